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

import ozaki
from ozaki import catalog, planning
from ozaki.crt import HALF_MODULUS_ERROR, garner, round_to_float64, signed_limbs, signed_residues
from ozaki.products import direct_products, plane_products
from ozaki.residues import crt_capacity, has_capacity, reference_moduli, residues
from ozaki.scaling import NO_SET_BIT, exact_bits, fixed_bits, row_extents, row_shifts, scale_rows


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


def _edge(moduli) -> int:
    """(M − 1) // 2: the CRT stage recovers every |Y| up to it, the whole window (−M/2, M/2)
    (the pipeline asks for ∏m > 2·K·(2^p − 1)(2^q − 1)), for odd and even M."""
    return (math.prod(moduli) - 1) // 2


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
        biggest = max(Fraction(abs(v)) for v in row)
        for value, integer in zip(row, integers):
            # round() of a Fraction rounds half to even.
            assert integer == round(Fraction(value) * Fraction(2) ** shift), (value, shift)
            # p bits kept: the integers fit p bits, and an entry moves by less than max/(2^p − 1).
            assert abs(integer) <= 2**b - 1
            if b and biggest:
                assert abs(integer * Fraction(2) ** -shift - Fraction(value)) < biggest / (2**b - 1)
        # The shift is the largest that keeps the row within p bits.
        if biggest:
            assert max(abs(round(Fraction(v) * Fraction(2) ** (shift + 1))) for v in row) > 2**b - 1


def _lowest_set_bit(value: float) -> int:
    """The exponent of the lowest set bit of a non-zero float: num/den in lowest terms has
    den = 2^d and, when d > 0, an odd num."""
    num, den = abs(value).as_integer_ratio()
    return (num & -num).bit_length() - den.bit_length()


@settings(max_examples=150, deadline=None)
@given(_scaled_rows())
def test_row_extents_follow_their_definition(case):
    # What bits and shifts are computed from (scaling.exact_bits_of, fixed_bits_of, shifts_of),
    # from Python's exact rationals; zeros of either sign ignored.
    x, _ = case
    extents = row_extents(torch.from_numpy(x))
    for row, largest, lowest in zip(x.tolist(), extents.row_max.tolist(), extents.lowest_bit.tolist()):
        nonzero = [v for v in row if v]
        assert largest == max(map(abs, row)) and math.copysign(1.0, largest) == 1.0
        assert lowest == (min(map(_lowest_set_bit, nonzero)) if nonzero else NO_SET_BIT)


# Rows whose maximum rounds up to 2^p at p bits: the top is one higher.  (max, p, shift, integers)
_CARRIES = [
    ([1 - 2.0**-9, 0.3, -0.5], 8, 7, [128, 38, -64]),  # 255.5 would round to 256 at shift 8
    ([-(1 - 2.0**-9), 2.0**-9], 8, 7, [-128, 0]),
    ([1 - 2.0**-9 - 2.0**-20, 0.75], 8, 8, [255, 192]),  # just under the tie: 255
    ([0.75, 0.5], 0, -1, [0, 0]),  # 0 bits: |x·2^-1| < ½ rounds to 0 = 2^0 − 1
    ([0.5, -0.25], 0, 0, [0, 0]),  # ½ rounds to the even 0: no carry
    ([3.0 * 2.0**-1074, 2.0**-1074], 1, 1072, [1, 0]),  # subnormals: 1.5 would round to 2
    ([2.0**53 - 1, 1.0], 52, -2, [2**51, 0]),
    ([2.0**53 - 1, 1.0], 53, 0, [2**53 - 1, 1]),  # 53 bits: lossless, no carry
]


@pytest.mark.parametrize("row, bits, shift, integers", _CARRIES)
def test_rounding_never_carries_past_the_bits_kept(row, bits, shift, integers):
    x = torch.tensor([row], dtype=torch.float64)
    b = torch.tensor([bits], dtype=torch.int64)
    s = scale_rows(x, b)
    assert s.shift.tolist() == [shift] == row_shifts(x, b).tolist()
    assert _scaled_integers(s) == [integers]
    assert max(map(abs, integers)) <= 2**bits - 1


@settings(max_examples=100, deadline=None)
@given(_scaled_rows())
def test_lossless_rows_never_carry(case):
    # Exact mode keeps every bit: the shift is the lossless one (bits − top), and with more
    # bits than the row's lossless width nothing rounds either.
    x, extra = case
    t = torch.from_numpy(x)
    bits = exact_bits(t)
    assert torch.equal(fixed_bits(t, 2200), bits)  # 2200 bits cover any finite row
    top = torch.frexp(t.abs().amax(dim=-1))[1].to(torch.int64)
    nonzero = t.abs().amax(dim=-1) > 0
    for wider in (bits, bits + torch.tensor(extra) % 40):
        assert torch.equal(row_shifts(t, wider), torch.where(nonzero, wider - top, 0))
        s = scale_rows(t, wider)
        for row, integers, shift in zip(x.tolist(), _scaled_integers(s), s.shift.tolist()):
            assert integers == [Fraction(v) * Fraction(2) ** shift for v in row]


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
    edge = _edge(moduli)
    # Anywhere in the window, or within 2^20 of either edge, where the sign is hardest.
    near_edge = st.builds(lambda s, j: s * max(edge - j, 0), st.sampled_from([1, -1]), st.integers(0, 2**20))
    return moduli, draw(st.lists(st.one_of(st.integers(-edge, edge), near_edge), min_size=1, max_size=8))


def _limb_values(limbs: torch.Tensor, negative: torch.Tensor) -> list[int]:
    """The signed integers spelled by signed_limbs' 21-bit limbs (L, B) and signs (B,)."""
    magnitudes = [sum(int(limb) << (21 * c) for c, limb in enumerate(column)) for column in limbs.T.tolist()]
    return [-v if n else v for v, n in zip(magnitudes, negative.tolist())]


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
    # The signed value, exactly, and its float64 where that holds it exactly (larger ones:
    # the rounding test below).
    assert _limb_values(*signed_limbs(digits, moduli)) == values
    exact = [abs(v) <= 2**53 for v in values]
    got = round_to_float64(digits, moduli, torch.zeros(len(values), dtype=torch.int64))
    assert [float(g) for g, e in zip(got.tolist(), exact) if e] == [float(v) for v, e in zip(values, exact) if e]


@settings(max_examples=150, deadline=None)
@given(_signed_values(), st.lists(st.sampled_from(_POOL), min_size=1, max_size=6))
def test_signed_residues_move_the_signed_value_to_other_moduli(case, targets):
    # Any targets, coprime to the moduli or not, even the moduli themselves: Y mod r of
    # the signed Y, the sign included (near the edges −Y and Y differ mod r).
    moduli, values = case
    digits = garner(_residue_tensor(values, moduli), moduli)
    got = signed_residues(digits, moduli, targets)
    assert got.shape == (len(targets), len(values))
    assert got.tolist() == [[v % r for v in values] for r in targets]


def test_signed_residues_refuse_sums_past_floor_mods_range():
    digits = garner(_residue_tensor([5], _WIDE_MODULI), _WIDE_MODULI)
    with pytest.raises(ValueError, match="floor_mod"):
        signed_residues(digits, _WIDE_MODULI, [2**31 - 1])


# Odd and even M, one modulus to many; the last digit small or large (it decides first).
_EDGE_MODULI = {
    "odd": (37, 4194271, 65519, 49, 65521),  # once refused at −⌊(M − 1)/4⌋ by a float64 sign estimate
    "even": (2**8, 3**5, 5**3, 7**2, 11**2, 13**2, 17, 19),
    "one-odd": (241,),
    "one-even": (256,),
    "two": (2, 3),
    "small-last": _LARGE_MODULI[:4] + (3,),
    "wide": _WIDE_MODULI,
}


@pytest.mark.parametrize("name", sorted(_EDGE_MODULI))
def test_signed_values_at_the_edges_of_the_window(name):
    # ±(M − 1) // 2 and the values just inside: the largest products the capacity admits.
    moduli = _EDGE_MODULI[name]
    edge = _edge(moduli)
    values = sorted({s * max(edge - j, 0) for j in (0, 1, 2, 3, 2**21, 2**42) for s in (1, -1)})
    digits = garner(_residue_tensor(values, moduli), moduli)
    assert _limb_values(*signed_limbs(digits, moduli)) == values
    exponents = torch.tensor([-max(abs(v).bit_length() - 53, 0) for v in values], dtype=torch.int64)
    got = round_to_float64(digits, moduli, exponents)
    assert_same_bits(got.numpy(), np.array([round_dyadic(v, int(e)) for v, e in zip(values, exponents)]))


@pytest.mark.parametrize("name", sorted(n for n in _EDGE_MODULI if math.prod(_EDGE_MODULI[n]) % 2 == 0))
def test_half_of_an_even_modulus_is_refused(name):
    # Y ≡ M/2 has no representative in (−M/2, M/2): the product reached M/2 in magnitude.
    moduli = _EDGE_MODULI[name]
    half = math.prod(moduli) // 2
    for values in ([half], [-half], [0, half - 1, half]):
        digits = garner(_residue_tensor(values, moduli), moduli)
        with pytest.raises(ValueError, match=HALF_MODULUS_ERROR.split(":")[0]):
            signed_limbs(digits, moduli)
        with pytest.raises(ValueError, match=HALF_MODULUS_ERROR.split(":")[0]):
            round_to_float64(digits, moduli, torch.zeros(len(values), dtype=torch.int64))


@settings(max_examples=50, deadline=None)
@given(_moduli, st.integers(1, 2**40))
def test_values_past_the_window_are_their_representatives(moduli, past):
    # Any other |Y| ≥ M/2 is congruent to a value inside the window, which the residues
    # cannot tell apart: the stage returns that representative.
    modulus = math.prod(moduli)
    values = [y for y in (modulus // 2 + past, -(modulus // 2) - past) if 2 * (y % modulus) != modulus]
    want = [y % modulus - modulus * (2 * (y % modulus) > modulus) for y in values]
    digits = garner(_residue_tensor(values, moduli), moduli)
    assert _limb_values(*signed_limbs(digits, moduli)) == want


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


# Capacity ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, p, q, want",
    [(1, 1, 1, 2), (3, 2, 4, 2 * 3 * 3 * 15), (5, 0, 7, 0), (16384, 53, 53, 2 * 16384 * (2**53 - 1) ** 2)],
)
def test_crt_capacity_is_the_plan_formats(k, p, q, want):
    assert crt_capacity(k, p, q) == want
    assert has_capacity(want + 1, want) and not has_capacity(want, want)


@pytest.mark.parametrize("bad", [(0.5, 1, 1), (1, -1, 1), (1, 1, True)])
def test_crt_capacity_refuses_non_integers(bad):
    with pytest.raises(ValueError, match="non-negative int"):
        crt_capacity(*bad)


@pytest.mark.parametrize("k, need", [(1, 5), (40, 2**121), (2**16, 2**300), (2**20, crt_capacity(2**20, 60, 61))])
def test_reference_moduli_are_the_fewest_that_serve(k, need):
    moduli = reference_moduli(k, need)
    assert has_capacity(math.prod(moduli), need) and not has_capacity(math.prod(moduli[:-1]), need)


@pytest.mark.parametrize("engine", ["reference", "int8", "fp4"])
@pytest.mark.parametrize("accuracy", ["exact", 5])
def test_pipeline_asks_for_the_plan_formats_capacity(engine, accuracy, monkeypatch):
    # Integers of exactly 7 (A) and 9 (B) bits: the engines get ∏m > 2·K·(2^p − 1)(2^q − 1).
    if engine != "reference" and not catalog.plans_for(engine):
        pytest.skip(f"the catalog has no {engine} plan")
    asked = []
    choose = planning.moduli_for
    monkeypatch.setattr(planning, "moduli_for", lambda *args: asked.append(args[2]) or choose(*args))
    a = np.array([[127.0, -65.0, 1.0], [3.0, 0.0, 64.0]])
    b = np.array([[511.0, 1.0], [-256.0, 3.0], [5.0, 257.0]])
    got = ozaki.matmul(a, b, accuracy=accuracy, engine=engine)
    p, q = (7, 9) if accuracy == "exact" else (5, 5)
    assert asked == [crt_capacity(3, p, q)]
    if accuracy == "exact":
        assert_same_bits(got, a @ b)  # every product and sum is exact in float64


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
