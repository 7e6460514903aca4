"""Stage 1, scaling: a row of float64 values becomes a row of integers.

    A'_ik = round(A_ik · 2^s_i),   s_i = p_i − top_i,   |A'_ik| ≤ 2^p_i

where ``top_i`` is the smallest integer with every |A_ik| < 2^top_i and ``p_i`` the bits
kept for that row.  Rounding is to nearest, ties to even; it is the only lossy step of
the whole emulation, so the choice of ``p_i`` decides the accuracy.  Columns of B are
rows of Bᵀ.

Every integer is kept as ``mantissa · 2^exponent`` (``exponent ≥ 0``, ``|mantissa| ≤ 2^53``)
so rows may keep any number of bits — far more than int64 holds — and residues are taken
straight from that form (see :mod:`ozaki.residues`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._bits import ldexp

__all__ = [
    "GUARD_BITS",
    "Scaled",
    "exact_bits",
    "fixed_bits",
    "fp64_bits",
    "scale_rows",
]

# Extra bits beyond float64's 53 in "fp64" mode: each quantized entry then carries a
# componentwise relative error of at most 2^-(53 + GUARD_BITS), see fp64_bits.
GUARD_BITS = 2

_MANTISSA_BITS = 53


@dataclass(frozen=True)
class Scaled:
    """Rows of integers ``mantissa · 2^exponent`` equal to ``round(x · 2^shift)``."""

    mantissa: torch.Tensor  # int64, |mantissa| ≤ 2^53
    exponent: torch.Tensor  # int64, ≥ 0
    shift: torch.Tensor  # int64, one per row
    bits: torch.Tensor  # int64, one per row: every |integer| ≤ 2^bits


def _decompose(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x = m · 2^e exactly with m an int64 of at most 53 bits (zero gives m = 0)."""
    fraction, exponent = torch.frexp(x)
    mantissa = (fraction * 2.0**_MANTISSA_BITS).to(torch.int64)
    return mantissa, exponent.to(torch.int64) - _MANTISSA_BITS


def _top(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the smallest integer ``top`` with every |x| < 2^top, and whether the row
    has a non-zero entry."""
    row_max = x.abs().amax(dim=-1)
    return torch.frexp(row_max)[1].to(torch.int64), row_max > 0


def _row_extents(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row: ``top``, ``low_top`` (the smallest frexp exponent of a non-zero entry),
    ``lowest_bit`` (the weight of the lowest set bit of any entry) and whether the row has a
    non-zero entry at all."""
    mantissa, exponent = _decompose(x)
    nonzero = mantissa != 0
    big = torch.iinfo(torch.int64).max // 4
    low_top = torch.where(nonzero, exponent + _MANTISSA_BITS, big).amin(dim=-1)
    # The lowest set bit of m is m & -m, a power of two that float64 holds exactly.
    lowest = torch.frexp((mantissa & -mantissa).to(torch.float64))[1].to(torch.int64) - 1 + exponent
    lowest_bit = torch.where(nonzero, lowest, big).amin(dim=-1)
    return _top(x)[0], low_top, lowest_bit, nonzero.any(dim=-1)


def exact_bits(x: torch.Tensor) -> torch.Tensor:
    """Bits per row that make the scaling lossless: the span from the row's highest bit
    to its lowest set bit (0 for an all-zero row)."""
    top, _, lowest_bit, has_nonzero = _row_extents(x)
    return torch.where(has_nonzero, top - lowest_bit, 0)


def fp64_bits(x: torch.Tensor, guard: int = GUARD_BITS) -> torch.Tensor:
    """Bits per row for ``accuracy="fp64"``.

    With p = 53 + guard + (top − low_top) bits, the rounding error of an entry with
    |x| ≥ 2^(low_top − 1) is at most 2^(top − p − 1) ≤ 2^-(53 + guard) · |x|: every entry,
    the smallest included, keeps a componentwise relative error of 2^-(53 + guard).  Hence
    |Ĉ − C| ≤ 2^(1 − 53 − guard)·(|A||B|) + u·|C|, inside DGEMM's own bound u|C| + K·u·(|A||B|).
    A row needs no more than its lossless width, so wide rows with short mantissas stay
    exact; the price of a wide exponent spread is paid in bits, never in accuracy.
    """
    top, low_top, lowest_bit, has_nonzero = _row_extents(x)
    spread_bits = _MANTISSA_BITS + guard + (top - low_top)
    return torch.where(has_nonzero, torch.minimum(spread_bits, top - lowest_bit), 0)


def fixed_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``bits`` per row (fast mode), never more than the row's lossless width.

    Error: an entry moves by at most 2^(top_i − bits − 1) < 2^-bits · max_k |A_ik|, so
    |Ĉ_ij − C_ij| ≤ 2^-bits (max|A_i:|·Σ_k|B_kj| + Σ_k|A_ik|·max|B_:j|) + 4^-bits·K·max|A_i:|·max|B_:j| + u|C_ij|.
    """
    return torch.minimum(exact_bits(x), torch.tensor(bits, dtype=torch.int64, device=x.device))


def scale_rows(x: torch.Tensor, bits: torch.Tensor) -> Scaled:
    """Round each row of ``x`` (float64, finite, shape (..., M, K)) to ``bits`` (shape (..., M)) bits."""
    if x.dtype != torch.float64:
        raise TypeError(f"scale_rows needs float64 input, got {x.dtype}")
    if bits.shape != x.shape[:-1]:
        raise ValueError(f"bits has shape {tuple(bits.shape)}, expected one entry per row {tuple(x.shape[:-1])}")
    if bits.numel() and int(bits.min()) < 0:
        raise ValueError("bits per row must be non-negative")
    top, has_nonzero = _top(x)
    shift = torch.where(has_nonzero, bits - top, 0)
    mantissa, exponent = _decompose(x)
    scaled_exponent = exponent + shift[..., None]
    # Entries whose scaled value has a fraction (scaled_exponent < 0) are below 2^53 in
    # magnitude; float64 holds x · 2^shift exactly there (or it is far below ½ and
    # rounds to zero either way), and torch.round rounds half to even.
    rounded = torch.round(ldexp(x, shift[..., None].expand_as(x))).to(torch.int64)
    fractional = scaled_exponent < 0
    return Scaled(
        mantissa=torch.where(fractional, rounded, mantissa),
        exponent=torch.where(fractional, 0, scaled_exponent),
        shift=shift,
        bits=torch.where(has_nonzero, bits, 0),
    )
