"""The emulated product as a torch operator, ``torch.ops.ozaki.matmul``.

``ozaki::matmul(Tensor a, Tensor b, str accuracy, str engine) -> Tensor`` multiplies float64 or complex128
operands of at least two dimensions, (…, M, K) @ (…, K, N) with broadcast batch dimensions; its implementation
is the emulation behind :func:`ozaki.matmul` (a complex product runs as its real embedding there, so one call
of the operator is one complex product, Karatsuba's three block products on the torch stages).  Registered with torch, the product is one call that torch's machinery
understands:

* autograd: the gradients are products of the same operator, accuracy and engine (so a double backward is
  emulated as well); for complex operands those of torch's convention, G·Bᴴ and Aᴴ·G, each part of each
  entry one product's rounding (the real part alone for a real operand);
* ``torch.func.vmap`` (and through it ``jacrev``, ``jacfwd`` of vmapped code): the vmapped dimension becomes a
  leading batch dimension of one product;
* ``torch.compile``: a fake implementation gives the result's shape, so the product is one opaque call in the
  graph, never traced into;
* DTensor operands reach :func:`ozaki.distributed.matmul`.

:func:`matmul` is the entry point for torch tensors (``ozaki.matmul`` and ``ozaki.emulate`` call it): it
promotes the operands to float64 and treats 1-D ones as numpy.matmul does, with differentiable views around
the operator.
"""

from __future__ import annotations

import sys
import threading

import torch

from . import operands

__all__ = ["matmul"]


def _encoded(accuracy) -> str:
    # The schema has one type per argument: "fp64", "exact", or a number of bits written in decimal.
    return str(accuracy)


def _decoded(accuracy: str):
    return int(accuracy) if accuracy.isdigit() else accuracy


@torch.library.custom_op("ozaki::matmul", mutates_args=())
def _product(a: torch.Tensor, b: torch.Tensor, accuracy: str, engine: str) -> torch.Tensor:
    # Detached: the pipeline may leave torch (numpy, integer kernels), which refuses tensors needing grad.
    return operands.emulated(a.detach(), b.detach(), _decoded(accuracy), engine)


@_product.register_fake
def _(a, b, accuracy, engine):
    # The operands' own checks and broadcast, on tensors without data: the same errors as a real call.
    ta, tb, _ = operands.operands(a, b, _decoded(accuracy), engine)
    dtype = torch.complex128 if ta.is_complex() or tb.is_complex() else torch.float64
    return ta.new_empty((*ta.shape[:-1], tb.shape[-1]), dtype=dtype)


def _setup_context(ctx, inputs, output):
    a, b, accuracy, engine = inputs
    ctx.save_for_backward(a, b)
    ctx.options = accuracy, engine


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    # The gradients are products of the operator, differentiable in turn: a double backward is emulated too.
    # With complex operands, G·Bᴴ and Aᴴ·G = (Gᵀ·conj(A))ᵀ (conj and mH are views, no-ops on real tensors); a
    # real operand takes the real part, where torch would otherwise cast a complex gradient with a warning.
    if ctx.needs_input_grad[0]:
        grad_a = _real_for(a, _operand_grad(grad, b.mH.resolve_conj(), a.shape, ctx.options))
    if ctx.needs_input_grad[1]:
        grad_b = _real_for(b, _operand_grad(grad.mT, a.conj().resolve_conj(), b.mT.shape, ctx.options).mT)
    return grad_a, grad_b, None, None


def _real_for(operand: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return grad.real if grad.is_complex() and not operand.is_complex() else grad


_product.register_autograd(_backward, setup_context=_setup_context)


class _Product(torch.autograd.Function):
    """The operator with the same gradient formula, for differentiable calls: torch.func's transforms (grad,
    jacrev) refuse the autograd.Function that torch.library builds for ``register_autograd`` as it has no
    setup_context staticmethod (pytorch/pytorch#168393), while they take this one."""

    generate_vmap_rule = True  # the forward is the operator, whose vmap rule is registered below

    @staticmethod
    def forward(a, b, accuracy, engine):
        return _product(a, b, accuracy, engine)

    setup_context = staticmethod(_setup_context)
    backward = staticmethod(_backward)


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
        return _Product.apply(grad, rhs, *options).reshape(shape)
    kept = [i for i in range(len(batch)) if i not in summed]
    kept_sizes = [batch[i] for i in kept]
    depth = q
    for i in summed:
        depth *= batch[i]
    lhs = grad.permute(*kept, len(batch), *summed, len(batch) + 1).reshape(*kept_sizes, p, depth)
    rhs = rhs.expand(*batch, q, r).permute(*kept, *summed, len(batch), len(batch) + 1)
    return _Product.apply(lhs, rhs.reshape(*kept_sizes, depth, r), *options).reshape(shape)


@_product.register_vmap
def _vmap(info, in_dims, a, b, accuracy, engine):
    # Each vmapped operand's vmapped dimension goes first, followed by as many unit dimensions as align its
    # batch dimensions with the other operand's (batch dimensions broadcast from the right): the result is one
    # product whose leading dimension is the vmapped one.
    rank = max(x.dim() - (dim is not None) for x, dim in zip((a, b), in_dims))

    def leading(x, dim):
        if dim is None:
            return x
        x = x.movedim(dim, 0)
        return x[(slice(None),) + (None,) * (rank + 1 - x.dim())]

    return _product(leading(a, in_dims[0]), leading(b, in_dims[1]), accuracy, engine), 0


def _is_dtensor(x) -> bool:
    # No DTensor exists before torch.distributed.tensor is imported, so its absence answers without importing it.
    module = sys.modules.get("torch.distributed.tensor")
    return type(x) is not torch.Tensor and module is not None and isinstance(x, module.DTensor)


_DTENSORS = threading.Lock()  # held while the first DTensor call registers their route
_dtensors_routed = False


def _route_dtensors() -> None:
    """Send the operator's DTensor calls to :func:`ozaki.distributed.matmul` (registered on the first
    DTensor, once whatever the threads: torch.distributed.tensor costs import time, and some torch
    builds lack torch.distributed)."""
    global _dtensors_routed
    with _DTENSORS:
        if _dtensors_routed:
            return
        from torch.distributed.tensor import DTensor

        from . import distributed

        def product(mode, func, types, args, kwargs):
            a, b, accuracy, engine = args
            return distributed.matmul(a, b, accuracy=_decoded(accuracy), engine=engine)

        torch.library.register_torch_dispatch(_product, DTensor, product)
        _dtensors_routed = True


def matmul(a, b, *, accuracy="fp64", engine: str = "auto") -> torch.Tensor:
    """``ozaki.matmul`` for torch tensors: the emulated product through the operator ``ozaki::matmul``.

    Parameters
    ----------
    a, b : torch.Tensor or array_like
        At least one a torch tensor (the other may be a numpy array on the CPU); numpy.matmul's shapes: 1-D
        operands are promoted to a row / column and the added axis removed, batch dimensions broadcast.  Other
        real dtypes are promoted to float64, complex64 to complex128 (a real operand against a complex one
        stays real: see :func:`ozaki.matmul`).
    accuracy, engine
        As in :func:`ozaki.matmul`.

    Returns
    -------
    torch.Tensor
        float64 (complex128 where an operand is complex) on the operands' device; differentiable in both
        operands.

    Raises
    ------
    TypeError
        For non-numeric operands.
    ValueError
        For bad options, scalars, operands on two devices, and shapes that do not multiply.

    Examples
    --------
    >>> import torch, ozaki.operator
    >>> w = torch.ones(3, 2, dtype=torch.float64, requires_grad=True)
    >>> ozaki.operator.matmul(torch.ones(3, dtype=torch.float64), w, accuracy="exact").sum().backward()
    >>> w.grad
    tensor([[1., 1.],
            [1., 1.],
            [1., 1.]], dtype=torch.float64)
    """
    operands.check_options(accuracy, engine)
    device = next(x.device for x in (a, b) if isinstance(x, torch.Tensor))
    a, b = operands.as_operand_tensor(a, "a", device), operands.as_operand_tensor(b, "b", device)
    if _is_dtensor(a) or _is_dtensor(b):
        _route_dtensors()
    # 1-D operands as differentiable views around the batched product, as torch.matmul treats them.
    out = _Product.apply(a.unsqueeze(0) if a.dim() == 1 else a, b.unsqueeze(-1) if b.dim() == 1 else b,
                         _encoded(accuracy), engine)
    if b.dim() == 1:
        out = out.squeeze(-1)
    if a.dim() == 1:
        out = out.squeeze(-1 if b.dim() == 1 else -2)
    return out
