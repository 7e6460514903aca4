"""The "fp64" rule's Triton passes (kernels.accuracy) give their plain references and the torch
path of ``ozaki.accuracy`` bit for bit: the upper reading (U, upper codes, their row sums), the
lower codes and the least quotients, on every kind of row, through any strides and any config;
and the whole "fp64" plan, so every result bit, is the torch path's with the kernels on."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels_scaling import CONFIGS, SHAPES, _layout
from test_kernels_scaling import _family as _extents_family
from test_pipeline import fused_path  # noqa: F401  (a fixture)

import kernels.accuracy
import kernels.scaling
import ozaki
import ozaki.catalog
from kernels.accuracy import (UNBOUNDED, least_quotients_kernel, levels_kernel, lower_codes_kernel,
                              reference_least_quotients, reference_levels, reference_lower_codes,
                              reference_upper_reading, reference_window_tops, row_reading_kernel,
                              upper_reading_kernel, window_tops_kernel)
from kernels.scaling import reference_row_extents
from ozaki import accuracy, pipeline, reading
from ozaki.agreement import Agreement
from ozaki.scaling import row_extents, shifts_of

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.gpu


def _family(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    """The extents kernel's families, and the rule's own: phi matrices (rand − 0.5)·exp(phi·randn)
    and entries near 2^±1000, in one row and in rows of their own."""
    if kind in ("phi0.5", "phi4"):
        return (rng.random(shape) - 0.5) * np.exp(float(kind[3:]) * rng.standard_normal(shape))
    if kind == "near-1000":
        x = rng.standard_normal(shape) * 2.0 ** rng.choice([1000, -1000, 1015, -1040], shape)
        x[0] = rng.standard_normal(shape[1]) * 2.0**1000
        x[-1] = rng.standard_normal(shape[1]) * 2.0**-1000
        return x
    return _extents_family(rng, shape, kind)


def _read(x: torch.Tensor):
    """The arguments the rule passes: each row's top, W for this K, the GEMM's padded shape
    (CUDA's, the larger: padding rows and K)."""
    k = x.shape[1]
    levels = min(accuracy._SUM_LEVELS, 52 - k.bit_length())
    rows, pad_k, _ = accuracy._gemm_shape(x.shape[0], k, 1, torch.device("cuda"))
    return accuracy._tops(row_extents(x.contiguous())), levels, (rows, pad_k)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int64)


def _same_reading(got, want) -> bool:
    return all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))


FAMILIES = ["phi0.5", "phi4", "near-1000", "spread", "subnormal", "zeros", "single", "extremes", "integers"]
# Every family in every shape (ragged against the tiles, K = 1, one row) and layout: A, Bᵀ, neither.
OPERANDS = [(kind, shape, layout) for kind in FAMILIES for shape in SHAPES for layout in ("rows", "columns", "strided")]


@pytest.mark.parametrize("case", OPERANDS, ids=str)
def test_operand_passes_equal_the_torch_path(case):
    kind, shape, layout = case
    x = _layout(_family(np.random.default_rng(zlib.crc32(str(case).encode())), shape, kind), layout)
    top, levels, padded = _read(x)
    got = upper_reading_kernel(x, top, levels)
    assert _same_reading(got, reference_upper_reading(x, top, levels))
    assert _same_reading(got, accuracy._upper_reading(x, top, levels, kernels=False))
    # The rule's own window tops, from the sums just read.
    window = accuracy._window_tops(top, got.sums, shape[1], levels)
    codes = lower_codes_kernel(x, window, padded)
    assert torch.equal(codes, reference_lower_codes(x, window, padded))
    assert torch.equal(codes, accuracy._lower_codes(x, window, padded, kernels=False))


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_any_config_gives_the_same_codes_and_sums(config, layout):
    # Integer sums and per-entry codes: tiles, chunks of K and the order of the atomics are free.
    rng = np.random.default_rng(zlib.crc32(f"{config}-{layout}".encode()))
    x = _layout(np.concatenate([_family(rng, (2, 21), kind) for kind in FAMILIES]), layout)
    top, levels, padded = _read(x)
    got = upper_reading_kernel(x, top, levels, **CONFIGS[config])
    assert _same_reading(got, reference_upper_reading(x, top, levels))
    window = top - 9
    assert torch.equal(lower_codes_kernel(x, window, padded, **CONFIGS[config]),
                       reference_lower_codes(x, window, padded))


def test_upper_pass_splits_k_where_its_float64_sums_would_round(monkeypatch):
    # A program sums its chunk of K in float64 integers, exact up to _EXACT_CHUNK entries per
    # row (2^21 at 2^16 levels): a longer chunk, asked for or not, is split over more programs.
    # Lowered here so that rows of the test's length cross it: every launch's chunk stays
    # within it and the sums stay the reference's.
    monkeypatch.setattr(kernels.accuracy, "_EXACT_CHUNK", 64)
    launched = []
    kernel = kernels.accuracy._codes_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append(args[kernel.arg_names.index("k_chunk")])
                return kernel[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(kernels.accuracy, "_codes_kernel", Spy())
    x = _layout(_family(np.random.default_rng(12), (5, 1000), "phi4"), "rows")
    top, levels, _ = _read(x)
    for chunks in (None, 1):
        assert _same_reading(upper_reading_kernel(x, top, levels, block=(16, 8), chunks=chunks),
                             reference_upper_reading(x, top, levels))
    assert kernels.scaling.chunked_grid(5, 1000, (16, 8), 1)[1] > 64  # one chunk alone would pass it
    assert len(launched) == 2 and max(launched) <= 64


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 4), k=st.integers(1, 24), data=st.data(), columns=st.booleans(),
       shift=st.integers(-60, 0))
def test_operand_passes_equal_the_torch_path_on_any_finite_rows(rows, k, data, columns, shift):
    values = data.draw(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=rows * k,
                                max_size=rows * k))
    x = _layout(np.array(values).reshape(rows, k), "columns" if columns else "rows")
    top, levels, padded = _read(x)
    got = upper_reading_kernel(x, top, levels)
    assert _same_reading(got, accuracy._upper_reading(x, top, levels, kernels=False))
    # Any window at or below the top, down to where every code is 127 or 0.
    window = top + shift
    assert torch.equal(lower_codes_kernel(x, window, padded), accuracy._lower_codes(x, window, padded, kernels=False))


# The row reading's launches: the default, tiles that split K and rows, one entry a tile.
ROW_READINGS = {"default": {}, "small-tiles": {"block": (16, 2), "num_warps": 1},
                "one-entry-tiles": {"block": (1, 1), "num_warps": 1}, "wide": {"block": (512, 4), "num_warps": 4}}


def _torch_row_reading(x: torch.Tensor):
    """What the torch path reads of A's rows, in the order of kernels.accuracy.RowReading."""
    top, levels, padded = _read(x)
    upper = accuracy._upper_reading(x, top, levels, kernels=False)
    window = accuracy._window_tops(top, upper.sums, x.shape[1], levels)
    return (reference_row_extents(x), upper, window, window - top,
            accuracy._lower_codes(x, window, padded, kernels=False)), levels, padded


def _same_row_reading(got, want) -> bool:
    (extents, upper, window, offset, codes), (want_extents, want_upper, want_window, want_offset, want_codes) = got, want
    return (torch.equal(_bits(extents.row_max), _bits(want_extents.row_max))
            and torch.equal(extents.lowest_bit, want_extents.lowest_bit) and _same_reading(upper, want_upper)
            and all(torch.equal(g, w) for g, w in ((window, want_window), (offset, want_offset), (codes, want_codes))))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kind", FAMILIES)
def test_row_reading_is_the_separate_passes(kind, shape):
    # A's extents, upper reading, window tops and lower codes from one launch: the torch path's.
    x = _layout(_family(np.random.default_rng(zlib.crc32(f"{kind}-{shape}".encode())), shape, kind), "rows")
    want, levels, padded = _torch_row_reading(x)
    assert _same_row_reading(row_reading_kernel(x, levels, padded), want)


@pytest.mark.parametrize("config", sorted(ROW_READINGS))
def test_row_reading_is_the_same_in_any_launch(config):
    rng = np.random.default_rng(zlib.crc32(config.encode()))
    x = _layout(np.concatenate([_family(rng, (2, 37), kind) for kind in FAMILIES]), "rows")[:, 1:]  # rows apart
    want, levels, padded = _torch_row_reading(x)
    assert _same_row_reading(row_reading_kernel(x, levels, padded, **ROW_READINGS[config]), want)


def test_row_reading_refuses_lanes_past_exact_float64_sums(monkeypatch):
    # Each lane sums K / BLOCK_K codes in float64 integers, exact up to _EXACT_CHUNK of them.
    monkeypatch.setattr(kernels.accuracy, "_EXACT_CHUNK", 4)
    x = _layout(_family(np.random.default_rng(3), (2, 40), "phi0.5"), "rows")
    _, levels, padded = _read(x)
    with pytest.raises(ValueError, match="exact integers"):
        row_reading_kernel(x, levels, padded, block=(8, 1))
    want, _, _ = _torch_row_reading(x)
    assert _same_row_reading(row_reading_kernel(x, levels, padded, block=(16, 1)), want)


def _quotient_inputs(seed: int, m: int, n: int, dtype: torch.dtype):
    """G, U and offsets as the rule makes them, with lines of U = 0 and zero entries of G."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randint(0, 127**2 * 40, (m, n), generator=gen, dtype=torch.int64)
    g[torch.rand((m, n), generator=gen) < 0.3] = 0
    sums = [torch.randint(0, 2**45, (size,), generator=gen) for size in (m, n)]
    for line in sums:
        line[torch.rand(line.shape, generator=gen) < 0.25] = 0
    offsets = [-torch.randint(0, 60, (size,), generator=gen) for size in (m, n)]
    return g.to(dtype).to(DEVICE), *(t.to(DEVICE) for t in (sums[0], offsets[0], sums[1], offsets[1]))


def _same_least(got, want) -> bool:
    return all(g.dtype == torch.float64 and torch.equal(_bits(g), _bits(w)) for g, w in zip(got, want))


def _torch_least(g, sums_a, offset_a, sums_b, offset_b):
    return (accuracy._least_quotients(g, sums_b, offset_b, dim=1),
            accuracy._least_quotients(g, sums_a, offset_a, dim=0))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize(("m", "n", "block"), [(37, 70, None), (1, 1, None), (1, 9, None), (9, 1, None),
                                               (13, 11, (4, 2)), (6, 5, (1, 1))])
def test_least_quotients_equal_the_torch_path(dtype, m, n, block):
    inputs = _quotient_inputs(m * n, m, n, dtype)
    got = least_quotients_kernel(*inputs, **({} if block is None else {"block": block}))
    assert _same_least(got, reference_least_quotients(*inputs))
    assert _same_least(got, _torch_least(*inputs))


def test_least_quotients_read_g_through_its_strides():
    # The GEMM's padded result, cut to the product's lines: a view, not a copy.
    g, *lines = _quotient_inputs(5, 21, 16, torch.int32)
    padded = torch.zeros((24, 24), dtype=torch.int32, device=DEVICE)
    padded[:21, :16] = g
    for view in (padded[:21, :16], g.T.contiguous().T):
        assert _same_least(least_quotients_kernel(view, *lines), _torch_least(g, *lines))


@settings(max_examples=30, deadline=None)
@given(m=st.integers(0, 6), n=st.integers(0, 6), data=st.data())
def test_least_quotients_equal_the_torch_path_on_any_lines(m, n, data):
    g = torch.tensor(data.draw(st.lists(st.integers(0, 2**31 - 1), min_size=m * n, max_size=m * n)),
                     dtype=torch.int32).reshape(m, n)
    sums_a, sums_b = (torch.tensor(data.draw(st.lists(st.integers(0, 2**52), min_size=size, max_size=size)),
                                   dtype=torch.int64) for size in (m, n))
    offset_a, offset_b = (torch.tensor(data.draw(st.lists(st.integers(-80, 0), min_size=size, max_size=size)),
                                       dtype=torch.int64) for size in (m, n))
    inputs = [t.to(DEVICE) for t in (g, sums_a, offset_a, sums_b, offset_b)]
    assert _same_least(least_quotients_kernel(*inputs), _torch_least(*inputs))


# The per-line steps: lines of every kind the rule meets (zero rows, U = 0 and U near 2^53,
# tops from the subnormals to 2^1024; least quotients 0, inf, subnormal, near powers of two).
_TOPS = [0, 1, -1, 5, -1073, 1024, -1040, 53, 700]
_SUMS = [0, 1, 2, 3, 2**30, 2**52 - 1, 2**52, 12345, 7]
_LEAST = [0.0, float("inf"), 5e-324, 2.0**-1022, 1.0, 2.0 - 2.0**-52, 2.0**52, 0.75, 1e300]


@pytest.mark.parametrize(("k", "levels"), [(1, 30), (16384, 30), (2**22, 29), (3, 0)])
def test_window_tops_equal_the_torch_path(k, levels):
    top, sums = (torch.tensor(line, dtype=torch.int64, device=DEVICE) for line in (_TOPS, _SUMS))
    (got,) = window_tops_kernel((top, sums), k=k, levels=levels)
    want = accuracy._window_tops(top, sums, k, levels)
    assert torch.equal(got[0], want) and torch.equal(got[1], want - top)
    assert all(torch.equal(g, r) for g, r in zip(got, reference_window_tops(top, sums, k, levels)))


@pytest.mark.parametrize("base", [0, 67, 120, -40])
def test_levels_equal_the_torch_path(base):
    least = torch.tensor(_LEAST, dtype=torch.float64, device=DEVICE)
    top = torch.tensor(_TOPS, dtype=torch.int64, device=DEVICE)
    window = top - torch.tensor([0, 3, 1, 0, 2, 7, 0, 1, 4], dtype=torch.int64, device=DEVICE)
    (got,) = levels_kernel((least, top, window), base=base)
    assert torch.equal(got, accuracy._levels(base + top - window, least))
    assert torch.equal(got, reference_levels(least, top, window, base))
    assert int(got[0]) == UNBOUNDED and int(got[1]) == 0


@settings(max_examples=30, deadline=None)
@given(lines=st.integers(0, 300), data=st.data())
def test_line_steps_equal_the_torch_path_on_any_lines(lines, data):
    def draw(elements):
        return data.draw(st.lists(elements, min_size=lines, max_size=lines))

    top = torch.tensor(draw(st.integers(-1074, 1024)), dtype=torch.int64, device=DEVICE)
    sums = torch.tensor(draw(st.integers(0, 2**53 - 1)), dtype=torch.int64, device=DEVICE)
    least = torch.tensor(draw(st.floats(0.0, None, allow_nan=False)), dtype=torch.float64, device=DEVICE)
    k, levels = data.draw(st.integers(1, 2**22)), data.draw(st.integers(0, 30))
    (window, offset), = window_tops_kernel((top, sums), k=k, levels=levels)
    assert torch.equal(window, accuracy._window_tops(top, sums, k, levels)) and torch.equal(offset, window - top)
    (level,) = levels_kernel((least, top, window), base=70)
    assert torch.equal(level, accuracy._levels(70 + top - window, least))
    # Two sides in one launch: each side's lines as if alone, whatever the other's length.
    other = slice(lines // 3, None)
    both = window_tops_kernel((top, sums), (top[other], sums[other]), k=k, levels=levels)
    assert torch.equal(both[0][0], window) and torch.equal(both[1][0], window[other])
    assert torch.equal(both[0][1], offset) and torch.equal(both[1][1], offset[other])
    both = levels_kernel((least[other], top[other], window[other]), (least, top, window), base=70)
    assert torch.equal(both[0], level[other]) and torch.equal(both[1], level)
    # Quotients at any stride: each line's own.
    strided = torch.stack([least, least], dim=1)
    assert torch.equal(levels_kernel((strided[:, 0], top, window), base=70)[0], level)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, top: window_tops_kernel((top, top.int()), k=4, levels=30), ValueError, "sums"),
        (lambda x, top: window_tops_kernel((top, top[:1]), k=4, levels=30), ValueError, "sums"),
        (lambda x, top: window_tops_kernel((top, top), (top, top[:1]), k=4, levels=30), ValueError, "sums"),
        (lambda x, top: window_tops_kernel(*[(top, top)] * 3, k=4, levels=30), ValueError, "one or two sides"),
        (lambda x, top: window_tops_kernel((top, top), k=4, levels=-1), ValueError, "non-negative"),
        (lambda x, top: window_tops_kernel((top, top), k=2**23, levels=31), ValueError, r"K·2\^levels at most 2\^53"),
        (lambda x, top: levels_kernel((x[0].float(), top, top), base=0), ValueError, "least"),
        (lambda x, top: levels_kernel((x[0], top, x[0]), base=0), ValueError, "window_top"),
        (lambda x, top: levels_kernel((x[0], top, top), (x[0], top, x[0]), base=0), ValueError, "window_top"),
        (lambda x, top: upper_reading_kernel(x.float(), top, 30), TypeError, "float64"),
        (lambda x, top: upper_reading_kernel(x[0], top, 30), ValueError, r"\[rows, K\]"),
        (lambda x, top: upper_reading_kernel(x, top.int(), 30), ValueError, "int64"),
        (lambda x, top: upper_reading_kernel(x, top, 63), ValueError, "levels"),
        (lambda x, top: lower_codes_kernel(x, top, (1, 8)), ValueError, "must hold"),
        (lambda x, top: lower_codes_kernel(x, top, (2, 8), block=(3, 4)), ValueError, "powers of two"),
        (lambda x, top: lower_codes_kernel(x, top, (2, 8), chunks=0), ValueError, "at least 1"),
        (lambda x, top: lower_codes_kernel(x, top, (2, 2**31)), ValueError, "below 2\\*\\*31"),
        (lambda x, top: row_reading_kernel(x.float(), 30, (2, 8)), TypeError, "float64"),
        (lambda x, top: row_reading_kernel(x[0], 30, (2, 8)), ValueError, r"\[rows, K\]"),
        (lambda x, top: row_reading_kernel(x.T, 30, (2, 8)), ValueError, "K-contiguous"),
        (lambda x, top: row_reading_kernel(x, 30, (1, 8)), ValueError, "must hold"),
        (lambda x, top: row_reading_kernel(x, 60, (2, 8)), ValueError, "levels"),
        (lambda x, top: row_reading_kernel(x, 30, (2, 8), block=(3, 1)), ValueError, "powers of two"),
        (lambda x, top: row_reading_kernel(x, 30, (2, 2**31)), ValueError, "below 2\\*\\*31"),
        (lambda x, top: least_quotients_kernel(x, top, top, top, top), TypeError, "int32 or int64"),
        (lambda x, top: least_quotients_kernel(x.int(), top, top, top[:1], top), ValueError, "sums_b"),
    ],
)
def test_bad_calls_raise(call, error, message):
    x = torch.ones((2, 2), dtype=torch.float64)
    with pytest.raises(error, match=message):
        call(x, torch.ones(2, dtype=torch.int64))


# The rule's statistics with the kernels on ------------------------------------------------


class _Recorded(Agreement):
    """One device's agreement on a product whose whole K is ``k`` (a K-split rank's view),
    recording what each reduction receives."""

    def __init__(self, k: int | None = None):
        self.k, self.calls = k, []

    def whole_shape(self, m, k, n):
        return m, k if self.k is None else self.k, n

    def sum_over_k(self, partial, bound):
        self.calls.append(("sum_over_k", partial.dtype, tuple(partial.shape), bound))
        return partial

    def min_over_rows(self, values):
        self.calls.append(("min_over_rows", values.dtype, tuple(values.shape)))
        return values

    def min_over_columns(self, values):
        self.calls.append(("min_over_columns", values.dtype, tuple(values.shape)))
        return values


@pytest.mark.parametrize(("m", "k", "n", "whole_k"), [
    (9, 45, 7, None), (1, 1, 1, None), (0, 12, 5, None), (6, 12, 0, None), (4, 0, 3, 20), (5, 9, 4, 2**18),
])  # fmt: skip
def test_statistics_and_what_the_agreement_receives_are_the_torch_paths(m, k, n, whole_k):
    # Empty sides (a mesh rank may hold no line, or no K) and a whole K past one int32 chunk.
    rng = np.random.default_rng(m * k * n + 1)
    a = _layout(_family(rng, (max(m, 1), max(k, 1)), "phi4")[:m, :k], "rows")
    bt = _layout(_family(rng, (max(n, 2), max(k, 1)), "zeros")[:n, :k], "columns")
    results = []
    for kernels_on in (False, True):
        agreement = _Recorded(whole_k)
        extents_a, extents_b = reference_row_extents(a), reference_row_extents(bt)
        level_a, level_b, bound = accuracy.fp64_statistics(a, bt, extents_a, extents_b, agreement, kernels=kernels_on)
        results.append((level_a, level_b, bound, agreement.calls))
    (want_a, want_b, want_bound, want_calls), (got_a, got_b, got_bound, got_calls) = results
    assert torch.equal(got_a, want_a) and torch.equal(got_b, want_b) and got_bound == want_bound
    assert got_calls == want_calls


def _pair(seed: int, m: int, k: int, n: int, phi: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.random((m, k)) - 0.5) * np.exp(phi * rng.standard_normal((m, k)))
    b = (rng.random((k, n)) - 0.5) * np.exp(phi * rng.standard_normal((k, n)))
    a[1], b[:, 1] = 0.0, -0.0  # an all-zero row of A, an all-zero column of B
    a[2] *= 2.0**-1040  # a row of subnormals
    b[:, 2] *= 2.0**900
    a[3, :] = 0.0
    a[3, k - 1] = 0.375  # a row with a single entry, in the last column
    return a, b


def _plan_bits(call):
    return [tuple(t.cpu() for t in row[2:]) for row in call.lines]


@pytest.mark.parametrize(("phi", "shape"), [(0.5, (7, 45, 6)), (4.0, (6, 33, 9)), (4.0, (5, 1, 5))])
def test_fp64_plan_and_product_keep_the_torch_bits(fused_path, monkeypatch, phi, shape):  # noqa: F811
    if not ozaki.catalog.plans_for("int8"):
        pytest.skip("the catalog has no int8 plan")
    m, k, n = shape
    a, b = _pair(m * k * n, m, k, n, phi)
    if k == 1:
        a[3, 0] = 0.375
    with monkeypatch.context() as torch_only:
        torch_only.setattr(reading, "kernels_available", lambda device: False)
        want_call = pipeline.prepare(torch.from_numpy(a), torch.from_numpy(b), "fp64", "int8")
        want = ozaki.matmul(a, b, engine="int8")
    passes = []
    for name in ("row_reading_kernel", "upper_reading_kernel", "lower_codes_kernel", "least_quotients_kernel",
                 "window_tops_kernel", "levels_kernel"):
        original = getattr(kernels.accuracy, name)
        monkeypatch.setattr(kernels.accuracy, name,
                            lambda *args, _name=name, _original=original, **options:
                            passes.append(_name) or _original(*args, **options))
    monkeypatch.setattr(pipeline, "sides_shifts", lambda *sides: pytest.fail("the plan made the shifts"))
    got = fused_path(a, b, engine="int8")
    # A's reading in one launch, Bᵀ's two operand passes, one over the code product, one launch
    # of each per-line step: the kernel path ran.
    assert sorted(passes) == sorted(["row_reading_kernel", "upper_reading_kernel", "lower_codes_kernel",
                                     "least_quotients_kernel", "window_tops_kernel", "levels_kernel"])
    ta, tb = (torch.from_numpy(x).to(DEVICE) for x in (a, b))
    got_call = pipeline.prepare(ta, tb, "fp64", "int8")
    assert got_call.plan == want_call.plan  # the moduli, p, q, guard and error bound
    for got_rows, want_rows in zip(_plan_bits(got_call), _plan_bits(want_call)):
        assert all(torch.equal(g, w) for g, w in zip(got_rows, want_rows))
    # The kernel path's plan made the rows' shifts with their widened bits: those of the bits.
    assert not want_call.shifts and len(got_call.shifts) == got_call.plan.batch
    for (extents_a, extents_b, bits_a, bits_b), shifts in zip(got_call.lines, got_call.shifts):
        assert all(torch.equal(shift.cpu(), shifts_of(extents.row_max.cpu(), bits.cpu()))
                   for shift, extents, bits in zip(shifts, (extents_a, extents_b), (bits_a, bits_b)))
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
