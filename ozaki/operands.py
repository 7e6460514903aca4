"""Operands as ``numpy.matmul`` takes them, around the pipeline: validation and promotion to
float64 (complex128 for complex operands), 1-D operands and batch dimensions as numpy handles
them, NaN and ±Inf placed where numpy's matmul puts them; and the emulated product of such
operands as a float64 (or complex128) tensor (:func:`emulated`), which :func:`ozaki.matmul`
returns for arrays and the torch operator ``ozaki::matmul`` (:mod:`ozaki.operator`) runs for
tensors.

A complex product is a real one (:func:`complex_embedding`): with A = Ar + i·Ai (M×K) and
B = Br + i·Bi (K×N),

    [Ar  Ai] · [[Br, Bi], [−Bi, Br]] = [Re C | Im C]   (M × 2K times 2K × 2N),

so each part of each entry is an entry of a real product of 2K terms, and every promise of a
real product (``"exact"``, the ``"fp64"`` and fast-mode bounds with 2K terms, the same bits on
every engine, batch invariance) holds for each part.  With one operand real, the complex one's
two parts are a batch of two real products of K terms: each part is then the real operand's
product with that part, as two real calls give it.

The pipeline reads the operands, has one plan decide the call (the moduli, or native DGEMM
where, for ``engine="auto"`` with ``accuracy="fp64"`` on a GPU, the cost model predicts it
faster) and runs it (:func:`ozaki.pipeline.prepare`, :func:`ozaki.pipeline.run`).
"""

from __future__ import annotations

import logging
import numbers
import warnings
from typing import NamedTuple

import numpy as np
import torch

from kernels.float64 import FLOAT64_EXACT, FRACTION_BITS, MAX_EXPONENT, MIN_NORMAL_EXPONENT

from . import pipeline, planning
from .planning import ENGINES
from .timing import stage

__all__ = ["Prepared", "as_operand_tensor", "check_options", "complex_embedding", "complex_result", "emulated",
           "nonfinite_terms", "operands", "overlay_nonfinite", "prepare", "shape_sends_to_dgemm"]

log = logging.getLogger("ozaki")

# The widest lossless row of float64 values, 1024 + 1074 bits: a row's top is at most 2^1024
# (every |x| < 2^1024) and its lowest set bit at least 2^-1074 (the least subnormal).  A row
# keeps min(accuracy, its lossless width) bits, so every accuracy up to this width can change a
# row (each bit halves the bound's ε, until the row is exact), and from it on every row is
# lossless: the product is accuracy="exact"'s, which is what a larger number would mean.
_MAX_FIXED_BITS = (MAX_EXPONENT + 1) - (MIN_NORMAL_EXPONENT - FRACTION_BITS)
# Integers that float64 holds exactly, every one of them: |x| ≤ 2^53.
_EXACT_INTEGER = FLOAT64_EXACT


def check_options(accuracy, engine) -> None:
    """ValueError naming the allowed values unless ``accuracy`` and ``engine`` are valid."""
    _check_accuracy(accuracy)
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r} is not one of {', '.join(map(repr, ENGINES))}")


def _check_accuracy(accuracy) -> None:
    if isinstance(accuracy, str):
        if accuracy in ("fp64", "exact"):
            return
    elif isinstance(accuracy, numbers.Integral) and not isinstance(accuracy, bool):
        if 1 <= accuracy <= _MAX_FIXED_BITS:
            return
        raise ValueError(
            f"accuracy={accuracy}: a number of input bits must lie in [1, {_MAX_FIXED_BITS}]: a row keeps at "
            f"most its lossless width, and no float64 row spans more than {_MAX_FIXED_BITS} bits (2^1024 down to "
            "2^-1074); for every row lossless, the correctly rounded product, use accuracy='exact'"
        )
    raise ValueError(f"accuracy={accuracy!r} is not one of 'fp64', 'exact' or a number of input bits (int)")


def as_operand_tensor(x, name: str, device: torch.device | None) -> torch.Tensor:
    """``x`` (array_like or tensor) as a float64 tensor, complex128 where it is complex
    (complex64 promoted), on ``device`` (None: where it is; a numpy array shares its memory)."""
    if isinstance(x, torch.Tensor):
        t = x
        if not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            _check_exact_integers(t, name)
    else:
        array = np.asarray(x)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{name} ({type(x).__name__}, read as dtype {array.dtype}) holds no numbers: ozaki.matmul takes "
                            "numpy arrays, torch tensors, arrays of a library that implements DLPack (__dlpack__: CuPy, "
                            f"JAX, ...) and nested sequences of numbers; convert {name} to one of them")
        if array.ndim == 0:
            raise ValueError(f"{name} is a scalar; matmul needs operands with at least one dimension (use * for scalars)")
        if array.dtype.kind in "iu":
            _check_exact_integers(array, name)
        t = _shared_tensor(np.ascontiguousarray(array, dtype=np.complex128 if array.dtype.kind == "c" else np.float64))
    if device is not None and t.device != device:
        raise ValueError(f"operands are on different devices ({device} and {t.device}); move them to one device")
    if t.dim() == 0:
        raise ValueError(f"{name} is a scalar; matmul needs operands with at least one dimension (use * for scalars)")
    wanted = torch.complex128 if t.is_complex() else torch.float64
    return t if t.dtype == wanted else t.to(wanted)


def _check_exact_integers(x, name: str) -> None:
    """ValueError where an integer operand (numpy array or tensor) holds a value that the
    promotion to float64 would round: past 2^53 in magnitude float64 skips integers, and the
    product of rounded operands is not the product asked for."""
    if x.dtype.itemsize < 8:
        return  # 32 bits and fewer: every value is a float64
    least = -_EXACT_INTEGER
    if isinstance(x, torch.Tensor) and x.dtype == torch.uint64:
        # torch compares no uint64: read as int64 patterns, the values from 2^63 on are negative.
        x, least = x.view(torch.int64), 0
    if bool((x > _EXACT_INTEGER).any()) or bool((x < least).any()):
        raise ValueError(
            f"{name} holds integers beyond 2^53 in magnitude, which float64 cannot all hold: the product would be "
            f"of rounded values; convert {name} to float64 explicitly (np.asarray({name}, dtype=np.float64) or "
            f"{name}.to(torch.float64)), accepting the rounding"
        )


def _shared_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory, writable or not.  torch.from_numpy (and
    torch.as_tensor) warn for a read-only array, as a tensor could write to it; the emulation
    only reads its operands (it shares a writable array's memory just the same), so the
    warning is silenced for that one call rather than the array copied."""
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
        return torch.from_numpy(array)


def nonfinite_terms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Whether some term a_ik·b_kj of each output is NaN, +inf, −inf because an input is NaN or
    infinite: a boolean (3, …, M, N) tensor.  Each is an "any" over K, so the terms of a whole
    product are the OR of those of its K shards (``ozaki.distributed``).

    A term a·b is NaN when either factor is NaN or it is 0·inf; it is ±inf when a factor is
    infinite and the other non-zero.  0/1 indicator products count the terms (a positive count
    is exact in float32).
    """

    def count(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x.to(torch.float32), y.to(torch.float32)) > 0

    finite_a = a.isfinite()
    nan_term = (
        a.isnan().any(dim=-1)[..., :, None]
        | b.isnan().any(dim=-2)[..., None, :]
        | count(a.isinf(), b == 0)
        | count(a == 0, b.isinf())
    )
    pos_a, neg_a, pos_b, neg_b = a > 0, a < 0, b > 0, b < 0
    posinf_a, neginf_a, posinf_b, neginf_b = a == np.inf, a == -np.inf, b == np.inf, b == -np.inf
    posinf = count(posinf_a, pos_b) | count(neginf_a, neg_b) | count(pos_a & finite_a, posinf_b) | count(neg_a & finite_a, neginf_b)
    neginf = count(posinf_a, neg_b) | count(neginf_a, pos_b) | count(pos_a & finite_a, neginf_b) | count(neg_a & finite_a, posinf_b)
    return torch.stack([nan_term, posinf, neginf])


def overlay_nonfinite(out: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """``out`` with NaN and ±inf where numpy's matmul puts them, from :func:`nonfinite_terms`:
    a sum is NaN with a NaN term or with both +inf and −inf terms, else ±inf with such a term."""
    nan_term, posinf, neginf = terms
    nan = nan_term | (posinf & neginf)
    return torch.where(nan, torch.nan, torch.where(posinf, torch.inf, torch.where(neginf, -torch.inf, out)))


def complex_embedding(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, str | None]:
    """The real products that hold a @ b, of at least two dimensions each, with the form's name
    (:attr:`ozaki.planning.Shape.complex`; None and the operands themselves where both are real).

    Both complex: A_e = [Ar Ai] (…, M, 2K) and B_e = [[Br, Bi], [−Bi, Br]] (…, 2K, 2N), whose
    product is [Re C | Im C].  One complex: its real and imaginary parts on a new leading axis
    (the batch dimensions of both operands aligned first), against the real operand, whose
    product is [Re C, Im C] on that axis.  Built of differentiable views and copies (real, imag,
    cat, stack, negation): the gradients of complex operands flow through it.  The batch shapes
    broadcast as those of a and b do; :func:`complex_result` turns the product back.
    """
    if not (a.is_complex() or b.is_complex()):
        return a, b, None
    if a.is_complex() and b.is_complex():
        b_top = torch.cat([b.real, b.imag], dim=-1)
        b_bottom = torch.cat([-b.imag, b.real], dim=-1)
        return torch.cat([a.real, a.imag], dim=-1), torch.cat([b_top, b_bottom], dim=-2), planning.COMPLEX_BOTH
    rank = max(a.dim(), b.dim())

    def parts(x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x.real, x.imag]).reshape(2, *(1,) * (rank - x.dim()), *x.shape)

    return (parts(a), b, planning.COMPLEX_ONE) if a.is_complex() else (a, parts(b), planning.COMPLEX_ONE)


def complex_result(out: torch.Tensor, form: str | None) -> torch.Tensor:
    """The complex product from the product of :func:`complex_embedding`'s operands."""
    if form == planning.COMPLEX_BOTH:
        n = out.shape[-1] // 2
        return torch.complex(out[..., :n], out[..., n:])
    if form == planning.COMPLEX_ONE:
        return torch.complex(out[0], out[1])
    return out


def emulated(a, b, accuracy, engine) -> torch.Tensor:
    """:func:`ozaki.matmul` as a float64 (complex128) tensor, whatever the operands; no autograd
    (the operator ``ozaki::matmul`` runs it as its implementation and carries the gradients).

    NaN and ±inf of a complex product are placed part by part, each part by the real rule
    (:func:`overlay_nonfinite`) on the terms of its real product (:func:`complex_embedding`):
    with both operands complex, the terms of Re C are Ar·Br and −Ai·Bi, those of Im C are Ar·Bi
    and Ai·Br, as in the schoolbook complex product (numpy's elementwise complex arithmetic,
    summed; torch's complex matmul on the CPU).  numpy.matmul through OpenBLAS's zgemm, zgemv and
    zdot differs: they scale the sum by alpha = 1 + 0i, so a part there is also NaN where the
    other part is ±inf or NaN (both parts in zgemm and zgemv, the real part in zdot).  With one
    operand real, each part is the real operand's product with that part, as two real calls give
    it; numpy.matmul first promotes the real operand to complex, and its added zero imaginary
    part makes 0·inf = NaN terms there too.
    """
    if shape_sends_to_dgemm(a, b, accuracy, engine):
        return torch.matmul(a, b)
    prepared = prepare(a, b, accuracy, engine)
    out = pipeline.run(prepared.call)  # on the native path, IEEE semantics for NaN and ±Inf as numpy's matmul
    if prepared.call.plan.nonfinite:
        # The finite terms went through the emulation; NaN/Inf positions are overlaid after.
        out = overlay_nonfinite(out, nonfinite_terms(*prepared.operands))
    out = complex_result(out, prepared.call.plan.complex)
    for axis in prepared.squeeze:
        out = out.squeeze(axis)
    return out


class Prepared(NamedTuple):
    """A call prepared on operands as numpy.matmul takes them: the pipeline's call, the real
    operands it multiplies (a complex product's embedding) and the axes to squeeze after."""

    call: pipeline.Call
    operands: tuple[torch.Tensor, torch.Tensor]
    squeeze: tuple[int, ...]


def prepare(a, b, accuracy, engine, *, early: bool = True) -> Prepared:
    """:func:`operands`, a complex product's :func:`complex_embedding`, then the read and the
    decision (:func:`ozaki.pipeline.prepare`; ``early`` as there)."""
    ta, tb, squeeze = operands(a, b, accuracy, engine)
    ta, tb, form = complex_embedding(ta, tb)
    ta, tb = _broadcast(ta, tb)
    with stage("plan", ta.device):
        call = pipeline.prepare(ta, tb, accuracy, engine, early=early, complex=form)
    return Prepared(call, (ta, tb), squeeze)


def shape_sends_to_dgemm(a, b, accuracy, engine) -> bool:
    """Whether the call is the common one that the plan (:func:`ozaki.planning.plan_for_shape`)
    sends to native DGEMM from the shape alone, reading no data: 2-D float64 tensors on one CUDA device, the default
    options, a shape the cost model (``planning.native_verdict``, cached per shape) keeps native.
    Such a call skips building the plan, whose host time would count against DGEMM's; the
    product is the one the plan would have run, and with the "ozaki" logger at debug level
    every call takes the planned path, which says so."""
    if (engine != "auto" or not isinstance(accuracy, str) or accuracy != "fp64" or type(a) is not torch.Tensor
            or type(b) is not torch.Tensor or a.dtype != torch.float64 or b.dtype != torch.float64 or a.dim() != 2
            or b.dim() != 2 or not a.is_cuda or a.device != b.device or a.shape[1] != b.shape[0]
            or log.isEnabledFor(logging.DEBUG)):
        return False
    verdict = planning.native_verdict(planning.Shape.of(a, b), accuracy, engine, planning.device_profile(a.device))
    return verdict is not None and verdict.native


def operands(a, b, accuracy, engine) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """a and b as float64 (complex128) tensors on one device, 1-D operands promoted and batch
    dimensions broadcast as numpy.matmul does, with the axes to squeeze from the result."""
    check_options(accuracy, engine)
    device = next((x.device for x in (a, b) if isinstance(x, torch.Tensor)), None)
    ta = as_operand_tensor(a, "a", device)
    tb = as_operand_tensor(b, "b", ta.device if device is None else device)
    shape_a, shape_b = tuple(ta.shape), tuple(tb.shape)

    vector_a, vector_b = ta.dim() == 1, tb.dim() == 1
    if vector_a:
        ta = ta[None, :]
    if vector_b:
        tb = tb[:, None]
    if ta.shape[-1] != tb.shape[-2]:
        raise ValueError(
            f"matmul: shapes {shape_a} and {shape_b} do not match: the last axis of a ({ta.shape[-1]}) "
            f"must equal the {'only' if vector_b else 'second-to-last'} axis of b ({tb.shape[-2]})"
        )
    squeeze = (-2,) * vector_a + (-1,) * vector_b  # -2 first: then b's axis is the last
    try:
        return *_broadcast(ta, tb), squeeze
    except RuntimeError:
        raise ValueError(f"matmul: batch dimensions of shapes {shape_a} and {shape_b} do not broadcast") from None


def _broadcast(ta: torch.Tensor, tb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ta and tb with their batch dimensions broadcast to one shape (RuntimeError where they do not)."""
    if ta.shape[:-2] == tb.shape[:-2]:  # plain 2-D products among them: no broadcast rules
        return ta, tb
    batch = torch.broadcast_shapes(ta.shape[:-2], tb.shape[:-2])
    return ta.expand(*batch, *ta.shape[-2:]), tb.expand(*batch, *tb.shape[-2:])
