"""Exponent bands (ozaki.bands): products wider than every plan, cut into products that fit.

The bands of an integer must add back to it, each must fit its width, the split must fit
the plans and be the cheapest, and a banded product must have the bits of the exact one
however it is split.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import torch
from exact_reference import assert_same_bits, exact_matmul
from hypothesis import given, settings
from hypothesis import strategies as st

import ozaki
from ozaki import bands, catalog, timing
from ozaki.residues import crt_capacity
from ozaki.scaling import scale_rows

_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@st.composite
def _scaled(draw):
    width = draw(st.integers(1, 6))
    row = draw(st.lists(_finite, min_size=width, max_size=width))
    bits = draw(st.integers(0, 2200))
    return scale_rows(torch.tensor([row], dtype=torch.float64), torch.tensor([bits])), bits


def _integers(s) -> list[int]:
    return [m << e for m, e in zip(s.mantissa[0].tolist(), s.exponent[0].tolist())]


@settings(max_examples=200, deadline=None)
@given(_scaled(), st.integers(1, 130))
def test_bands_add_back_to_the_integer_and_fit_their_width(case, width):
    s, bits = case
    count = max(1, -(-bits // width))
    parts = [bands.band(s, width, i) for i in range(count + 1)]  # one band past the top: zero
    for part in parts:
        assert (part.exponent >= 0).all() and (part.mantissa.abs() <= 2**53).all()
        assert all(abs(v) <= 2**width - 1 for v in _integers(part))
    assert not parts[-1].mantissa.any()
    total = [sum(v << (width * i) for i, v in enumerate(column)) for column in zip(*map(_integers, parts))]
    assert total == _integers(s)
    # Truncation toward zero: a band has the integer's sign or is zero.
    for part in parts:
        assert all(v == 0 or (v < 0) == (x < 0) for v, x in zip(_integers(part), _integers(s)))


# A made-up catalog: (capacity, plane GEMMs) of each plan.
_TOY_PLANS = [(2**40, 5), (2**64, 8), (2**100, 13), (2**130, 17)]


def _brute_split(k, p, q):
    """The fewest plane GEMMs over every count of bands of A' and of B'."""
    best = None
    for count_a in range(1, p + 1):
        for count_b in range(1, q + 1):
            need = crt_capacity(k, -(-p // count_a), -(-q // count_b))
            fits = [products for capacity, products in _TOY_PLANS if capacity > need]
            if fits:
                cost = count_a * count_b * min(fits)
                best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2**12), st.integers(1, 80), st.integers(1, 80))
def test_split_fits_the_plans_covers_the_bits_and_is_cheapest(k, p, q):
    split = bands.split(k, p, q, _TOY_PLANS)
    assert split.width_a * split.count_a >= p and split.width_b * split.count_b >= q
    need = crt_capacity(k, split.width_a, split.width_b)
    per_pair = min(products for capacity, products in _TOY_PLANS if capacity > need)
    assert split.products == split.pairs * per_pair
    assert split.products == _brute_split(k, p, q)


def test_split_refuses_k_past_every_plan():
    with pytest.raises(ValueError, match="too long for every plan"):
        bands.split(2**40, 10, 10, [(2**41, 1)])


def _wide_rows(seed: int, m: int, k: int, n: int, span: int):
    """Entries (rand − 0.5)·2^e with e uniform in ±span: rows wider than every plan."""
    rng = np.random.default_rng(seed)

    def draw(rows, cols):
        return (rng.random((rows, cols)) - 0.5) * np.exp2(rng.integers(-span, span + 1, size=(rows, cols)))

    return draw(m, k), draw(k, n)


_ENGINES = ("int8", "fp8", "fp4")


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize("accuracy", ["exact", "fp64", 700])
def test_plan_engines_past_every_plan_give_the_single_products_bits(engine, accuracy, caplog):
    a, b = _wide_rows(7, 3, 5, 2, span=400)
    with caplog.at_level(logging.DEBUG, logger="ozaki"):
        got = ozaki.matmul(a, b, accuracy=accuracy, engine=engine)
    assert any("past every plan" in r.getMessage() for r in caplog.records)
    assert_same_bits(got, ozaki.matmul(a, b, accuracy=accuracy, engine="reference"))
    if accuracy != 700:
        assert_same_bits(got, exact_matmul(a, b))


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize("plan_index", [0, -1])
def test_bits_do_not_depend_on_the_split(engine, plan_index, cut_catalog):
    # With the catalog cut to its smallest or its largest plan, the bands differ (widths,
    # counts and moduli), the bits must not.  Cancellation: the second column of B
    # negates the first but in its lowest band.
    a, b = _wide_rows(11, 2, 6, 2, span=300)
    b[:, 1] = -b[:, 0]
    b[0, 1] = np.nextafter(b[0, 1], 0.0)
    plans = sorted((p for p in catalog.plans_for(engine)), key=lambda p: p.capacity)
    cut_catalog(lambda digits: [plans[plan_index]] if digits == engine else [])
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact", engine=engine), exact_matmul(a, b))


def test_band_split_serves_k_past_the_plans_capacity(cut_catalog):
    # Full-width 53-bit rows and K above every plan's k_max: the plan alone cannot serve
    # it, bands of fewer bits can.
    plan = min((p for p in catalog.plans_for("int8") if p.input_bits >= 53), key=lambda p: p.capacity)
    cut_catalog(lambda digits: [plan] if digits == "int8" else [])
    k = plan.capacity // crt_capacity(1, 53, 53) + 1  # past k_max: the moduli have some slack
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, k)), rng.standard_normal((k, 2))
    assert crt_capacity(k, 53, 53) >= plan.capacity > crt_capacity(plan.k_max, 53, 53)
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact", engine="int8"), exact_matmul(a, b))


def test_banded_stages_are_timed_once_each():
    # The banded path runs outside the plain path's encode stage: no stage holds another.
    a, b = _wide_rows(5, 2, 3, 2, span=300)
    started = time.perf_counter()
    with timing.stage_times() as times:
        ozaki.matmul(a, b, accuracy="exact", engine="int8")
    elapsed = time.perf_counter() - started
    assert set(times) == {"plan", "encode", "products", "decode"}
    assert sum(times.values()) <= elapsed
