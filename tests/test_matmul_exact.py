"""accuracy="exact": the correctly rounded product (nearest, ties to even), bit for bit.

The expected bits come from tests/exact_reference.py (Python integers and CPython's
correctly rounded int/int division).  Zero signs follow that module: an exact zero is +0.0;
a non-zero value that rounds to zero keeps its sign.  The reference itself is first checked
against the hardware's own correctly rounded operations (a float64 multiply, math.fsum).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
import torch
from exact_reference import assert_same_bits, exact_matmul
from families import FAMILIES, family, finite_pairs
from hypothesis import given, settings
from hypothesis import strategies as st

import ozaki
from ozaki import catalog
from ozaki.residues import crt_capacity

_PLAN_ENGINES = ("int8", "fp8", "fp4")


def _engines() -> list:
    digits = sorted({plan.digits for plan in catalog.plans().values()} & set(_PLAN_ENGINES))
    skipped = [
        pytest.param(name, marks=pytest.mark.skip(reason=f"the catalog has no {name} plan yet"))
        for name in _PLAN_ENGINES
        if name not in digits
    ]
    return ["auto", "reference", *digits, *skipped]


ENGINES = _engines()

_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@cache
def _expected(name: str) -> np.ndarray:
    return exact_matmul(*family(name))


# The reference against the hardware --------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(_finite, _finite)
def test_reference_k1_is_the_ieee_product(x, y):
    # An IEEE multiply is one correct rounding, subnormals and overflow included.
    with np.errstate(over="ignore", under="ignore"):
        want = np.float64(x) * np.float64(y) if x and y else 0.0
    assert_same_bits(exact_matmul(np.array([[x]]), np.array([[y]])), np.array([[want]]))


# Entries of at most 26 significant bits inside ±2^400: every product is exact in float64,
# so math.fsum (correctly rounded) of the products is the correctly rounded dot product.
_short = st.builds(
    lambda m, e: math.ldexp(m, e),
    st.integers(-(2**26) + 1, 2**26 - 1),
    st.integers(-400, 400),
)


_short_vectors = st.integers(1, 24).flatmap(
    lambda k: st.tuples(st.lists(_short, min_size=k, max_size=k), st.lists(_short, min_size=k, max_size=k))
)


@settings(max_examples=200, deadline=None)
@given(_short_vectors)
def test_reference_dot_is_fsum_of_exact_products(xy):
    x, y = xy
    want = math.fsum(p * q for p, q in zip(x, y)) + 0.0  # + 0.0: an exact zero is +0.0
    got = exact_matmul(np.array([x]), np.array([y]).T)
    assert_same_bits(got, np.array([[want]]))


# The library against the reference ---------------------------------------------------


def _lossless_width(x: np.ndarray) -> int:
    """The most bits any row of x spans, from its highest to its lowest set bit."""
    widest = 0
    for row in x.tolist():
        tops, lows = [], []
        for numerator, denominator in (v.as_integer_ratio() for v in row if v):
            shift = denominator.bit_length() - 1
            tops.append(abs(numerator).bit_length() - shift)
            lows.append((numerator & -numerator).bit_length() - 1 - shift)
        widest = max(widest, max(tops, default=0) - min(lows, default=0))
    return widest


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", FAMILIES)
def test_exact_numpy_bitwise(name, engine):
    # Families wider than every plan (wide_row_span: 2050-bit rows) run the plan engines in
    # exponent bands (ozaki.bands).
    a, b = family(name)
    got = ozaki.matmul(a, b, accuracy="exact", engine=engine)
    assert_same_bits(got, _expected(name))


@pytest.mark.parametrize("name", FAMILIES)
def test_exact_torch_bitwise(name):
    a, b = family(name)
    got = ozaki.matmul(torch.from_numpy(a), torch.from_numpy(b), accuracy="exact")
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64 and got.device == torch.device("cpu")
    assert_same_bits(got.numpy(), _expected(name))


@settings(max_examples=100, deadline=None)
@given(finite_pairs())
def test_exact_on_arbitrary_finite_floats(ab):
    # Entries anywhere in the float64 range, subnormals and ±0.0 included: families the
    # tests were not written around.
    a, b = ab
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact"), exact_matmul(a, b))


def _catalog_plans() -> list:
    found = sorted((p for p in catalog.plans().values() if p.digits in _PLAN_ENGINES), key=lambda p: p.name)
    return found or [pytest.param(None, marks=pytest.mark.skip(reason="the catalog has no plan yet"))]


@pytest.mark.parametrize("accuracy", ["exact"])
@pytest.mark.parametrize("plan", _catalog_plans(), ids=lambda p: getattr(p, "name", "none"))
def test_plan_engine_serves_its_plans_advertised_limits(plan, accuracy, cut_catalog):
    # A plan promises ∏m > 2·k_max·(2^input_bits − 1)²: K = k_max terms of input_bits-bit
    # integers are in range, up to |A'B'| = k_max·(2^input_bits − 1)² of either sign.  The
    # catalog is cut down to this plan alone, so the engine must serve the product with it.
    bits, k = plan.input_bits, plan.k_max
    cut_catalog(lambda digits: [plan] if digits == plan.digits else [])
    rng = np.random.default_rng(k + bits)
    # The largest magnitude below 2^bits that float64 holds, and an odd one that makes every
    # row exactly `bits` wide (lowest bit 2^0, top bit 2^(bits − 1)), so that exact mode
    # drops no bit: the result is the exact product, rounded once.
    head = min(bits, 53)
    big, odd = ((1 << head) - 1) << (bits - head), (1 << head) - 1

    def operand(signs, odd_at: int) -> np.ndarray:
        """(len(signs), k): ±big everywhere (one sign per row) but ±odd at column odd_at."""
        out = np.array([[s * big] * k for s in signs], dtype=np.float64)
        out[:, odd_at] = np.array(signs, dtype=np.float64) * odd
        return out

    # A's row against B's columns: +big·+big and +big·−big sum to ±K·(2^bits − 1)², the
    # capacity's edges, when bits ≤ 53 (past 53 bits within a factor (1 − 2/K)(1 − 2^-51) of
    # them); the third column has random signs and odd entries with the top bit set.
    a = operand([1], 0)
    b = operand([1, -1], 1 % k).T
    low_bits = rng.integers(0, 2 ** (head - 1), size=k, dtype=np.uint64).tolist()
    signs = rng.choice([-1, 1], size=k).tolist()
    mixed = [s * (((1 << (head - 1)) | int(v) | 1) << (bits - head if i % 2 == 0 else 0))
             for i, (s, v) in enumerate(zip(signs, low_bits))]
    b = np.hstack([b, np.array(mixed, dtype=np.float64)[:, None]])
    assert _lossless_width(a) == bits == _lossless_width(b.T)
    bound = k * (2**bits - 1) ** 2
    assert crt_capacity(k, bits, bits) == 2 * bound < plan.capacity
    positive, negative = (sum(int(x) * int(y) for x, y in zip(a[0], b[:, j])) for j in range(2))
    assert positive == -negative <= bound and positive * k * 2**51 >= (k - 2) * bound * (2**51 - 1)
    assert ozaki.explain(a, b, accuracy=accuracy, engine=plan.digits).moduli.moduli == tuple(m for m, _ in plan.moduli)
    assert_same_bits(ozaki.matmul(a, b, accuracy=accuracy, engine=plan.digits), exact_matmul(a, b))
