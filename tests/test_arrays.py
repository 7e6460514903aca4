"""Arrays of other libraries (``ozaki.arrays``): JAX and array_api_strict on the CPU, CuPy on a GPU (the
device set), each product of the operands' library and on their device with the bits of the path its values
take there (the numpy path on the CPU, the torch path on a GPU); the rule for mixed operands; JAX's
transformations; and the errors for what cannot be read in place."""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np
import pytest
import torch

import ozaki
from ozaki import arrays

array_api_compat = pytest.importorskip("array_api_compat")  # ozaki's own dependency, where it meets these arrays


@pytest.fixture(scope="module")
def jax():
    """JAX with its 64-bit types on (ozaki's products are float64), restored after this module."""
    jax = pytest.importorskip("jax")
    enabled = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    yield jax
    jax.config.update("jax_enable_x64", enabled)


@pytest.fixture(scope="module")
def xs():
    return pytest.importorskip("array_api_strict")


@pytest.fixture(scope="module")
def cupy():
    cupy = pytest.importorskip("cupy")
    if not torch.cuda.is_available() or not cupy.cuda.is_available():
        pytest.skip("CuPy's arrays need a CUDA GPU")
    return cupy


class Library(NamedTuple):
    """One library's arrays as the tests make and read them."""

    array: Callable  # a numpy array's values as the library's array, on the device under test
    numpy: Callable  # the library's array's values as a numpy array
    reference: Callable  # ozaki.matmul of numpy operands through the path whose bits the library's product has


def _torch_cuda_path(a, b, **options):
    return ozaki.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), **options).cpu().numpy()


def _make_library(name: str, request) -> Library:
    module = request.getfixturevalue(name)
    if name == "jax":
        cpu = module.devices("cpu")[0]  # JAX's default device may be a GPU
        return Library(functools.partial(module.device_put, device=cpu), np.asarray, ozaki.matmul)
    if name == "xs":
        # A copy: numpy before 2 makes read-only arrays of DLPack imports, and exports none of them.
        return Library(module.asarray, lambda x: np.from_dlpack(module.asarray(x, copy=True)), ozaki.matmul)
    return Library(module.asarray, module.asnumpy, _torch_cuda_path)


@pytest.fixture(params=["jax", "xs", pytest.param("cupy", marks=pytest.mark.gpu)])
def library(request) -> Library:
    return _make_library(request.param, request)


def _spread(rng, *shape) -> np.ndarray:
    # Exponents over 60 binades: the accuracies keep different bits of such rows.
    return rng.standard_normal(shape) * np.exp2(rng.integers(-30, 30, shape))


def _complex(rng, *shape) -> np.ndarray:
    return _spread(rng, *shape) + 1j * _spread(rng, *shape)


def _nonfinite(rng):
    a, b = _spread(rng, 3, 5), _spread(rng, 5, 4)
    a[0, 1], a[2, 3], b[4, 0] = np.inf, np.nan, -np.inf
    return a, b


_CASES = {
    "matrix": lambda rng: (_spread(rng, 3, 5), _spread(rng, 5, 4)),
    "vector @ matrix": lambda rng: (_spread(rng, 5), _spread(rng, 5, 4)),
    "matrix @ vector": lambda rng: (_spread(rng, 3, 5), _spread(rng, 5)),
    "vector @ vector": lambda rng: (_spread(rng, 5), _spread(rng, 5)),
    "broadcast batches": lambda rng: (_spread(rng, 2, 1, 3, 5), _spread(rng, 3, 5, 4)),
    "complex": lambda rng: (_complex(rng, 2, 3, 5), _complex(rng, 5, 4)),
    "real @ complex": lambda rng: (_spread(rng, 3, 5), _complex(rng, 5, 4)),
    "float32": lambda rng: (_spread(rng, 3, 5).astype(np.float32), _spread(rng, 5, 4).astype(np.float32)),
    "int64": lambda rng: (rng.integers(-2**40, 2**40, (3, 5)), rng.integers(-2**12, 2**12, (5, 4))),
    "inf and nan": _nonfinite,
}


def _operands(case: str):
    return _CASES[case](np.random.default_rng(list(_CASES).index(case)))


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """The same dtype, shape and bit patterns (−0.0 against +0.0 and NaN payloads count)."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes()


def _assert_of(library: Library, got, want: np.ndarray) -> None:
    """``got`` is the library's array, on the device of its operands, with ``want``'s bits."""
    like = library.array(np.zeros(1))
    assert type(got) is type(like)
    assert array_api_compat.device(got) == array_api_compat.device(like)
    assert_same_bits(library.numpy(got), want)


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 12])
@pytest.mark.parametrize("case", _CASES)
def test_a_product_is_of_the_operands_library_with_the_bits_of_their_values(library, case, accuracy):
    a, b = _operands(case)
    got = ozaki.matmul(library.array(a), library.array(b), accuracy=accuracy)
    _assert_of(library, got, library.reference(a, b, accuracy=accuracy))


def test_explain_gives_the_plan_of_the_values(library):
    a, b = _operands("broadcast batches")
    assert ozaki.explain(library.array(a), library.array(b)) == ozaki.explain(a, b)


def test_cpu_arrays_are_read_in_place(jax, xs):
    a = jax.device_put(np.ones((3, 2)), jax.devices("cpu")[0])
    assert arrays.as_operands(a, a)[0].ctypes.data == a.unsafe_buffer_pointer()
    b = xs.asarray(np.ones((3, 2)))
    assert np.shares_memory(arrays.as_operands(b, b)[1], np.from_dlpack(b))


def test_the_result_lies_on_the_operands_device(request, xs):
    # array_api_strict's devices share the CPU's DLPack device: the product returns to the operands' own.
    device = xs.Device("device1")
    a, b = _operands("matrix")
    got = ozaki.matmul(xs.asarray(a, device=device), xs.asarray(b, device=device))
    assert got.device == device
    assert_same_bits(_make_library("xs", request).numpy(got), ozaki.matmul(a, b))


_MAKERS = {
    "numpy": lambda request: np.asarray,
    "list": lambda request: np.ndarray.tolist,
    "torch": lambda request: torch.from_numpy,
    "jax": lambda request: _make_library("jax", request).array,
    "xs": lambda request: _make_library("xs", request).array,
}
_RESULTS = {  # the type of a result, and its values as a numpy array
    "numpy": lambda request: (np.ndarray, np.asarray),
    "torch": lambda request: (torch.Tensor, np.asarray),
    "jax": lambda request: (request.getfixturevalue("jax").Array, np.asarray),
    "xs": lambda request: (type(request.getfixturevalue("xs").asarray(0.0)), _make_library("xs", request).numpy),
}


@pytest.mark.parametrize("kind_a, kind_b, result", [
    # A torch tensor makes a torch tensor; else the first operand of another library names it; numpy arrays
    # and array_likes join that library; numpy alone stays numpy.
    ("jax", "torch", "torch"),
    ("torch", "xs", "torch"),
    ("jax", "xs", "jax"),
    ("xs", "jax", "xs"),
    ("jax", "numpy", "jax"),
    ("numpy", "jax", "jax"),
    ("list", "xs", "xs"),
    ("numpy", "list", "numpy"),
])
def test_mixed_operands_follow_the_rule(request, kind_a, kind_b, result):
    a, b = _operands("broadcast batches")
    got = ozaki.matmul(_MAKERS[kind_a](request)(a), _MAKERS[kind_b](request)(b))
    kind, values = _RESULTS[result](request)
    assert isinstance(got, kind)
    assert_same_bits(values(got), ozaki.matmul(a, b))


# JAX's transformations: the product as a host callback, batched under vmap, differentiable once.

def _cpu(jax, *values):
    return [jax.device_put(v, jax.devices("cpu")[0]) for v in values]


@pytest.mark.parametrize("accuracy", ["fp64", "exact"])
@pytest.mark.parametrize("case", _CASES)
def test_jit_gives_the_bits_of_concrete_arrays(jax, case, accuracy):
    a, b = _operands(case)
    got = jax.jit(functools.partial(ozaki.matmul, accuracy=accuracy))(*_cpu(jax, a, b))
    assert isinstance(got, jax.Array)
    assert_same_bits(np.asarray(got), ozaki.matmul(a, b, accuracy=accuracy))


_VMAPS = {  # in_axes, a, b (the vmapped axis of size 3 included)
    "a": ((0, None), (3, 2, 5), (5, 4)),
    "b": ((None, 0), (2, 5), (3, 5, 4)),
    "both": ((0, 0), (3, 2, 5), (3, 5, 4)),
    "rows of a as vectors": ((0, None), (3, 5), (5, 4)),
    "columns of b as vectors": ((None, 1), (2, 5), (5, 3)),
    "a batch against each b": ((None, 0), (2, 2, 5), (3, 5, 4)),
    "each a against a batch": ((0, None), (3, 2, 5), (2, 5, 4)),
}


@pytest.mark.parametrize("complex_values", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("case", _VMAPS)
def test_vmap_gives_each_products_bits(jax, case, complex_values):
    in_axes, shape_a, shape_b = _VMAPS[case]
    rng = np.random.default_rng(7)
    make = _complex if complex_values else _spread
    a, b = make(rng, *shape_a), make(rng, *shape_b)
    got = jax.vmap(ozaki.matmul, in_axes=in_axes)(*_cpu(jax, a, b))

    def example(x, axis, i):
        return x if axis is None else np.take(x, i, axis=axis)

    want = np.stack([ozaki.matmul(example(a, in_axes[0], i), example(b, in_axes[1], i)) for i in range(3)])
    assert_same_bits(np.asarray(got), want)


@pytest.mark.parametrize("case", ["matrix", "complex", "real @ complex"])
def test_cotangents_are_the_transposed_products(jax, case):
    # JAX's convention: the cotangents of C = A·B at G are G·Bᵀ and Aᵀ·G (the real part for a real operand).
    a, b = _operands(case)
    g = _complex(np.random.default_rng(3), 3, 4) if np.iscomplexobj(b) else _spread(np.random.default_rng(3), 3, 4)
    a2 = a[0] if a.ndim == 3 else a
    _, vjp = jax.vjp(functools.partial(ozaki.matmul, accuracy="exact"), *_cpu(jax, a2, b))
    grad_a, grad_b = vjp(*_cpu(jax, g))
    want_a = ozaki.matmul(g, b.T, accuracy="exact")
    assert_same_bits(np.asarray(grad_a), want_a if np.iscomplexobj(a2) else want_a.real)
    assert_same_bits(np.asarray(grad_b), ozaki.matmul(a2.T, g, accuracy="exact"))


@pytest.mark.parametrize("case", ["vector @ matrix", "matrix @ vector", "broadcast batches"])
def test_cotangents_are_the_torch_operators_gradients(jax, case):
    # Summed batch axes are folded into one emulated product, as the torch operator's backward does.
    a, b = _operands(case)
    out = ozaki.matmul(a, b)
    g = _spread(np.random.default_rng(4), *out.shape)
    _, vjp = jax.vjp(ozaki.matmul, *_cpu(jax, a, b))
    got = vjp(*_cpu(jax, g))
    leaves = [torch.tensor(x, requires_grad=True) for x in (a, b)]
    want = torch.autograd.grad(ozaki.matmul(*leaves), leaves, torch.from_numpy(g))
    for cotangent, gradient in zip(got, want):
        assert_same_bits(np.asarray(cotangent), gradient.numpy())


def test_grad_under_jit_and_per_example_under_vmap(jax):
    a, b = _operands("broadcast batches")
    a, b = a[:, 0], b[0]  # (2, 3, 5) and (5, 4)

    def loss(x, y):
        return (ozaki.matmul(x, y) ** 2).sum()

    grad = jax.grad(loss, argnums=(0, 1))
    each = [grad(*_cpu(jax, a[i], b)) for i in range(2)]
    for got, want in zip(jax.jit(grad)(*_cpu(jax, a[0], b)), each[0]):
        assert_same_bits(np.asarray(got), np.asarray(want))
    for k, got in enumerate(jax.vmap(grad, in_axes=(0, None))(*_cpu(jax, a, b))):
        assert_same_bits(np.asarray(got), np.stack([np.asarray(e[k]) for e in each]))


def test_a_float32_operand_gets_a_float32_cotangent_and_integers_none(jax):
    a, b = _cpu(jax, np.ones((3, 5), np.float32), np.arange(20).reshape(5, 4))
    got = jax.grad(lambda x: ozaki.matmul(x, b).sum())(a)
    assert got.dtype == np.float32
    assert_same_bits(np.asarray(got), np.tile(np.arange(20.0).reshape(5, 4).sum(1), (3, 1)).astype(np.float32))


class _Exporter:
    """A DLPack exporter over a numpy array, of no array API namespace, whose export or device a test changes."""

    def __init__(self, array, *, refusal=None, dlpack_device=(1, 0)):
        self.array, self.refusal, self.dlpack_device = array, refusal, dlpack_device
        self.strides = array.strides

    def __dlpack__(self, **kwargs):
        if self.refusal is not None:
            raise self.refusal
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.dlpack_device


class _NoDevice:
    def __dlpack__(self, **kwargs):
        return np.ones(2).__dlpack__(**kwargs)


def _traced(jax, call):
    """``call(x)`` with x a traced JAX array (under jit)."""
    return jax.jit(call)(_cpu(jax, np.ones((3, 3)))[0])


_ERRORS = {
    "a str": (lambda jax, xs: ozaki.matmul("abc", np.ones((3, 2))), TypeError, r"a \(str.*holds no numbers.*DLPack"),
    "an object": (lambda jax, xs: ozaki.matmul(np.ones(2), object()), TypeError, r"b \(object.*holds no numbers"),
    "lists of strings": (lambda jax, xs: ozaki.matmul([["x", "y"]], np.ones(2)), TypeError, "holds no numbers"),
    "a refused export": (
        lambda jax, xs: ozaki.matmul(_Exporter(np.ones((2, 2)), refusal=BufferError("read-only")), np.ones(2)),
        ValueError, r"a \(.*_Exporter, dtype .*\) cannot be read in place through DLPack: read-only; pass a contiguous "
                    r"float64 .* copy=True"),
    "a device ozaki cannot run on": (
        lambda jax, xs: ozaki.matmul(np.ones(2), _Exporter(np.ones((2, 2)), dlpack_device=(8, 0))),
        ValueError, "b .* lies on a Metal device, where ozaki cannot run: it runs on the CPU and on CUDA GPUs; move"),
    "negative strides on a GPU": (  # refused before torch reads them: some of its releases abort on them
        lambda jax, xs: ozaki.matmul(_Exporter(np.ones((2, 2))[::-1], dlpack_device=(2, 0)), np.ones(2)),
        ValueError, "cannot be read in place through DLPack: negative strides"),
    "no __dlpack_device__": (lambda jax, xs: ozaki.matmul(_NoDevice(), np.ones(2)), TypeError, "no __dlpack_device__"),
    "no array namespace": (lambda jax, xs: ozaki.matmul(_Exporter(np.ones((2, 2))), np.ones(2)),
                           TypeError, "names no array API namespace"),
    "two devices of one library": (
        lambda jax, xs: ozaki.matmul(xs.asarray(np.ones((2, 2))), xs.asarray(np.ones(2), device=xs.Device("device1"))),
        ValueError, "operands are on different devices"),
    "integers float64 would round": (
        lambda jax, xs: ozaki.matmul(*_cpu(jax, np.array([[2**60]]), np.ones((1, 1)))), ValueError, r"beyond 2\^53"),
    "integers float64 would round, traced": (  # found on the host: JAX's runtime error carries the message
        lambda jax, xs: jax.jit(ozaki.matmul)(*_cpu(jax, np.array([[2**60]]), np.ones((1, 1)))), RuntimeError,
        r"beyond 2\^53"),
    "shapes that do not match, traced": (
        lambda jax, xs: _traced(jax, lambda x: ozaki.matmul(x, np.ones((2, 2)))), ValueError, "do not match"),
    "a tracer against a torch tensor": (
        lambda jax, xs: _traced(jax, lambda x: ozaki.matmul(x, torch.ones(3, dtype=torch.float64))),
        TypeError, "a is a traced JAX array .* pass JAX or numpy operands"),
    "a tracer against another library's array": (
        lambda jax, xs: _traced(jax, lambda x: ozaki.matmul(xs.asarray(np.ones((3, 3))), x)),
        TypeError, "a is a array_api_strict.* under jax.jit, vmap and grad the operands must be JAX or numpy"),
    "explain of a tracer": (
        lambda jax, xs: _traced(jax, lambda x: ozaki.explain(x, x)), TypeError, "a is a traced JAX array"),
    "forward mode": (
        lambda jax, xs: jax.jacfwd(lambda x: ozaki.matmul(x, x))(*_cpu(jax, np.ones((2, 2)))), TypeError, "custom_vjp"),
    "a second derivative": (
        lambda jax, xs: jax.grad(lambda x: jax.grad(lambda y: ozaki.matmul(y, y).sum())(x).sum())(
            *_cpu(jax, np.ones((2, 2)))),
        TypeError, "differentiates JAX arrays once .* use torch tensors"),
}


@pytest.mark.parametrize("case", _ERRORS)
def test_errors_name_the_problem_and_the_fix(jax, xs, case):
    call, error, message = _ERRORS[case]
    with pytest.raises(error, match=message):
        call(jax, xs)


@pytest.mark.parametrize("traced", [False, True], ids=["concrete", "traced"])
def test_jax_without_64_bit_types_is_refused(jax, traced):
    a = np.ones((2, 2), np.float32)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(TypeError, match=r"jax_enable_x64 is off.*jax.config.update\('jax_enable_x64', True\)"):
            (jax.jit(ozaki.matmul) if traced else ozaki.matmul)(*_cpu(jax, a, a))
    finally:
        jax.config.update("jax_enable_x64", True)


# CuPy on a GPU, beyond the library table above.

@pytest.mark.gpu
def test_cupy_arrays_are_read_in_place_with_the_numpy_paths_exact_bits(cupy):
    a, b = _operands("complex")
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    assert arrays.as_operands(ca, cb)[0].data_ptr() == ca.data.ptr
    assert_same_bits(cupy.asnumpy(ozaki.matmul(ca, cb, accuracy="exact")), ozaki.matmul(a, b, accuracy="exact"))
    got = ozaki.matmul(torch.from_numpy(a).cuda(), cb, accuracy="exact")
    assert isinstance(got, torch.Tensor) and got.is_cuda
    assert_same_bits(got.cpu().numpy(), ozaki.matmul(a, b, accuracy="exact"))


@pytest.mark.gpu
@pytest.mark.parametrize("case", [
    (lambda cupy: ozaki.matmul(cupy.ones((2, 2)), np.ones(2)), ValueError, "different devices"),
    (lambda cupy: ozaki.matmul(torch.ones(2, dtype=torch.float64), cupy.ones((2, 2))), ValueError, "different devices"),
    (lambda cupy: ozaki.matmul(cupy.ones((3, 3))[::-1], cupy.ones(3)), ValueError, "negative strides"),
], ids=["numpy", "torch on the CPU", "negative strides"])
def test_cupy_errors(cupy, case):
    call, error, message = case
    with pytest.raises(error, match=message):
        call(cupy)
