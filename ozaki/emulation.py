"""Run existing torch code's float64 matrix products through ``ozaki.matmul``.

``with ozaki.emulate():`` (or ``@ozaki.emulate()`` on a function) routes ``torch.matmul`` (and
``torch.linalg.matmul``), ``torch.mm``, ``torch.bmm``, ``torch.addmm``, ``torch.baddbmm``, the ``@``
operator, the ``Tensor`` methods of the same names and ``torch.nn.functional.linear`` (hence ``nn.Linear``)
through the emulation whenever every operand is a dense float64 tensor, or every one a dense complex128 tensor
(torch multiplies no mix of the two); a batch of products is one call of the emulation.  Every other call reaches torch untouched, products included: ``mv``, ``dot``, ``einsum``,
``tensordot`` and sparse operands run natively.

The routing is a ``TorchFunctionMode``: torch keeps the mode stack per thread and pops it on exit, so the
scope is exact, nests (the innermost scope sees a call first), and never reaches other threads.  Nothing in
torch is patched.  Products are calls of the torch operator ``ozaki::matmul`` (:mod:`ozaki.operator`): their
backward products are emulated too, and ``torch.func`` transforms and ``torch.compile`` see one product.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from inspect import Signature, signature

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import operator
from .operands import check_options

__all__ = ["emulate"]

# Depth of routed work on this thread.  While positive, every torch call passes straight through: the shape
# check below and the calls around a product must reach torch itself, not an enclosing emulate scope (an outer
# scope stays on the mode stack while an inner one handles a call).
_busy = threading.local()


@contextlib.contextmanager
def _routing():
    _busy.depth = getattr(_busy, "depth", 0) + 1
    try:
        yield
    finally:
        _busy.depth -= 1


def _check_options(accuracy, engine) -> tuple:
    # ozaki.matmul checks both on every call; checking them here as well makes a typo fail at the ``with``
    # line rather than at the first product somewhere deep inside the wrapped code.
    check_options(accuracy, engine)
    return accuracy, engine


@dataclass(frozen=True)
class _Route:
    """Where a routed function keeps its operands: ``addend`` is addmm's input or linear's bias."""

    signature: Signature
    left: str
    right: str
    addend: str | None = None
    transpose_right: bool = False


_PRODUCT = _Route(signature(lambda input, other, *, out=None: None), "input", "other")
_METHOD_PRODUCT = _Route(signature(lambda self, other: None), "self", "other")
_MM = _Route(signature(lambda input, mat2, *, out=None: None), "input", "mat2")
_METHOD_MM = _Route(signature(lambda self, mat2: None), "self", "mat2")
_ROUTES = {
    torch.matmul: _PRODUCT,
    torch.linalg.matmul: _PRODUCT,
    torch.Tensor.matmul: _METHOD_PRODUCT,
    # Depending on the torch release, ``a @ b`` arrives as __matmul__ or as Tensor.matmul.
    torch.Tensor.__matmul__: _METHOD_PRODUCT,
    torch.Tensor.__rmatmul__: _Route(signature(lambda self, other: None), "other", "self"),
    torch.mm: _MM,
    torch.Tensor.mm: _METHOD_MM,
    torch.bmm: _MM,
    torch.Tensor.bmm: _METHOD_MM,
    torch.addmm: _Route(
        signature(lambda input, mat1, mat2, *, beta=1, alpha=1, out=None: None), "mat1", "mat2", "input"
    ),
    torch.Tensor.addmm: _Route(signature(lambda self, mat1, mat2, *, beta=1, alpha=1: None), "mat1", "mat2", "self"),
    torch.baddbmm: _Route(
        signature(lambda input, batch1, batch2, *, beta=1, alpha=1, out=None: None), "batch1", "batch2", "input"
    ),
    torch.Tensor.baddbmm: _Route(
        signature(lambda self, batch1, batch2, *, beta=1, alpha=1: None), "batch1", "batch2", "self"
    ),
    F.linear: _Route(signature(lambda input, weight, bias=None: None), "input", "weight", "bias", transpose_right=True),
}


# The dtypes whose products are routed: float64 and its complex counterpart.
_ROUTED_DTYPES = (torch.float64, torch.complex128)


def _is_dense_routed(x) -> bool:
    # Sparse and other layouts have products of their own that the emulation does not cover.
    return isinstance(x, torch.Tensor) and x.dtype in _ROUTED_DTYPES and x.layout == torch.strided


def _as_meta(x):
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta").requires_grad_(x.requires_grad)


def _addmm(addend, product, beta, alpha, shape: torch.Size) -> torch.Tensor:
    """torch's beta * input + alpha * product, each step rounded in float64 with no fused multiply-add (so
    every device gives the same bits); as in BLAS, a zero beta or alpha drops its term, NaN and inf included."""
    if beta != 0 and alpha != 0:
        return addend * beta + product() * alpha
    if alpha != 0:
        return product() * alpha
    if beta != 0:
        return torch.broadcast_to(addend * beta, shape).clone()
    return addend.new_zeros(shape)


# The routed functions that take a left operand of any rank from 2 up against a 2-D right one (torch.mm and
# addmm take exactly 2-D ones; bmm 3-D, always checked on meta tensors).
_BATCHED_LEFT = {torch.matmul, torch.linalg.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
                 torch.Tensor.__rmatmul__, F.linear}
_TWO_DIMENSIONAL = {torch.mm, torch.Tensor.mm, torch.addmm, torch.Tensor.addmm}


def _plain_shape(func, route: _Route, left: torch.Tensor, right: torch.Tensor, addend,
                 values: dict) -> torch.Size | None:
    """The result's shape where the call is one torch accepts as it stands, decided from the shapes alone: no
    ``out=``, a 2-D right operand, a left one whose last dimension matches it (2-D for mm and addmm), and an
    addend that broadcasts to the result without growing it (linear's bias: 1-D).  None elsewhere: the meta
    check decides (it runs torch's Python reference of the call, some hundreds of microseconds, which a
    model's every layer would pay)."""
    if values.get("out") is not None or right.dim() != 2 or left.dim() < 2:
        return None
    if not (func in _BATCHED_LEFT or (func in _TWO_DIMENSIONAL and left.dim() == 2)):
        return None
    inner, columns = (right.shape[1], right.shape[0]) if route.transpose_right else right.shape
    if left.shape[-1] != inner:
        return None
    shape = torch.Size((*left.shape[:-1], columns))
    if addend is not None and (addend.dim() > (1 if route.transpose_right else len(shape))
                               or any(a not in (1, s) for a, s in zip(reversed(addend.shape), reversed(shape)))):
        return None
    return shape


def _route(func, route: _Route, args: tuple, kwargs: dict, options: tuple):
    try:
        bound = route.signature.bind(*args, **kwargs)
    except TypeError:
        if any(_is_dense_routed(x) for x in (*args, *kwargs.values())):
            raise TypeError(
                f"emulate: cannot route {func.__name__} called with {len(args)} positional arguments and "
                f"keywords {sorted(kwargs)} on float64 or complex128 tensors; the emulated form is "
                f"{func.__name__}{route.signature}. Call it outside the emulate scope to use torch's own."
            ) from None
        return func(*args, **kwargs)
    bound.apply_defaults()
    values = bound.arguments
    left, right, addend = values[route.left], values[route.right], values.get(route.addend)
    operands = [x for x in (left, right, addend) if x is not None]
    devices = {x.device for x in operands if isinstance(x, torch.Tensor)}
    dtypes = {x.dtype for x in operands if isinstance(x, torch.Tensor)}
    if not all(_is_dense_routed(x) for x in operands) or len(devices) != 1 or len(dtypes) != 1:
        # Other dtypes and layouts, and the mixes torch rejects, are torch's business.
        return func(*args, **kwargs)
    shape = _plain_shape(func, route, left, right, addend, values)
    if shape is None:
        # torch's own shape, dtype, out= and autograd rules, checked by running the call on meta tensors: torch
        # raises its own error for anything it would reject, and warns where it would resize ``out``.
        shape = func(*[_as_meta(x) for x in args], **{k: _as_meta(v) for k, v in kwargs.items()}).shape

    def product():
        accuracy, engine = options
        return operator.matmul(left, right.t() if route.transpose_right else right, accuracy=accuracy, engine=engine)

    if route.transpose_right:
        # linear: torch adds the bias to the product (addmm with beta = alpha = 1 gives the same bits).
        result = product() if addend is None else product() + addend
    elif route.addend is not None:
        result = _addmm(addend, product, values["beta"], values["alpha"], shape)
    else:
        result = product()
    out = values.get("out")
    if out is None:
        return result
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


class emulate(TorchFunctionMode, contextlib.ContextDecorator):
    """Context manager and decorator: torch float64 and complex128 products inside run through ``ozaki.matmul``.

    The routing ends when the scope ends, exception or not; scopes nest, the innermost settings winning;
    other threads are unaffected.  One instance may be entered again while active (recursion, several
    threads): each entry pushes it again on the mode stack of its thread.  ``torch.compile`` traces the
    routing, a scope opened inside the compiled function or around the call alike: the products are single
    calls of the operator ``ozaki::matmul`` in the graph.

    Parameters
    ----------
    accuracy : {"fp64", "exact"} or int, default "fp64"
        Passed to every emulated product, as :func:`ozaki.matmul` takes it.
    engine : {"auto", "reference", "int8", "fp8", "fp4"}, default "auto"
        Likewise.

    Raises
    ------
    ValueError
        For an accuracy or engine :func:`ozaki.matmul` refuses, at construction.

    Examples
    --------
    >>> import torch, ozaki
    >>> x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    >>> w = torch.tensor([[3.0], [4.0]], dtype=torch.float64, requires_grad=True)
    >>> with ozaki.emulate(accuracy="exact"):
    ...     y = x @ w
    >>> y.sum().backward()
    >>> y.tolist(), w.grad.tolist()
    ([[11.0]], [[1.0], [2.0]])
    """

    def __init__(self, accuracy="fp64", engine="auto"):
        super().__init__()
        # Itself the mode (no state beyond the options): entering it is TorchFunctionMode's push, which
        # torch.compile knows how to trace.
        self.accuracy, self.engine = _check_options(accuracy, engine)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _ROUTES.get(func)
        if route is None or getattr(_busy, "depth", 0):
            return func(*args, **kwargs)
        with _routing():
            return _route(func, route, args, kwargs, (self.accuracy, self.engine))

    def __repr__(self) -> str:
        return f"emulate(accuracy={self.accuracy!r}, engine={self.engine!r})"
