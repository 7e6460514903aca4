"""Exact float64 helpers shared by the pipeline stages.

``torch.ldexp`` multiplies by ``2.0 ** e`` computed in floating point; building the
power from its IEEE bits keeps every step exact and device-independent.

The stages run their elementwise work in blocks of fewer than :data:`BLOCK` elements: each
block's temporaries stay in cache and are small enough for the allocator to recycle, whereas
one pass over a whole 2048 × 2048 operand costs a fresh 32 MiB allocation (page faults
included) and a trip through main memory.  Below 2^15 elements torch also runs an
elementwise op on the calling thread alone: on a loaded machine a pool thread that waits
for a descheduled partner costs more than the op.  (torch.round, floor and trunc split
from 2048 elements on, hence :func:`round_`.)  Elementwise results do not depend on
blocking.
"""

from __future__ import annotations

import torch

from kernels.float64 import MAX_EXPONENT, MIN_NORMAL_EXPONENT

__all__ = ["BLOCK", "FLOOR_MOD_LIMIT", "blocks", "floor_mod", "ldexp", "pow2", "round_"]


BLOCK = 1 << 15

_ROUNDING_MAGIC = 2.0**52

# floor_mod is exact for integers t with |t| ≤ FLOOR_MOD_LIMIT (see its proof).
FLOOR_MOD_LIMIT = 2**50


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as float64 for integer e in [-1022, 1023] (values outside are clamped)."""
    e = e.to(torch.int64).clamp(MIN_NORMAL_EXPONENT, MAX_EXPONENT)
    return ((e + 1023) << 52).view(torch.float64)


def ldexp(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """x · 2^e rounded once to float64 (to ±inf beyond the range) when x · 2^(clamp(e)) is
    exact; two exact power-of-two factors reach the subnormal range and overflow."""
    e = e.to(torch.int64)
    first = e.clamp(MIN_NORMAL_EXPONENT, MAX_EXPONENT)
    return x * pow2(first) * pow2(e - first)


def blocks(count: int, width: int, device: torch.device) -> list[slice]:
    """Consecutive slices covering range(count), each of ``width`` elements per index and
    fewer than BLOCK in all (unless one index alone is wider); one slice off the CPU, where a
    kernel launch per block would cost more than it saves."""
    if device.type != "cpu":
        return [slice(0, count)] if count else []
    step = max(1, (BLOCK - 1) // max(1, width))
    return [slice(start, min(start + step, count)) for start in range(0, count, step)]


def round_(z: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """z rounded in place to the nearest integer, ties to even, for float64 |z| < 2^52;
    entries where ``keep`` is True are left as they are (any value).

    z ± 2^52 (the sign of z) lies in [2^52, 2^53) in magnitude, where float64 steps by 1, so
    the addition rounds z to an integer (2^52 is even, so ties go to even z) and the
    subtraction is exact."""
    # Filled on the device: a tensor made from the constant would be a copy from the host.
    magic = torch.full_like(z, _ROUNDING_MAGIC).copysign_(z)
    if keep is not None:
        magic.masked_fill_(keep, 0.0)
    return z.add_(magic).sub_(magic)


def floor_mod(t: torch.Tensor, m: int, out: torch.Tensor, low: int = 0) -> torch.Tensor:
    """The representative of t mod m in [low, low + m) for float64 integers |t| ≤ 2^50,
    written to ``out`` (which may be ``t``); |low| < m < 2^31.

    With q = ⌊(t − low)/m⌋ and k = t − low − q·m ∈ [0, m), the quotient
    (t − low + ½ − m/2)/m = q + (2k + 1 − m)/(2m) lies within ½ − 1/(2m) of q, so rounding
    it gives q whenever the computed quotient is off by less than 1/(2m).  It is: t + c with
    c = ½ − low − m/2 is exact (|t + c| < 2^50.9, at most one fraction bit), and
    fl((t + c)·w) with w = fl(1/m) differs from (t + c)/m by at most |(t + c)/m|·2^-51.9
    (|w − 1/m| ≤ 2^-53/m plus one rounding of the product) < 1/(2m).  Then |q·m| ≤ |t| + 2m
    < 2^53 is exact, and t − q·m, an integer in [low, low + m), is representable, so the
    subtraction (fused or not) is exact too.
    """
    q = round_(torch.add(t, 0.5 - low - m / 2).mul_(1.0 / m))
    return torch.add(t, q, alpha=-m, out=out)
