"""``ozaki.matmul`` and ``ozaki.explain``: numpy.matmul's semantics around the emulated product.

Operands are validated and promoted to float64, 1-D operands and batch dimensions are
handled as numpy does; the pipeline reads the operands, has one plan decide the call (the
moduli, or native DGEMM where, for ``engine="auto"`` with ``accuracy="fp64"`` on a GPU, the
cost model predicts it faster) and runs it (:func:`ozaki.pipeline.prepare`,
:func:`ozaki.pipeline.run`), and NaN and ±Inf are placed where numpy's matmul puts them.
"""

from __future__ import annotations

import logging
import numbers

import numpy as np
import torch

from . import pipeline
from . import planning
from .planning import ENGINES, ProductPlan
from .timing import stage

__all__ = ["check_options", "explain", "matmul", "nonfinite_terms", "overlay_nonfinite"]

log = logging.getLogger("ozaki")

_MAX_FIXED_BITS = 2200  # past every float64 exponent span: fixed bits beyond it change nothing


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
        raise ValueError(f"accuracy={accuracy}: a number of input bits must lie in [1, {_MAX_FIXED_BITS}]")
    raise ValueError(f"accuracy={accuracy!r} is not one of 'fp64', 'exact' or a number of input bits (int)")


def _as_float64_tensor(x, name: str, device: torch.device | None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        t = x
    else:
        array = np.asarray(x)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{name} has dtype {array.dtype}; ozaki.matmul takes numeric arrays")
        if array.dtype.kind == "c":
            raise TypeError(f"{name} is complex ({array.dtype}): complex products are not supported yet")
        if array.ndim == 0:
            raise ValueError(f"{name} is a scalar; matmul needs operands with at least one dimension (use * for scalars)")
        t = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    if t.is_complex():
        raise TypeError(f"{name} is complex ({t.dtype}): complex products are not supported yet")
    if device is not None and t.device != device:
        raise ValueError(f"operands are on different devices ({device} and {t.device}); move them to one device")
    if t.dim() == 0:
        raise ValueError(f"{name} is a scalar; matmul needs operands with at least one dimension (use * for scalars)")
    return t if t.dtype == torch.float64 else t.to(torch.float64)


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


def matmul(a, b, *, accuracy="fp64", engine: str = "auto"):
    """The float64 matrix product a @ b, emulated with the Ozaki scheme II.

    Semantics are ``numpy.matmul``'s: 1-D operands are promoted to a row/column and the
    added axis removed afterwards, leading (batch) dimensions broadcast.  numpy (or array-like)
    operands give a numpy array, torch tensors give a torch tensor on their device.  Integer,
    boolean and lower-precision float inputs are promoted to float64; complex raises TypeError.

    accuracy:
        ``"fp64"`` (default): DGEMM-level.  The bits kept per row of A and column of B follow
        from an exact lower bound of |A||B| (:mod:`ozaki.accuracy`) so that elementwise
        |Ĉ − C| ≤ u|C| + 2^-g·(1 + 2^-19)·√K·u·(|A||B|) + 2^-1075 (u = 2^-53; the last term is half
        the smallest subnormal), g ≥ 4 reported by ``ozaki.explain(...).guard``: √K·2^g times
        inside DGEMM's worst-case bound u|C| + K·u·(|A||B|).  The moduli are the fewest those
        bits need, and every row then keeps all the bits the int8 plan of that need pays for,
        on every engine, so all engines return the same bits (which, unlike "exact", depend on
        the whole of A and B, not on one row and one column).  A result whose bound reaches the
        overflow threshold may round to ±inf, as DGEMM's may.  With the default
        ``engine="auto"`` on a GPU, the product is computed by native float64 matmul (cuBLAS
        DGEMM) unless the cost model (:mod:`ozaki.cost`, fixed per device and shape, never
        timed at call time) predicts the emulation at least 5% faster
        (``ozaki.cost.EMULATION_MARGIN``); the result then carries DGEMM's
        accuracy and is not bitwise reproducible across devices.  A debug message on the
        ``"ozaki"`` logger says which path ran and why.  Pass ``accuracy="exact"`` or an explicit
        engine for guaranteed emulated bits.
        ``"exact"``: the correctly rounded (nearest, ties to even) value of the exact product.
        ``int`` b: fast mode with b bits per row; |Ĉ − C| ≤ ε·(max|A_i:|·Σ|B_:j| +
        Σ|A_i:|·max|B_:j|) + ε²·K·max|A_i:|·max|B_:j| + u|C| + 2^-1075 elementwise,
        ε = 1/(2^b − 1).
    engine:
        ``"auto"`` (fastest exact engine for the device: an int8 plan on a GPU, the reference
        engine on the CPU; on a GPU with ``"fp64"`` possibly native DGEMM, see above),
        ``"reference"`` (float64 BLAS on residues), or a plan engine ``"int8"``, ``"fp8"``,
        ``"fp4"``.  All engines return the same bits.

    NaN and ±Inf inputs give NaN/±Inf exactly where numpy's matmul does; finite results beyond
    the float64 range become ±inf; an exact zero is +0.0.
    """
    if _shape_sends_to_dgemm(a, b, accuracy, engine):
        return torch.matmul(a, b)
    ta, tb, squeeze = _operands(a, b, accuracy, engine)
    with stage("plan", ta.device):
        call = pipeline.prepare(ta, tb, accuracy, engine)
    out = pipeline.run(call)  # on the native path, IEEE semantics for NaN and ±Inf as numpy's matmul
    if call.plan.nonfinite:
        # The finite terms went through the emulation; NaN/Inf positions are overlaid after.
        out = overlay_nonfinite(out, nonfinite_terms(ta, tb))
    for axis in squeeze:
        out = out.squeeze(axis)
    torch_out = isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)
    return out if torch_out else out.cpu().numpy()


def _shape_sends_to_dgemm(a, b, accuracy, engine) -> bool:
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


def explain(a, b, *, accuracy="fp64", engine: str = "auto") -> ProductPlan:
    """How ``ozaki.matmul(a, b, accuracy=..., engine=...)`` would compute the product, without
    computing it: the path (``"native"`` DGEMM or ``"emulated"``), the engine and its moduli,
    the low-precision GEMMs (``products``), the (fewest, most) bits kept per row of A and per
    column of B, the documented elementwise error bound and, on a device with a cost profile,
    the predicted times (``predicted``).  Reads the inputs' exponents where the shape alone
    does not decide, as matmul does."""
    ta, tb, _ = _operands(a, b, accuracy, engine)
    return pipeline.prepare(ta, tb, accuracy, engine, early=False).plan


def _operands(a, b, accuracy, engine) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """a and b as float64 tensors on one device, 1-D operands promoted and batch dimensions
    broadcast as numpy.matmul does, with the axes to squeeze from the result."""
    check_options(accuracy, engine)
    device = next((x.device for x in (a, b) if isinstance(x, torch.Tensor)), None)
    ta = _as_float64_tensor(a, "a", device)
    tb = _as_float64_tensor(b, "b", ta.device if device is None else device)
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
    if ta.shape[:-2] == tb.shape[:-2]:  # plain 2-D products among them: no broadcast rules
        return ta, tb, squeeze
    try:
        batch = torch.broadcast_shapes(ta.shape[:-2], tb.shape[:-2])
    except RuntimeError:
        raise ValueError(f"matmul: batch dimensions of shapes {shape_a} and {shape_b} do not broadcast") from None
    return ta.expand(*batch, *ta.shape[-2:]), tb.expand(*batch, *tb.shape[-2:]), squeeze
