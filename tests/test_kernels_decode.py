"""The fused decode kernel returns exactly the bits of the staged torch path:
``ozaki.crt.garner`` -> ``ozaki.crt.round_to_float64`` (the plain reference)."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.decode import decode_residues
from ozaki.crt import garner, round_to_float64

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Overflowing results are meant to become infinities.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")

MODULI = {
    "fp4-plan": [7, 8, 9, 11, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 85, 89, 139, 149, 151, 157, 169],
    "small": [7, 8, 9],
    "int8": [256, 255, 253, 251, 247, 241],
    "wide": [32749, 32719, 32717, 32713],
}


def residues_of(values: list[list[int]], moduli) -> torch.Tensor:
    return torch.tensor([[[y % m for y in row] for row in values] for m in moduli], dtype=torch.int64,
                        device=DEVICE)


def staged(c, moduli, row_exp, col_exp) -> torch.Tensor:
    return round_to_float64(garner(c, moduli), moduli, row_exp[:, None] + col_exp[None, :])


def special_values(limit: int, rng: random.Random) -> list[int]:
    """Zero, ±1, the capacity edge, and integers whose 53-bit rounding is a tie or just off one."""
    out = [0, 1, -1, limit - 1, -(limit - 1)]
    for shift in range(1, max(2, limit.bit_length() - 54), 7):
        core = rng.randrange(2**52, 2**53) << shift
        half = 1 << (shift - 1)
        out += [core + half, -(core + half), core + half + 1, core + half - 1, (core | (1 << shift)) + half]
    return [v for v in out if abs(v) < limit]


@pytest.mark.parametrize("moduli", sorted(MODULI))
@pytest.mark.parametrize("exponents", ["moderate", "subnormal", "overflow"])
def test_fused_decode_equals_staged_path(moduli, exponents):
    rng = random.Random(f"{moduli}-{exponents}")
    mods = MODULI[moduli]
    limit = math.prod(mods) // 4
    values = special_values(limit, rng)
    values += [rng.choice([-1, 1]) * rng.randrange(2 ** rng.randrange(1, limit.bit_length())) for _ in range(150)]
    rows = 7
    values += [0] * (-len(values) % rows)
    grid = [values[i::rows] for i in range(rows)]
    cols = len(grid[0])
    low, high = {"moderate": (-300, 300), "subnormal": (-1200, -900), "overflow": (850, 1100)}[exponents]
    row_exp = torch.tensor([rng.randrange(low, high) for _ in range(rows)], dtype=torch.int64, device=DEVICE)
    col_exp = torch.tensor([rng.randrange(-60, 60) for _ in range(cols)], dtype=torch.int64, device=DEVICE)
    c = residues_of(grid, mods)
    got = decode_residues(c, mods, row_exp, col_exp)
    want = staged(c, mods, row_exp, col_exp)
    # Same bits, signed zeros, infinities included.
    assert torch.equal(got.view(torch.int64), want.view(torch.int64))


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.integers(-(2**118), 2**118), min_size=1, max_size=30),
       row=st.integers(-1250, 1100), col=st.integers(-100, 100))
def test_fused_decode_any_product(values, row, col):
    mods = MODULI["fp4-plan"]
    c = residues_of([values], mods)
    row_exp = torch.tensor([row], dtype=torch.int64, device=DEVICE)
    col_exp = torch.full((len(values),), col, dtype=torch.int64, device=DEVICE)
    got = decode_residues(c, mods, row_exp, col_exp)
    assert torch.equal(got.view(torch.int64), staged(c, mods, row_exp, col_exp).view(torch.int64))


def test_int32_residues_from_the_gemm_decode_alike():
    mods = MODULI["int8"]
    c = residues_of([[12345, -678, 2**40 + 3]], mods)
    e = torch.zeros(1, dtype=torch.int64, device=DEVICE), torch.zeros(3, dtype=torch.int64, device=DEVICE)
    assert torch.equal(decode_residues(c.int(), mods, *e), decode_residues(c, mods, *e))
    assert decode_residues(c, mods, *e).tolist() == [[12345.0, -678.0, float(2**40 + 3)]]


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(c=lambda c: c.double()), TypeError, "int32 or int64"),
        (dict(c=lambda c: c[:2]), ValueError, "expected \\[3 moduli, R, C\\]"),
        (dict(c=lambda c: c + 2**50), ValueError, "2\\*\\*50"),
        (dict(moduli=[7, 8, 14]), ValueError, "not coprime"),
        (dict(moduli=[7, 8, 1]), ValueError, "modulus 1"),
        (dict(row=lambda r: r.int()), ValueError, "row_exponent"),
        (dict(col=lambda r: r[:1]), ValueError, "col_exponent"),
        (dict(c=lambda c: torch.full_like(c, 200)), ValueError, "reaches M/4"),
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
    assert torch.equal(got.view(torch.int64), staged(c, mods, row, col).view(torch.int64))
