"""The fused encode kernel writes exactly the planes of the staged torch path:
``scale_rows`` -> ``residues`` -> ``products.digit_planes`` (the plain reference), for
every kind of encoding (computed identity planes, looked-up planes, int16 planes, moduli up
to the kernel's bound) and every kind of row; and it compiles for sm_90 to exact float
residue arithmetic without 64-bit division."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.residues
from kernels.residues import MAX_MODULUS, MAX_SHIFT, encode_planes, shift_range, stores_residues
from ozaki import products
from kernels.digits import digit_set
from ozaki.formats import encoding_from_dict
from ozaki.residues import residues
from ozaki.scaling import exact_bits, fixed_bits, row_shifts, scale_rows

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The device set (`pytest -m gpu`): on a GPU these compile the kernels and check their bits.
pytestmark = pytest.mark.gpu


def _one_limb(m: int, digits: str, coefficients=(1,), largest=False):
    """Each input's limb is the smallest (or largest) digit congruent to it; extra
    coefficients split the one product into several planes (they sum to 1 mod m)."""
    lo = -(m // 2)
    allowed = sorted(digit_set(digits), key=lambda d: (-abs(d) if largest else abs(d), d))
    side = {"min": lo, "max": lo + m - 1, "weights": [1],
            "limbs": [[next(d for d in allowed if (d - x) % m == 0)] for x in range(lo, lo + m)]}
    return _encoding(f"res{m}-{digits}-{len(coefficients)}", m, digits, side, side,
                     [{"a": [1], "b": [1], "coefficient": c} for c in coefficients])


def _two_limb(m: int, n: int = 13, digits: str = "fp4"):
    """x = d0 + n·d1 with digits d0 ≡ x (mod n) and small d1; four planes, λ = (1, n, n, n²)."""
    allowed = sorted(digit_set(digits), key=lambda d: (abs(d), d))
    lo = -(m // 2)
    limbs = []
    for x in range(lo, lo + m):
        d0 = next(d for d in allowed if (d - x) % n == 0)
        limbs.append([d0, (x - d0) // n])
    side = {"min": lo, "max": lo + m - 1, "weights": [1, n], "limbs": limbs}
    planes = [{"a": [int(i == 0), int(i == 1)], "b": [int(j == 0), int(j == 1)], "coefficient": n ** (i + j)}
              for i in range(2) for j in range(2)]
    return _encoding(f"res{m}-{digits}-4", m, digits, side, side, planes)


def _encoding(name, m, digits, a, b, planes):
    return encoding_from_dict({"format": "ozaki-encoding/1", "name": name, "digits": digits, "modulus": m,
                               "a": a, "b": b, "planes": planes, "products": len(planes)})


FP4 = [_one_limb(7, "fp4"), _one_limb(8, "fp4", (3, -2)), _one_limb(13, "fp4", (3, -1, 12)), _two_limb(89)]
INT8 = [_one_limb(256, "int8"), _one_limb(251, "int8"), _one_limb(255, "int8")]
FP8 = [_one_limb(17, "fp8", (9, -8), largest=True), _one_limb(13, "fp8")]  # values to 448: int16 planes
# Moduli at the kernel's bound (2**12: its float64 residue step rounds c/m within 1/(2m)), int8
# digits in two limbs of base 64, next to one-plane identity encodings, which a launch with
# table encodings looks up too.
WIDE = [_two_limb(MAX_MODULUS, 64, "int8"), _two_limb(4093, 64, "int8"), _one_limb(251, "int8"), _one_limb(2, "int8")]
ENCODINGS = {"fp4": FP4, "int8": INT8, "fp8": FP8, "wide": WIDE}


def staged(x: torch.Tensor, bits: torch.Tensor, encodings, side: str) -> torch.Tensor:
    r = residues(scale_rows(x, bits), [e.modulus for e in encodings])
    return torch.cat([products.digit_planes(r[i], e, side) for i, e in enumerate(encodings)])


def fused(x: torch.Tensor, bits: torch.Tensor, encodings, side: str) -> torch.Tensor:
    return encode_planes(x, row_shifts(x, bits), encodings, side)


def rows(rng: np.random.Generator, shape, kind: str) -> torch.Tensor:
    if kind == "phi":
        x = (rng.random(shape) - 0.5) * np.exp(2.0 * rng.standard_normal(shape))
    elif kind == "subnormal":
        x = rng.integers(-(2**40), 2**40, shape) * 2.0**-1074
    elif kind == "wide":  # huge and tiny entries in one row, zeros, signed zeros
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-1000, 1000, shape)
        x[..., ::5] = 0.0
        x[..., 1::7] = -0.0
    elif kind == "extremes":  # the largest finite, the smallest subnormal, rows of (signed) zeros
        x = rng.choice([1.0, -1.0], shape) * rng.choice([np.finfo(np.float64).max, 5e-324, 1.0, 2.0**-1022], shape)
        x[..., 0, :] = 0.0
        x[..., 1, :] = -0.0
        x[..., 2, ::3] = 0.0
    elif kind == "integers":  # 53-bit odd integers: every significand bit set at the bottom
        x = (rng.integers(2**51, 2**52, shape) * 2 + 1).astype(np.float64) * rng.choice([1.0, -1.0], shape)
    else:  # ties: |x| in [64, 128) has top 7, so 7 bits keep the integer part of k + 0.5
        x = rng.choice([-1.0, 1.0], shape) * (rng.integers(64, 127, shape) + 0.5)
    return torch.tensor(x, dtype=torch.float64, device=DEVICE)


BITS = {"exact": exact_bits, "fixed7": lambda x: fixed_bits(x, 7),
        "fixed60": lambda x: fixed_bits(x, 60)}


@pytest.mark.parametrize("kind", ["phi", "subnormal", "wide", "ties", "extremes", "integers"])
@pytest.mark.parametrize("bits", sorted(BITS))
@pytest.mark.parametrize("name", sorted(ENCODINGS))
@pytest.mark.parametrize("side", ["a", "b"])
def test_fused_encode_equals_staged_path(kind, bits, name, side):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{bits}-{side}-{name}".encode()))
    x = rows(rng, (2, 9, 150), kind)  # batch 2, 9 rows, K 150: ragged against the tiles
    b = BITS[bits](x)
    got = fused(x, b, ENCODINGS[name], side)
    want = staged(x, b, ENCODINGS[name], side)
    assert got.dtype == (torch.int16 if name == "fp8" else torch.int8)
    assert torch.equal(got.long(), want)


def test_one_plane_storing_the_input_takes_the_computed_path():
    # A launch whose encodings all are such computes the values (INT8 above), a mixed one looks
    # them up (WIDE); the tests above prove the bits equal either way.
    every = FP4 + INT8 + FP8 + WIDE
    computed = {e.name for e in every if kernels.residues._is_identity(e.plane_table("a"), e.a.min, e.modulus)}
    assert computed == {"res7-fp4-1", "res256-int8-1", "res251-int8-1", "res255-int8-1", "res13-fp8-1",
                        "res2-int8-1"}


def test_power_table():
    moduli = (2, 3, 8, 13, 251, 256, 4093, MAX_MODULUS)
    table = kernels.residues._power_table(moduli, 2048, torch.device("cpu"))
    assert table.dtype == torch.float64 and table.shape == (2048, len(moduli))
    assert table.t().long().tolist() == [[pow(2, p, m) for p in range(2048)] for m in moduli]


@pytest.mark.parametrize("side", ["a", "b"])
def test_transposed_view_is_read_in_place(side):
    # The pipeline passes Bᵀ as a view of B (rows strided by 1, K strided by N).
    rng = np.random.default_rng(5)
    b = rows(rng, (150, 9), "phi")
    bt = b.t()
    bits = exact_bits(bt)
    assert not bt.is_contiguous()
    assert torch.equal(fused(bt, bits, WIDE, side).long(), staged(bt.contiguous(), bits, WIDE, side))


def test_a_batch_of_transposed_views_is_read_in_place():
    # A batch's Bᵀ, (batch, N, K) of a contiguous (batch, K, N): one launch for the batch, each
    # product's planes those of it alone.
    rng = np.random.default_rng(6)
    bt = rows(rng, (3, 150, 9), "phi").transpose(-1, -2)
    bits = exact_bits(bt)
    got = fused(bt, bits, WIDE, "b")
    assert got.shape[1:] == bt.shape
    for index in range(len(bt)):
        assert torch.equal(got[:, index], fused(bt[index], bits[index], WIDE, "b"))


@pytest.mark.parametrize("side", ["a", "b"])
def test_karatsuba_planes_are_the_parts_and_their_sum(side):
    # [2, rows, K] parts of one shift per row (as a complex product's [Ar Ai] rows): the planes
    # of each part, and of the sum of their integers, which the encodings' planes store.
    rng = np.random.default_rng(8)
    parts = rows(rng, (9, 2, 150), "wide").transpose(0, 1)
    shift = row_shifts(parts.transpose(0, 1).reshape(9, 300), torch.full((9,), 40)).expand(2, 9)
    got = encode_planes(parts, shift, INT8, side, karatsuba=True)
    assert got.shape == (len(INT8), 3, 9, 150)
    alone = [encode_planes(part, shift[0], INT8, side) for part in parts]
    assert torch.equal(got[:, 0], alone[0]) and torch.equal(got[:, 1], alone[1])
    scaled = [scale_rows(part, torch.full((9,), 40), shift[0]) for part in parts]
    sums = residues(scaled[0], [e.modulus for e in INT8]) + residues(scaled[1], [e.modulus for e in INT8])
    want = torch.cat([products.digit_planes(torch.remainder(sums[i], e.modulus), e, side) for i, e in enumerate(INT8)])
    assert torch.equal(got[:, 2].long(), want)
    assert stores_residues(INT8, side) and not stores_residues(FP4, side)
    with pytest.raises(ValueError, match="Karatsuba's planes take"):
        encode_planes(parts, shift, FP4, side, karatsuba=True)


def _exact_planes(x: torch.Tensor, shift: int, encodings, side: str) -> torch.Tensor:
    """Planes from Python's exact rationals: round(x·2^shift) (ties to even), mod m, table."""
    out = []
    for e in encodings:
        operand, table = (e.a if side == "a" else e.b), e.plane_table(side)
        index = [[(round(Fraction(v) * Fraction(2) ** shift) - operand.min) % e.modulus for v in row]
                 for row in x.tolist()]
        out.extend([[plane[i] for i in row] for row in index] for plane in table)
    return torch.tensor(out, dtype=torch.int64)


def test_any_shift_in_range_rounds_to_nearest_even():
    # Shifts far past a row's bits (huge integers) and far below (all rounds to 0, ties
    # included) go through the same kernel arithmetic; checked against exact rationals.
    rng = np.random.default_rng(6)
    x = torch.cat([rows(rng, (2, 40), "phi"), rows(rng, (2, 40), "ties"), rows(rng, (2, 40), "wide")])
    for shift in (-MAX_SHIFT, -1100, -60, -7, -1, 0, 1, 700, 3000, MAX_SHIFT):
        s = torch.full((6,), shift, dtype=torch.int64, device=DEVICE)
        for encodings in (INT8, FP4):
            got = encode_planes(x, s, encodings, "a").long().cpu()
            assert torch.equal(got, _exact_planes(x, shift, encodings, "a")), shift


@pytest.mark.parametrize("encodings", [INT8, WIDE], ids=["computed", "tables"])
def test_powers_on_both_sides_of_the_table_threshold(encodings):
    # Powers up to kernels.residues._SMALL_POWER shift the integer, larger ones read the table
    # of 2**p mod m.  One row holds every power from 0 to 40 (both sides of the threshold, in
    # the tile's table loop); alone, the other row's powers stay small under the small shifts
    # (the loop without table).  Zeros, whose power is large under a large shift, read nothing.
    rng = np.random.default_rng(7)
    significands = rng.integers(2**52, 2**53, 41) * rng.choice([-1, 1], 41)
    mixed = [float(s) * 2.0**(p - 52) for s, p in zip(significands.tolist(), range(41))]
    small = [v * 2.0**-40 for v in mixed]
    x = torch.tensor([mixed + [0.0], small + [0.0]], dtype=torch.float64, device=DEVICE)
    for operand in (x, x[1:]):
        for shift in (0, 3, 52, 1100):
            s = torch.full((len(operand),), shift, dtype=torch.int64, device=DEVICE)
            got = encode_planes(operand, s, encodings, "a").long().cpu()
            assert torch.equal(got, _exact_planes(operand, shift, encodings, "a")), shift


@pytest.mark.parametrize("kind", ["phi", "subnormal", "wide", "ties", "extremes", "integers"])
def test_float_and_integer_tiles_write_the_same_planes(kind, monkeypatch):
    # Tiles of small scaled entries take the float path unless the launch's shifts or windows
    # rule it out; forcing every tile onto the integer path changes no bit, for rows kept at
    # 60 bits (all float tiles) and at their lossless width (wide rows: integer tiles too).
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    x = rows(rng, (37, 150), kind)
    for bits in (fixed_bits(x, 60), exact_bits(x)):
        shift = row_shifts(x, bits)
        for encodings in (INT8, WIDE, FP8):
            with_float = encode_planes(x, shift, encodings, "a")
            with monkeypatch.context() as patch:
                patch.setattr(kernels.residues, "_float_tiles", lambda *args: False)
                assert torch.equal(encode_planes(x, shift, encodings, "a"), with_float), (kind, encodings[0].name)
    # The float path's windows: one step by m from [-m/2, m/2] must land in [base, base + m).
    assert kernels.residues._float_tiles([7, 8], [-3, -4], (0, 60))
    assert kernels.residues._float_tiles([7, 8], [0, 0], (-2044, 2046))
    assert kernels.residues._float_tiles([7], [4], (0, 60)) and kernels.residues._float_tiles([7], [-10], (0, 60))
    assert not kernels.residues._float_tiles([7], [5], (0, 60))
    assert not kernels.residues._float_tiles([7], [-11], (0, 60))
    assert not kernels.residues._float_tiles([7], [0], (-2045, 60))
    assert not kernels.residues._float_tiles([7], [0], (0, 2047))


@pytest.mark.parametrize("block, num_warps", [((1, 32), 1), ((4, 64), 2), ((32, 64), 8), ((16, 256), 4)])
def test_tile_and_warps_change_no_bit(block, num_warps):
    rng = np.random.default_rng(8)
    x = rows(rng, (37, 150), "wide")
    for bt in (x, x.t()):
        shift = row_shifts(bt, exact_bits(bt))
        want = encode_planes(bt, shift, WIDE, "b")
        assert torch.equal(encode_planes(bt, shift, WIDE, "b", block=block, num_warps=num_warps), want)


def test_register_cap_goes_with_the_default_launch_only(monkeypatch):
    # The cap was chosen for each layout's default tile; other tiles spill under it (the
    # H200 sweeps in benchmarks/kernels.md), so a launch with a tile of its own goes uncapped.
    launched = []
    kernel = kernels.residues._encode_kernel

    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **options):
                launched.append(options.get("maxnreg"))
                return kernel[grid](*args, **options)
            return launch

    monkeypatch.setattr(kernels.residues, "_encode_kernel", Recorder())
    rng = np.random.default_rng(9)
    x = rows(rng, (20, 64), "phi")
    for operand, layout in ((x, "k"), (x.t(), "rows")):
        shift = row_shifts(operand, exact_bits(operand))
        want = encode_planes(operand, shift, INT8, "b")
        assert launched.pop() == kernels.residues.ENCODE_LAUNCHES[layout][2]
        for options in ({"block": (4, 64)}, {"num_warps": 2}):
            assert torch.equal(encode_planes(operand, shift, INT8, "b", **options), want)
            assert launched.pop() is None
    assert kernels.residues.ENCODE_LAUNCHES["rows"][2] is not None


def test_a_given_span_and_finite_operand_change_no_bit():
    # The pipeline reads both shifts' range once and encodes row blocks with it (their own
    # range lies inside), its operands finite: the planes are those of a call that reads both.
    rng = np.random.default_rng(10)
    a, bt = rows(rng, (37, 150), "wide"), rows(rng, (21, 150), "phi")
    shift_a, shift_b = row_shifts(a, exact_bits(a)), row_shifts(bt, exact_bits(bt))
    span = shift_range(shift_a, shift_b)
    assert span == (min(shift_a.min(), shift_b.min()), max(shift_a.max(), shift_b.max()))
    assert shift_range(shift_a[:0], shift_b) == tuple(torch.stack(shift_b.aminmax()).tolist())
    assert shift_range(shift_a[:0]) == (0, 0)
    for x, shift in ((a, shift_a), (a[5:9], shift_a[5:9]), (bt, shift_b)):
        for encodings in (INT8, WIDE):
            assert torch.equal(encode_planes(x, shift, encodings, "a", span=span, known_finite=True),
                               encode_planes(x, shift, encodings, "a"))
    with pytest.raises(ValueError, match="shift per row must lie in"):
        encode_planes(a, shift_a, INT8, "a", span=(0, MAX_SHIFT + 1))


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("transposed", [False, True], ids=["a", "bt"])
def test_non_finite_entries_are_found_by_the_kernel(value, transposed):
    # One inf or nan among finite entries, in a tile of its own or not, in A or in a Bᵀ view:
    # the kernel flags it and the launcher raises; finite rows around it change nothing.
    rng = np.random.default_rng(9)
    x = rows(rng, (70, 150), "phi")
    shift = torch.zeros(70 if not transposed else 150, dtype=torch.int64, device=DEVICE)
    for i, j in ((0, 0), (69, 149), (33, 77)):
        bad = x.clone()
        bad[i, j] = value
        operand = bad.t() if transposed else bad
        for encodings in (INT8, WIDE):
            with pytest.raises(ValueError, match="inf or nan"):
                encode_planes(operand, shift, encodings, "b" if transposed else "a")
    operand = x.t() if transposed else x
    assert encode_planes(operand, shift, INT8, "a").shape == (3, *operand.shape)


@settings(max_examples=20, deadline=None)
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=40),
       bits=st.integers(0, 200))
def test_fused_encode_any_finite_row(values, bits):
    x = torch.tensor([values], dtype=torch.float64, device=DEVICE)
    b = torch.tensor([bits], dtype=torch.int64, device=DEVICE)
    assert torch.equal(fused(x, b, FP4, "a").long(), staged(x, b, FP4, "a"))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, b: encode_planes(x.float(), b, FP4, "a"), TypeError, "float64"),
        (lambda x, b: encode_planes(x, b[..., :1], FP4, "a"), ValueError, "one entry per row"),
        (lambda x, b: encode_planes(x, b, FP4, "a", block=(16, 96)), ValueError, "powers of two"),
        (lambda x, b: encode_planes(x, b.int(), FP4, "a"), ValueError, "int64"),
        (lambda x, b: encode_planes(x, b + MAX_SHIFT, FP4, "a"), ValueError, r"shift per row must lie in"),
        (lambda x, b: encode_planes(x, b - MAX_SHIFT - 5, FP4, "a"), ValueError, r"shift per row must lie in"),
        (lambda x, b: encode_planes(x, b, [_two_limb(MAX_MODULUS + 1, 64, "int8")], "a"), ValueError,
         "modulus in \\[2, 4096\\]"),
        (lambda x, b: encode_planes(x * float("inf"), b, FP4, "a"), ValueError, "inf or nan"),
        (lambda x, b: encode_planes(x, b, FP4, "c"), ValueError, "side"),
        (lambda x, b: encode_planes(x, b, [], "a"), ValueError, "at least one encoding"),
        (lambda x, b: encode_planes(x[0, 0], b, FP4, "a"), ValueError, r"\[..., rows, K\]"),
    ],
)
def test_bad_encode_calls_raise(call, error, message):
    x = torch.ones((1, 2, 3), dtype=torch.float64, device=DEVICE)
    b = torch.full((1, 2), 4, dtype=torch.int64, device=DEVICE)
    with pytest.raises(error, match=message):
        call(x, b)


def test_product_encodings_are_refused():
    side = {"min": -2, "max": 1, "weights": [1], "limbs": [[x] for x in range(-2, 2)]}
    product = encoding_from_dict({"format": "ozaki-encoding/1", "name": "int2xint2-int4-1", "digits": "int4",
                                  "modulus": None, "a": side, "b": side,
                                  "planes": [{"a": [1], "b": [1], "coefficient": 1}], "products": 1})
    x = torch.ones((2, 3), dtype=torch.float64, device=DEVICE)
    with pytest.raises(ValueError, match="no residue encoding"):
        encode_planes(x, torch.full((2,), 3, dtype=torch.int64, device=DEVICE), [product], "a")


_PTX_SCRIPT = """
import json, sys
from kernels.ptx import registers
from kernels.residues import compile_kernel, compile_ptx
from ozaki import catalog
moduli = [m for m, _ in catalog.plan("fp64-int8-k16384").moduli]
from kernels.ptx import compile_ptx as compile_any
from kernels.residues import _sum_planes_kernel
sum_signature = {"planes_ptr": "*i8", "moduli_ptr": "*i32", "bases_ptr": "*i32", "size": "i32", "stride_plane": "i32",
                 "BLOCK": "constexpr"}
json.dump({"ptx": {f"{operand}-{computed}-{float_tiles}": compile_ptx(moduli, 90, operand, computed, float_tiles)
                   for operand in "ab" for computed in (True, False) for float_tiles in (True, False)},
           "registers": {"b": registers(compile_kernel(moduli, 90, "b"))},
           "sum": compile_any(_sum_planes_kernel, sum_signature, {"BLOCK": 1024},
                              divisible=["planes_ptr", "size", "stride_plane"], num_warps=4)},
          open(sys.argv[1], "w"))
"""


def test_kernel_compiles_for_sm90_to_exact_float_residues(tmp_path):
    # Compiled kernels need a process without TRITON_INTERPRET.  The residue step is float64
    # arithmetic on integers it holds exactly (so fusing a multiply and an add, or not, changes
    # no bit) that rounds by adding and subtracting 1.5 * 2**52 and reads integers from the
    # bits: no float rounding or conversion instruction per modulus, no emulated 64-bit
    # division, no spills.  Only the rounding constant's two adds must survive as written.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, str(tmp_path / "ptx.json")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    compiled = json.loads((tmp_path / "ptx.json").read_text())
    for name, ptx in compiled["ptx"].items():
        assert ".entry _encode_kernel" in ptx, name
        assert re.search(r"add\.f64\s+%\w+, %\w+, 0d4338000000000000", ptx), name
        assert re.search(r"add\.f64\s+%\w+, %\w+, 0dC338000000000000", ptx), name
        # Float to integer (cvt.r*i.s32.f64 ...), float rounding (cvt.rmi/rni.f64.f64), float64
        # to float32: none.  (The one-per-entry integer-to-float conversions remain.)
        assert not re.search(r"cvt\.r[nzmp]i(\.ftz)?(\.sat)?\.[su]\d+\.f\d+", ptx), name
        assert not re.search(r"cvt\.r[nzmp]i(\.ftz)?\.f\d+\.f\d+", ptx), name
        assert not re.search(r"cvt\.\w+(\.ftz)?\.f32\.f64", ptx), name
        for forbidden in ("div.s64", "rem.s64", "div.u64", "rem.u64", "div.rn.f64", "div.rn.f32", ".local"):
            assert forbidden not in ptx, (name, forbidden)
        # The non-finite check is in the kernel: a relaxed max on the flag, for flagged lanes only.
        assert re.search(r"(atom|red)\.global\.gpu\.relaxed\.max\.s32", ptx), name
    # A's int8 planes leave in one store of all a thread's bytes of a row (4 with the default
    # launch's 4 entries per thread: a 32-bit word), not byte by byte.
    ptx_a = compiled["ptx"]["a-True-True"]
    assert re.search(r"st\.global(\.v[24])?\.b32", ptx_a) and not re.search(r"st\.global\.(u|b|s)8\b", ptx_a)
    # Bᵀ's default launch compiles under its register cap (kernels.ptx.registers reads the cubin),
    # which keeps five of its programs on an SM's 65,536 registers.
    _, warps, cap = kernels.residues.ENCODE_LAUNCHES["rows"]
    assert 0 < compiled["registers"]["b"] <= cap, compiled["registers"]
    assert 5 * 32 * warps * cap <= 65536
    # Karatsuba's third operand: the sum of two planes brought back into the window by selects.
    assert ".entry _sum_planes_kernel" in compiled["sum"]
    assert not re.search(r"(div|rem)\.[su]\d+", compiled["sum"]) and ".local" not in compiled["sum"]
