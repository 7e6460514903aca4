"""Properties of the integer pipeline stages, each checked against plain Python integers.

scale_rows -> residues -> (products) -> garner -> signed value / round_to_float64: every stage
is exact, so each is compared for equality with big-integer arithmetic, never within a tolerance.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy
import torch
from exact_reference import assert_same_bits, round_dyadic
from hypothesis import given, settings
from hypothesis import strategies as st

from ozaki import catalog
from ozaki.crt import garner, round_to_float64
from ozaki.products import direct_products, plane_products
from ozaki.residues import residues
from ozaki.scaling import scale_rows


def _descending_primes(top: int, count: int) -> tuple[int, ...]:
    primes = [sympy.prevprime(top)]
    while len(primes) < count:
        primes.append(sympy.prevprime(primes[-1]))
    return tuple(primes)


# Pairwise coprime by construction: distinct primes and powers of distinct primes.
_SMALL_MODULI = (2**8, 3**5, 5**3, 7**2, 11**2, 13**2, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 89, 97)
# Primes below 2^22, the size the reference engine uses (its CRT sums stay exact in float64).
_LARGE_MODULI = _descending_primes(2**22, 4) + _descending_primes(2**20, 3) + _descending_primes(2**16, 3)
_POOL = _SMALL_MODULI + _LARGE_MODULI
# 62 primes near 2^22: M ≈ 2^1360, enough for signed integers of 1300 bits.
_WIDE_MODULI = _descending_primes(2**22, 62)

_moduli = st.lists(st.sampled_from(_POOL), min_size=1, max_size=16, unique=True)
_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _balanced(x: int, m: int) -> int:
    return (x + m // 2) % m - m // 2


def _signed_range(moduli) -> tuple[int, int]:
    """Signed integers the CRT stage must recover: it documents |Y| < M/4 (the pipeline asks
    for ∏m > 4·K·2^p·2^q, so a float64 estimate of X/M tells the sign).  A margin of M·2^-40
    keeps clear of the estimate's rounding; the boundary itself has its own test below."""
    modulus = math.prod(moduli)
    quarter = (modulus - 1) // 4 - (modulus >> 40)
    return -quarter, quarter


def _residue_tensor(values: list[int], moduli) -> torch.Tensor:
    return torch.tensor([[v % m for v in values] for m in moduli], dtype=torch.int64)


# Scaling and residues -------------------------------------------------------------------


@st.composite
def _scaled_rows(draw):
    rows, width = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    x = np.array(draw(st.lists(_finite, min_size=rows * width, max_size=rows * width))).reshape(rows, width)
    bits = draw(st.lists(st.integers(0, 2200), min_size=rows, max_size=rows))
    return x, bits


def _scaled_integers(s) -> list[list[int]]:
    return [[m << e for m, e in zip(mr, er)] for mr, er in zip(s.mantissa.tolist(), s.exponent.tolist())]


@settings(max_examples=150, deadline=None)
@given(_scaled_rows())
def test_scale_rows_rounds_to_nearest_even(case):
    x, bits = case
    s = scale_rows(torch.from_numpy(x), torch.tensor(bits, dtype=torch.int64))
    assert (s.exponent >= 0).all() and (s.mantissa.abs() <= 2**53).all()
    for row, integers, shift, b in zip(x.tolist(), _scaled_integers(s), s.shift.tolist(), bits):
        for value, integer in zip(row, integers):
            # round() of a Fraction rounds half to even.
            assert integer == round(Fraction(value) * Fraction(2) ** shift), (value, shift)
            assert abs(integer) <= 2**b


@settings(max_examples=100, deadline=None)
@given(_scaled_rows(), _moduli)
def test_residues_are_balanced_and_congruent(case, moduli):
    x, bits = case
    s = scale_rows(torch.from_numpy(x), torch.tensor(bits, dtype=torch.int64))
    r = residues(s, moduli)
    assert r.dtype == torch.int64 and r.shape == (len(moduli), *x.shape)
    integers = _scaled_integers(s)
    for i, m in enumerate(moduli):
        assert r[i].tolist() == [[_balanced(v, m) for v in row] for row in integers], m


def test_residues_of_256_fit_int8():
    # The balanced range for m = 256 is exactly [−128, 127].
    s = scale_rows(torch.arange(-300.0, 300.0, dtype=torch.float64)[None], torch.tensor([9]))
    r = residues(s, [256])
    assert int(r.min()) == -128 and int(r.max()) == 127


# CRT --------------------------------------------------------------------------------------


@st.composite
def _signed_values(draw):
    moduli = draw(_moduli)
    low, high = _signed_range(moduli)
    return moduli, draw(st.lists(st.integers(low, high), min_size=1, max_size=8))


@settings(max_examples=200, deadline=None)
@given(_signed_values())
def test_garner_digits_and_signed_value_are_the_identity(case):
    moduli, values = case
    digits = garner(_residue_tensor(values, moduli), moduli)
    assert digits.shape == (len(moduli), len(values))
    # Mixed-radix digits: v_i ∈ [0, m_i) and Σ v_i ∏_{j<i} m_j ≡ Y (mod M).
    modulus, reconstructed, weight = math.prod(moduli), [0] * len(values), 1
    for m, row in zip(moduli, digits.tolist()):
        assert all(0 <= v < m for v in row)
        reconstructed = [x + v * weight for x, v in zip(reconstructed, row)]
        weight *= m
    assert reconstructed == [v % modulus for v in values]
    # The signed value, where float64 holds it exactly (larger ones: the rounding test below).
    exact = [abs(v) <= 2**53 for v in values]
    got = round_to_float64(digits, moduli, torch.zeros(len(values), dtype=torch.int64))
    assert [float(g) for g, e in zip(got.tolist(), exact) if e] == [float(v) for v, e in zip(values, exact) if e]


@settings(max_examples=50, deadline=None)
@given(_moduli)
def test_signed_values_beyond_a_quarter_of_m_are_refused(moduli):
    # Past M/4 the sign is no longer certain: the stage must raise rather than guess.
    modulus = math.prod(moduli)
    values = [modulus // 2, -(modulus // 2), 3 * modulus // 8, -(3 * modulus // 8)]
    digits = garner(_residue_tensor(values, moduli), moduli)
    for column in range(len(values)):
        with pytest.raises(ValueError):
            round_to_float64(digits[:, column : column + 1], moduli, torch.zeros(1, dtype=torch.int64))


# Found by hypothesis: with these moduli Y = −⌊(M − 1)/4⌋ is refused.
_QUARTER_BOUNDARY_MODULI = (37, 4194271, 65519, 49, 65521)


def test_signed_values_just_inside_a_quarter_of_m():
    moduli = _QUARTER_BOUNDARY_MODULI
    quarter = (math.prod(moduli) - 1) // 4
    values = [quarter, -quarter]
    digits = garner(_residue_tensor(values, moduli), moduli)
    got = round_to_float64(digits, moduli, torch.zeros(2, dtype=torch.int64))
    assert got.tolist() == [float(v) for v in values]


def test_garner_refuses_moduli_that_are_not_coprime():
    with pytest.raises(ValueError):
        garner(torch.zeros((2, 1), dtype=torch.int64), [6, 9])


@st.composite
def _big_and_exponent(draw):
    """A signed integer of up to 1300 bits and an exponent putting Y·2^e anywhere from below
    half the smallest subnormal to past the largest float64, ties to even included."""
    length = draw(st.integers(0, 1300))
    if draw(st.booleans()) or length < 60:
        magnitude = draw(st.integers(0, 2**length - 1)) if length else 0
    else:
        # 54 leading bits, then exactly half an ulp, or half an ulp nudged by one.
        head = draw(st.integers(2**53, 2**54 - 1)) << (length - 54)
        magnitude = head + (1 << (length - 55)) + draw(st.sampled_from([-1, 0, 0, 1]))
    value = -magnitude if draw(st.booleans()) else magnitude
    target = draw(st.integers(-1130, 1030))
    return value, target - max(magnitude.bit_length(), 1)


@settings(max_examples=80, deadline=None)
@given(st.lists(_big_and_exponent(), min_size=1, max_size=8))
def test_round_to_float64_is_one_correct_rounding(pairs):
    values, exponents = zip(*pairs)
    digits = garner(_residue_tensor(list(values), _WIDE_MODULI), _WIDE_MODULI)
    got = round_to_float64(digits, _WIDE_MODULI, torch.tensor(exponents, dtype=torch.int64))
    assert got.dtype == torch.float64
    assert_same_bits(got.numpy(), np.array([round_dyadic(v, e) for v, e in pairs]))


# Residue products -------------------------------------------------------------------------


@st.composite
def _residue_matrices(draw, moduli_strategy):
    moduli = draw(moduli_strategy)
    m_, k, n = draw(st.integers(1, 4)), draw(st.integers(1, 12)), draw(st.integers(1, 4))
    ra = [[[draw(st.integers(-(m // 2), m - 1 - m // 2)) for _ in range(k)] for _ in range(m_)] for m in moduli]
    rb = [[[draw(st.integers(-(m // 2), m - 1 - m // 2)) for _ in range(n)] for _ in range(k)] for m in moduli]
    return moduli, ra, rb


def _python_products(moduli, ra, rb) -> list:
    return [
        [[sum(x * y for x, y in zip(row, col)) % m for col in zip(*b)] for row in a]
        for m, a, b in zip(moduli, ra, rb)
    ]


# Moduli whose float64 residue products stay exact for K ≤ 12: 12·⌊m/2⌋² < 2^53.
_DIRECT_MODULI = st.lists(st.sampled_from([m for m in _POOL if 12 * (m // 2) ** 2 < 2**53]), min_size=1, max_size=6, unique=True)


@settings(max_examples=100, deadline=None)
@given(_residue_matrices(_DIRECT_MODULI))
def test_direct_products_are_exact_modular_products(case):
    moduli, ra, rb = case
    c = direct_products(torch.tensor(ra), torch.tensor(rb), moduli)
    assert c.dtype == torch.int64
    assert c.tolist() == _python_products(moduli, ra, rb)


@pytest.mark.parametrize("modulus", [_LARGE_MODULI[0], _LARGE_MODULI[4]])
def test_direct_products_stay_exact_past_one_float64_gemm(modulus):
    # K·⌊m/2⌋² ≥ 2^53 with every residue at −⌊m/2⌋: one float64 GEMM over all of K would
    # round, so the stage must split K and still return the exact residue.
    half = modulus // 2
    k = -(-(2**53) // (half * half)) + 3
    c = direct_products(torch.full((1, 1, k), -half), torch.full((1, k, 1), -half), [modulus])
    assert c.tolist() == [[[k * half * half % modulus]]]


def test_direct_products_refuse_a_modulus_too_big_for_float64():
    # ⌊m/2⌋² ≥ 2^53: not even one product of two residues is exact in float64.
    modulus = _descending_primes(2**31, 1)[0]
    with pytest.raises(ValueError, match="53"):
        direct_products(torch.full((1, 1, 1), 1), torch.full((1, 1, 1), 1), [modulus])


def _residue_encodings() -> list:
    found = sorted((e for e in catalog.encodings().values() if e.modulus is not None), key=lambda e: e.name)
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="the catalog has no residue encoding yet"))]


@pytest.mark.parametrize("encoding", _residue_encodings(), ids=lambda e: getattr(e, "name", "none"))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_plane_products_are_exact_modular_products(encoding, data):
    m = encoding.modulus
    _, ra, rb = data.draw(_residue_matrices(st.just([m])))
    c = plane_products(torch.tensor(ra), torch.tensor(rb), [encoding])
    assert c.tolist() == _python_products([m], ra, rb)
