"""The extents kernel gives its plain reference and ``ozaki.scaling.row_extents`` integer for
integer, on every kind of row, through any strides and any config; and the fused pipeline, which takes its bits and
shifts from the kernel's extents, keeps the torch path's bits, shifts, p, q and plan."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pipeline import _spread, fused_path  # noqa: F401  (fused_path is a fixture)

import kernels.scaling
import ozaki
import ozaki.catalog
from kernels.scaling import (SUMMARY_LENGTH, SummaryLines, capped_shifts_kernel, line_summary_kernel,
                             reference_line_summary, reference_row_extents, reference_row_shifts, row_extents_kernel,
                             row_shifts_kernel)
from ozaki import pipeline, planning, reading
from ozaki.residues import crt_capacity
from ozaki.scaling import NO_SET_BIT, exact_bits_of, fixed_bits_of, row_extents, row_shifts, shifts_of

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The device set (`pytest -m gpu`): on a GPU these compile the kernels and check their bits.
pytestmark = pytest.mark.gpu
TINY, HUGE = 5e-324, np.finfo(np.float64).max


def _family(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    rows, k = shape
    if kind == "spread":  # magnitudes over the whole exponent range within each row
        return rng.standard_normal(shape) * 2.0 ** rng.integers(-1070, 1020, shape)
    if kind == "subnormal":  # subnormals of every width, next to the smallest normals
        x = rng.integers(-(2**52), 2**52, shape) * TINY
        x[::2, ::3] = rng.choice([2.0**-1022, -(2.0**-1021) * 3], (len(range(0, rows, 2)), len(range(0, k, 3))))
        return x
    if kind == "zeros":  # ±0 among the entries, rows of +0, of -0 and of both
        x = rng.standard_normal(shape)
        x[rng.random(shape) < 0.5] = 0.0
        x[rng.random(shape) < 0.3] = -0.0
        x[0], x[-1] = 0.0, -0.0
        x[rows // 2, ::2] = -0.0
        x[rows // 2, 1::2] = 0.0
        return x
    if kind == "single":  # one non-zero entry per row, anywhere (the last column included)
        x = np.zeros(shape)
        x[np.arange(rows), rng.integers(0, k, rows)] = rng.choice([TINY, -1.0, 3.0 * 2.0**-1060, -HUGE, 0.375], rows)
        x[-1, -1] = 2.0**-1074 * 12
        return x
    if kind == "extremes":  # the largest finite, the smallest subnormal, 2^-1022 and powers of two
        return rng.choice([1.0, -1.0], shape) * rng.choice([HUGE, TINY, 2.0**-1022, 1.0, 2.0**1023, 0.5], shape)
    if kind == "integers":  # odd 53-bit integers (lowest bit 2^0) and their halves
        x = (rng.integers(2**51, 2**52, shape) * 2 + 1).astype(np.float64) * rng.choice([1.0, -1.0], shape)
        x[1::2] /= 2.0
        return x
    raise ValueError(kind)


def _layout(x: np.ndarray, layout: str) -> torch.Tensor:
    """x as the kernel's input in one of the pipeline's (or any) layouts, same values."""
    t = torch.tensor(x, dtype=torch.float64, device=DEVICE)
    if layout == "rows":  # A: K contiguous
        return t
    if layout == "columns":  # Bᵀ: a view of a contiguous B, whose columns are x's rows
        view = torch.empty((x.shape[1], x.shape[0]), dtype=torch.float64, device=DEVICE).T.copy_(t)
        assert view.stride(0) == 1 and torch.equal(view, t)
        return view
    # Every other row and column of a larger matrix: neither axis of unit stride.
    big = torch.zeros((2 * x.shape[0], 3 * x.shape[1]), dtype=torch.float64, device=DEVICE)
    big[::2, ::3] = t
    return big[::2, ::3]


def _same(got, want) -> bool:
    # Patterns, so that a -0.0 for 0.0 (or any other bit) would show.
    return (torch.equal(got.row_max.view(torch.int64), want.row_max.view(torch.int64))
            and torch.equal(got.lowest_bit, want.lowest_bit))


FAMILIES = ["spread", "subnormal", "zeros", "single", "extremes", "integers"]
# Ragged against the default tile (32 x 64) and the small one below; one row, one column.
SHAPES = [(37, 150), (1, 1), (5, 1), (1, 300), (70, 33)]
CONFIGS = {"default": {}, "one-chunk": {"chunks": 1}, "small-tiles": {"block": (8, 4), "chunks": 3},
           "one-entry-tiles": {"block": (1, 1), "chunks": 5}}


@pytest.mark.parametrize("layout", ["rows", "columns", "strided"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", FAMILIES)
def test_kernel_equals_the_torch_extents(kind, shape, layout):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{shape}-{layout}".encode()))
    x = _layout(_family(rng, shape, kind), layout)
    (got,), want = row_extents_kernel(x), reference_row_extents(x)
    assert _same(got, want)
    assert _same(got, row_extents(x.contiguous()))
    assert torch.equal(exact_bits_of(got), exact_bits_of(want))


def test_the_extents_of_several_inputs_are_each_ones():
    # A's rows and Bᵀ's (a view, B's columns) of other counts, and an empty one, in one call:
    # one fill under all of them, so each must end with its own rows' extents only.
    rng = np.random.default_rng(7)
    a = _layout(np.concatenate([_family(rng, (5, 33), kind) for kind in FAMILIES]), "rows")
    bt = _layout(np.concatenate([_family(rng, (3, 33), kind) for kind in FAMILIES]), "columns")
    empty = torch.zeros((0, 33), dtype=torch.float64, device=DEVICE)
    got = row_extents_kernel(a, empty, bt)
    assert len(got) == 3 and got[1].row_max.numel() == 0
    assert _same(got[0], reference_row_extents(a)) and _same(got[2], reference_row_extents(bt))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_any_config_gives_the_same_extents(config, layout):
    # Max and min over exact integers: tiles, chunks of K and the order of the atomics are free.
    rng = np.random.default_rng(zlib.crc32(f"{config}-{layout}".encode()))
    x = np.concatenate([_family(rng, (9, 45), kind) for kind in FAMILIES])
    t = _layout(x, layout)
    assert _same(row_extents_kernel(t, **CONFIGS[config])[0], reference_row_extents(t))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 5), k=st.integers(1, 40), data=st.data(), columns=st.booleans())
def test_kernel_equals_the_torch_extents_on_any_finite_rows(rows, k, data, columns):
    values = data.draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=rows * k,
                                max_size=rows * k))
    x = _layout(np.array(values).reshape(rows, k), "columns" if columns else "rows")
    (got,) = row_extents_kernel(x)
    assert _same(got, reference_row_extents(x))
    assert _same(got, row_extents(x.contiguous()))


# (row, largest |x|, lowest set bit's exponent) from the definition, by hand.
_ROWS = [
    ([1.0, -0.0], 1.0, 0),
    ([0.75, 3.0], 3.0, -2),
    ([TINY, -1.0], 1.0, -1074),
    ([-HUGE, 2.0**1023], HUGE, 971),
    ([2.0**-1022, 3 * TINY], 2.0**-1022, -1074),
    ([2.0**-1022, -(2.0**-1000)], 2.0**-1000, -1022),
    ([2.0**52 + 1, 2.0**60], 2.0**60, 0),
    ([-0.0, 0.0, 0.0], 0.0, NO_SET_BIT),
]


def test_extents_follow_their_definition():
    width = max(len(row) for row, _, _ in _ROWS)
    x = torch.tensor([row + [0.0] * (width - len(row)) for row, _, _ in _ROWS], dtype=torch.float64, device=DEVICE)
    (got,) = row_extents_kernel(x)
    assert _same(got, reference_row_extents(x))
    assert got.row_max.tolist() == [largest for _, largest, _ in _ROWS]
    assert got.lowest_bit.tolist() == [lowest for _, _, lowest in _ROWS]
    assert got.has_nonzero.tolist() == [largest > 0 for _, largest, _ in _ROWS]


def test_empty_inputs_are_all_zero_rows():
    for shape in ((0, 5), (3, 0)):
        (got,) = row_extents_kernel(torch.zeros(shape, dtype=torch.float64, device=DEVICE))
        assert got.row_max.tolist() == [0.0] * shape[0] and got.lowest_bit.tolist() == [NO_SET_BIT] * shape[0]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x: row_extents_kernel(x.float()), TypeError, "float64"),
        (lambda x: row_extents_kernel(x.numpy()), TypeError, "float64 tensor"),
        (lambda x: row_extents_kernel(x[None]), ValueError, r"\[rows, K\]"),
        (lambda x: row_extents_kernel(x[0]), ValueError, r"\[rows, K\]"),
        (lambda x: row_extents_kernel(x, block=(3, 4)), ValueError, "powers of two"),
        (lambda x: row_extents_kernel(x, block=(4,)), ValueError, "powers of two"),
        (lambda x: row_extents_kernel(x, chunks=0), ValueError, "at least 1"),
        (lambda x: row_extents_kernel(x.expand(2**31, 3)), ValueError, "below 2\\*\\*31"),
        (lambda x: row_extents_kernel(x[:, :1].expand(1, 70000), block=(1, 1), chunks=70000), ValueError,
         "grid limit"),
        (lambda x: row_extents_kernel(), ValueError, "at least one"),
        (lambda x: row_extents_kernel(x, x.float()), TypeError, "float64"),
    ],
)
def test_bad_calls_raise(call, error, message):
    x = torch.ones((1, 3), dtype=torch.float64)
    with pytest.raises(error, match=message):
        call(x)


# Scaling from extents ---------------------------------------------------------------------


_CARRY_ROWS = [[1 - 2.0**-9, 0.3, -0.5], [-(1 - 2.0**-9), 2.0**-9, 0.0], [0.75, 0.5, 0.0], [3 * TINY, TINY, 0.0],
               [2.0**53 - 1, 1.0, 0.0], [0.0, -0.0, 0.0]]


@pytest.mark.parametrize("bits", [0, 1, 8, 52, 53, 2200])
def test_bits_and_shifts_from_the_kernel_extents(bits):
    # The rounding carry (a maximum that rounds up to 2^p) included: shifts_of needs only the maximum.
    rng = np.random.default_rng(bits)
    x = torch.tensor(np.concatenate([_CARRY_ROWS, _family(rng, (6, 3), "spread")]), dtype=torch.float64,
                     device=DEVICE)
    (extents,) = row_extents_kernel(x)
    kept = fixed_bits_of(extents, bits)
    assert torch.equal(kept, reading.row_bits(x, bits))
    assert torch.equal(shifts_of(extents.row_max, kept), row_shifts(x, kept))


# Maxima at the edges of the shift and the carry: zeros, subnormals (the smallest, one that
# carries at p = 0, the largest), a maximum one ulp under a power of two (carries below 53
# bits), 2^53 − 1, powers of two and the largest float64.
_MAXIMA = [0.0, TINY, 3 * TINY, 2.0**-1060 * (1 - 2.0**-10), 2.0**-1022 - TINY, 2.0**-1022, 1 - 2.0**-53,
           1 - 2.0**-9, 0.75, 0.5, 1.0, 3.0, 2.0**53 - 1, 2.0**1000 * 1.5, 1.7976931348623157e308]


@pytest.mark.parametrize("bits", [0, 1, 3, 8, 52, 53, 60, 2200, 1 << 20])
def test_shifts_kernel_equals_the_torch_shifts(bits):
    row_max = torch.tensor(_MAXIMA, dtype=torch.float64)
    kept = torch.full(row_max.shape, bits, dtype=torch.int64)
    # Mixed widths too: each row's own p.
    mixed = torch.arange(len(_MAXIMA), dtype=torch.int64) * 4 % 57
    for widths in (kept, mixed):
        want = shifts_of(row_max, widths)  # the torch path, on the CPU
        assert torch.equal(want, reference_row_shifts(row_max, widths))
        (got,) = row_shifts_kernel((row_max.to(DEVICE), widths.to(DEVICE)))
        assert got.dtype == torch.int64 and torch.equal(got.cpu(), want)
        # Two sides of different lengths in one launch: each its own shifts.
        other = widths.flip(0)[:5]
        both = row_shifts_kernel((row_max.to(DEVICE), widths.to(DEVICE)), (row_max[:5].to(DEVICE), other.to(DEVICE)))
        assert torch.equal(both[0].cpu(), want) and torch.equal(both[1].cpu(), shifts_of(row_max[:5], other))


@pytest.mark.parametrize("cap", [0, 1, 8, 52, 53, 60, 2200])
def test_capped_shifts_are_the_shifts_of_the_capped_bits(cap):
    # A plan widened to P bits per row: p = min(lossless, P) and its shift, in one launch for both sides.
    row_max = torch.tensor(_MAXIMA, dtype=torch.float64)
    lossless = torch.arange(len(_MAXIMA), dtype=torch.int64) * 37 % 97
    other = lossless.flip(0)[:6]
    (kept, shift), (other_kept, other_shift) = capped_shifts_kernel(
        (row_max.to(DEVICE), lossless.to(DEVICE), cap), (row_max[:6].to(DEVICE), other.to(DEVICE), cap + 3))
    assert torch.equal(kept.cpu(), lossless.clamp(max=cap)) and torch.equal(other_kept.cpu(), other.clamp(max=cap + 3))
    assert torch.equal(shift.cpu(), shifts_of(row_max, lossless.clamp(max=cap)))
    assert torch.equal(other_shift.cpu(), shifts_of(row_max[:6], other.clamp(max=cap + 3)))
    with pytest.raises(ValueError, match="cap must be a non-negative int"):
        capped_shifts_kernel((row_max.to(DEVICE), lossless.to(DEVICE), -1))


@pytest.mark.parametrize("cap", [0, 1, 53, 61, 973])
def test_any_row_span_holds_every_capped_shift(cap):
    # The span the early encodes take before the plan's read (ozaki.planning.any_row_span)
    # sizes their table of powers: every row kept at most ``cap`` bits has its shift in it,
    # whatever its maximum (subnormal, largest finite, inf, NaN, zero) and lossless width.
    row_max = torch.tensor(_MAXIMA + [math.inf, math.nan], dtype=torch.float64).repeat(6)
    lossless = torch.tensor([0, 1, 52, 53, 61, 2098], dtype=torch.int64).repeat_interleave(len(_MAXIMA) + 2)
    (_, shift), = capped_shifts_kernel((row_max.to(DEVICE), lossless.to(DEVICE), cap))
    lowest, highest = planning.any_row_span(cap, cap)
    # Both ends are reached: rows of subnormal maxima keeping the cap, inf and NaN rows keeping none.
    assert (int(shift.min()), int(shift.max())) == (lowest, highest)


def test_exact_bits_kernel_equals_the_torch_path():
    row_max = torch.tensor(_MAXIMA + [0.0, 0.0], dtype=torch.float64)
    lowest = torch.tensor([-1074, -1074, 0, -60, -2, 1, 0, 0, 0, 900, 971, NO_SET_BIT, -3][:len(_MAXIMA)]
                          + [0] * (len(_MAXIMA) - 13) + [NO_SET_BIT, 5], dtype=torch.int64)
    want = exact_bits_of(kernels.scaling.Extents(row_max, lowest))  # the torch path, on the CPU
    want_top = torch.frexp(row_max)[1].to(torch.int64)  # the tops ozaki.accuracy computes in torch
    # Two sides of different lengths in one launch (the second with an inf and a NaN maximum,
    # whose tops are torch.frexp's 0 too): each its own bits and tops.
    other_max = torch.tensor([3.0, float("inf"), float("nan"), 0.0], dtype=torch.float64)
    other_lowest = torch.tensor([0, 0, 0, NO_SET_BIT], dtype=torch.int64)
    (got, top), (_, other_top) = kernels.scaling.exact_bits_kernel(
        kernels.scaling.Extents(row_max.to(DEVICE), lowest.to(DEVICE)),
        kernels.scaling.Extents(other_max.to(DEVICE), other_lowest.to(DEVICE)))
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), want)
    assert int(got[-1]) == 0 == int(got[-2])  # all-zero rows
    assert top.dtype == torch.int64 and torch.equal(top.cpu(), want_top)
    assert other_top.tolist() == [2, 0, 0, 0] == torch.frexp(other_max)[1].tolist()
    with pytest.raises(ValueError, match="lowest_bit"):
        kernels.scaling.exact_bits_kernel(kernels.scaling.Extents(row_max, lowest.int()))


def test_shifts_kernel_refuses_bad_calls():
    row_max = torch.ones(3, dtype=torch.float64, device=DEVICE)
    with pytest.raises(TypeError, match="1-D float64"):
        row_shifts_kernel((row_max.float(), torch.zeros(3, dtype=torch.int64, device=DEVICE)))
    with pytest.raises(ValueError, match="int64 tensor of shape"):
        row_shifts_kernel((row_max, torch.zeros(2, dtype=torch.int64, device=DEVICE)))
    with pytest.raises(ValueError, match="one or two sides"):
        row_shifts_kernel(*[(row_max, torch.zeros(3, dtype=torch.int64, device=DEVICE))] * 3)
    empty = (row_max[:0], torch.zeros(0, dtype=torch.int64, device=DEVICE))
    assert [shift.shape for shift in row_shifts_kernel(empty, empty)] == [(0,), (0,)]


def _summary_lines(seed: int, lines: int, lossy: bool) -> SummaryLines:
    """Lines as the plan reads them: maxima from zero through subnormals to inf and NaN, widths
    up to the largest, bits at them or, lossy ("fp64"), levels (the launch sets the bits) and
    code sums."""
    rng = np.random.default_rng(seed)
    row_max = torch.tensor(rng.choice(_MAXIMA + [0.0, math.inf, math.nan], lines), dtype=torch.float64)
    lossless = torch.tensor(rng.integers(0, 2099, lines), dtype=torch.int64)
    level = torch.tensor(rng.integers(0, 70, lines), dtype=torch.int64)
    sums = tuple(torch.tensor(rng.integers(0, 2**40, lines), dtype=torch.int64) for _ in range(2))
    if lossy:
        return SummaryLines(torch.full_like(lossless, -1), lossless, row_max, level, sums)
    return SummaryLines(lossless.clone(), lossless, row_max)


def _on_device(lines: SummaryLines) -> SummaryLines:
    return SummaryLines(*(x if x is None else tuple(t.to(DEVICE) for t in x) if isinstance(x, tuple) else x.to(DEVICE)
                          for x in lines))


@pytest.mark.parametrize("lines", [0, 1, 5, 1024, 1500])
@pytest.mark.parametrize("lossy", [True, False])
def test_line_summary_equals_the_torch_path(lines, lossy):
    sides = [_summary_lines(lines, lines, lossy), _summary_lines(lines + 1, lines // 3 + 2, lossy)]
    guard = 4 if lossy else None
    kept = [torch.minimum(side.level + 4, side.lossless) if lossy else side.bits for side in sides]
    reference = [value for side, bits in zip(sides, kept)
                 for value in reference_line_summary(bits, side.lossless, side.row_max, side.level, side.code_sums)]
    on_device = [_on_device(side) for side in sides]
    # The torch path, on the CPU: it too sets the bits from the levels, then summarizes.
    want = reading._summary([(reading.Line(kernels.scaling.Extents(side.row_max, torch.zeros_like(side.lossless)),
                                              side.bits, side.lossless, side.level), side.code_sums)
                              for side in sides], None, kernels=False)
    assert want.tolist() == reference
    assert all(torch.equal(side.bits, bits) for side, bits in zip(sides, kept))
    got = line_summary_kernel(*on_device, guard=guard)
    assert torch.equal(got.cpu(), want)
    assert all(torch.equal(side.bits.cpu(), bits) for side, bits in zip(on_device, kept))
    # One side alone is its half; launches add by maxima into one summary (a batch's products share it).
    assert torch.equal(line_summary_kernel(on_device[1], guard=guard).cpu(), want[SUMMARY_LENGTH:])
    twice = line_summary_kernel(*on_device, guard=guard, out=got)
    assert torch.equal(twice.cpu(), want)


def test_a_finite_width_past_the_summarys_slots_is_refused():
    # Unreachable for float64 rows (at most 1024 + 1074 bits wide), so checked on a made-up summary.
    summary = [60, kernels.scaling.MAX_WIDTH, 0x3FF0000000000000, 0, 0, 0, 0] + [0] * kernels.scaling.MAX_WIDTH
    with pytest.raises(RuntimeError, match="MAX_WIDTH is too small"):
        reading.SideStatistics.of(torch.tensor(summary))
    summary[2] = kernels.scaling.INF_PATTERN  # a non-finite operand: its widths are never used
    assert reading.SideStatistics.of(torch.tensor(summary)).nonfinite


def test_line_summary_refuses_bad_calls():
    bits = torch.zeros(3, dtype=torch.int64, device=DEVICE)
    row_max = torch.zeros(3, dtype=torch.float64, device=DEVICE)
    lines = SummaryLines(bits, bits, row_max)
    lossy = SummaryLines(bits, bits, row_max, bits, (bits, bits))
    for call, message in [
        (lambda: line_summary_kernel(SummaryLines(bits, bits[:2], row_max)), "lossless"),
        (lambda: line_summary_kernel(SummaryLines(bits, bits, row_max.float())), "row_max"),
        (lambda: line_summary_kernel(lines, out=torch.zeros(SUMMARY_LENGTH - 1, dtype=torch.int64)), "out"),
        (lambda: line_summary_kernel(lines, lines, out=torch.zeros(SUMMARY_LENGTH, dtype=torch.int64)), "out"),
        (lambda: line_summary_kernel(lines, lines, lines), "one or two sides"),
        (lambda: line_summary_kernel(lossy), "guard goes with levels"),
        (lambda: line_summary_kernel(lines, guard=4), "guard goes with levels"),
        (lambda: line_summary_kernel(lossy, lines, guard=4), "every side has levels"),
        (lambda: line_summary_kernel(SummaryLines(bits[::2], bits[::2], row_max[::2], bits[::2]), guard=4),
         "contiguous"),
    ]:
        with pytest.raises(ValueError, match=message):
            call()


# The fused pipeline -----------------------------------------------------------------------


def _operands(seed: int, m: int, k: int, n: int, wide: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a, b = _spread(rng, (m, k), 1.5), _spread(rng, (k, n), 1.5)
    a[1], b[:, 1] = 0.0, -0.0  # an all-zero row of A, an all-zero column of B
    a[2, :] = 0.0
    a[2, k - 1] = 0.375  # a row with a single entry, in the last column
    b[:, 2] *= 1e120
    a[3] = np.round(a[3] * 2**20)  # integers: their lowest set bit is 2^0 or above
    if wide:  # rows spanning more bits than any plan holds losslessly: fixed bits only
        a[4, 0], b[0, 3] = TINY, HUGE / 2**40
    return a, b


@pytest.mark.parametrize("accuracy", ["fp64", 40, 12])
def test_fused_path_on_rows_from_the_subnormals_up(fused_path, monkeypatch, accuracy):  # noqa: F811
    """Rows whose tops lie far below 0 take shifts of a thousand bits and more, beside zero
    rows (shift 0) and columns near 2^-1000: the fused path, encoding with the plan's span of
    the shifts (tests/test_explain.py holds the span itself to every shift), gives the
    reference engine's bits."""
    rng = np.random.default_rng(11)
    tiny = np.ldexp(rng.random((4, 1)) + 0.5, rng.integers(-1070, -900, size=(4, 1)))
    a = np.vstack([rng.random((3, 12)) - 0.5, np.zeros((2, 12)), tiny * (rng.random((4, 12)) - 0.5)])
    b = np.hstack([rng.random((12, 3)) - 0.5, np.zeros((12, 1)), np.ldexp(rng.random((12, 2)), -1000)])
    with monkeypatch.context() as torch_only:
        torch_only.setattr(reading, "kernels_available", lambda device: False)
        reference = ozaki.matmul(a, b, engine="reference", accuracy=accuracy)
    got = fused_path(a, b, engine="int8", accuracy=accuracy)
    assert np.array_equal(got.view(np.uint64), reference.view(np.uint64))


@pytest.mark.parametrize(("digits", "accuracy", "shape", "wide"), [
    ("int8", "exact", (7, 45, 5), False), ("int8", 40, (6, 33, 9), False), ("int8", 24, (9, 70, 6), True),
    ("int8", 1, (6, 20, 5), True), ("fp4", 30, (7, 40, 6), True),
])  # fmt: skip
def test_fused_path_keeps_the_torch_stage_one(fused_path, monkeypatch, digits, accuracy, shape, wide):  # noqa: F811
    """The kernel's extents give the torch path's p, q and plan, its shifts, and so the
    reference engine's bits."""
    if not ozaki.catalog.plans_for(digits):
        pytest.skip(f"the catalog has no {digits} plan")
    m, k, n = shape
    a, b = _operands(math.prod(shape), m, k, n, wide)
    with monkeypatch.context() as torch_only:  # the reference engine entirely in torch
        torch_only.setattr(reading, "kernels_available", lambda device: False)
        reference = ozaki.matmul(a, b, engine="reference", accuracy=accuracy)
    asked, fused = [], pipeline._fused_by_row_blocks
    choose = planning.moduli_for
    monkeypatch.setattr(planning, "moduli_for", lambda *args: asked.append(args[2]) or choose(*args))

    def recorded(a_, bt, shift_a, shift_b, plan, span, slack, early=None, **options):
        asked.append((shift_a, shift_b, span))
        return fused(a_, bt, shift_a, shift_b, plan, span, slack, early, **options)

    monkeypatch.setattr(pipeline, "_fused_by_row_blocks", recorded)
    read = []
    monkeypatch.setattr(kernels.scaling, "row_extents_kernel", lambda *xs: read.extend(xs) or row_extents_kernel(*xs))
    got = fused_path(a, b, engine=digits, accuracy=accuracy)
    # One kernel pass over A, one over B's columns, read in place (Bᵀ is a view: unit row stride).
    assert [tuple(x.shape) for x in read] == [(m, k), (n, k)] and read[1].stride(0) == 1

    ta, tbt = torch.from_numpy(a), torch.from_numpy(b).T
    bits_a, bits_b = reading.row_bits(ta, accuracy), reading.row_bits(tbt, accuracy)
    assert asked[0] == crt_capacity(k, int(bits_a.max()), int(bits_b.max()))
    shift_a, shift_b = (shift.cpu() for shift in asked[1][:2])
    assert torch.equal(shift_a, row_shifts(ta, bits_a)) and torch.equal(shift_b, row_shifts(tbt, bits_b))
    # The plan's span, read with its maxima, holds every shift.
    lowest, highest = asked[1][2]
    assert lowest <= min(shift_a.min(), shift_b.min()) and max(shift_a.max(), shift_b.max()) <= highest
    assert np.array_equal(got.view(np.uint64), reference.view(np.uint64))
