"""Results at the overflow threshold: the decoders' saturation at ±DBL_MAX.

Rounding the rows to b bits moves the product's integer by at most the slack
(``ozaki.scaling.rounding_slack``); a quantized value that rounds past ±DBL_MAX while the
exact product is finite (``[[DBL_MAX]] @ [[1]]`` with 40 bits: DBL_MAX rounds up to 2^1024)
saturates at ±DBL_MAX, and ±inf stays where the exact product certainly overflows.  Judged
against the exact reference (:mod:`ozaki.exact`): "exact" is correctly rounded (±inf past
the range, as numpy), and for b bits a finite exact product gives a finite result within the
documented bound, an infinite result only an overflowing exact product.  The staged torch
decode (the reference engine's), the Triton decode (under the interpreter on the CPU) and the
exact-integer ``reference_decode`` give the same bits.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
from exact_reference import exact_dyadic, round_dyadic, to_fraction
from hypothesis import given, settings
from hypothesis import strategies as st

import ozaki
from kernels.crt import decode_residues, reference_decode, slack_exponent
from ozaki import pipeline
from ozaki.capacity import crt_capacity
from ozaki.crt import garner, round_to_float64
from ozaki.products import residue_products
from ozaki.residues import reference_moduli, residues
from ozaki.scaling import exact_bits_of, fixed_bits_of, row_extents, rounding_slack, scale_rows

DBL_MAX = sys.float_info.max
# Values from this magnitude on round past DBL_MAX: DBL_MAX plus half its ulp (a tie to the even 2^1024).
THRESHOLD = Fraction(2**1024 - 2**970)
U = Fraction(1, 2**53)
HALF_SUBNORMAL_ULP = Fraction(1, 2**1075)
ACCURACIES = ("exact", 1, 2, 24, 40, 53, 60)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

_D, _H = DBL_MAX, DBL_MAX / 2
# (A, B): exact products at, just under and just over the threshold, of either sign.
CASES = {
    "max_times_one": ([[_D]], [[1.0]]),
    "minus_max_times_one": ([[-_D]], [[1.0]]),
    "two_halves": ([[_H, _H]], [[1.0], [1.0]]),
    "two_halves_negative": ([[_H, _H]], [[-1.0], [-1.0]]),
    "max_times_two": ([[_D]], [[2.0]]),
    "max_times_next_above_one": ([[_D]], [[1.0 + 2.0**-52]]),
    "just_under_threshold": ([[_D, 2.0**970 * (1 - 2.0**-52)]], [[1.0], [1.0]]),
    "at_threshold": ([[_D, 2.0**970]], [[1.0], [1.0]]),
    "just_over_threshold": ([[_D, 2.0**970 * (1 + 2.0**-52)]], [[1.0], [1.0]]),
    "cancelling_maxima": ([[_D, -_D, _D]], [[1.0], [1.0 - 2.0**-53], [0.5]]),
    "mixed_rows": ([[_D, 1.0, -3.0], [_H, -_H, 2.0**-1074], [0.75 * _D, 0.5 * _D, -0.25 * _D]],
                   [[1.0, 0.5], [1.5, -1.0], [1e-300, 1.25]]),
}


def _bits(extents, accuracy):
    return exact_bits_of(extents) if accuracy == "exact" else fixed_bits_of(extents, accuracy)


def _staged_parts(a: np.ndarray, b: np.ndarray, accuracy):
    """The reference engine's stages on A and B: the residues of A'B', the exponents and the slack."""
    ta, tbt = torch.from_numpy(a), torch.from_numpy(np.ascontiguousarray(b.T))
    extents_a, extents_b = row_extents(ta), row_extents(tbt)
    bits_a, bits_b = _bits(extents_a, accuracy), _bits(extents_b, accuracy)
    sa, sb = scale_rows(ta, bits_a), scale_rows(tbt, bits_b)
    k = a.shape[1]
    moduli = reference_moduli(k, crt_capacity(k, int(bits_a.max()), int(bits_b.max())))
    c = residue_products(residues(sa, moduli), residues(sb, moduli).transpose(-1, -2), moduli, None)
    slack = rounding_slack(k, (extents_a, bits_a), (extents_b, bits_b))
    return c, moduli, -sa.shift, -sb.shift, slack


def _staged(a, b, accuracy) -> np.ndarray:
    c, moduli, row, col, slack = _staged_parts(a, b, accuracy)
    return round_to_float64(garner(c, moduli), moduli, row[:, None] + col[None, :], slack).numpy()


def _documented_bound(a: np.ndarray, b: np.ndarray, bits: int):
    """matmul's bound for ``bits`` bits per row, exactly: ε·(max|A_i:|·Σ|B_:j| + Σ|A_i:|·max|B_:j|)
    + ε²·K·max|A_i:|·max|B_:j| + u|C| + 2^-1075, ε = 1/(2^b − 1)."""
    step, k = Fraction(1, 2**bits - 1), a.shape[1]
    rows = [(max(map(abs, map(Fraction, r))), sum(map(abs, map(Fraction, r)))) for r in a.tolist()]
    cols = [(max(map(abs, map(Fraction, c))), sum(map(abs, map(Fraction, c)))) for c in b.T.tolist()]

    def bound(i: int, j: int, c: Fraction) -> Fraction:
        (a_max, a_sum), (b_max, b_sum) = rows[i], cols[j]
        return step * (a_max * b_sum + a_sum * b_max) + step * step * k * a_max * b_max + U * abs(c) + HALF_SUBNORMAL_ULP

    return bound


def _check_contract(a: np.ndarray, b: np.ndarray, accuracy, got: np.ndarray) -> None:
    """"exact": the correctly rounded bits.  b bits: finite within the bound where the exact
    product rounds finite; ±inf only where it overflows (by its sign); ±DBL_MAX otherwise."""
    exact = exact_dyadic(a, b)
    bound = None if accuracy == "exact" else _documented_bound(a, b, accuracy)
    for (i, j), value in np.ndenumerate(got):
        s, e = exact[i][j]
        want, c = round_dyadic(s, e), to_fraction(s, e)
        where = f"entry {(i, j)} at accuracy={accuracy!r}: got {value!r}, exact rounds to {want!r}"
        if accuracy == "exact":
            assert np.float64(value).view(np.uint64) == np.float64(want).view(np.uint64), where
        elif math.isfinite(want):
            assert math.isfinite(value), where
            assert abs(Fraction(value) - c) <= bound(i, j, c), where
        elif math.isinf(value):
            assert value == want, where
        else:  # the exact product overflows, but by less than the rounding of the rows can tell
            assert value == (DBL_MAX if s > 0 else -DBL_MAX), where


@pytest.mark.parametrize("accuracy", ACCURACIES, ids=str)
@pytest.mark.parametrize("name", CASES)
def test_reference_engine_keeps_the_contract_at_the_threshold(name, accuracy):
    a, b = (np.array(x, dtype=np.float64) for x in CASES[name])
    _check_contract(a, b, accuracy, _staged(a, b, accuracy))


@pytest.mark.parametrize("accuracy", ("exact", 1, 40, 60), ids=str)
@pytest.mark.parametrize("name", ["max_times_one", "two_halves_negative", "max_times_two", "mixed_rows"])
def test_every_decoder_gives_the_same_bits_at_the_threshold(name, accuracy):
    a, b = (np.array(x, dtype=np.float64) for x in CASES[name])
    c, moduli, row, col, slack = _staged_parts(a, b, accuracy)
    staged = round_to_float64(garner(c, moduli), moduli, row[:, None] + col[None, :], slack)
    kernel = decode_residues(c.to(DEVICE), moduli, row.to(DEVICE), col.to(DEVICE), slack=slack).cpu()
    exact_integers = reference_decode(c, moduli, row, col, slack)
    assert torch.equal(kernel.view(torch.int64), staged.view(torch.int64))
    assert torch.equal(exact_integers.view(torch.int64), staged.view(torch.int64))


def _saturates(y: int, exponent: int, slack: int) -> bool:
    """The rule from its definition: Y·2^e rounds past DBL_MAX, but (|Y| − 2^σ)·2^e stays
    under the threshold (σ the least with 2^σ ≥ slack)."""
    if slack == 0 or abs(to_fraction(y, exponent)) < THRESHOLD:
        return False
    power = 1 << max(0, (slack - 1).bit_length())
    return to_fraction(abs(y) - power, exponent) < THRESHOLD


# The residues of Y for the moduli of the decoders, Y near 2^(1024 − e) on either side.
_MODULI = [4194301, 4194287, 4194277, 4194271, 4194247, 4194217]  # 132 bits: 7 limbs of 21 bits, 3 words
_SLACKS = (0, 1, 2, 3, 2**20, 2**63 + 5, 2**131, 2**200)


@settings(max_examples=25)
@given(st.integers(0, 70), st.integers(-2**20, 2**20), st.sampled_from(_SLACKS), st.booleans())
def test_decoders_saturate_by_the_definition(scale, offset, slack, negative):
    # Y·2^e from e = 970 − scale on rounds past DBL_MAX exactly from |Y| = edge on, and the rule
    # saturates exactly below edge + 2^σ: values on both sides of both boundaries.
    exponent, edge = 970 - scale, (2**54 - 1) << scale
    power = 1 << max(0, (slack - 1).bit_length())
    values = [edge + offset, edge - 1, edge, 2 * edge + offset, edge + power - 1, edge + power, edge + slack]
    values = [(-v if negative else v) for v in values if 0 < v < math.prod(_MODULI) // 2]
    c = torch.tensor([[[y % m for y in values]] for m in _MODULI], dtype=torch.int64)
    row, col = torch.tensor([exponent]), torch.zeros(len(values), dtype=torch.int64)
    got = reference_decode(c, _MODULI, row, col, slack)[0].tolist()
    staged = round_to_float64(garner(c, _MODULI), _MODULI, torch.full((1, len(values)), exponent), slack)
    assert torch.equal(staged[0].view(torch.int64), torch.tensor(got, dtype=torch.float64).view(torch.int64))
    for y, value in zip(values, got):
        plain = round_dyadic(y, exponent)
        assert value == (math.copysign(DBL_MAX, y) if _saturates(y, exponent, slack) else plain), (y, slack)


@pytest.mark.parametrize("slack, sigma", [(0, -1), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (2**100 + 1, 101)])
def test_slack_exponent_is_the_least_power_at_least_the_slack(slack, sigma):
    assert slack_exponent(slack) == sigma


@pytest.mark.parametrize("slack", [-1, 1.5, "2"])
def test_slack_must_be_a_non_negative_int(slack):
    with pytest.raises(ValueError, match="non-negative int"):
        slack_exponent(slack)


_FINITE = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=40)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.sampled_from([1, 2, 7, 24, 53, 60, "exact"]),
       st.data())
def test_rounding_slack_bounds_how_far_the_scaling_moves_each_entry(k, m, n, accuracy, data):
    # |Σ_k A'_ik·B'_kj − 2^(s_i + t_j)·C_ij| ≤ S, exactly, for rows of any spread.
    a = np.array(data.draw(st.lists(st.lists(_FINITE, min_size=k, max_size=k), min_size=m, max_size=m)))
    bt = np.array(data.draw(st.lists(st.lists(_FINITE, min_size=k, max_size=k), min_size=n, max_size=n)))
    ta, tbt = torch.from_numpy(a), torch.from_numpy(bt)
    extents_a, extents_b = row_extents(ta), row_extents(tbt)
    bits_a, bits_b = _bits(extents_a, accuracy), _bits(extents_b, accuracy)
    slack = rounding_slack(k, (extents_a, bits_a), (extents_b, bits_b))
    sa, sb = scale_rows(ta, bits_a), scale_rows(tbt, bits_b)

    def integers(scaled):
        return [[int(mm) << int(ee) for mm, ee in zip(*row)] for row in zip(scaled.mantissa.tolist(), scaled.exponent.tolist())]

    ia, ib = integers(sa), integers(sb)
    for i in range(m):
        for j in range(n):
            shift = int(sa.shift[i]) + int(sb.shift[j])
            exact = sum(Fraction(x) * Fraction(y) for x, y in zip(a[i], bt[j])) * Fraction(2) ** shift
            assert abs(sum(x * y for x, y in zip(ia[i], ib[j])) - exact) <= slack
    if accuracy == "exact":
        assert slack == 0


# Through ozaki.matmul: the plan's slack, read from the statistics, reaches the decoders.
@pytest.mark.parametrize("engine", ["reference", "int8"])
@pytest.mark.parametrize("accuracy", [1, 24, 40], ids=str)
def test_matmul_keeps_finite_products_finite(accuracy, engine):
    for name in ("max_times_one", "two_halves", "two_halves_negative", "just_under_threshold"):
        a, b = (np.array(x, dtype=np.float64) for x in CASES[name])
        _check_contract(a, b, accuracy, ozaki.matmul(a, b, accuracy=accuracy, engine=engine))


@pytest.mark.parametrize("accuracy", ["exact", "fp64", 1, 24, 40, 60])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_plans_slack_is_rounding_slack_of_its_rows(name, accuracy):
    # The plan computes each product's slack from the statistics alone; rounding_slack reads
    # the rows the pipeline scales.  A batch of the case and a copy at another scale: each
    # product has its own.
    a, b = (torch.tensor(x, dtype=torch.float64) for x in CASES[name])
    batch_a, batch_b = torch.stack([a, a * 2.0**-900]), torch.stack([b, b])
    for x, y in ((a, b), (batch_a, batch_b)):
        call = pipeline.prepare(x, y, accuracy, "reference", early=False)
        want = tuple(rounding_slack(x.shape[-1], (extents_a, bits_a), (extents_b, bits_b))
                     for extents_a, extents_b, bits_a, bits_b in call.lines)
        assert call.plan.slack == want


@pytest.mark.parametrize("name", ["max_times_two", "at_threshold", "just_over_threshold", "max_times_one"])
def test_matmul_exact_overflows_as_numpy(name):
    a, b = (np.array(x, dtype=np.float64) for x in CASES[name])
    _check_contract(a, b, "exact", ozaki.matmul(a, b, accuracy="exact"))
