"""accuracy="fp64" (the default) and accuracy=<bits>, measured exactly against the rational reference.

Every error below is computed exactly, as a Fraction: |Ĉ − C| with C the exact product.

Below the normal range the last rounding alone may cost half a subnormal ulp, 2^-1075,
whatever |C| is; DGEMM's textbook bound assumes no underflow, so every bound here adds that
one term (it changes nothing for results of normal size).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
import torch
from exact_reference import abs_product_dyadic, assert_same_bits, exact_dyadic, round_dyadic, to_fraction
from families import FAMILIES, STATISTICAL, family, finite_pairs
from hypothesis import given, settings

import ozaki

U = Fraction(1, 2**53)
HALF_SUBNORMAL_ULP = Fraction(1, 2**1075)
FAST_BITS = (4, 12, 24, 40)


@cache
def _exact(name: str):
    a, b = family(name)
    return a, b, exact_dyadic(a, b)


def _abs_error(got: float, s: int, e: int) -> Fraction | float:
    """|got − s·2^e| exactly; inf when got is not the (infinite) rounded value it should be."""
    want = round_dyadic(s, e)
    if math.isinf(want):
        return Fraction(0) if got == want else math.inf
    if not math.isfinite(got):
        return math.inf
    return abs(Fraction(got) - to_fraction(s, e))


def _show(x) -> str:
    """A short decimal for an exact error or bound, also past the float64 range."""
    try:
        return f"{float(x):.3g}"
    except OverflowError:
        return f"~2^{x.numerator.bit_length() - x.denominator.bit_length()}"


def _violations(got: np.ndarray, exact, bound) -> list[str]:
    """Entries whose error exceeds bound(i, j, |C_ij|)."""
    bad = []
    for (i, j), value in np.ndenumerate(got):
        s, e = exact[i][j]
        error = _abs_error(float(value), s, e)
        limit = bound(i, j, abs(to_fraction(s, e)))
        if error > limit:
            bad.append(
                f"({i}, {j}): got {float(value)!r}, exact ≈ {_show(to_fraction(s, e))}, "
                f"error {_show(error)} > bound {_show(limit)}"
            )
    return bad


def _max_errors(got: np.ndarray, exact) -> tuple:
    """(max relative error over entries with C ≠ 0, max absolute error over entries with C = 0)."""
    relative, absolute = Fraction(0), Fraction(0)
    for (i, j), value in np.ndenumerate(got):
        s, e = exact[i][j]
        error = _abs_error(float(value), s, e)
        if s:
            relative = max(relative, error / abs(to_fraction(s, e)) if math.isfinite(error) else error)
        else:
            absolute = max(absolute, error)
    return relative, absolute


@cache
def _fp64_result(name: str) -> np.ndarray:
    a, b, _ = _exact(name)
    got = ozaki.matmul(a, b)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == (a.shape[0], b.shape[1])
    return got


# Bounds on |Ĉ_ij − C_ij| from K, |C_ij|, (|A||B|)_ij and the plan's guard g: DGEMM's worst
# case, and the one ozaki.matmul documents (ozaki.accuracy), with √K rounded down.
_FP64_BOUNDS = {
    "dgemm": lambda k, c, scale, guard: U * c + k * U * scale,
    "documented": lambda k, c, scale, guard: (
        U * c + Fraction(2**19 + 1, 2**(19 + guard)) * Fraction(math.isqrt(k << 40), 2**20) * U * scale),
}
# Where the bound reaches the overflow threshold (DBL_MAX plus half an ulp), ±inf is allowed.
_OVERFLOW = Fraction(2**1024 - 2**970)


@cache
def _abs_product(name: str):
    return abs_product_dyadic(*family(name))


def _assert_within_fp64_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray, exact, scale, kind: str) -> None:
    formula, k = _FP64_BOUNDS[kind], a.shape[1]
    plan = ozaki.explain(a, b)
    guard = 0 if plan.guard is None else plan.guard  # None: correctly rounded, inside every guard's bound

    def bound(i, j, c):
        limit = formula(k, c, to_fraction(*scale[i][j]), guard) + HALF_SUBNORMAL_ULP
        return math.inf if c + limit >= _OVERFLOW else limit

    bad = _violations(got, exact, bound)
    assert not bad, f"{len(bad)} entries outside the {kind} bound: " + "; ".join(bad[:5])


@pytest.mark.parametrize("kind", _FP64_BOUNDS)
@pytest.mark.parametrize("name", FAMILIES)
def test_fp64_within_bound(name, kind):
    a, b, exact = _exact(name)
    _assert_within_fp64_bound(_fp64_result(name), a, b, exact, _abs_product(name), kind)


@pytest.mark.parametrize("kind", _FP64_BOUNDS)
@settings(max_examples=60, deadline=None)
@given(ab=finite_pairs())
def test_fp64_within_bound_on_arbitrary_floats(ab, kind):
    a, b = ab
    _assert_within_fp64_bound(ozaki.matmul(a, b), a, b, exact_dyadic(a, b), abs_product_dyadic(a, b), kind)


@pytest.mark.parametrize("name", STATISTICAL)
def test_fp64_never_worse_than_dgemm(name):
    a, b, exact = _exact(name)
    with np.errstate(all="ignore"):
        dgemm = a @ b
    ours, theirs = _max_errors(_fp64_result(name), exact), _max_errors(dgemm, exact)
    assert ours[0] <= theirs[0], f"max relative error {_show(ours[0])} > DGEMM's {_show(theirs[0])}"
    assert ours[1] <= theirs[1], f"max error on exact zeros {_show(ours[1])} > DGEMM's {_show(theirs[1])}"


def test_fp64_is_the_default_and_torch_agrees():
    a, b, _ = _exact("phi2")
    got = ozaki.matmul(torch.from_numpy(a), torch.from_numpy(b), accuracy="fp64")
    assert got.dtype == torch.float64
    assert_same_bits(got.numpy(), _fp64_result("phi2"))


@cache
def _line_stats(name: str) -> tuple[list, list]:
    """(max_k |A_ik|, Σ_k |A_ik|) per row of A and (max_k |B_kj|, Σ_k |B_kj|) per column of B, exactly."""
    a, b = family(name)
    ones = np.ones((a.shape[1], 1))
    a_sums = [to_fraction(*row[0]) for row in abs_product_dyadic(a, ones)]
    b_sums = [to_fraction(*entry) for entry in abs_product_dyadic(ones.T, b)[0]]
    a_max = [Fraction(float(v)) for v in np.abs(a).max(axis=1)]
    b_max = [Fraction(float(v)) for v in np.abs(b).max(axis=0)]
    return list(zip(a_max, a_sums)), list(zip(b_max, b_sums))


@pytest.mark.parametrize("bits", FAST_BITS)
@pytest.mark.parametrize("name", ["phi0", "phi2", "phi4", "cancel_pairs", "subnormal", "huge_tiny_rows", "long_k"])
def test_fast_mode_documented_bound(name, bits):
    # Each row's integers fit `bits` bits, so an entry moves by < max|row|/(2^bits − 1)
    # (ozaki.scaling.row_shifts), and with ε = 1/(2^b − 1)
    # |Ĉ_ij − C_ij| ≤ ε (max|A_i:|·Σ_k|B_kj| + Σ_k|A_ik|·max|B_:j|) + ε²·K·max|A_i:|·max|B_:j| + u|C_ij|.
    a, b, exact = _exact(name)
    k = a.shape[1]
    rows, cols = _line_stats(name)
    step = Fraction(1, 2**bits - 1)

    def bound(i, j, c):
        (a_max, a_sum), (b_max, b_sum) = rows[i], cols[j]
        return step * (a_max * b_sum + a_sum * b_max) + step * step * k * a_max * b_max + U * c + HALF_SUBNORMAL_ULP

    bad = _violations(ozaki.matmul(a, b, accuracy=bits), exact, bound)
    assert not bad, f"{len(bad)} entries outside the fast-mode bound: " + "; ".join(bad[:5])


@pytest.mark.parametrize("name", ["phi4", "wide_row_span", "ties", "underflow"])
def test_fast_mode_with_every_bit_is_exact(name):
    # 2098 bits, the most accepted, cover any row of finite float64 values (below 2^1024, down
    # to 2^-1074): nothing is dropped, so the result is the exact product rounded once.
    a, b, exact = _exact(name)
    want = np.array([[round_dyadic(s, e) for s, e in row] for row in exact])
    assert_same_bits(ozaki.matmul(a, b, accuracy=2098), want)
