"""accuracy="fp64" (ozaki.accuracy): the documented DGEMM-level bound, held exactly, with the
fewest moduli the data need and every bit those moduli pay for."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from exact_reference import abs_product_dyadic, exact_dyadic, round_dyadic, to_fraction
from families import PHIS, phi_entries
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.accuracy
import ozaki
import ozaki.catalog
from ozaki import accuracy, planning, reading
from ozaki.capacity import crt_capacity, has_capacity
from ozaki.scaling import exact_bits, row_extents, scale_rows

U = Fraction(1, 2**53)


def _documented_bound(k: int, c: Fraction, scale: Fraction, guard: int) -> Fraction:
    # u|C| + 2^-g·(1 + 2^-19)·√K·u·(|A||B|) + 2^-1075, with √K rounded down.
    root_k = Fraction(math.isqrt(k << 40), 2**20)
    return U * c + Fraction(2**19 + 1, 2 ** (19 + guard)) * root_k * U * scale + Fraction(1, 2**1075)


def _assert_documented_bound(a: np.ndarray, b: np.ndarray, engine: str = "auto") -> None:
    plan = ozaki.explain(a, b, engine=engine)
    got = ozaki.matmul(a, b, engine=engine)
    exact, scale = exact_dyadic(a, b), abs_product_dyadic(a, b)
    for (i, j), value in np.ndenumerate(got):
        s, e = exact[i][j]
        if plan.guard is None:  # every row lossless: the correctly rounded product
            assert value == round_dyadic(s, e), (i, j)
            continue
        c = to_fraction(s, e)
        limit = _documented_bound(a.shape[1], abs(c), to_fraction(*scale[i][j]), plan.guard)
        assert math.isfinite(value) and abs(Fraction(float(value)) - c) <= limit, (i, j, value, float(c))


@st.composite
def spread_pairs(draw):
    """Phi matrices with rows and columns scaled by powers of two far apart, cancelling pairs
    and subnormals: the inputs whose bits the rule must get right."""
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 80)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    phi = draw(st.sampled_from(PHIS))
    a, b = phi_entries(rng, (m, k), phi), phi_entries(rng, (k, n), phi)
    a *= np.ldexp(1.0, rng.integers(-300, 300, size=(m, 1)))
    b *= np.ldexp(1.0, rng.integers(-300, 300, size=(1, n)))
    if draw(st.booleans()) and k >= 2:  # a pair that cancels exactly
        a[:, 1], b[1] = -a[:, 0], b[0]
    if draw(st.booleans()):  # a subnormal corner
        a[0, 0], b[0, 0] = 2.0**-1060 * 3, 2.0**-20
    return a, b


@settings(max_examples=80, deadline=None)
@given(ab=spread_pairs())
def test_documented_bound_holds_exactly(ab):
    _assert_documented_bound(*ab)


@pytest.mark.parametrize("phi", PHIS)
@pytest.mark.parametrize("k", [1, 7, 300, 3000])
def test_documented_bound_on_phi_families(phi, k):
    rng = np.random.default_rng(int(phi * 10) + k)
    _assert_documented_bound(phi_entries(rng, (3, k), phi), phi_entries(rng, (k, 3), phi))


def test_phi_half_at_k_16384_takes_at_most_16_int8_moduli():
    if not ozaki.catalog.plans_for("int8"):
        pytest.skip("the catalog has no int8 plan")
    rng = np.random.default_rng(0)
    a, b = phi_entries(rng, (64, 16384), 0.5), phi_entries(rng, (16384, 64), 0.5)
    plan = ozaki.explain(a, b, engine="int8")
    assert len(plan.moduli.moduli) <= 16 and plan.guard is not None and plan.guard >= accuracy.FP64_GUARD
    # "exact" keeps every row's lossless width, which costs more.
    assert len(ozaki.explain(a, b, engine="int8", accuracy="exact").moduli.moduli) > len(plan.moduli.moduli)


@pytest.mark.parametrize("phi", [0.5, 2.0])
def test_rows_keep_every_bit_the_int8_plan_pays_for_on_every_engine(phi):
    if not ozaki.catalog.plans_for("int8"):
        pytest.skip("the catalog has no int8 plan")
    rng = np.random.default_rng(5)
    a, b = phi_entries(rng, (6, 500), phi), phi_entries(rng, (500, 5), phi)
    plan = ozaki.explain(a, b, engine="int8")
    (_, p), (_, q) = plan.bits_a, plan.bits_b
    product = math.prod(plan.moduli.moduli)
    ta, tbt = torch.from_numpy(a), torch.from_numpy(b).T
    *_, bound = accuracy.fp64_statistics(ta, tbt, row_extents(ta), row_extents(tbt))

    def needed(p_, q_):
        return min(crt_capacity(500, p_, q_), bound.capacity(p_, q_))

    assert has_capacity(product, needed(p, q))
    widest_a, widest_b = int(exact_bits(ta).max()), int(exact_bits(tbt).max())
    # One more bit on either side is beyond the capacity, or beyond every row's lossless width.
    assert p == widest_a or not has_capacity(product, needed(p + 1, q))
    assert q == widest_b or not has_capacity(product, needed(p, q + 1))
    # Every engine keeps the same bits, so returns the same result.
    engines = [e for e in ("reference", "fp8", "fp4") if e == "reference" or ozaki.catalog.plans_for(e)]
    for engine in engines:
        other = ozaki.explain(a, b, engine=engine)
        assert (other.bits_a, other.bits_b, other.guard) == (plan.bits_a, plan.bits_b, plan.guard), engine
    results = [ozaki.matmul(a, b, engine=engine) for engine in ("int8", *engines)]
    assert all(np.array_equal(r.view(np.uint64), results[0].view(np.uint64)) for r in results)


@settings(max_examples=60, deadline=None)
@given(ab=spread_pairs(), p=st.integers(0, 70), q=st.integers(0, 70))
def test_magnitude_bound_bounds_the_scaled_product(ab, p, q):
    # The CRT's window rests on it: Σ_k |A'_ik||B'_kj| ≤ capacity/2 for rows kept to at most
    # p and q bits, checked in exact integers on the scaled operands the pipeline builds.
    a, b = (torch.from_numpy(x) for x in ab)
    bt = b.T
    *_, bound = accuracy.fp64_statistics(a, bt, row_extents(a), row_extents(bt))
    sa = scale_rows(a, exact_bits(a).clamp(max=p))
    sb = scale_rows(bt, exact_bits(bt).clamp(max=q))
    ints_a = [[abs(int(m)) << int(e) for m, e in zip(rm, re)] for rm, re in zip(sa.mantissa.tolist(), sa.exponent.tolist())]
    ints_b = [[abs(int(m)) << int(e) for m, e in zip(rm, re)] for rm, re in zip(sb.mantissa.tolist(), sb.exponent.tolist())]
    largest = max(sum(x * y for x, y in zip(row, col)) for row in ints_a for col in ints_b)
    assert 2 * largest <= bound.capacity(p, q)


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 5), k=st.integers(1, 12), data=st.data())
def test_code_sums_bound_every_code_product(rows, cols, k, data):
    # The bound's G: from row sums and sums of squares of codes in [0, 64] alone, at least
    # every entry of their product, and equal to the largest where one row meets itself.
    row = st.lists(st.integers(0, accuracy.UPPER_CODE_MAX), min_size=k, max_size=k)
    a, b = data.draw(st.lists(row, min_size=rows, max_size=rows)), data.draw(st.lists(row, min_size=cols, max_size=cols))
    bound = accuracy.MagnitudeBound.from_code_sums(max(map(sum, a)), max(map(sum, b)),
                                                   max(sum(c * c for c in r) for r in a),
                                                   max(sum(c * c for c in r) for r in b), k)
    assert bound.products >= max(sum(x * y for x, y in zip(r, c)) for r in a for c in b)
    same = accuracy.MagnitudeBound.from_code_sums(sum(a[0]), sum(a[0]), sum(c * c for c in a[0]),
                                                  sum(c * c for c in a[0]), k)
    assert same.products == sum(c * c for c in a[0])


def test_k_past_the_code_sums_range_is_refused(monkeypatch):
    # The sums of squares of codes up to 2^16 are int64 only up to UPPER_MAX_K (about 2^31):
    # past it the rule refuses, on the torch path and in the kernels' launcher alike.
    a = torch.ones((2, 5), dtype=torch.float64)
    monkeypatch.setattr(accuracy, "UPPER_MAX_K", 4)
    with pytest.raises(ValueError, match="K up to 4"):
        accuracy.fp64_reading(a, a, row_extents(a), row_extents(a))
    monkeypatch.setattr(kernels.accuracy, "UPPER_MAX_K", 4)
    with pytest.raises(ValueError, match="K = 5 passes 4"):
        kernels.accuracy.upper_reading_kernel(a, torch.ones(2, dtype=torch.int64), 30)


@pytest.mark.parametrize("value", [1 - 2.0**-40, 0.75, -(2.0**-1070)])
def test_magnitude_bound_is_tight_on_constant_rows(value):
    # Every |A'_ik| = 2^p − 1 (or 2^(p−1)) on a row of equal entries: the sum is K·|A'||B'|,
    # which the bound must cover and, on these rows, hardly exceed.
    k, p, q = 64, 50, 47
    a = torch.full((2, k), value, dtype=torch.float64)
    *_, bound = accuracy.fp64_statistics(a, a, row_extents(a), row_extents(a))
    sa, sb = scale_rows(a, torch.full((2,), p)), scale_rows(a, torch.full((2,), q))
    exact = k * (abs(int(sa.mantissa[0, 0])) << int(sa.exponent[0, 0])) * (abs(int(sb.mantissa[0, 0])) << int(sb.exponent[0, 0]))
    assert 2 * exact <= bound.capacity(p, q) <= 4 * exact


def test_levels_are_exact_integers_independent_of_row_order():
    # The rule's arithmetic is exact (integer GEMM, correctly rounded quotients): permuting the
    # rows of A permutes its levels and leaves B's unchanged.
    rng = np.random.default_rng(9)
    a, bt = torch.from_numpy(phi_entries(rng, (9, 200), 1.0)), torch.from_numpy(phi_entries(rng, (7, 200), 1.0))
    order = torch.randperm(9, generator=torch.Generator().manual_seed(0))
    level_a, level_b, _ = accuracy.fp64_statistics(a, bt, row_extents(a), row_extents(bt))
    moved_a, moved_b, _ = accuracy.fp64_statistics(a[order], bt, row_extents(a[order]), row_extents(bt))
    assert torch.equal(moved_a, level_a[order]) and torch.equal(moved_b, level_b)


@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "plane-gemm"])
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 2), (3, 1, 4), (2, 3, 5), (17, 9, 1), (5, 40, 33)])
def test_code_products_are_exact(m, k, n, kernels):
    # The int8 code GEMM against int64 products, on the shapes where some torch releases'
    # kernels go wrong (K = 1 on the CPU in torch 2.11), by torch._int_mm and by the plane GEMM
    # (on the GPU where there is one: Triton runs CPU tensors only under its interpreter).
    gen = torch.Generator().manual_seed(m * k * n)
    a = torch.randint(0, 128, (m, k), dtype=torch.int8, generator=gen)
    bt = torch.randint(0, 128, (n, k), dtype=torch.int8, generator=gen)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    pad_m, pad_k, pad_n = accuracy._gemm_shape(m, k, n, device)
    padded_a, padded_bt = (accuracy._padded(x, rows, pad_k).to(device) for x, rows in ((a, pad_m), (bt, pad_n)))
    # One int32 GEMM up to the chunk's K, int64 sums of chunks past it (as the whole K of a mesh decides).
    for whole_k, dtype in ((k, torch.int32), (accuracy._INT_MM_CHUNK + 1, torch.int64)):
        g = accuracy._code_product(padded_a, padded_bt, m, n, whole_k, kernels)
        assert g.dtype == dtype and torch.equal(g.cpu().long(), a.long() @ bt.long().T)


def test_rows_that_meet_only_zeros_need_no_bits():
    # B all zero: no row of A can err, and B's columns keep nothing (their lossless width, 0).
    a = torch.from_numpy(phi_entries(np.random.default_rng(4), (3, 6), 1.0))
    bt = torch.zeros((2, 6), dtype=torch.float64)
    level_a, _, _ = accuracy.fp64_statistics(a, bt, row_extents(a), row_extents(bt))
    assert level_a.tolist() == [0, 0, 0]


def test_beyond_max_k_rows_keep_their_lossless_width(monkeypatch):
    monkeypatch.setattr(accuracy, "MAX_K", 4)
    rng = np.random.default_rng(2)
    a, bt = torch.from_numpy(phi_entries(rng, (3, 5), 1.0)), torch.from_numpy(phi_entries(rng, (2, 5), 1.0))
    level_a, level_b, _ = accuracy.fp64_statistics(a, bt, row_extents(a), row_extents(bt))
    assert bool((level_a == accuracy.UNBOUNDED).all()) and bool((level_b == accuracy.UNBOUNDED).all())


def test_row_bits_refuses_fp64():
    with pytest.raises(ValueError, match="both operands"):
        reading.row_bits(torch.ones(2, 3, dtype=torch.float64), "fp64")
