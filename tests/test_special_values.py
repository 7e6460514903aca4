"""The contract at the edges: non-finite values, empty and odd shapes, dtypes, layouts, bad arguments.

NaN/inf placement is judged against numpy.matmul, whose IEEE arithmetic gives NaN for
0·inf and inf − inf and signed infinities otherwise.  Finite results are judged against the
exact reference in exact mode, so layout and promotion must not change a single bit.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from exact_reference import assert_same_bits, exact_matmul
from families import phi_entries
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ozaki

ACCURACIES = ("fp64", "exact", 30)
_INF, _NAN = np.inf, np.nan


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


_KINDS = {"numpy": np.asarray, "torch": torch.from_numpy}


def _as_numpy(result, kind: str) -> np.ndarray:
    """The result as numpy, after checking it came back as the kind that went in."""
    if kind == "torch":
        assert isinstance(result, torch.Tensor) and result.dtype == torch.float64, type(result)
        return result.numpy()
    assert isinstance(result, (np.ndarray, np.float64)), type(result)
    return np.asarray(result)


def _numpy(a, b) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.matmul(a, b)


def _expected_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy.matmul semantics written out: 1-D operands promoted and the added axis dropped,
    batch axes broadcast, each batch entry rounded by the exact reference."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.empty(batch + (a2.shape[-2], b2.shape[-1]))
    for index in np.ndindex(*batch):
        out[index] = exact_matmul(np.ascontiguousarray(a2[index]), np.ascontiguousarray(b2[index]))
    if b.ndim == 1:
        out = out[..., 0]
    if a.ndim == 1:
        out = out[..., 0, :] if b.ndim > 1 else out[..., 0]
    return out


# Non-finite inputs -------------------------------------------------------------------

_NONFINITE_CASES = {
    "zero_times_inf": ([[_INF]], [[0.0]]),
    "inf_minus_inf": ([[_INF, 1.0]], [[1.0], [-_INF]]),
    "inf_minus_inf_both_sides": ([[_INF, -_INF]], [[1.0], [1.0]]),
    "inf_plus_finite": ([[_INF, 1.0]], [[2.0], [3.0]]),
    "minus_inf": ([[-_INF, 1.0]], [[2.0], [3.0]]),
    "inf_times_negative": ([[_INF]], [[-2.0]]),
    "minus_inf_squared": ([[-_INF]], [[-_INF]]),
    "inf_inf_same_sign": ([[_INF, _INF]], [[1.0], [2.0]]),
    "nan_times_zero": ([[_NAN, 0.0]], [[0.0], [0.0]]),
    "nan_in_b": ([[1.0, 2.0]], [[_NAN], [0.0]]),
    "inf_row_zero_col": ([[_INF, 1.0], [1.0, 1.0]], [[0.0, 1.0], [5.0, 1.0]]),
}


def _random_nonfinite(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = _rng(seed)
    a, b = phi_entries(rng, (6, 7), 1.0), phi_entries(rng, (7, 5), 1.0)
    for x in (a, b):
        spots = rng.random(x.shape)
        x[spots < 0.06] = _INF
        x[(spots >= 0.06) & (spots < 0.12)] = -_INF
        x[(spots >= 0.12) & (spots < 0.15)] = _NAN
        x[(spots >= 0.15) & (spots < 0.25)] = 0.0
    return a, b


_NONFINITE = {
    **{name: tuple(np.array(m, dtype=np.float64) for m in pair) for name, pair in _NONFINITE_CASES.items()},
    **{f"random{seed}": _random_nonfinite(seed) for seed in range(4)},
}


def _check_nonfinite_like_numpy(a: np.ndarray, b: np.ndarray, accuracy) -> None:
    got, want = ozaki.matmul(a, b, accuracy=accuracy), _numpy(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions differ from numpy")
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)], err_msg="±inf differ from numpy")
    assert np.isfinite(got[np.isfinite(want)]).all(), "non-finite result where numpy's is finite"
    if accuracy == "exact":
        # Entries whose row and column hold finite values only are ordinary products.
        rows, cols = np.isfinite(a).all(axis=1), np.isfinite(b).all(axis=0)
        assert_same_bits(got[np.ix_(rows, cols)], exact_matmul(a[rows], b[:, cols]))


@pytest.mark.parametrize("accuracy", ACCURACIES)
@pytest.mark.parametrize("name", _NONFINITE)
def test_nonfinite_like_numpy(name, accuracy):
    _check_nonfinite_like_numpy(*_NONFINITE[name], accuracy)


# Finite entries stay below 1e100 so that no finite partial sum overflows: numpy's NaN/inf
# pattern is then decided by IEEE rules alone, not by its summation order.
_SPECIAL_OR_MODERATE = st.one_of(
    st.sampled_from([_INF, -_INF, _NAN, 0.0, -0.0]),
    st.floats(-1e100, 1e100),
)


@pytest.mark.parametrize("accuracy", ACCURACIES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_nonfinite_like_numpy_on_random_patterns(accuracy, data):
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    a = data.draw(hnp.arrays(np.float64, (m, k), elements=_SPECIAL_OR_MODERATE))
    b = data.draw(hnp.arrays(np.float64, (k, n), elements=_SPECIAL_OR_MODERATE))
    _check_nonfinite_like_numpy(a, b, accuracy)


@pytest.mark.parametrize("accuracy", ACCURACIES)
def test_results_beyond_range_are_signed_inf(accuracy):
    a = np.array([[1e200, 1e200], [-1e200, 3e200], [1e308, 1e308]])
    b = np.array([[1e200, -1e200], [1e200, -2e200]])
    got = ozaki.matmul(a, b, accuracy=accuracy)
    np.testing.assert_array_equal(got, np.array([[_INF, -_INF], [_INF, -_INF], [_INF, -_INF]]))


# Shapes ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("accuracy", ACCURACIES)
@pytest.mark.parametrize(
    "shape_a, shape_b, shape_out",
    [
        ((3, 0), (0, 4), (3, 4)),
        ((2, 3, 0), (0, 5), (2, 3, 5)),
        ((0,), (0,), ()),
    ],
)
def test_k_zero_gives_positive_zeros(shape_a, shape_b, shape_out, accuracy, kind):
    got = ozaki.matmul(_KINDS[kind](np.empty(shape_a)), _KINDS[kind](np.empty(shape_b)), accuracy=accuracy)
    assert_same_bits(_as_numpy(got, kind), np.zeros(shape_out))


@pytest.mark.parametrize(
    "shape_a, shape_b, shape_out",
    [
        ((0, 5), (5, 3), (0, 3)),
        ((3, 5), (5, 0), (3, 0)),
        ((0, 2, 3), (3, 4), (0, 2, 4)),
        ((2, 3), (4, 0, 3, 1), (4, 0, 2, 1)),
    ],
)
@pytest.mark.parametrize("kind", _KINDS)
def test_empty_dimensions_give_empty_results(shape_a, shape_b, shape_out, kind):
    rng = _rng(1)
    got = _as_numpy(ozaki.matmul(_KINDS[kind](rng.random(shape_a)), _KINDS[kind](rng.random(shape_b))), kind)
    assert got.shape == shape_out and got.dtype == np.float64


_SHAPES = {
    "vector_matrix": ((4,), (4, 3)),
    "matrix_vector": ((3, 4), (4,)),
    "vector_vector": ((4,), (4,)),
    "batch_vector": ((2, 3, 4), (4,)),
    "vector_batch": ((4,), (2, 4, 3)),
    "broadcast": ((2, 1, 3, 4), (5, 4, 2)),
    "broadcast_2d_left": ((3, 4), (2, 4, 5)),
    "broadcast_ones": ((1, 3, 4), (2, 1, 4, 2)),
}


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("name", _SHAPES)
def test_numpy_matmul_shape_semantics(name, kind):
    shape_a, shape_b = _SHAPES[name]
    rng = _rng(len(name))
    a, b = phi_entries(rng, shape_a, 2.0), phi_entries(rng, shape_b, 2.0)
    got = _as_numpy(ozaki.matmul(_KINDS[kind](a), _KINDS[kind](b), accuracy="exact"), kind)
    assert got.shape == np.matmul(a, b).shape
    assert_same_bits(got, _expected_exact(a, b))


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize(
    "shape_a, shape_b",
    [((3, 4), (5, 2)), ((4,), (5,)), ((2, 3, 4), (3, 4, 2)), ((3, 4), (3,))],
)
def test_mismatched_shapes_name_both(shape_a, shape_b, kind):
    with pytest.raises(ValueError) as info:
        ozaki.matmul(_KINDS[kind](np.ones(shape_a)), _KINDS[kind](np.ones(shape_b)))
    message = str(info.value)
    for shape in (shape_a, shape_b):
        pattern = r"\s*[,x×]\s*".join(str(n) for n in shape) if len(shape) > 1 else rf"\b{shape[0]}\b"
        assert re.search(pattern, message), f"{shape} not named in: {message}"


_SCALARS = {
    "numpy_scalar_left": (lambda: np.float64(2.0), lambda: np.ones((1, 1))),
    "numpy_0d_right": (lambda: np.ones((1, 1)), lambda: np.array(3.0)),
    "torch_0d_left": (lambda: torch.tensor(2.0, dtype=torch.float64), lambda: torch.ones((1, 1), dtype=torch.float64)),
}


@pytest.mark.parametrize("name", _SCALARS)
def test_scalar_operands_are_rejected_like_numpy(name):
    a, b = (make() for make in _SCALARS[name])
    with pytest.raises(ValueError):
        ozaki.matmul(a, b)


# Layouts and dtypes --------------------------------------------------------------------


# Each layout gives an (r, c) view whose memory order is not C order.
_LAYOUTS = {
    "transposed": lambda rng, r, c: phi_entries(rng, (c, r), 2.0).T,
    "strided": lambda rng, r, c: phi_entries(rng, (2 * r, 3 * c), 2.0)[::2, ::3],
    "fortran": lambda rng, r, c: np.asfortranarray(phi_entries(rng, (r, c), 2.0)),
    "negative_strides": lambda rng, r, c: phi_entries(rng, (r, 2 * c), 2.0)[::-1, ::-2],
    "zero_stride": lambda rng, r, c: np.broadcast_to(phi_entries(rng, (1, c), 2.0), (r, c)),
}


@pytest.mark.parametrize("layout", _LAYOUTS)
def test_layouts_numpy(layout):
    rng = _rng(7)
    a, b = _LAYOUTS[layout](rng, 5, 7), _LAYOUTS[layout](rng, 7, 4)
    want = exact_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact"), want)


_TORCH_LAYOUTS = {
    "transposed": lambda t: t.T,
    "strided": lambda t: t[::2, 1::2],
    "column_major": lambda t: t.T.contiguous().T,
    "expanded": lambda t: t[:1].expand(t.shape[0], -1),
}


@pytest.mark.parametrize("layout", _TORCH_LAYOUTS)
def test_layouts_torch(layout):
    rng = _rng(8)
    a = _TORCH_LAYOUTS[layout](torch.from_numpy(phi_entries(rng, (8, 8), 2.0)))
    b = _TORCH_LAYOUTS[layout](torch.from_numpy(phi_entries(rng, (8, 8), 2.0)))
    got = ozaki.matmul(a, b, accuracy="exact")
    assert isinstance(got, torch.Tensor)
    assert_same_bits(got.numpy(), exact_matmul(a.contiguous().numpy(), b.contiguous().numpy()))


_NUMPY_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.float16, np.float32]


@pytest.mark.parametrize("dtype", _NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_dtypes_promote_to_float64(dtype):
    rng = _rng(3)
    a = (rng.random((4, 6)) * 100).astype(dtype)
    b = (rng.random((6, 3)) * 100 - (0 if np.dtype(dtype).kind == "u" else 50)).astype(dtype)
    got = ozaki.matmul(a, b, accuracy="exact")
    assert_same_bits(got, exact_matmul(a.astype(np.float64), b.astype(np.float64)))


def test_mixed_numpy_dtypes_promote_to_float64():
    rng = _rng(4)
    a, b = rng.integers(-9, 9, (3, 5)), rng.random((5, 2)).astype(np.float32)
    assert_same_bits(ozaki.matmul(a, b, accuracy="exact"), exact_matmul(a.astype(np.float64), b.astype(np.float64)))


_TORCH_DTYPES = [torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", _TORCH_DTYPES, ids=str)
def test_torch_in_torch_out_float64_same_device(dtype):
    rng = _rng(5)
    a = torch.from_numpy(rng.random((4, 6)) * 100 - 50).to(dtype)
    b = torch.from_numpy(rng.random((6, 3)) * 100 - 50).to(dtype)
    got = ozaki.matmul(a, b, accuracy="exact")
    assert isinstance(got, torch.Tensor)
    assert got.dtype == torch.float64 and got.device == a.device
    assert_same_bits(got.numpy(), exact_matmul(a.double().numpy(), b.double().numpy()))


# Arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize("accuracy", ["float64", "double", "", "fast"])
def test_bad_accuracy_names_the_allowed_values(accuracy):
    with pytest.raises(ValueError) as info:
        ozaki.matmul(np.ones((2, 2)), np.ones((2, 2)), accuracy=accuracy)
    message = str(info.value)
    assert "fp64" in message and "exact" in message, message


@pytest.mark.parametrize("accuracy", [0, -3])
def test_bad_bit_count_names_the_allowed_range(accuracy):
    with pytest.raises(ValueError) as info:
        ozaki.matmul(np.ones((2, 2)), np.ones((2, 2)), accuracy=accuracy)
    message = str(info.value)
    assert "bits" in message and re.search(r"\b1\b", message), message


@pytest.mark.parametrize("engine", ["cuda", "cublas", "", "fp16"])
def test_bad_engine_names_the_allowed_values(engine):
    with pytest.raises(ValueError) as info:
        ozaki.matmul(np.ones((2, 2)), np.ones((2, 2)), engine=engine)
    message = str(info.value)
    for allowed in ("auto", "reference", "int8", "fp8", "fp4"):
        assert allowed in message, f"{allowed!r} not named in: {message}"
