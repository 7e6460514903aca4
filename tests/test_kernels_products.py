"""The plane-GEMM engines return exactly the torch reference, and every exactness bound
they rest on is enforced with an error that names the fix.

Without a GPU the kernels run under Triton's interpreter (tests/conftest.py), so shapes
are small and tiles large: a few programs, a few K steps each.
"""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.products import (
    CONFIGS,
    INTERPRETER_OPERANDS,
    PlaneGemmConfig,
    _joined,
    _launch,
    _to_operand,
    config_refusal,
    EXACT_SUM_MODULUS,
    encoded_modular_matmul,
    exact_int8_matmul,
    grouped_modular_matmul,
    modular_matmul,
    plan_chunk,
    reference_modular_matmul,
    residue_dtype,
    select_operand,
)
from kernels import wgmma_products
from kernels.mod_reduce import fold_chunk, reduce_chunk
from kernels.digits import digit_set
from ozaki import catalog
from ozaki.products import digit_planes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The device set (`pytest -m gpu`): on a GPU these compile the kernels and check their bits.
pytestmark = pytest.mark.gpu
TMA = PlaneGemmConfig(64, 64, 32, num_warps=4, num_stages=2, tma=True)
POINTER = PlaneGemmConfig(64, 64, 64, num_warps=4, num_stages=2)
CONFIG = {"tma": TMA, "pointer": POINTER}

needs_dot_scaled = pytest.mark.skipif(DEVICE == "cpu" and "e2m1" not in INTERPRETER_OPERANDS,
                                      reason="tl.dot_scaled runs in Triton's interpreter from 3.8 on")


def planes(digits: str, shape: tuple[int, ...], rng: random.Random, dtype=torch.int16) -> torch.Tensor:
    """Random digits with both extremes of the set planted, so the largest products occur."""
    values = sorted(digit_set(digits))
    flat = [rng.choice(values) for _ in range(torch.Size(shape).numel())]
    out = torch.tensor(flat, dtype=dtype).reshape(shape)
    if out.numel() >= 2:
        out.view(-1)[0], out.view(-1)[-1] = values[0], values[-1]
    return out.to(DEVICE)


def coefficients(count: int, rng: random.Random) -> list[int]:
    return [rng.randrange(-(2**70), 2**70) for _ in range(count)]


def window(config: PlaneGemmConfig, digits: str) -> PlaneGemmConfig:
    # Full fp8 digits (up to 448) fit no FP8 wgmma window: promote every instruction.
    return dataclasses.replace(config, imprecise_window=0) if digits == "fp8" else config


ENGINES = [
    # digits, operand, planes, modulus, config
    ("int8", "int8", 1, 251, "tma"),
    ("int8", "int8", 1, 256, "pointer"),
    ("int4", "int8", 2, 7, "tma"),
    ("fp4", "int8", 6, 169, "tma"),
    ("fp4", "e4m3", 3, 89, "tma"),
    ("fp4", "e4m3", 3, 13, "pointer"),
    ("fp8", "e4m3", 3, 251, "tma"),
    ("fp8", "e4m3", 2, 2**31 - 1, "pointer"),
    # Moduli from 2**15 up take the 64-bit residue arithmetic, smaller ones the 32-bit one.
    ("int8", "int8", 1, 2**15 - 1, "pointer"),
    ("int8", "int8", 1, 2**15, "tma"),
    ("fp4", "e4m3", 3, 2**31 - 1, "tma"),
    pytest.param("fp4", "e2m1", 3, 157, "tma", marks=needs_dot_scaled),
    pytest.param("fp4", "e2m1", 2, 89, "pointer", marks=needs_dot_scaled),
]


@pytest.mark.parametrize("digits, operand, count, modulus, config", ENGINES)
def test_engine_matches_reference(digits, operand, count, modulus, config):
    rng = random.Random(f"{digits}-{operand}-{modulus}")
    # K = 100 is no multiple of a block (zero padding); M, N are no multiple of a tile.
    a, b = planes(digits, (count, 70, 100), rng), planes(digits, (count, 50, 100), rng)
    coeffs = coefficients(count, rng)
    got = modular_matmul(a, b, coeffs, modulus, digits=digits, operand=operand, config=window(CONFIG[config], digits))
    assert got.dtype == torch.int64 and got.shape == (70, 50)
    assert torch.equal(got, reference_modular_matmul(a, b, coeffs, modulus))


@pytest.mark.parametrize("modulus, config", [(251, "tma"), (256, "pointer"), (2**15 - 1, "pointer"), (2**15, "tma"),
                                             (2**31 - 1, "pointer")])
def test_unit_coefficients_reduce_each_sum_once(modulus, config):
    # The int8 engine's launches: one plane of coefficient 1 per modulus, whose epilogue reduces
    # each sum once (kernels.mod_reduce.reduce_chunk) in every residue width.
    rng = random.Random(modulus)
    a, b = planes("int8", (1, 70, 100), rng), planes("int8", (1, 50, 100), rng)
    got = modular_matmul(a, b, [1], modulus, digits="int8", config=CONFIG[config])
    assert torch.equal(got, reference_modular_matmul(a, b, [1], modulus))


@pytest.mark.parametrize("count, k, k_chunk, config",
                         [(1, 160, 64, "pointer"), (3, 160, 32, "tma"), (2, 96, 64, "tma")])
def test_k_chunks_combine_exactly(count, k, k_chunk, config):
    rng = random.Random(k_chunk * count)
    a, b = planes("fp4", (count, 64, k), rng), planes("fp4", (count, 64, k), rng)
    coeffs = coefficients(count, rng)
    got = modular_matmul(a, b, coeffs, 211, digits="fp4", operand="e4m3", config=CONFIG[config], k_chunk=k_chunk)
    assert torch.equal(got, reference_modular_matmul(a, b, coeffs, 211))


def test_grouped_launch_matches_each_group():
    rng = random.Random(5)
    groups = [(planes("fp4", (count, 40, 70), rng), planes("fp4", (count, 30, 70), rng), coefficients(count, rng), m)
              for count, m in [(1, 7), (3, 89), (6, 256), (4, 149)]]
    got = grouped_modular_matmul(groups, digits="fp4", config=TMA)
    assert got.shape == (4, 40, 30)
    for index, (a, b, coeffs, m) in enumerate(groups):
        assert torch.equal(got[index], reference_modular_matmul(a, b, coeffs, m))


def test_grouped_launch_of_slices_of_one_tensor_copies_nothing():
    # The fused encode hands the groups over as back-to-back slices of one plane tensor.
    rng = random.Random(7)
    counts, moduli = [1, 3, 2], [7, 89, 251]
    a, b = planes("fp4", (sum(counts), 40, 70), rng), planes("fp4", (sum(counts), 30, 70), rng)
    bounds = [0, 1, 4, 6]
    groups = [(a[s:e], b[s:e], coefficients(e - s, rng), m) for s, e, m in zip(bounds, bounds[1:], moduli)]
    joined = _joined([g[0] for g in groups])
    assert joined.data_ptr() == a.data_ptr() and torch.equal(joined, a)
    assert not torch.equal(_joined([g[0] for g in reversed(groups)]), a)  # out of order: a real copy
    got = grouped_modular_matmul(groups, digits="fp4", config=TMA)
    for index, (ga, gb, coeffs, m) in enumerate(groups):
        assert torch.equal(got[index], reference_modular_matmul(ga, gb, coeffs, m))


def test_batch_dimensions_and_int32_output():
    rng = random.Random(6)
    a, b = planes("int8", (1, 2, 3, 33, 40), rng, torch.int8), planes("int8", (1, 2, 3, 20, 40), rng, torch.int8)
    got = modular_matmul(a, b, [3], 97, digits="int8", config=POINTER, out_dtype=torch.int32)
    assert got.dtype == torch.int32 and got.shape == (2, 3, 33, 20)
    assert torch.equal(got.long(), reference_modular_matmul(a, b, [3], 97))


@triton.jit
def _fold_kernel(residue_ptr, part_ptr, coef_ptr, modulus_ptr, out_ptr, reduced_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    modulus = tl.load(modulus_ptr + offs, mask=mask, other=2)
    part = tl.load(part_ptr + offs, mask=mask, other=0)
    folded = fold_chunk(tl.load(residue_ptr + offs, mask=mask, other=0), part,
                        tl.load(coef_ptr + offs, mask=mask, other=0), modulus, 1.0 / modulus.to(tl.float64), 8)
    tl.store(out_ptr + offs, folded, mask=mask)
    tl.store(reduced_ptr + offs, reduce_chunk(part, modulus, 1.0 / modulus.to(tl.float64), 8), mask=mask)


@pytest.mark.parametrize("part_dtype", [torch.int32, torch.float32])
def test_byte_residue_fold_is_exact_over_its_whole_range(part_dtype):
    """The epilogue's reductions for moduli up to 2**8 (kernels.mod_reduce.fold_chunk, and
    reduce_chunk, a single plane's of coefficient 1): every modulus from 2 to 256, chunk sums at
    the ends of their range (int32's, or the integers fp32 holds exactly for the fp8 and fp4
    accumulators) and at the 2**16 seams of its split, residues and coefficients up to m - 1,
    against Python's integers."""
    limit = 2**31 - 1 if part_dtype == torch.int32 else 2**24
    edges = [0, 1, -1, limit, -limit, 2**16 - 1, 2**16, -(2**16), -(2**16) - 1, 2**23, -(2**23) + 1, 2**24 - 1]
    rng = random.Random(7)
    rows = []
    for m in range(2, 257):
        for part in edges + [rng.randint(-limit, limit) for _ in range(12)]:
            rows.append((rng.choice([0, m - 1, rng.randrange(m)]), part, rng.choice([0, 1, m - 1, rng.randrange(m)]), m))
    residue, part, coef, modulus = (list(column) for column in zip(*rows))
    tensors = [torch.tensor(residue, dtype=torch.int32), torch.tensor(part, dtype=torch.int64).to(part_dtype),
               torch.tensor(coef, dtype=torch.int32), torch.tensor(modulus, dtype=torch.int32)]
    tensors = [t.to(DEVICE) for t in tensors]
    out, reduced = (torch.empty(len(rows), dtype=torch.int32, device=DEVICE) for _ in range(2))
    _fold_kernel[(triton.cdiv(len(rows), 1024),)](*tensors, out, reduced, len(rows), BLOCK=1024)
    assert out.cpu().tolist() == [(r + p * c) % m for r, p, c, m in rows]
    assert reduced.cpu().tolist() == [p % m for _, p, _, m in rows]


@pytest.mark.parametrize("moduli, dtype", [([7, 256], torch.uint8), ([257], torch.int16), ([2, 2**15 - 1], torch.int16),
                                           ([2**15], torch.int32), ([2**31 - 1], torch.int32)])
def test_residues_leave_the_kernel_in_the_narrowest_type(moduli, dtype):
    assert residue_dtype(moduli) == dtype
    rng = random.Random(str(moduli))
    groups = [(planes("int8", (1, 33, 40), rng, torch.int8), planes("int8", (1, 20, 40), rng, torch.int8), [5], m)
              for m in moduli]
    got = grouped_modular_matmul(groups, digits="int8", config=POINTER, out_dtype=dtype)
    assert got.dtype == dtype
    for index, (a, b, coeffs, m) in enumerate(groups):
        assert torch.equal(got[index].long(), reference_modular_matmul(a, b, coeffs, m))
    if dtype != torch.uint8:
        with pytest.raises(TypeError, match=f"cannot hold residues mod {max(moduli)}"):
            grouped_modular_matmul(groups, digits="int8", config=POINTER, out_dtype=torch.uint8)


def plan_encodings(name: str) -> tuple:
    return tuple(catalog.encoding(encoding) for _, encoding in catalog.plan(name).moduli)


def test_the_residue_arithmetic_follows_the_moduli_not_the_output_type():
    # The fp32 reduction is exact for moduli up to 2**8 only: a byte output cannot select it for more.
    rng = random.Random(8)
    a, b = planes("int8", (1, 1, 16, 32), rng, torch.int8), planes("int8", (1, 1, 16, 32), rng, torch.int8)
    out = torch.empty((1, 1, 16, 16), dtype=torch.uint8, device=DEVICE)
    with pytest.raises(ValueError, match="residues mod 300 need torch.int16 or wider"):
        _launch(a, b, (1,), (0, 1), (300,), out, "int8", POINTER, 64)
    wide = torch.empty((1, 1, 16, 16), dtype=torch.int64, device=DEVICE)
    _launch(_to_operand(a, "int8", POINTER.block_k), _to_operand(b, "int8", POINTER.block_k), (1,), (0, 1), (251,),
            wide, "int8", POINTER, 64)
    assert torch.equal(wide[0, 0], reference_modular_matmul(a[:, 0], b[:, 0], [1], 251))


@pytest.mark.parametrize("name", ["b16-int8-k16384", "b24-fp4-k4096", "b24-fp8-k4096"])
def test_encoded_planes_multiply_without_reading_them(name):
    # The pipeline's path: the planes of a plan's encodings, bounded by the encodings alone.
    encodings = plan_encodings(name)
    rng = random.Random(name)
    k = 70
    residues_a = [[[rng.randrange(e.modulus) for _ in range(k)] for _ in range(40)] for e in encodings]
    residues_b = [[[rng.randrange(e.modulus) for _ in range(k)] for _ in range(30)] for e in encodings]

    def encoded(residues, side):
        # As encode_planes stores them: int8 where every value fits, else int16.
        planes = torch.cat([digit_planes(torch.tensor(r), e, side) for r, e in zip(residues, encodings)])
        return planes.to(torch.int8 if planes.abs().max() <= 127 else torch.int16).to(DEVICE)

    planes_a, planes_b = encoded(residues_a, "a"), encoded(residues_b, "b")
    got = encoded_modular_matmul(planes_a, planes_b, encodings, config=window(TMA, encodings[0].digits))
    assert got.dtype == residue_dtype([e.modulus for e in encodings]) and got.shape == (len(encodings), 40, 30)
    for index, (e, ra, rb) in enumerate(zip(encodings, residues_a, residues_b)):
        exact = torch.remainder(torch.tensor(ra) @ torch.tensor(rb).T, e.modulus)
        assert torch.equal(got[index].long().cpu(), exact)


def test_a_batch_of_encoded_planes_multiplies_in_one_launch():
    # [T, B, rows, K] planes: each product's residues those of its planes alone.
    encodings = plan_encodings("b16-int8-k16384")
    rng = random.Random(3)
    planes_a, planes_b = (torch.tensor([[[[rng.randrange(-(e.modulus // 2), e.modulus - e.modulus // 2)
                                           for _ in range(40)] for _ in range(rows)] for _ in range(3)]
                                         for e in encodings], dtype=torch.int8, device=DEVICE) for rows in (9, 7))
    got = encoded_modular_matmul(planes_a, planes_b, encodings)
    assert got.shape == (len(encodings), 3, 9, 7)
    for index in range(3):
        assert torch.equal(got[:, index], encoded_modular_matmul(planes_a[:, index], planes_b[:, index], encodings))


def test_encoded_products_reject_planes_that_do_not_fit_the_encodings():
    encodings = plan_encodings("b16-int8-k16384")
    a = torch.zeros((len(encodings), 8, 32), dtype=torch.int8, device=DEVICE)
    with pytest.raises(ValueError, match="planes for encodings of"):
        encoded_modular_matmul(a[:-1], a[:-1], encodings)
    with pytest.raises(TypeError, match="int8 or int16 planes"):
        encoded_modular_matmul(a.float(), a, encodings)
    with pytest.raises(ValueError, match="do not match"):
        encoded_modular_matmul(a, a[..., :16], encodings)
    with pytest.raises(ValueError, match="at least one encoding"):
        encoded_modular_matmul(a, a, ())


@pytest.mark.skipif(DEVICE == "cpu", reason="host synchronisation exists on CUDA only")
def test_a_product_of_encoded_planes_never_waits_for_the_device():
    encodings = plan_encodings("b16-int8-k16384")
    rng = random.Random(3)
    a = planes("int8", (len(encodings), 256, 512), rng, torch.int8)
    b = planes("int8", (len(encodings), 256, 512), rng, torch.int8)
    expected = encoded_modular_matmul(a, b, encodings)  # compiles, and fills the launch's caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = encoded_modular_matmul(a, b, encodings)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(got, expected)


def test_empty_dimensions():
    a = torch.zeros((2, 5, 0), dtype=torch.int16, device=DEVICE)
    b = torch.zeros((2, 4, 0), dtype=torch.int16, device=DEVICE)
    assert torch.equal(modular_matmul(a, b, [1, 2], 13, digits="fp4"), torch.zeros((5, 4), dtype=torch.int64,
                                                                                    device=DEVICE))
    assert modular_matmul(a[:, :0], b, [1, 2], 13, digits="fp4").shape == (0, 4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    digits=st.sampled_from(["int8", "fp4", "fp8"]),
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    k=st.integers(1, 130),
    count=st.integers(1, 3),
    modulus=st.integers(2, 2**31 - 1),
    seed=st.integers(0, 2**32),
)
def test_default_engine_is_exact(digits, m, n, k, count, modulus, seed):
    rng = random.Random(seed)
    count = 1 if digits == "int8" else count
    a, b = planes(digits, (count, m, k), rng), planes(digits, (count, n, k), rng)
    coeffs = coefficients(count, rng)
    got = modular_matmul(a, b, coeffs, modulus, digits=digits, config=window(TMA, digits))
    assert torch.equal(got, reference_modular_matmul(a, b, coeffs, modulus))


@pytest.mark.parametrize(
    "operand, max_product, config, expected",
    [
        ("int8", 128 * 128, PlaneGemmConfig(128, 128, 128), 130944),  # (2**31 - 1) // 16384 = 131071
        ("int8", 12 * 12, PlaneGemmConfig(128, 128, 128), 14913024),
        ("e4m3", 12 * 12, PlaneGemmConfig(128, 128, 128, imprecise_window=64), 116480),  # 2**24 // 144 = 116508
        ("e2m1", 12 * 12, PlaneGemmConfig(128, 128, 64), 116480),
        ("e4m3", 448 * 448, PlaneGemmConfig(64, 64, 64, imprecise_window=0), 64),  # 2**24 // 200704 = 83
    ],
)
def test_chunk_is_the_exact_bound_in_whole_blocks(operand, max_product, config, expected):
    assert plan_chunk(operand, config, max_product) == expected


@given(max_product=st.integers(1, 2**22), block_k=st.sampled_from([32, 64, 128]))
def test_chunk_is_largest_exact_multiple(max_product, block_k):
    config = PlaneGemmConfig(64, 64, block_k, imprecise_window=0)
    for operand, exact in (("int8", 2**31 - 1), ("e4m3", 2**24)):
        if exact // max_product < block_k:
            with pytest.raises(ValueError, match="fewer than block_k"):
                plan_chunk(operand, config, max_product)
            continue
        chunk = plan_chunk(operand, config, max_product)
        assert chunk % block_k == 0 and chunk * max_product <= exact < (chunk + block_k) * max_product


def test_operand_choice_is_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="ozaki.kernels"):
        assert select_operand("fp4", "cpu") == "e4m3"
        assert select_operand("fp8", "cpu") == "e4m3"
        assert select_operand("int8", "cpu") == "int8"
    assert "digits fp4 on cpu (capability None): operand e4m3" in caplog.text


def test_reference_large_values_take_the_int64_path():
    # Values beyond digit sets push the float64 bound past 2**53; compare with Python ints.
    rng = random.Random(9)
    a = torch.tensor([[[rng.randrange(-(2**29), 2**29) for _ in range(3)] for _ in range(2)]])
    b = torch.tensor([[[rng.randrange(-(2**29), 2**29) for _ in range(3)] for _ in range(2)]])
    got = reference_modular_matmul(a, b, [-5], 1_000_003)
    for i in range(2):
        for j in range(2):
            exact = -5 * sum(int(a[0, i, t]) * int(b[0, j, t]) for t in range(3))
            assert int(got[i, j]) == exact % 1_000_003
    with pytest.raises(ValueError, match="overflows int64"):
        reference_modular_matmul(a * 2**3, b * 2**3, [1], 7)


def _bad(**change):
    rng = random.Random(3)
    call = dict(a=planes("fp4", (2, 8, 40), rng), b=planes("fp4", (2, 8, 40), rng), coefficients=[1, 2],
                modulus=89, digits="fp4", config=TMA)
    call.update(change)
    return call


def _with(tensor, index, value):
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


BAD_CALLS = [
    (lambda c: dict(a=c["a"].float()), TypeError, "signed integer digit planes"),
    (lambda c: dict(a=_with(c["a"], (1, 2, 3), 5)), ValueError, r"\[1, 2, 3\] = 5 is not in the fp4 digit set"),
    (lambda c: dict(b=_with(c["b"], (0, 0, 0), 16)), ValueError, "outside the fp4 digits"),
    (lambda c: dict(b=c["b"][..., :39]), ValueError, "do not match"),
    (lambda c: dict(b=c["b"][:1]), ValueError, "do not match"),
    (lambda c: dict(coefficients=[1]), ValueError, "1 coefficients for 2 planes"),
    (lambda c: dict(coefficients=[1, 2.0]), TypeError, "coefficient 2.0 is not an int"),
    (lambda c: dict(modulus=1), ValueError, r"modulus 1 must be an int in \[2, 2\*\*31\)"),
    (lambda c: dict(modulus=2**31), ValueError, "modulus"),
    (lambda c: dict(modulus=True), ValueError, "modulus"),
    (lambda c: dict(digits="fp16"), ValueError, "unknown digit set"),
    (lambda c: dict(digits="fp8", operand="int8"), ValueError, "operand int8 cannot hold every fp8 digit"),
    (lambda c: dict(operand="bf16"), ValueError, "unknown operand"),
    (lambda c: dict(k_chunk=48), ValueError, "multiple of block_k 32"),
    (lambda c: dict(operand="int8", k_chunk=2**31), ValueError, "at most 14913080"),
    (lambda c: dict(operand="e4m3", config=PlaneGemmConfig(64, 64, 128, imprecise_window=128)), ValueError,
     r"imprecise_window 128 x max\|P\*Q\| 144 >= 2\*\*14.*imprecise_window <= 113"),
    (lambda c: dict(a=planes("fp8", (2, 8, 40), random.Random(1)), b=planes("fp8", (2, 8, 40), random.Random(2)),
                    digits="fp8", config=PlaneGemmConfig(64, 64, 128, imprecise_window=0)), ValueError,
     "allows only 83 exact products"),
    (lambda c: dict(out_dtype=torch.float64), TypeError, "out_dtype"),
]


@pytest.mark.parametrize("change, error, message", BAD_CALLS)
def test_bad_calls_raise(change, error, message):
    call = _bad()
    call.update(change(call))
    with pytest.raises(error, match=message):
        modular_matmul(call.pop("a"), call.pop("b"), call.pop("coefficients"), call.pop("modulus"), **call)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(block_m=48), "power of two"),
        (dict(block_k=16), "K >= 32"),
        (dict(imprecise_window=48), "multiple of 32"),
        (dict(block_k=32, imprecise_window=64), "no larger than block_k"),
        (dict(programs_per_sm=0), "must be 1 to 4"),
        (dict(gluon=True), "needs tma=True"),
        (dict(gluon=True, tma=True, num_warps=2), "num_warps 4 or 8"),
        (dict(block_m=64, gluon=True, tma=True, num_warps=8), "multiple of 128"),
        (dict(block_n=512, gluon=True, tma=True, num_warps=4), "at most 256"),
    ],
)
def test_bad_configs_raise(fields, message):
    with pytest.raises(ValueError, match=message):
        PlaneGemmConfig(**{"block_m": 64, "block_n": 64, "block_k": 64, **fields})


def test_bad_groups_raise():
    rng = random.Random(4)
    a, b = planes("fp4", (1, 8, 32), rng), planes("fp4", (1, 8, 32), rng)
    with pytest.raises(ValueError, match="at least one group"):
        grouped_modular_matmul([], digits="fp4")
    with pytest.raises(ValueError, match="group 1 planes differ in shape"):
        grouped_modular_matmul([(a, b, [1], 7), (a[:, :4], b, [1], 7)], digits="fp4")


def test_every_listed_config_is_valid_for_its_operand():
    # The launcher falls back along these lists; each must admit the digits its operand is for.
    for operand, configs in CONFIGS.items():
        digits = {"int8": "int8", "e4m3": "fp4", "e2m1": "fp4"}[operand]
        largest = max(abs(v) for v in digit_set(digits)) ** 2
        for config in configs:
            assert plan_chunk(operand, config, largest) >= config.block_k


# ---------------------------------------------------------------------------------------------
# The Gluon kernel (kernels.wgmma_products): sm_90 only; its PTX is checked in test_kernels_ptx.py.

GLUON = [c for c in CONFIGS["int8"] if c.gluon]
on_hopper = pytest.mark.skipif(not wgmma_products.supports(torch.device(DEVICE)), reason="wgmma needs an sm_90 GPU")


@on_hopper
@pytest.mark.parametrize("config", GLUON, ids=[f"{c.block_m}x{c.block_n}x{c.block_k}w{c.num_warps}s{c.num_stages}"
                                                f"g{c.group_m}" for c in GLUON])
@pytest.mark.parametrize("moduli", [[251, 256, 2, 97], [2**15 - 1, 3], [2**31 - 1, 65537]])
@pytest.mark.parametrize("shape", [(1, 1, 1), (130, 250, 300), (513, 129, 4000), (3, 260, 200, 70)])
def test_gluon_kernel_matches_reference(config, moduli, shape):
    """One plane per modulus, edge tiles, K padded to whole blocks, batch dimensions, every
    residue arithmetic: the reference's residues."""
    *batch, m, n, k = shape
    rng = random.Random(f"{config}-{moduli}-{shape}")
    groups = [(planes("int8", (1, *batch, m, k), rng), planes("int8", (1, *batch, n, k), rng), coefficients(1, rng), q)
              for q in moduli]
    got = grouped_modular_matmul(groups, digits="int8", config=config, out_dtype=residue_dtype(moduli))
    for index, (a, b, coeffs, q) in enumerate(groups):
        assert torch.equal(got[index].long(), reference_modular_matmul(a, b, coeffs, q)), q


@on_hopper
def test_gluon_kernel_refuses_what_it_does_not_cover():
    rng = random.Random(5)
    config = GLUON[0]
    two = (planes("int4", (2, 70, 100), rng), planes("int4", (2, 50, 100), rng), [1, 3], 7)
    with pytest.raises(ValueError, match="one plane per modulus"):
        grouped_modular_matmul([two], digits="int4", config=config)
    one = (planes("int8", (1, 70, 512), rng), planes("int8", (1, 50, 512), rng), [1], 7)
    with pytest.raises(ValueError, match="one exact chunk"):
        grouped_modular_matmul([one], digits="int8", config=config, k_chunk=256)


def test_gluon_configs_are_admitted_only_where_the_kernel_runs():
    config, largest = GLUON[0], 128 * 128
    assert config_refusal("int8", config, largest) is None
    assert "one plane per modulus" in config_refusal("int8", config, largest, planes=[1, 2])
    assert "one exact chunk" in config_refusal("int8", config, 2**23, k=256)  # chunks of one 128-block
    assert "sm_90" in config_refusal("int8", config, largest, device="cpu")
    assert config_refusal("int8", dataclasses.replace(config, gluon=False), largest, planes=[2], device="cpu") is None
    # The launcher's default, which the interpreter and every GPU run, is never the Gluon kernel.
    assert not CONFIGS["int8"][0].gluon


@pytest.mark.skipif(DEVICE != "cpu", reason="the refusal on a device without wgmma")
def test_gluon_kernel_is_refused_without_wgmma():
    rng = random.Random(6)
    one = (planes("int8", (1, 8, 32), rng), planes("int8", (1, 8, 32), rng), [1], 7)
    with pytest.raises(ValueError, match="gluon=False"):
        grouped_modular_matmul([one], digits="int8", config=GLUON[0])


def _int8_configs() -> list:
    # Every int8 config this device runs: the Gluon ones only where wgmma is.
    return [c for c in CONFIGS["int8"] if not c.gluon or wgmma_products.supports(torch.device(DEVICE))]


@pytest.mark.parametrize("config", _int8_configs(), ids=str)
@pytest.mark.parametrize(("m", "k", "n", "top"), [(1, 1, 1, 127), (17, 9, 3, 127), (130, 300, 260, 64), (5, 0, 4, 9),
                                                  (40, 256, 33, 0)])
def test_exact_int8_matmul_returns_the_sums(m, k, n, top, config):
    gen = torch.Generator().manual_seed(m * 1000 + k)
    a = torch.randint(0, top + 1, (m, k), dtype=torch.int8, generator=gen)
    bt = torch.randint(0, top + 1, (n, k), dtype=torch.int8, generator=gen)
    if config_refusal("int8", config, max(top**2, 1), planes=[1], k=k, device=DEVICE) is not None:
        pytest.skip("config refuses this launch")
    got = exact_int8_matmul(a.to(DEVICE), bt.to(DEVICE), top, config=config)
    assert got.dtype == torch.int32 and torch.equal(got.cpu().long(), a.long() @ bt.long().T)


def test_exact_int8_matmul_at_its_window_and_past_it():
    # The largest K whose all-127 sums stay below the prime 2**31 - 1, and one more.
    k = (EXACT_SUM_MODULUS - 1) // 127**2
    a, bt = (torch.full((rows, k), 127, dtype=torch.int8, device=DEVICE) for rows in (2, 3))
    assert exact_int8_matmul(a, bt, 127).cpu().tolist() == [[k * 127**2] * 3] * 2
    wider = torch.zeros((1, k + 1), dtype=torch.int8, device=DEVICE)
    with pytest.raises(ValueError, match="reach 2\\*\\*31 - 1: split K"):
        exact_int8_matmul(wider, wider, 127)
    with pytest.raises(TypeError, match="2-D int8"):
        exact_int8_matmul(a.to(torch.int16), bt, 127)
    with pytest.raises(ValueError, match=r"max_entry 128 must lie in \[0, 127\]"):
        exact_int8_matmul(a, bt, 128)
