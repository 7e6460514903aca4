"""Exact powers of two for float64 tensors, built from their bit patterns.

``torch.ldexp`` multiplies by ``2.0 ** e`` computed in floating point; building the
power from its IEEE bits keeps every step exact and device-independent.
"""

from __future__ import annotations

import torch

__all__ = ["ldexp", "pow2"]

_MIN_NORMAL_EXPONENT = -1022
_MAX_EXPONENT = 1023


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as float64 for integer e in [-1022, 1023] (values outside are clamped)."""
    e = e.to(torch.int64).clamp(_MIN_NORMAL_EXPONENT, _MAX_EXPONENT)
    return ((e + 1023) << 52).view(torch.float64)


def ldexp(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """x · 2^e rounded once to float64 (to ±inf beyond the range) when x · 2^(clamp(e)) is
    exact; two exact power-of-two factors reach the subnormal range and overflow."""
    e = e.to(torch.int64)
    first = e.clamp(_MIN_NORMAL_EXPONENT, _MAX_EXPONENT)
    return x * pow2(first) * pow2(e - first)
