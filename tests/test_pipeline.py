"""The orchestrator's promises: bits depend only on the quantized inputs.

Not on the moduli, not on the other rows in the batch, not on the thread that computes them.
"""

import collections
import math
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import kernels.crt
import kernels.dispatch
import ozaki
import ozaki.catalog
from exact_reference import round_dyadic as _correctly_rounded
from ozaki import _bits, cost, pipeline, planning, reading
from ozaki.crt import garner, round_to_float64, signed_limbs
from ozaki.products import _PRODUCT_LIMIT, _reduce_product, direct_products
from ozaki.residues import reference_moduli, residues
from ozaki.scaling import exact_bits, fixed_bits, scale_rows


def _spread(rng, shape, phi):
    return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))


def _with_moduli(a: torch.Tensor, b: torch.Tensor, moduli) -> torch.Tensor:
    bt = b.T
    sa, sb = scale_rows(a, exact_bits(a)), scale_rows(bt, exact_bits(bt))
    c = direct_products(residues(sa, moduli), residues(sb, moduli).transpose(-1, -2), moduli)
    return round_to_float64(garner(c, moduli), moduli, -(sa.shift[:, None] + sb.shift[None, :]))


@pytest.mark.parametrize("phi", [0.0, 1.0, 4.0])
def test_bits_do_not_depend_on_the_moduli(phi):
    rng = np.random.default_rng(7)
    a, b = torch.from_numpy(_spread(rng, (9, 40), phi)), torch.from_numpy(_spread(rng, (40, 6), phi))
    p, q = int(exact_bits(a).max()), int(exact_bits(b.T).max())
    need = 2 * 40 << (p + q)
    large = reference_moduli(40, need)
    small = reference_moduli(2**16, need)  # long K forces smaller primes, so more of them
    assert not set(small) & set(large)
    assert torch.equal(_with_moduli(a, b, large), _with_moduli(a, b, small))


@pytest.mark.parametrize("digits", planning.PLAN_ENGINES)
def test_plan_lookup_is_the_cheapest_plan_past_the_need(digits):
    # The lookup (a search over the plans no cheaper one outholds) against the plain scan of
    # the catalog's plans, cheapest first, at and around every plan's capacity.
    plans = ozaki.catalog.plans_for(digits)
    needs = sorted({0} | {plan.capacity + step for plan in plans for step in (-1, 0, 1)})
    for need in needs:
        want = next((plan for plan in plans if plan.capacity > need), None)
        got = planning._plan_moduli(digits, need)
        if want is None:
            assert got is None
        else:
            assert got.moduli == tuple(m for m, _ in want.moduli) and got.engine == digits


@pytest.mark.parametrize("k", [1, 100, 20000, 2**40])
def test_reference_moduli_reach_the_capacity_and_stay_exact(k):
    plan = planning.moduli_for("reference", k, 2**300, torch.device("cpu"))
    assert plan.engine == "reference" and plan.encodings is None
    assert math.prod(plan.moduli) > 2**300
    assert all(min(k, 2**16) * (m // 2) ** 2 < 2**53 for m in plan.moduli)


def test_direct_products_refuse_an_inexact_float64_gemm():
    m = 2**28 + 1  # ⌊m/2⌋² = 2^54: not even one term fits below 2^53
    r = torch.ones((1, 2, 3), dtype=torch.int64)
    with pytest.raises(ValueError, match="2\\^53"):
        direct_products(r, r.transpose(-1, -2), [m])


def test_long_k_is_chunked_exactly():
    """K beyond one exact float64 chunk: the chunks are reduced mod m and still exact."""
    m = 2**24 + 3  # chunk = (2^53 − 1) // (2^23 + 1)² = 127 terms
    rng = np.random.default_rng(2)
    k = 1000
    ra = torch.from_numpy(rng.integers(-(m // 2), m - m // 2, (1, 3, k)))
    rb = torch.from_numpy(rng.integers(-(m // 2), m - m // 2, (1, k, 2)))
    got = direct_products(ra, rb, [m])[0]
    want = [[sum(int(x) * int(y) for x, y in zip(ra[0, i], rb[0, :, j])) % m for j in range(2)] for i in range(3)]
    assert got.tolist() == want


@pytest.mark.parametrize("accuracy", ["exact", 24])
def test_batch_invariance(accuracy):
    """mm(A[:k], B) equals mm(A, B)[:k] bit for bit: a row's bits depend on that row alone.
    ("fp64" is not batch invariant: its bits follow |A||B| and the capacity the moduli of the
    whole call pay for, ozaki.accuracy.)"""
    rng = np.random.default_rng(3)
    a, b = _spread(rng, (33, 64), 2.0), _spread(rng, (64, 17), 2.0)
    a[5] *= 1e-200  # a tiny row among ordinary ones must not change the others' bits
    full = ozaki.matmul(a, b, accuracy=accuracy)
    for rows in (slice(0, 1), slice(0, 7), slice(5, 6), slice(20, 33)):
        part = ozaki.matmul(a[rows], b, accuracy=accuracy)
        assert np.array_equal(part.view(np.uint64), full[rows].view(np.uint64))


@pytest.mark.parametrize("engine", ["reference", "int8", "fp4"])
@pytest.mark.parametrize("accuracy", ["fp64", "exact", 30])
@pytest.mark.parametrize("broadcast", [False, True])
def test_a_product_of_a_batch_has_its_bits_alone(engine, accuracy, broadcast):
    """Every product of a batch has the bits it has computed alone, in every accuracy: under
    "fp64" too, whose bits follow the product's own A and B, never its neighbours' (products
    of different scales and spreads here, one B broadcast or a B per product)."""
    if engine != "reference" and not ozaki.catalog.plans_for(engine):
        pytest.skip(f"the catalog has no {engine} plan")
    a, b = _batch_of_scales(np.random.default_rng(17), broadcast)
    batch = ozaki.matmul(a, b, accuracy=accuracy, engine=engine)
    alone = np.stack([ozaki.matmul(a[i], b if broadcast else b[i], accuracy=accuracy, engine=engine)
                      for i in range(6)])
    assert np.array_equal(batch.view(np.uint64), alone.view(np.uint64))


def test_threads_agree():
    rng = np.random.default_rng(11)
    pairs = [(_spread(rng, (16, 48), 1.0), _spread(rng, (48, 12), 1.0)) for _ in range(4)]
    serial = [ozaki.matmul(a, b) for a, b in pairs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda ab: ozaki.matmul(*ab), pairs * 2))
    for i, result in enumerate(threaded):
        assert np.array_equal(result.view(np.uint64), serial[i % 4].view(np.uint64))


@pytest.mark.parametrize("bits_for", [exact_bits, lambda x: fixed_bits(x, 20)])
def test_scaled_integers_respect_their_bits(bits_for):
    rng = np.random.default_rng(5)
    x = torch.from_numpy(_spread(rng, (12, 30), 3.0))
    x[2] = 0.0
    bits = bits_for(x)
    s = scale_rows(x, bits)
    assert int(s.exponent.min()) >= 0
    for i in range(x.shape[0]):
        bound = 1 << int(s.bits[i])
        for mantissa, exponent in zip(s.mantissa[i].tolist(), s.exponent[i].tolist()):
            assert abs(mantissa << exponent) <= bound


def test_exact_bits_are_lossless():
    rng = np.random.default_rng(9)
    x = torch.from_numpy(_spread(rng, (6, 25), 4.0))
    s = scale_rows(x, exact_bits(x))
    assert torch.equal(s.mantissa.to(torch.float64) * 2.0 ** s.exponent.to(torch.float64),
                       torch.ldexp(x, s.shift[:, None].expand_as(x)))


# The stages' float64 arithmetic and blocking ------------------------------------------------



def _rounding_cases(rng, count: int) -> tuple[list[int], list[int]]:
    """Signed integers up to 170 bits with exponents that put them below the subnormals,
    among them, in the normal range and past it; a third are ties or ties ± 1 below the
    53rd bit, with and without lower bits set."""
    values, exponents = [], []
    for _ in range(count):
        length = int(rng.integers(1, 171))
        magnitude = int(rng.integers(1, 2**62)) << max(0, length - 62)
        magnitude |= int(rng.integers(0, 2)) << max(0, length - 1)
        if length > 55 and rng.random() < 0.35:
            head = (magnitude >> (length - 53)) << (length - 53)
            magnitude = head + (1 << (length - 54)) + int(rng.choice([-1, 0, 0, 1, 2 ** max(0, length - 60)]))
        target = int(rng.choice([rng.integers(-1140, -1060), rng.integers(-1080, -1015), rng.integers(-1000, 1000),
                                 rng.integers(1015, 1030)]))
        values.append(-magnitude if rng.random() < 0.5 else magnitude)
        exponents.append(target - magnitude.bit_length())
    return values, exponents


@pytest.mark.parametrize("seed", [0, 1])
def test_round_to_float64_matches_python_division(seed):
    rng = np.random.default_rng(seed)
    moduli = reference_moduli(2048, 2**172)
    quarter = math.prod(moduli) // 4
    values, exponents = _rounding_cases(rng, 1500)
    values = [v for v in values if abs(v) < quarter]
    exponents = exponents[: len(values)]
    digits = garner(torch.tensor([[v % m for v in values] for m in moduli]), moduli)
    got = round_to_float64(digits, moduli, torch.tensor(exponents))
    want = np.array([_correctly_rounded(v, e) for v, e in zip(values, exponents)])
    assert np.array_equal(got.numpy().view(np.uint64), want.view(np.uint64))
    # The cases reach both decode paths: subnormal or zero results, and normal ones.
    assert np.any(np.abs(want) < 2.0**-1021) and np.any(np.abs(want) > 2.0**-1021)
    assert np.any(np.isinf(want))


@pytest.mark.parametrize("block", [40, 300])
@pytest.mark.parametrize("accuracy", ["exact", 30])
def test_bits_do_not_depend_on_the_block_size(monkeypatch, block, accuracy):
    """Stage work runs in blocks, each choosing its own path (wide rows fall back to int64
    residues and to mantissa-exponent scaling; tiny results are rounded bit by bit)."""
    rng = np.random.default_rng(21)
    a, b = _spread(rng, (23, 45), 2.0), _spread(rng, (45, 19), 2.0)
    a[3, 7] = 5e-324  # a row wider than 1023 bits in "exact" mode
    a[4] *= 1e-303
    b[:, 5] *= 1e-8  # with row 4: results in the subnormal range
    b[:, 2] *= 1e290
    want = ozaki.matmul(a, b, accuracy=accuracy, engine="reference")
    assert np.any((want != 0) & (np.abs(want) < 2.0**-1022))
    monkeypatch.setattr(_bits, "BLOCK", block)
    got = ozaki.matmul(a, b, accuracy=accuracy, engine="reference")
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))


_FLOOR_MOD_MODULI = [2, 3, 7, 256, 4194301, 16777213, 2**31 - 1]


@pytest.mark.parametrize("m", _FLOOR_MOD_MODULI)
def test_floor_mod_is_exact_up_to_its_limit(m):
    rng = np.random.default_rng(m)
    limit = _bits.FLOOR_MOD_LIMIT
    edges = [0, 1, -1, m - 1, m, m + 1, -m, limit, -limit, limit - 1, -limit + 1, limit - m // 2, -limit + m // 2]
    values = edges + [int(v) for v in rng.integers(-limit, limit + 1, 500)]
    t = torch.tensor(values, dtype=torch.float64)
    for low in (0, -(m // 2)):
        got = _bits.floor_mod(t.clone(), m, out=torch.empty_like(t), low=low)
        assert got.tolist() == [float((v - low) % m + low) for v in values], low


def test_round_is_to_nearest_even():
    z = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.0**51 + 0.5, -(2.0**51) - 0.5, 2.0**52 - 0.5, 0.49999999999999994, -0.0, 7.0], dtype=torch.float64)
    want = [round(v) for v in z.tolist()]  # Python's round() is to nearest even
    assert _bits.round_(z.clone()).tolist() == want
    # Entries marked ``keep`` may hold integers past 2^52, which the rounding would move.
    big = torch.tensor([2.0**52 + 1, 2.0**53 - 1, 3.5], dtype=torch.float64)
    assert _bits.round_(big.clone(), keep=big >= 2.0**52).tolist() == [2.0**52 + 1, 2.0**53 - 1, 4.0]


@pytest.mark.parametrize("m", [3, 257, 4194301, 94906265 * 2 + 1, 2**31 - 1])
def test_product_reduction_is_exact_up_to_its_limit(m):
    rng = np.random.default_rng(m)
    values = [0, 1, -1, _PRODUCT_LIMIT, -_PRODUCT_LIMIT, _PRODUCT_LIMIT - 1] + [
        int(v) for v in rng.integers(-_PRODUCT_LIMIT, _PRODUCT_LIMIT + 1, 500)
    ]
    c = torch.tensor(values, dtype=torch.float64)
    _reduce_product(c, m)
    assert c.tolist() == [float(v % m) for v in values]


def test_direct_products_refuse_moduli_whose_square_passes_the_reduction_limit():
    m = 2 * 94906260 + 1  # 2^53 − 2^32 < ⌊m/2⌋² < 2^53: one product is exact, its reduction would not be
    r = torch.ones((1, 2, 3), dtype=torch.int64)
    with pytest.raises(ValueError, match="2\\^53 − 2\\^32"):
        direct_products(r, r.transpose(-1, -2), [m])


def test_garner_refuses_moduli_beyond_its_float64_range():
    with pytest.raises(ValueError, match="2\\^24"):
        garner(torch.zeros((2, 3), dtype=torch.int64), [2**24 + 43, 3])


def test_garner_reduces_arbitrary_integers_first():
    moduli = (4194301, 4194287, 4194277)
    rng = np.random.default_rng(4)
    c = torch.from_numpy(rng.integers(-2**62, 2**62, (3, 50)))
    reduced = torch.stack([torch.remainder(c[i], m) for i, m in enumerate(moduli)])
    assert torch.equal(garner(c, moduli), garner(reduced, moduli))


def test_signed_limbs_spell_the_signed_value():
    moduli = reference_moduli(2048, 2**100)
    values = [0, 1, -1, 2**60 + 12345, -(2**97) + 3]
    limbs, negative = signed_limbs(garner(torch.tensor([[v % m for v in values] for m in moduli]), moduli), moduli)
    got = [sum(int(limb) << (21 * c) for c, limb in enumerate(column)) for column in limbs.T.tolist()]
    assert got == [abs(v) for v in values]
    assert negative.tolist() == [v < 0 for v in values]


def test_exact_bits_follow_their_formula():
    """top − lowest_bit per row, from Python's own frexp and integer ratios."""
    rng = np.random.default_rng(8)
    x = _spread(rng, (10, 30), 3.0)
    x[2] = 0.0
    x[3, ::2] = 0.0
    x[4, 5] = 5e-324
    x[5] = np.round(x[5] * 1e6)
    want = []
    for row in x.tolist():
        nonzero = [v for v in row if v]
        if not nonzero:
            want.append(0)
            continue
        top = math.frexp(max(map(abs, nonzero)))[1]
        lowest = min(1 - v.as_integer_ratio()[1].bit_length() if v != int(v) else
                     (int(abs(v)) & -int(abs(v))).bit_length() - 1 for v in nonzero)
        want.append(top - lowest)
    assert exact_bits(torch.from_numpy(x)).tolist() == want


@pytest.fixture
def fused_path(monkeypatch):
    """``ozaki.matmul`` of numpy operands on the fused Triton path (encode kernel, grouped plane
    GEMMs, decode kernel): on a GPU with the operands moved to it, without one through Triton's
    interpreter (tests/conftest.py) on the CPU tensors.  Returns a numpy array, as matmul does."""
    if not torch.cuda.is_available():
        monkeypatch.setattr(reading, "kernels_available", lambda device: True)
        return ozaki.matmul

    def on_gpu(a: np.ndarray, b: np.ndarray, **options) -> np.ndarray:
        return ozaki.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), **options).cpu().numpy()

    return on_gpu


def _blocks_of(monkeypatch, rows: int) -> list[int]:
    """Forces the fused path to stream over blocks of ``rows`` rows of A; returns the list that
    the height of every block decoded from then on is appended to."""
    monkeypatch.setattr(cost, "stream_rows", lambda m, k, n, **sizes: rows)
    heights, decode = [], kernels.crt.decode_residues

    def counted(c, *args, **kwargs):
        heights.append(c.shape[1])
        return decode(c, *args, **kwargs)

    monkeypatch.setattr(kernels.crt, "decode_residues", counted)
    return heights


@pytest.mark.gpu
@pytest.mark.parametrize("digits", ["int8", "fp8", "fp4"])
def test_triton_path_gives_the_reference_bits(fused_path, digits):
    """On a small product: the reference engine's bits."""
    if not ozaki.catalog.plans_for(digits):
        pytest.skip(f"the catalog has no {digits} plan")
    rng = np.random.default_rng(13)
    a, b = _spread(rng, (20, 40), 1.0), _spread(rng, (40, 12), 1.0)
    reference = ozaki.matmul(a, b, engine="reference", accuracy=24)
    fused = fused_path(a, b, engine=digits, accuracy=24)
    assert np.array_equal(fused.view(np.uint64), reference.view(np.uint64))


@pytest.mark.gpu
@pytest.mark.parametrize(("digits", "accuracy", "shape", "rows"), [
    ("int8", 24, (20, 40, 12), 3), ("int8", "exact", (13, 129, 5), 4), ("int8", "exact", (2, 9, 33, 7), 2),
    ("fp4", 30, (20, 40, 12), 7),
])  # fmt: skip
def test_streamed_blocks_give_the_unblocked_bits(fused_path, monkeypatch, digits, accuracy, shape, rows):
    """Blocks of A's rows, ragged at the end, over batch dimensions and moduli sets: the bits of
    one block of all rows, which are the reference engine's."""
    *batch, m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a, b = _spread(rng, (*batch, m, k), 1.5), _spread(rng, (*batch, k, n), 1.5)
    a[..., 1, :] *= 1e-150  # rows and columns far apart in scale, each in its own block
    b[..., :, 2] *= 1e120
    reference = ozaki.matmul(a, b, engine="reference", accuracy=accuracy)
    heights = _blocks_of(monkeypatch, m)
    whole = fused_path(a, b, engine=digits, accuracy=accuracy)
    # A batch of products that fit whole decodes in one launch.
    assert heights == [m * math.prod(batch)]
    heights = _blocks_of(monkeypatch, rows)
    streamed = fused_path(a, b, engine=digits, accuracy=accuracy)
    assert heights == [min(rows, m - start) for start in range(0, m, rows)] * math.prod(batch)
    assert np.array_equal(whole.view(np.uint64), reference.view(np.uint64))
    assert np.array_equal(streamed.view(np.uint64), reference.view(np.uint64))


def _batch_of_scales(rng, broadcast: bool) -> tuple[np.ndarray, np.ndarray]:
    """Six products 9×40×7 of different scales and spreads (one of a single spread), over one B
    broadcast or a B per product."""
    scales = np.array([1e-100, 1.0, 1e50, 1e-3, 1e200, 1.0])[:, None, None]
    a = _spread(rng, (6, 9, 40), 2.0) * scales
    a[3] = _spread(rng, (9, 40), 0.0) * 1e-3
    b = _spread(rng, (40, 7), 1.0) if broadcast else _spread(rng, (6, 40, 7), 1.0) * scales[::-1]
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize(("digits", "accuracy", "broadcast"), [
    ("int8", "fp64", False), ("int8", "fp64", True), ("fp8", "exact", False), ("int8", 30, True),
])  # fmt: skip
def test_the_fused_batch_gives_each_product_its_bits_alone(fused_path, digits, accuracy, broadcast):
    """The fused stages run a batch in one launch each; every product keeps the bits it has
    alone (the reference engine's, every engine's)."""
    a, b = _batch_of_scales(np.random.default_rng(23), broadcast)
    batch = fused_path(a, b, accuracy=accuracy, engine=digits)
    alone = np.stack([ozaki.matmul(a[i], b if broadcast else b[i], accuracy=accuracy, engine="reference")
                      for i in range(len(a))])
    assert np.array_equal(batch.view(np.uint64), alone.view(np.uint64))


def _triton_launches(monkeypatch) -> collections.Counter:
    """Counts the Triton launches of every kernel module from now on, by kernel name."""
    counts, launch = collections.Counter(), kernels.dispatch.launch

    def counted(kernel, grid, *args, **kwargs):
        counts[getattr(kernel, "fn", kernel).__name__] += 1
        return launch(kernel, grid, *args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("kernels.") and getattr(module, "launch", None) is launch:
            monkeypatch.setattr(module, "launch", counted)
    return counts


@pytest.mark.gpu
@pytest.mark.parametrize("accuracy", ["fp64"])
def test_a_batch_of_small_products_launches_as_one_product_does(fused_path, monkeypatch, accuracy):
    """The read, the encodes, the plane GEMMs and the decode of a batch of small products take
    the batch whole: as many Triton launches for 7 products as for 2 (on a GPU, CUDA kernels
    too, counted by the profiler)."""
    rng = np.random.default_rng(29)
    counts = _triton_launches(monkeypatch)
    launched = []
    for batch in (2, 7):
        a, b = _spread(rng, (batch, 12, 24), 1.0), _spread(rng, (batch, 24, 10), 1.0)
        counts.clear()
        fused_path(a, b, accuracy=accuracy, engine="int8")
        launched.append(dict(counts))
    assert launched[0] == launched[1]
    assert {"_encode_kernel", "_plane_gemm_kernel", "_decode_kernel"} <= set(launched[0])
    if torch.cuda.is_available():
        kernels_run = []
        for batch in (2, 7):
            a, b = (torch.from_numpy(_spread(rng, shape, 1.0)).cuda() for shape in ((batch, 12, 24), (batch, 24, 10)))
            ozaki.matmul(a, b, accuracy=accuracy, engine="int8")  # compiled and tuned before the count
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
                ozaki.matmul(a, b, accuracy=accuracy, engine="int8")
                torch.cuda.synchronize()
            kernels_run.append(sum(event.device_type == torch.autograd.DeviceType.CUDA
                                   and "memcpy" not in event.name.lower() and "memset" not in event.name.lower()
                                   for event in profile.events()))
        assert kernels_run[0] == kernels_run[1]


@pytest.mark.gpu
def test_batch_invariance_of_the_streamed_path(fused_path, monkeypatch):
    """mm(A[:k], B) equals mm(A, B)[:k] bit for bit with the fused path's blocks falling
    differently on the same rows."""
    rng = np.random.default_rng(3)
    a, b = _spread(rng, (33, 64), 1.0), _spread(rng, (64, 17), 1.0)
    a[5] *= 1e-200
    _blocks_of(monkeypatch, 4)
    full = fused_path(a, b, engine="int8", accuracy="exact")
    for rows in (slice(0, 1), slice(0, 7), slice(5, 6), slice(20, 33)):
        part = fused_path(a[rows], b, engine="int8", accuracy="exact")
        assert np.array_equal(part.view(np.uint64), full[rows].view(np.uint64))


@pytest.mark.gpu
@pytest.mark.parametrize(("digits", "guess"), [
    ("int8", "same plan"), ("int8", "P narrower"), ("int8", "Q narrower"), ("int8", "other moduli"),
    ("int8", "non-finite operand"), ("fp8", "same plan"), ("fp4", "same plan"),
])  # fmt: skip
def test_work_queued_on_the_last_plan_keeps_the_bits_of_the_plan_made(fused_path, monkeypatch, digits, guess):
    """A second product of a shape starts on its last plan before the read (the rows widened to
    its P and Q, B's and the first block's planes): kept where the read gives the same plan,
    dropped otherwise, the bits in every case those of a plan made without it.  After a plan
    that differed from its guess, the next call guesses nothing, and the one after it guesses
    again (its plan repeated); after a plan read with NaN, no call guesses."""
    if not ozaki.catalog.plans_for(digits):
        pytest.skip(f"the catalog has no {digits} plan")
    rng = np.random.default_rng(29)
    a, b = _spread(rng, (20, 40), 0.5), _spread(rng, (40, 12), 0.5)
    a[3] *= 1e-310  # subnormal entries, and a column near the top of the range: shifts far apart
    b[:, 4] *= 1e300
    if guess == "non-finite operand":
        a[7, 2] = np.nan
    want = ozaki.matmul(a, b, engine="reference")
    monkeypatch.setattr(pipeline, "_LAST_PLANS", {})
    first = fused_path(np.where(np.isnan(a), 0.0, a), b, engine=digits)
    (key, last), = pipeline._LAST_PLANS.items()
    frontier = planning._plan_frontier(ozaki.catalog.catalog_dir(), digits)[1]
    pipeline._LAST_PLANS[key] = {
        "P narrower": pipeline._LastPlan(last.moduli, last.p - 8, last.q),
        "Q narrower": pipeline._LastPlan(last.moduli, last.p, last.q - 8),
        "other moduli": pipeline._LastPlan(next(m for m in frontier if m is not last.moduli), last.p, last.q),
    }.get(guess, last)
    queued, taken = [], []
    early, take = pipeline._early_encodes, pipeline.EarlyPlanes.take

    def spied_early(a_, bt_, moduli, shift_a, shift_b, span):
        for shift in (shift_a, shift_b):
            assert span[0] <= int(shift.min()) and int(shift.max()) <= span[1]
        queued.append(moduli)
        return early(a_, bt_, moduli, shift_a, shift_b, span)

    monkeypatch.setattr(pipeline, "_early_encodes", spied_early)
    monkeypatch.setattr(pipeline.EarlyPlanes, "take", lambda self: taken.append(self) or take(self))
    counts = []
    for _ in range(3):
        got = fused_path(a, b, engine=digits)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
        counts.append((len(queued), len(taken)))
        queued.clear(), taken.clear()
    assert counts == {"same plan": [(1, 1)] * 3, "non-finite operand": [(1, 0), (0, 0), (0, 0)]}.get(
        guess, [(1, 0), (0, 0), (1, 1)])
    if guess != "non-finite operand":
        assert np.array_equal(first.view(np.uint64), want.view(np.uint64))
