"""Arrays of other libraries: which library an operand is of, the operand read in place as one the
emulation takes, and the product back as that library's array on the operand's device.

Any array that implements DLPack (``__dlpack__``, the array API standard's exchange protocol: CuPy,
JAX, ``array_api_strict``, ...) is read without a copy: on the CPU through numpy's DLPack consumer
(``numpy.from_dlpack``), so that it takes the numpy path and numpy.matmul's rules (1-D operands,
broadcast batches, promotion, the refusal of integers float64 would round) hold by construction; on a
CUDA GPU through ``torch.from_dlpack``.  numpy's consumer takes every CPU layout, negative strides
included, which torch refuses (its older releases abort the process on them).  The product, a torch
tensor, goes back through the library's own ``from_dlpack`` (its array API namespace, as
``array_api_compat.array_namespace`` finds it), onto the operand's device.

The result is of (the first rule that applies):

1. torch, where an operand is a torch tensor: the product runs as the operator ``ozaki::matmul``
   (:mod:`ozaki.operator`), with its gradients;
2. JAX, where an operand is a traced JAX array (under ``jax.jit``, ``vmap`` or ``grad``), see below;
3. the library of the first operand that is another library's array;
4. numpy.

A numpy array or an array_like meets another library's array as a Python list meets that library's own
functions: it joins the library.  Operands on two devices are refused.

Traced JAX arrays hold no values: the product is a ``jax.pure_callback`` to the numpy path on the host
(the CPU, where every engine gives the emulation's bits; concrete arrays on a GPU may take DGEMM under
``accuracy="fp64"``, ``engine="auto"``), batched under ``vmap`` as one product with the vmapped axis
leading, and differentiable in reverse mode (``grad``, ``vjp``, ``jacrev``) through ``jax.custom_vjp``,
whose cotangents are the torch operator's gradients: emulated products of the same accuracy and engine.
JAX refuses forward mode (``jvp``, ``jacfwd``) for a custom_vjp, and a second derivative is refused as the
cotangents are a host callback too.  Integers that float64 would round are found on the host, where the
error reaches the caller as JAX's runtime error.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
import torch

from . import operator
from .operands import emulated, operands

__all__ = ["as_operands", "product"]

# DLPack's device types (DLDeviceType) where ozaki runs, read through numpy's consumer and torch's.
_CPU, _CUDA = 1, 2
_DEVICE_NAMES = {3: "CUDA host (pinned)", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm", 13: "CUDA managed",
                 14: "oneAPI", 15: "WebGPU"}
# How an exporter or a consumer says that it refuses an array (its dtype, its layout, a read-only
# buffer, an argument of the protocol's newer versions).
_REFUSALS = (BufferError, RuntimeError, TypeError, ValueError, NotImplementedError)


def _of_another_library(x) -> bool:
    """Whether ``x`` is an array of a library other than numpy and torch: it implements DLPack."""
    return not isinstance(x, (np.ndarray, np.generic, torch.Tensor)) and hasattr(x, "__dlpack__")


def _jax_array(x) -> bool:
    jax = sys.modules.get("jax")  # no JAX array exists before jax is imported
    return jax is not None and isinstance(x, jax.Array)


def _traced(x) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def as_operands(a, b) -> tuple:
    """``a`` and ``b`` as the emulation takes them: another library's array as a numpy array (on the CPU)
    or a torch tensor (on a CUDA GPU) sharing its memory; numpy arrays, array_likes and tensors as they are."""
    return _read_in_place(a, "a"), _read_in_place(b, "b")


def _read_in_place(x, name: str):
    if not _of_another_library(x):
        return x
    if _traced(x):
        raise TypeError(
            f"{name} is a traced JAX array (under jax.jit, vmap or grad), which holds no values here: ozaki.matmul "
            "takes one only with a JAX or numpy array (not a torch tensor), and ozaki.explain reads values; pass "
            "JAX or numpy operands, or call it outside the transformation"
        )
    kind = _device_kind(x, name)
    try:
        if kind == _CPU:
            return np.from_dlpack(x)
        if any(stride < 0 for stride in getattr(x, "strides", None) or ()):
            raise BufferError("negative strides, which torch does not take")
        return torch.from_dlpack(x)
    except _REFUSALS as refusal:
        raise ValueError(
            f"{name} ({_type_name(x)}, dtype {getattr(x, 'dtype', '?')}) cannot be read in place through DLPack: "
            f"{refusal}; pass a contiguous float64 (or complex128) copy, xp.asarray({name}, dtype=xp.float64, "
            "copy=True) with xp its array namespace"
        ) from refusal


def _device_kind(x, name: str) -> int:
    """The DLPack device type of ``x``; an error unless ozaki runs there (the CPU, a CUDA GPU)."""
    try:
        kind, _ = x.__dlpack_device__()
    except AttributeError:
        raise TypeError(f"{name} ({_type_name(x)}) has __dlpack__ but no __dlpack_device__, which DLPack asks "
                        f"for: convert {name} to a numpy array or a torch tensor first") from None
    if kind not in (_CPU, _CUDA):
        where = _DEVICE_NAMES.get(int(kind), f"DLPack device type {int(kind)}")
        raise ValueError(f"{name} ({_type_name(x)}) lies on a {where} device, where ozaki cannot run: it runs on "
                         f"the CPU and on CUDA GPUs; move {name} to one of them first (its library's to_device, "
                         "jax.device_put)")
    return kind


def _type_name(x) -> str:
    return f"{type(x).__module__}.{type(x).__qualname__}"


def product(a, b, accuracy, engine):
    """:func:`ozaki.matmul` where neither operand is a torch tensor: a numpy array for numpy arrays and
    array_likes, else an array of the library the module's rules name, on its operand's device."""
    names = [name for name, x in (("a", a), ("b", b)) if _of_another_library(x)]
    if not names:
        return emulated(a, b, accuracy, engine).cpu().numpy()
    if _traced(a) or _traced(b):
        return _traced_product(a, b, accuracy, engine)
    import array_api_compat  # here, where another library's array is met: numpy and torch callers never need it

    if len(names) == 2 and type(a) is type(b) and array_api_compat.device(a) != array_api_compat.device(b):
        # One library's devices, which may share one DLPack device (array_api_strict's, JAX's CPU devices).
        raise ValueError(f"operands are on different devices ({array_api_compat.device(a)} and "
                         f"{array_api_compat.device(b)}); move them to one device")
    readable = as_operands(a, b)
    like = a if names[0] == "a" else b
    namespace = _namespace(like, names[0])
    out = emulated(*readable, accuracy, engine)
    result, device = namespace.from_dlpack(out), array_api_compat.device(like)
    # Where the DLPack device is more than one of the library's own (array_api_strict's devices, JAX's CPU
    # devices), the import names the operand's.
    return result if array_api_compat.device(result) == device else namespace.from_dlpack(out, device=device)


def _namespace(x, name: str):
    """The array API namespace of ``x`` to make the product in; an error where it has none or cannot hold it."""
    import array_api_compat

    try:
        namespace = array_api_compat.array_namespace(x)
    except TypeError:
        raise TypeError(f"{name} ({_type_name(x)}) implements DLPack but names no array API namespace "
                        "(__array_namespace__) to return the product in: convert it with numpy.from_dlpack or "
                        "torch.from_dlpack first") from None
    if _jax_array(x):
        _check_jax_float64()
    return namespace


def _check_jax_float64() -> None:
    import jax

    if jax.dtypes.canonicalize_dtype(jax.numpy.float64) != np.float64:
        raise TypeError("JAX runs without 64-bit types (jax_enable_x64 is off), so its arrays cannot hold the float64 "
                        "product: enable them at startup with jax.config.update('jax_enable_x64', True) or "
                        "JAX_ENABLE_X64=1")


def _traced_product(a, b, accuracy, engine):
    """The product of JAX operands of which one at least is traced (the other may be a numpy array or an
    array_like): numpy.matmul's checks and shapes on data-free tensors, then one :func:`_jax_product`."""
    import jax.numpy as jnp

    _check_jax_float64()
    a, b = _jax_operand(a, "a", jnp), _jax_operand(b, "b", jnp)

    def meta(x):
        return torch.empty(x.shape, dtype=torch.complex128 if jnp.iscomplexobj(x) else torch.float64, device="meta")

    ta, _, squeeze = operands(meta(a), meta(b), accuracy, engine)
    # Operands of one rank, 1-D ones as a row and a column: under vmap the vmapped axis then leads both,
    # a batch axis of the one product.
    rank = ta.dim()
    a = a.reshape((1,) * (rank - max(a.ndim, 2)) + (a.shape if a.ndim > 1 else (1, -1)))
    b = b.reshape((1,) * (rank - max(b.ndim, 2)) + (b.shape if b.ndim > 1 else (-1, 1)))
    out = _jax_product()(a, b, accuracy, engine)
    for axis in squeeze:
        out = jnp.squeeze(out, axis)
    return out


def _jax_operand(x, name: str, jnp):
    """``x`` as a JAX array, floating dtypes promoted to float64 and complex128 (a differentiable cast: the
    cotangent returns in the operand's dtype); integers and booleans as they are, checked on the host."""
    if _of_another_library(x) and not _jax_array(x):
        raise TypeError(f"{name} is a {_type_name(x)} and the other operand a traced JAX array: under jax.jit, vmap "
                        f"and grad the operands must be JAX or numpy arrays; convert {name} with jnp.from_dlpack")
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return x.astype(jnp.complex128)
    return x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x


@functools.cache
def _jax_product():
    """The product of two JAX arrays of one rank (at least 2) as a host callback to the numpy path, with its
    reverse-mode rule; made on first use, as JAX is imported only where its arrays are."""
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
    def matmul(a, b, accuracy, engine):
        shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
        dtype = jnp.complex128 if jnp.iscomplexobj(a) or jnp.iscomplexobj(b) else jnp.float64
        # expand_dims: an operand that is not vmapped gets a unit leading axis, which broadcasts.
        return jax.pure_callback(functools.partial(_host_product, accuracy=accuracy, engine=engine),
                                 jax.ShapeDtypeStruct(shape, dtype), a, b, vmap_method="expand_dims")

    def forward(a, b, accuracy, engine):
        return matmul(a, b, accuracy, engine), (a, b)

    def backward(accuracy, engine, saved, cotangent):
        inexact = tuple(bool(jnp.issubdtype(x.dtype, jnp.inexact)) for x in saved)
        grads = iter(cotangents(accuracy, engine, inexact, *saved, cotangent))
        return tuple(next(grads) if wanted else None for wanted in inexact)  # None: integers have none

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
    def cotangents(accuracy, engine, inexact, a, b, cotangent):
        shapes = tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x, wanted in zip((a, b), inexact) if wanted)
        # broadcast_all: under vmap each example keeps its own cotangent, where a unit axis would sum them.
        return jax.pure_callback(functools.partial(_host_cotangents, accuracy=accuracy, engine=engine),
                                 shapes, a, b, cotangent, vmap_method="broadcast_all")

    @cotangents.defjvp
    def _(accuracy, engine, inexact, primals, tangents):
        raise TypeError("ozaki.matmul differentiates JAX arrays once (grad, vjp, jacrev): its cotangents come from a "
                        "host callback, which JAX does not differentiate; for higher derivatives use torch tensors, "
                        "whose gradients ozaki differentiates again")

    matmul.defvjp(forward, backward)
    return matmul


def _host_product(a, b, *, accuracy, engine) -> np.ndarray:
    return emulated(np.asarray(a), np.asarray(b), accuracy, engine).cpu().numpy()


def _host_cotangents(a, b, cotangent, *, accuracy, engine) -> tuple[np.ndarray, ...]:
    """JAX's cotangents of the floating operands from the torch operator's gradients (emulated products).
    JAX transposes the linear map (G·Bᵀ, Aᵀ·G) where torch takes the adjoint (G·Bᴴ, Aᴴ·G), so JAX's
    cotangent is the conjugate of torch's at the conjugate cotangent; on real values the two agree."""
    leaves = [torch.tensor(np.asarray(x)) for x in (a, b)]  # copies: leaves of their own for autograd
    wanted = [t.requires_grad_() for t in leaves if t.is_floating_point() or t.is_complex()]
    out = operator.matmul(*leaves, accuracy=accuracy, engine=engine)
    grads = torch.autograd.grad(out, wanted, torch.tensor(np.asarray(cotangent)).conj())
    return tuple(g.conj().resolve_conj().numpy() for g in grads)
