"""The fused decode kernel (linear CRT) returns exactly the bits of its plain reference
(``reference_decode``: exact integers, one correct rounding), of the staged torch path
``ozaki.crt.garner`` -> ``ozaki.crt.round_to_float64`` within that path's bounds, and of
CPython's correctly rounded integer division."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import crt
from kernels.crt import decode_residues, new_flag, raise_for_flag, reference_decode
from kernels.products import residue_dtype
from ozaki.crt import HALF_MODULUS_ERROR, garner, round_to_float64

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The device set (`pytest -m gpu`): on a GPU these compile the kernels and check their bits.
# Overflowing results are meant to become infinities.
pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")]

MODULI = {
    "fp4-plan": [7, 8, 9, 11, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 85, 89, 139, 149, 151, 157, 169],
    "int8-20": [256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 211, 199, 197, 193, 191, 181, 179, 173, 167],
    # 126 bits: three limbs of 42 bits in two words.
    "int8-16": [256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 211, 199, 197, 193, 191],
    # 178 bits: five limbs of 42 bits in three words.
    "int8-23": [256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181, 179, 173,
                167, 163, 157],
    "three": [7, 8, 9],
    "two": [251, 256],
    "one": [241],
    "wide": [32749, 32719, 32717, 32713],
    "primes-2^22": [4194301, 4194287, 4194277, 4194271],
    "mixed": [3, 256, 4194301, 65521, 1021, 13],
}
# Past the staged path's own bounds (moduli from 2**24): checked against exact Python integers.
BEYOND_STAGED = {"primes-2^30": [1073741789, 1073741783]}


def exact(y: int, e: int) -> float:
    """y * 2**e rounded once to float64 by CPython (int / int and float(int) round to nearest
    even, subnormals included); +-inf past the range; an exact 0 is +0.0."""
    try:
        return float(y << e) if e >= 0 else y / (1 << -e)
    except OverflowError:
        return math.copysign(math.inf, y)


def residues_of(values: list[list[int]], moduli, balanced: bool = False, dtype=torch.int64) -> torch.Tensor:
    def rep(y, m):
        r = y % m
        return r - m if balanced and r > m // 2 else r
    return torch.tensor([[[rep(y, m) for y in row] for row in values] for m in moduli], dtype=dtype, device=DEVICE)


def window(mods) -> int:
    """(M - 1) // 2: the largest |Y| with a representative in (-M/2, M/2), for odd and even M."""
    return (math.prod(mods) - 1) // 2


def special_values(limit: int, rng: random.Random) -> list[int]:
    """Zero, +-1, values near +-limit, and integers whose 53-bit rounding is a tie or just off one."""
    out = [0, 1, -1, limit - 1, -(limit - 1), limit // 2, -(limit // 3)]
    for shift in range(1, max(2, limit.bit_length() - 54), 7):
        core = rng.randrange(2**52, 2**53) << shift
        half = 1 << (shift - 1)
        out += [core + half, -(core + half), core + half + 1, core + half - 1, (core | (1 << shift)) + half]
    return [v for v in out if abs(v) < limit]


def grid_case(mods, exponents: str, seed: str, rows: int = 5):
    """A rows x cols grid of products with row and column exponents, up to the edges
    +-(M - 1) // 2 of the window (-M/2, M/2) and just inside them."""
    rng = random.Random(seed)
    edge = window(mods)
    values = special_values(edge + 1, rng) + [s * (edge - j) for j in range(1, 4) for s in (1, -1) if j < edge]
    values += [rng.choice([-1, 1]) * rng.randrange(2 ** rng.randrange(1, (edge + 1).bit_length())) for _ in range(60)]
    values += [0] * (-len(values) % rows)
    grid = [values[i::rows] for i in range(rows)]
    low, high = {"moderate": (-300, 300), "subnormal": (-1200, -900), "overflow": (850, 1100)}[exponents]
    row_exp = [rng.randrange(low, high) for _ in range(rows)]
    col_exp = [rng.randrange(-60, 60) for _ in range(len(grid[0]))]
    return grid, row_exp, col_exp


def exponent_tensors(row_exp, col_exp):
    return (torch.tensor(row_exp, dtype=torch.int64, device=DEVICE),
            torch.tensor(col_exp, dtype=torch.int64, device=DEVICE))


def staged(c: torch.Tensor, mods, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """The library's staged torch decode of the same residues and exponents."""
    return round_to_float64(garner(c.to(torch.int64), mods), mods, row[:, None] + col[None, :])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Signed zeros and infinities included.
    return torch.equal(a.view(torch.int64), b.view(torch.int64))


@pytest.mark.parametrize("moduli", sorted(MODULI))
@pytest.mark.parametrize("exponents", ["moderate", "subnormal", "overflow"])
def test_decode_equals_staged_path(moduli, exponents):
    mods = MODULI[moduli]
    grid, row_exp, col_exp = grid_case(mods, exponents, f"{moduli}-{exponents}")
    row, col = exponent_tensors(row_exp, col_exp)
    c = residues_of(grid, mods)
    got = decode_residues(c, mods, row, col)
    assert same_bits(got, reference_decode(c, mods, row, col))
    assert same_bits(got, staged(c, mods, row, col))
    # Balanced representatives, int32 storage and the plane GEMM's narrowest type name the same products.
    assert same_bits(decode_residues(residues_of(grid, mods, balanced=True, dtype=torch.int32), mods, row, col), got)
    assert same_bits(decode_residues(c.to(residue_dtype(mods)), mods, row, col), got)


def edge_values(mods) -> list[int]:
    """+-(M - 1) // 2 and the three integers inside each edge (where they exist)."""
    edge = window(mods)
    return sorted({s * (edge - j) for j in range(4) for s in (1, -1) if j <= edge})


def estimate(y: int, mods) -> tuple[float, int]:
    """E = sum_l S_l * fl(2**(b*l) / M) for the product y, from the limb sums
    S_l = sum_i c_i * digit_l(w_i') summed from the top limb down in float64 without fused
    multiply-adds (as the interpreter computes it), and the quotient q with X' = q * M + y."""
    layout = crt._constants(tuple(mods))
    residues = [y % m for m in mods]
    sums = [float(sum(c * w[l] for c, w in zip(residues, layout.weights))) for l in range(len(layout.modulus))]
    value = sums[-1] * layout.scales[-1]
    for s, scale in zip(sums[-2::-1], layout.scales[-2::-1]):
        value += s * scale
    total = sum(c * sum(limb << (layout.limb_bits * l) for l, limb in enumerate(w))
                for c, w in zip(residues, layout.weights))
    return value, (total - y) // math.prod(mods)


def estimate_error(y: int, mods) -> int:
    """round(E) - q for the product y.  Non-zero: the float64 estimate picks the wrong q, and
    only the exact comparison with +-floor(M/2) corrects it."""
    value, quotient = estimate(y, mods)
    return math.floor(value + 0.5) - quotient


def test_edge_values_mislead_the_estimate_both_ways():
    # The edge tests below reach the correction: at +-(M - 1) // 2, X'/M lies within 1/M of
    # a half-integer, and the float64 estimate rounds to either neighbour.
    errors = {estimate_error(y, MODULI[name]) for name in MODULI for y in edge_values(MODULI[name])}
    assert errors == {-1, 0, 1}


@pytest.mark.parametrize("moduli", sorted(MODULI | BEYOND_STAGED))
def test_window_edges_decode(moduli):
    # |Y| up to (M - 1) // 2, both signs, odd and even M: the sign is exact to the last unit.
    mods = (MODULI | BEYOND_STAGED)[moduli]
    values = edge_values(mods)
    row = torch.tensor([-30], dtype=torch.int64, device=DEVICE)
    col = torch.zeros(len(values), dtype=torch.int64, device=DEVICE)
    c = residues_of([values], mods)
    got = decode_residues(c, mods, row, col)
    assert got.tolist() == [[exact(y, -30) for y in values]]
    assert same_bits(decode_residues(residues_of([values], mods, balanced=True), mods, row, col), got)
    assert same_bits(got, reference_decode(c, mods, row, col))
    if moduli in MODULI:
        assert same_bits(got, staged(c, mods, row, col))


def boundary_values(mods) -> list[int]:
    """Per bit length k of the window: 2**k and its neighbours, all ones (rounding carries
    into a new bit), and ties to even rounding down and up at 53 bits."""
    edge = window(mods)
    values = []
    for k in range(edge.bit_length()):
        values += [1 << k, (1 << k) - 1, (1 << k) + 1, (1 << (k + 1)) - 1]
        if k >= 54:
            values += [(1 << k) | (1 << (k - 53)), ((1 << 53) - 1 << (k - 52)) | (1 << (k - 53))]
    return sorted({s * v for v in values for s in (1, -1) if 0 < v <= edge})


@pytest.mark.parametrize("moduli", ["int8-23", "int8-16", "primes-2^22", "mixed", "wide", "one", "primes-2^30"])
@pytest.mark.parametrize("shift", [0, -1074])
def test_every_limb_boundary_decodes(moduli, shift):
    # Limb widths 42 (int8), 31, 32, 30 and 23 bits, one to five limbs in one to three words:
    # every leading-bit position of every word (the rounding window's moves and
    # normalization), products that use every limb, ties at 53 bits; normal results, and
    # subnormal ones keeping 20 bits.
    mods = (MODULI | BEYOND_STAGED)[moduli]
    values = boundary_values(mods)
    col_exp = [shift and shift + 20 - abs(y).bit_length() for y in values]
    row, col = exponent_tensors([0], col_exp)
    c = residues_of([values], mods)
    got = decode_residues(c, mods, row, col)
    assert got.tolist() == [[exact(y, e) for y, e in zip(values, col_exp)]]
    assert same_bits(got, reference_decode(c, mods, row, col))


@pytest.mark.parametrize("moduli", sorted(BEYOND_STAGED))
def test_decode_beyond_the_staged_bounds(moduli):
    mods = BEYOND_STAGED[moduli]
    grid, row_exp, col_exp = grid_case(mods, "moderate", moduli)
    c, exponents = residues_of(grid, mods), exponent_tensors(row_exp, col_exp)
    got = decode_residues(c, mods, *exponents)
    want = [[exact(y, r + col_exp[j]) for j, y in enumerate(row)] for row, r in zip(grid, row_exp)]
    assert same_bits(got, torch.tensor(want, dtype=torch.float64, device=DEVICE))
    assert same_bits(got, reference_decode(c, mods, *exponents))


def test_strided_residues():
    # A transposed view (column stride != 1) decodes like its contiguous copy.
    mods = MODULI["int8-20"]
    grid, row_exp, col_exp = grid_case(mods, "moderate", "strided")
    c = residues_of([list(col) for col in zip(*grid)], mods).transpose(1, 2)
    row, col = exponent_tensors(row_exp, col_exp)
    assert not c.is_contiguous()
    assert same_bits(decode_residues(c, mods, row, col), decode_residues(c.contiguous(), mods, row, col))


def test_decode_into_rows_of_a_larger_result():
    # out= takes a contiguous block of rows of C (the pipeline's streamed blocks): the same bits.
    mods = MODULI["int8-20"]
    grid, row_exp, col_exp = grid_case(mods, "moderate", "into")
    c = residues_of(grid, mods)
    row, col = exponent_tensors(row_exp, col_exp)
    whole = torch.full((len(grid) + 2, len(grid[0])), 7.0, dtype=torch.float64, device=c.device)
    got = decode_residues(c, mods, row, col, out=whole[1:-1])
    assert got.data_ptr() == whole[1:-1].data_ptr()
    assert same_bits(whole[1:-1], decode_residues(c, mods, row, col))
    assert whole[0].eq(7.0).all() and whole[-1].eq(7.0).all()
    for bad in (whole[:-2].T, whole[1:-1].float(), whole[:2]):
        with pytest.raises(ValueError, match="out must be a contiguous float64 tensor"):
            decode_residues(c, mods, row, col, out=bad)


def test_a_batch_decodes_each_product_with_its_own_columns_and_slack():
    # Three products of 2 rows in one launch, each with its column exponents and slack: the
    # bits of each decoded alone (the last two overflow, one saturating and one not).
    mods = MODULI["int8-20"]
    grid, _, _ = grid_case(mods, "moderate", "batch", rows=6)
    c = residues_of(grid, mods)
    cols = len(grid[0])
    row = torch.tensor([0, -3, 5, 1, 1000, 1000], dtype=torch.int64, device=DEVICE)
    col = torch.tensor([[0] * cols, [7] * cols, [1100] * cols], dtype=torch.int64, device=DEVICE)
    slack = (0, 5, 2**40)
    got = decode_residues(c, mods, row, col, slack=slack)
    for index in range(3):
        rows = slice(2 * index, 2 * index + 2)
        alone = decode_residues(c[:, rows], mods, row[rows], col[index], slack=slack[index])
        assert same_bits(got[rows], alone)
    # The last product overflows: saturated where its slack may hide a finite product, inf elsewhere.
    assert got[4:].isinf().any() and (got[4:].abs() == torch.finfo(torch.float64).max).any()
    with pytest.raises(ValueError, match="one per product"):
        decode_residues(c, mods, row, col, slack=(0, 1))
    with pytest.raises(ValueError, match="col_exponent of shape"):
        decode_residues(c, mods, row, col[:, None].expand(3, 2, cols).reshape(6, cols)[:4])


@pytest.mark.parametrize("moduli", ["int8-20", "int8-16", "fp4-plan"])
def test_karatsuba_products_decode_as_the_embeddings_residues(moduli):
    # P1, P2, P3 in [0, m) (as the plane GEMM stores them) decode as [P1 − P2 | P3 − P1 − P2]
    # mod m: every residue class in both parts, including P3 − P1 − P2 down to −2(m − 1).
    mods = MODULI[moduli]
    rng = random.Random(moduli)
    rows, half = 3, 37
    three = torch.tensor([[[[rng.randrange(m) for _ in range(half)] for _ in range(rows)] for _ in range(3)]
                          for m in mods], dtype=torch.uint8 if max(mods) <= 256 else torch.int32, device=DEVICE)
    three[:, 2, 0, :3] = 0
    three[:, :2, 0, :3] = (torch.tensor(mods, device=DEVICE) - 1).to(three.dtype)[:, None, None]
    m = torch.tensor(mods, dtype=torch.int64, device=DEVICE)[:, None, None]
    p1, p2, p3 = three.long().unbind(1)
    embedding = torch.remainder(torch.cat([p1 - p2, p3 - p1 - p2], dim=-1), m)
    row = torch.tensor([-5, 0, 9], dtype=torch.int64, device=DEVICE)
    col = torch.tensor([rng.randrange(-40, 40) for _ in range(2 * half)], dtype=torch.int64, device=DEVICE)
    got = decode_residues(three, mods, row, col, karatsuba=True)
    assert same_bits(got, decode_residues(embedding, mods, row, col))
    with pytest.raises(ValueError, match="Karatsuba's products are"):
        decode_residues(three[:, :2], mods, row, col, karatsuba=True)


@settings(max_examples=20, deadline=None)
@given(data=st.data(), moduli=st.sampled_from(["fp4-plan", "int8-20", "primes-2^22"]),
       row=st.integers(-1250, 1100), col=st.integers(-100, 100))
def test_decode_any_product(data, moduli, row, col):
    mods = MODULI[moduli]
    edge = window(mods)
    near_edge = st.builds(lambda s, j: s * (edge - j), st.sampled_from([1, -1]), st.integers(0, 2**30))
    values = data.draw(st.lists(st.one_of(st.integers(-edge, edge), near_edge), min_size=1, max_size=20))
    c = residues_of([values], mods)
    row_exp = torch.tensor([row], dtype=torch.int64, device=DEVICE)
    col_exp = torch.full((len(values),), col, dtype=torch.int64, device=DEVICE)
    got = decode_residues(c, mods, row_exp, col_exp)
    assert same_bits(got, reference_decode(c, mods, row_exp, col_exp))
    assert same_bits(got, staged(c, mods, row_exp, col_exp))
    assert got.tolist() == [[exact(y, row + col) for y in values]]


@pytest.mark.parametrize("moduli", sorted(name for name in MODULI if math.prod(MODULI[name]) % 2 == 0))
def test_half_of_an_even_modulus_raises(moduli):
    # Y = +-M/2 (one class mod M) has no representative in (-M/2, M/2): the product
    # reached M/2, the caller's capacity was too small, and no result is returned.
    mods = MODULI[moduli]
    half = math.prod(mods) // 2
    row, col = torch.zeros(1, dtype=torch.int64, device=DEVICE), torch.zeros(3, dtype=torch.int64, device=DEVICE)
    for values in ([1, half, 2], [-half, 0, 0]):
        c = residues_of([values], mods)
        for decode in (decode_residues, reference_decode, staged):
            with pytest.raises(ValueError, match=HALF_MODULUS_ERROR.split(":")[0]):
                decode(c, mods, row, col)


@pytest.mark.parametrize("moduli", ["one", "wide", "primes-2^22", "int8-20", "three"])
def test_products_past_the_window_are_their_representatives(moduli):
    # Any other |Y| >= M/2 is congruent to a value inside the window, which the residues
    # cannot tell apart: the decode returns that representative (the pipeline's capacity
    # keeps every product inside).
    mods = MODULI[moduli]
    big = math.prod(mods)
    values = [y for y in (big // 2 + 1, big // 2 + 2, big - 1, big + 5, -(big // 2) - 1) if 2 * abs(y % big) != big]
    want = [y % big - big * (2 * (y % big) > big) for y in values]
    row = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    col = torch.zeros(len(values), dtype=torch.int64, device=DEVICE)
    got = decode_residues(residues_of([values], mods), mods, row, col)
    assert got.tolist() == [[exact(w, 0) for w in want]]


@pytest.mark.parametrize(
    "row_exp, col_exp, want",
    [
        (-(2**40), 0, [0.0, -0.0, 0.0]),
        (2**40, -(2**39), [math.inf, -math.inf, 0.0]),  # each term past the saturation, the sum too
        (2**40, -(2**40) + 3, [12345.0 * 8, -(2.0**103), 0.0]),  # large terms, moderate sum
        (2**62, 2**62, [math.inf, -math.inf, 0.0]),  # the int64 sum wraps
        (-(2**63), -(2**62), [0.0, -0.0, 0.0]),
        (2**63 - 1, -(2**63) + 1, [12345.0, -(2.0**100), 0.0]),
    ],
)
def test_extreme_exponents(row_exp, col_exp, want):
    mods = MODULI["int8-20"]
    c = residues_of([[12345, -(2**100), 0]], mods)
    row = torch.tensor([row_exp], dtype=torch.int64, device=DEVICE)
    col = torch.tensor([col_exp] * 3, dtype=torch.int64, device=DEVICE)
    got = decode_residues(c, mods, row, col)
    assert same_bits(got, torch.tensor([want], dtype=torch.float64, device=DEVICE))
    assert same_bits(got, reference_decode(c, mods, row, col))


def test_int32_residues_from_the_gemm_decode_alike():
    mods = MODULI["int8-20"][:6]
    c = residues_of([[12345, -678, 2**40 + 3]], mods)
    e = torch.zeros(1, dtype=torch.int64, device=DEVICE), torch.zeros(3, dtype=torch.int64, device=DEVICE)
    assert same_bits(decode_residues(c.int(), mods, *e), decode_residues(c, mods, *e))
    assert decode_residues(c, mods, *e).tolist() == [[12345.0, -678.0, float(2**40 + 3)]]


@pytest.mark.parametrize("block, num_warps", [(32, 1), (128, 4), (1024, 8)])
def test_launch_shape_leaves_the_bits(block, num_warps):
    # block and num_warps (what a GPU benchmark sweeps) tune the launch, not the bits; a
    # block that is not a power of two or holds less than one entry per thread is refused.
    mods = MODULI["int8-16"]
    grid, row_exp, col_exp = grid_case(mods, "moderate", "launch")
    c, exponents = residues_of(grid, mods, dtype=torch.uint8), exponent_tensors(row_exp, col_exp)
    got = decode_residues(c, mods, *exponents, block=block, num_warps=num_warps)
    assert same_bits(got, decode_residues(c, mods, *exponents))
    for bad in (dict(block=block * 3 // 2), dict(block=block, num_warps=2 * block // 32), dict(num_warps=3)):
        with pytest.raises(ValueError, match="powers of two"):
            decode_residues(c, mods, *exponents, **bad)


@pytest.mark.parametrize("moduli", sorted(MODULI))
def test_fast_and_general_blocks_decode_alike(moduli):
    # A block whose estimates all lie within 3/8 of their q skips the comparisons with +-G,
    # and one whose results are all normal and finite rounds with a constant drop; the others
    # take the general steps.  Blocks of 32 entries, each kind in its own rows, and rows that
    # mix them: every entry has the reference's bits.
    mods = MODULI[moduli]
    rng = random.Random(moduli)
    small = max(1, math.prod(mods) // 16)
    cols = 64
    far = [[rng.randrange(-small, small + 1) for _ in range(cols)] for _ in range(3)]
    near = [[rng.choice([-1, 1]) * (window(mods) - rng.randrange(min(4, window(mods) + 1))) for _ in range(cols)]]
    mixed = [far[0][:cols - 1] + near[0][:1]]
    grid = far + near + mixed
    estimates = [[estimate(y, mods)[0] for y in row] for row in grid]
    certain = [all(abs(e - math.floor(e + 0.5)) <= crt._CERTAIN.value for e in row) for row in estimates]
    assert certain == [True, True, True, False, False]
    # Moderate, subnormal, overflowing, moderate and moderate results, row by row.
    row_exp = [-40, -1150, 1000, 40, -40]
    col_exp = [rng.randrange(-30, 30) for _ in range(cols)]
    c, exponents = residues_of(grid, mods, dtype=torch.int32), exponent_tensors(row_exp, col_exp)
    got = decode_residues(c, mods, *exponents, block=32, num_warps=1)
    assert same_bits(got, reference_decode(c, mods, *exponents))
    assert same_bits(decode_residues(c, mods, *exponents), got)


@pytest.mark.parametrize("moduli", sorted(name for name in MODULI if math.prod(MODULI[name]).bit_length() > 120))
def test_float_rounding_defers_what_it_cannot_be_sure_of(moduli):
    # Blocks whose entries are all certain and normal round in float64 where each entry's
    # hi + lo (within 2**-98 of Y) settles RN(Y), as long random values' do; ties and
    # near-ties of values longer than the float sums hold exactly, in both directions, and
    # values around the lower midpoint under a power of two must send their block to the
    # words.  Every entry has the reference's bits either way.
    mods = MODULI[moduli]
    assert crt._constants(tuple(mods)).float_round
    rng = random.Random(moduli)
    top = math.prod(mods).bit_length() - 3  # |Y| < 2**top: well inside M/2, so certain
    cols = 32
    easy = [[rng.choice([-1, 1]) * rng.randrange(2 ** (top - 1), 2**top) for _ in range(cols)] for _ in range(2)]
    ties = []
    for _ in range(cols // 8):
        shift = rng.randrange(60, top - 53)
        core, half = rng.randrange(2**52, 2**53) << shift, 1 << (shift - 1)
        power = 1 << rng.randrange(110, top)
        lower = power - (power >> 54)  # the midpoint under a power of two
        ties += [core + half, core + half + 1, core + half - 1, -(core + half + 1), lower, lower + 1, lower - 1, -lower,
                 -(lower - 1), -(lower + 1)]
    # Each tricky value in a block of easy ones (a block is one row here), so that its block
    # falls back for it alone.
    grid = easy + [easy[j % 2][: cols - 1] + [value] for j, value in enumerate(ties)]
    estimates = [[estimate(y, mods)[0] for y in row] for row in grid]
    assert all(abs(e - math.floor(e + 0.5)) <= crt._CERTAIN.value for row in estimates for e in row)
    row_exp, col_exp = [rng.randrange(-60, 60) for _ in grid], [rng.randrange(-30, 30) for _ in range(cols)]
    c, exponents = residues_of(grid, mods, dtype=torch.int32), exponent_tensors(row_exp, col_exp)
    got = decode_residues(c, mods, *exponents, block=32, num_warps=1)
    want = reference_decode(c, mods, *exponents)
    assert same_bits(got, want)
    assert got.cpu().tolist() == [[exact(y, r + k) for y, k in zip(row, col_exp)] for row, r in zip(grid, row_exp)]


def test_empty_grid():
    mods = MODULI["three"]
    c = torch.zeros((3, 0, 4), dtype=torch.int64, device=DEVICE)
    row, col = torch.zeros(0, dtype=torch.int64, device=DEVICE), torch.zeros(4, dtype=torch.int64, device=DEVICE)
    assert decode_residues(c, mods, row, col).shape == reference_decode(c, mods, row, col).shape == (0, 4)


def test_rows_past_the_grids_second_axis(monkeypatch):
    # Rows beyond the grid's second axis go on its third; the programs past the last row, in
    # its last slice, write nothing (three rows a slice here, where a launch takes 65535).
    monkeypatch.setattr(crt, "_GRID_ROWS", 3)
    mods = MODULI["int8-16"]
    grid, row_exp, col_exp = grid_case(mods, "moderate", "slices", rows=7)
    c = residues_of(grid, mods, dtype=torch.uint8)
    row, col = exponent_tensors(row_exp, col_exp)
    whole = torch.full((len(grid) + 2, len(grid[0])), 7.0, dtype=torch.float64, device=c.device)
    decode_residues(c, mods, row, col, out=whole[:-2])
    assert same_bits(whole[:-2], reference_decode(c, mods, row, col))
    assert whole[-2:].eq(7.0).all()


def test_a_collected_flag_raises_once_read():
    # Row blocks of one product decode into one flag, read after the last: a block's bad
    # residue or half-modulus class raises then, the worst first, as a lone decode would.
    mods = [7, 8, 9]
    row, col = torch.zeros(1, dtype=torch.int64, device=DEVICE), torch.zeros(2, dtype=torch.int64, device=DEVICE)
    good, half, bad = (residues_of([values], mods) for values in ([1, -2], [252, 1], [3, 4]))
    bad[0, 0, 0] += 9
    for blocks, message in (([good, half], HALF_MODULUS_ERROR.split(":")[0]), ([half, bad, good], "reduce it first")):
        flag = new_flag(DEVICE)
        outs = [decode_residues(c, mods, row, col, flag=flag) for c in blocks]
        assert same_bits(outs[[c is good for c in blocks].index(True)], decode_residues(good, mods, row, col))
        with pytest.raises(ValueError, match=message):
            raise_for_flag(flag)
    with pytest.raises(ValueError, match="flag must be an int32 tensor"):
        decode_residues(good, mods, row, col, flag=torch.zeros(1, dtype=torch.int64, device=DEVICE))


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(c=lambda c: c.double()), TypeError, "uint8, int16, int32 or int64"),
        (dict(c=lambda c: c[:2]), ValueError, "expected \\[3 moduli, R, C\\]"),
        (dict(c=lambda c: c + 9), ValueError, "reduce it first"),
        (dict(c=lambda c: c - 9), ValueError, "reduce it first"),
        (dict(c=lambda c: c + 2**50), ValueError, "reduce it first"),
        (dict(moduli=[7, 8, 14]), ValueError, "not coprime"),
        (dict(moduli=[7, 8, 1]), ValueError, "modulus 1"),
        (dict(moduli=[7, 8, 2**31]), ValueError, "modulus 2147483648"),
        (dict(moduli=[7, 8, True]), ValueError, "modulus True"),
        (dict(moduli=[2**31 - 1, 2**31 - 2, 5]), ValueError, "sum\\(m - 1\\) = .* passes 2\\*\\*31"),
        (dict(moduli=[]), ValueError, "at least one modulus"),
        (dict(row=lambda r: r.int()), ValueError, "row_exponent"),
        (dict(col=lambda r: r[:1]), ValueError, "col_exponent"),
        (dict(row=lambda r: r.to("meta")), ValueError, "one device"),
        (dict(c=lambda c: residues_of([[252, 1], [3, 4]], [7, 8, 9])), ValueError, "congruent to M/2"),
    ],
)
def test_bad_decode_calls_raise(change, error, message):
    mods = [7, 8, 9]
    c = residues_of([[1, -2], [3, 4]], mods)
    row, col = torch.zeros(2, dtype=torch.int64, device=DEVICE), torch.zeros(2, dtype=torch.int64, device=DEVICE)
    c = change.get("c", lambda x: x)(c)
    row = change.get("row", lambda x: x)(row)
    col = change.get("col", lambda x: x)(col)
    with pytest.raises(error, match=message):
        decode_residues(c, change.get("moduli", mods), row, col)


@pytest.mark.parametrize("moduli", sorted(MODULI | BEYOND_STAGED))
def test_limb_sums_at_their_bounds_stay_exact(moduli):
    # For each limb, the residues (balanced, |c_i| = m_i - 1) whose terms c_i * digit_l(w_i')
    # all share a sign: that limb's sum reaches the bound the limb width was admitted by, and
    # must stay within 2**53 (exact in float64) for the decode to give the reference's bits.
    mods = (MODULI | BEYOND_STAGED)[moduli]
    layout = crt._constants(tuple(mods))
    rows = []
    for limb in range(len(layout.modulus)):
        signs = [1 if w[limb] >= 0 else -1 for w in layout.weights]
        residues = [s * (m - 1) for s, m in zip(signs, mods)]
        assert abs(sum(c * w[limb] for c, w in zip(residues, layout.weights))) <= 2**53
        rows.append(residues)
    c = torch.tensor(rows, dtype=torch.int64, device=DEVICE).T[:, None, :].contiguous()
    exponents = exponent_tensors([0], [-60] * len(rows))
    assert same_bits(decode_residues(c, mods, *exponents), reference_decode(c, mods, *exponents))


def test_moduli_no_limb_width_admits_are_refused(monkeypatch):
    # At 51 bits alone the 16 int8 moduli's limb sums pass 2**53: no layout, a clear error.
    monkeypatch.setattr(crt, "_MIN_LIMB_BITS", 51)
    crt._constants.cache_clear()
    try:
        with pytest.raises(ValueError, match="no limb width from 51 to 51 bits"):
            decode_residues(residues_of([[1]], MODULI["int8-16"]), MODULI["int8-16"], *exponent_tensors([0], [0]))
    finally:
        crt._constants.cache_clear()


def test_products_past_int32_exponents_are_refused(monkeypatch):
    # The kernel's exponents are int32, which holds every result's exponent while the
    # product of the moduli has at most crt._MAX_PRODUCT_BITS bits (2**24; a lower limit
    # here stands for it, since 2**24 bits take a million moduli).
    monkeypatch.setattr(crt, "_MAX_PRODUCT_BITS", 8)
    crt._constants.cache_clear()
    try:
        with pytest.raises(ValueError, match="exponents are int32"):
            decode_residues(residues_of([[1]], [7, 9, 11]), [7, 9, 11], *exponent_tensors([0], [0]))
    finally:
        crt._constants.cache_clear()


@pytest.mark.parametrize("length", [60, 85, 110])
@pytest.mark.parametrize("kept", [1, 2, 5, 30])
def test_subnormal_results_round_once(length, kept):
    # Y = kept ones, a zero, then ones: rounding straight to `kept` bits rounds down, while a
    # first rounding to 53 bits would make a tie that rounds the odd top bits up.
    top = (1 << kept) - 1
    y = (top << (length - kept)) | ((1 << (length - kept - 1)) - 1)
    mods = MODULI["fp4-plan"]
    c = residues_of([[y, -y]], mods)
    row = torch.tensor([-1074 - length + kept], dtype=torch.int64, device=DEVICE)
    col = torch.zeros(2, dtype=torch.int64, device=DEVICE)
    got = decode_residues(c, mods, row, col)
    assert got.tolist() == [[math.ldexp(top, -1074), -math.ldexp(top, -1074)]]
    assert same_bits(got, reference_decode(c, mods, row, col))
    assert same_bits(got, staged(c, mods, row, col))


_PTX_SCRIPT = """
import json, sys
from kernels.crt import compile_kernel
from kernels.ptx import sass_opcodes
compiled = {name: compile_kernel(moduli, residues=residues, aligned=aligned, karatsuba=karatsuba)
            for name, (moduli, residues, aligned, karatsuba) in json.loads(sys.argv[1]).items()}
json.dump({name: [kernel.asm["ptx"], kernel.metadata.shared, sass_opcodes(kernel)] for name, kernel in compiled.items()},
          open(sys.argv[2], "w"))
"""


def test_kernel_compiles_for_sm90_with_register_resident_limbs(tmp_path):
    # Compiled kernels need a process without TRITON_INTERPRET.  Every entry's limbs live in
    # one thread's registers: shared memory holds no more than the two block-wide minima that
    # pick the fast paths, a word per warp (a cross-thread limb axis once made the decode
    # slower than the staged path), no local memory (spills of the limb tuples), nor
    # emulated 64-bit division.  Limbs of 42 bits (int8 sets, across words; uint8 residues as
    # the plane GEMM writes them), of 23 bits, one limb.  Compiled as
    # a launch at n = 16384 specializes it (aligned, vector loads and stores), the int8
    # decode moves no entry between threads: no shared memory, shuffle or barrier (the
    # results' stores and the flag's atomic once went through them).  Karatsuba's decode, which
    # forms its residues from three products, likewise.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    shapes = {"int8-20": (MODULI["int8-20"], "i32", False, False), "int8-23": (MODULI["int8-23"], "u8", False, False),
              "primes-2^30": (BEYOND_STAGED["primes-2^30"], "i64", False, False),
              "three": (MODULI["three"], "i32", False, False), "int8-16 aligned": (MODULI["int8-16"], "u8", True, False),
              "int8-16 karatsuba": (MODULI["int8-16"], "u8", True, True)}
    done = subprocess.run([sys.executable, "-c", _PTX_SCRIPT, json.dumps(shapes), str(tmp_path / "ptx.json")],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    compiled = json.loads((tmp_path / "ptx.json").read_text())
    for name, (ptx, shared, _) in compiled.items():
        assert ".entry _decode_kernel" in ptx, name
        assert shared <= 2 * 4 * crt.DECODE_WARPS, (name, shared)
        for forbidden in (".local", "div.s64", "rem.s64", "div.u64", "rem.u64"):
            assert forbidden not in ptx, (name, forbidden)
    _, shared, sass = compiled["int8-16 aligned"]
    if crt.DECODE_WARPS == 1:
        assert shared == 0
        assert not {"SHFL", "BAR", "STS", "LDS"} & set(sass), sass
        assert sass.get("STG", 0) >= 2 and sass.get("REDG", 0) + sass.get("ATOMG", 0) == 1, sass
