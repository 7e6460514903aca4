"""Run existing torch code's float64 matrix products through ``ozaki.matmul``.

``with ozaki.emulate():`` (or ``@ozaki.emulate()`` on a function) routes ``torch.matmul`` (and
``torch.linalg.matmul``), ``torch.mm``, ``torch.bmm``, ``torch.addmm``, the ``@`` operator, the ``Tensor``
methods of the same names and ``torch.nn.functional.linear`` (hence ``nn.Linear``) through the emulation
whenever every operand is a dense float64 tensor.  Every other call reaches torch untouched, products included:
``mv``, ``dot``, ``baddbmm``, ``einsum``, ``tensordot`` and sparse operands run natively.

The routing is a ``TorchFunctionMode``: torch keeps the mode stack per thread and pops it on exit, so the
scope is exact, nests (the innermost scope sees a call first), and never reaches other threads.  Nothing in
torch is patched.  Products carry a ``torch.autograd.Function`` whose backward products are emulated too.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass
from inspect import Signature, signature

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import ozaki

from .frontend import check_options

__all__ = ["emulate"]

# Depth of routed work on this thread.  While positive, every torch call passes straight through: the pipeline's
# own torch calls and the shape check below must reach torch itself, not an enclosing emulate scope (an outer
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


def _ozaki_matmul(a: torch.Tensor, b: torch.Tensor, options: tuple) -> torch.Tensor:
    accuracy, engine = options
    with _routing():
        if _is_dtensor(a) or _is_dtensor(b):
            # Imported on the first DTensor: torch.distributed.tensor costs import time, and some
            # torch builds lack torch.distributed.
            from . import distributed

            return distributed.matmul(a, b, accuracy=accuracy, engine=engine)
        return ozaki.matmul(a, b, accuracy=accuracy, engine=engine)


def _is_dtensor(x) -> bool:
    # No DTensor exists before torch.distributed.tensor is imported, so its absence answers without importing it.
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(x, module.DTensor)


class _Product(torch.autograd.Function):
    """``a @ b`` for operands of at least two dimensions with broadcast batch dimensions."""

    @staticmethod
    def forward(ctx, a, b, options):
        ctx.save_for_backward(a, b)
        ctx.options = options
        # Detached: the pipeline may leave torch (numpy, integer kernels), which refuses tensors needing grad.
        return _ozaki_matmul(a.detach(), b.detach(), options)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        grad_a = grad_b = None
        # The gradients are products built from _Product itself, so a double backward is emulated as well.
        if ctx.needs_input_grad[0]:
            grad_a = _operand_grad(grad, b.mT, a.shape, ctx.options)
        if ctx.needs_input_grad[1]:
            grad_b = _operand_grad(grad.mT, a, b.mT.shape, ctx.options).mT
        return grad_a, grad_b, None


def _operand_grad(grad: torch.Tensor, rhs: torch.Tensor, shape: torch.Size, options: tuple) -> torch.Tensor:
    """Sum over the broadcast batch dimensions of ``grad @ rhs``, reduced to the operand's ``shape``.

    The summed batch dimensions are folded into the contraction, so the reduction happens inside one emulated
    product (integer-exact, rounded once at the end) instead of adding separately rounded products in float64;
    torch's own matmul backward folds a 2-D operand against a batched one the same way.
    """
    *batch, p, q = grad.shape
    r = rhs.shape[-1]
    missing = len(batch) - (len(shape) - 2)
    summed = [i for i in range(len(batch)) if i < missing or (shape[i - missing] == 1 and batch[i] != 1)]
    if not summed:
        return _Product.apply(grad, rhs, options).reshape(shape)
    kept = [i for i in range(len(batch)) if i not in summed]
    kept_sizes = [batch[i] for i in kept]
    depth = q
    for i in summed:
        depth *= batch[i]
    lhs = grad.permute(*kept, len(batch), *summed, len(batch) + 1).reshape(*kept_sizes, p, depth)
    rhs = rhs.expand(*batch, q, r).permute(*kept, *summed, len(batch), len(batch) + 1)
    return _Product.apply(lhs, rhs.reshape(*kept_sizes, depth, r), options).reshape(shape)


def _matmul(a: torch.Tensor, b: torch.Tensor, options: tuple) -> torch.Tensor:
    """torch.matmul's treatment of 1-D operands, as differentiable views around the batched product."""
    out = _Product.apply(a.unsqueeze(0) if a.dim() == 1 else a, b.unsqueeze(-1) if b.dim() == 1 else b, options)
    if b.dim() == 1:
        out = out.squeeze(-1)
    if a.dim() == 1:
        out = out.squeeze(-1 if b.dim() == 1 else -2)
    return out


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
    F.linear: _Route(signature(lambda input, weight, bias=None: None), "input", "weight", "bias", transpose_right=True),
}


def _is_dense_float64(x) -> bool:
    # Sparse and other layouts have products of their own that the emulation does not cover.
    return isinstance(x, torch.Tensor) and x.dtype == torch.float64 and x.layout == torch.strided


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
        if any(_is_dense_float64(x) for x in (*args, *kwargs.values())):
            raise TypeError(
                f"emulate: cannot route {func.__name__} called with {len(args)} positional arguments and "
                f"keywords {sorted(kwargs)} on float64 tensors; the emulated form is "
                f"{func.__name__}{route.signature}. Call it outside the emulate scope to use torch's own."
            ) from None
        return func(*args, **kwargs)
    bound.apply_defaults()
    values = bound.arguments
    left, right, addend = values[route.left], values[route.right], values.get(route.addend)
    operands = [x for x in (left, right, addend) if x is not None]
    devices = {x.device for x in operands if isinstance(x, torch.Tensor)}
    if not all(_is_dense_float64(x) for x in operands) or len(devices) != 1:
        # Other dtypes and layouts, and the mixes torch rejects, are torch's business.
        return func(*args, **kwargs)
    shape = _plain_shape(func, route, left, right, addend, values)
    if shape is None:
        # torch's own shape, dtype, out= and autograd rules, checked by running the call on meta tensors: torch
        # raises its own error for anything it would reject, and warns where it would resize ``out``.
        shape = func(*[_as_meta(x) for x in args], **{k: _as_meta(v) for k, v in kwargs.items()}).shape

    def product():
        return _matmul(left, right.t() if route.transpose_right else right, options)

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


class _EmulateMode(TorchFunctionMode):
    def __init__(self, options: tuple):
        super().__init__()
        self._options = options

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = _ROUTES.get(func)
        if route is None or getattr(_busy, "depth", 0):
            return func(*args, **kwargs)
        with _routing():
            return _route(func, route, args, kwargs, self._options)


class emulate(contextlib.ContextDecorator):
    """Context manager and decorator: torch float64 products inside run through ``ozaki.matmul``.

    ``accuracy`` and ``engine`` are passed to every emulated product.  The routing ends when the scope ends,
    exception or not; scopes nest, the innermost settings winning; other threads are unaffected.  One
    instance may be entered again while active (recursion, several threads): each entry pushes its own mode.
    """

    def __init__(self, accuracy="fp64", engine="auto"):
        self.accuracy, self.engine = _check_options(accuracy, engine)
        self._entered = threading.local()

    def __enter__(self):
        mode = _EmulateMode((self.accuracy, self.engine))
        mode.__enter__()
        self._entered.__dict__.setdefault("modes", []).append(mode)
        return self

    def __exit__(self, exc_type, exc, traceback):
        self._entered.modes.pop().__exit__(exc_type, exc, traceback)
        return False

    def __repr__(self) -> str:
        return f"emulate(accuracy={self.accuracy!r}, engine={self.engine!r})"
