"""Stage 4 and 5, CRT and unscaling: residues become one correctly rounded float64.

Garner's algorithm gives the mixed-radix digits of the unique X ∈ [0, M), M = ∏ m_i, with
X ≡ C'_i (mod m_i):

    X = v_0 + m_0·(v_1 + m_1·(v_2 + …)),     v_i ∈ [0, m_i)

The signed product is Y = X − M when 2X ≥ M, else X (so |A'B'| < M/2 is recovered
exactly).  Y is expanded into 32-bit limbs and rounded once, to nearest with ties to even,
as Y · 2^exponent (exponent = −s_i − t_j undoes the scaling): subnormal results and
overflow to ±inf included.  The bits depend only on the exact integer, never on the moduli.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from ._bits import ldexp

__all__ = ["garner", "round_to_float64", "signed_limbs"]

LIMB_BITS = 32
_LIMB_MASK = (1 << LIMB_BITS) - 1


def garner(c: torch.Tensor, moduli: Sequence[int]) -> torch.Tensor:
    """Mixed-radix digits v (shape of ``c``, int64) of X ≡ c_i (mod m_i); c may hold any integers."""
    if c.shape[0] != len(moduli):
        raise ValueError(f"{c.shape[0]} residue planes for {len(moduli)} moduli")
    for m in moduli:
        if not 2 <= m < 2**31:
            raise ValueError(f"modulus {m} outside [2, 2^31): Garner's products must stay in int64")
    digits = torch.empty_like(c)
    for i, m in enumerate(moduli):
        t = torch.remainder(c[i], m)
        # t ← (t − v_j) · m_j⁻¹ mod m_i for j < i peels the lower digits off X mod m_i.
        for j in range(i):
            inverse = pow(moduli[j], -1, m)  # ValueError here means the moduli are not coprime
            t = torch.remainder((t - digits[j]) * inverse, m)
        digits[i] = t
    return digits


def _limb_count(moduli: Sequence[int]) -> int:
    return math.prod(moduli).bit_length() // LIMB_BITS + 1


def _constant_limbs(value: int, count: int, like: torch.Tensor) -> torch.Tensor:
    limbs = [(value >> (LIMB_BITS * i)) & _LIMB_MASK for i in range(count)]
    return torch.tensor(limbs, dtype=torch.int64, device=like.device).reshape(count, *([1] * like.dim()))


def _subtract(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a − b limb by limb; returns (difference mod 2^(32·L), borrow out: 1 where a < b)."""
    out = torch.empty(torch.broadcast_shapes(a.shape, b.shape), dtype=torch.int64, device=a.device)
    borrow = torch.zeros(out.shape[1:], dtype=torch.int64, device=a.device)
    for i in range(out.shape[0]):
        d = a[i] - b[i] - borrow
        borrow = (d < 0).to(torch.int64)
        out[i] = d & _LIMB_MASK
    return out, borrow


def signed_limbs(digits: torch.Tensor, moduli: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """|Y| as little-endian 32-bit limbs (shape (L, ...)) and the sign (True where Y < 0)."""
    count = _limb_count(moduli)
    limbs = torch.zeros((count, *digits.shape[1:]), dtype=torch.int64, device=digits.device)
    # Horner from the top digit: X ← X·m_i + v_i; limb·m_i < 2^32·2^31 fits in int64.
    for i in reversed(range(len(moduli))):
        limbs *= moduli[i]
        limbs[0] += digits[i]
        for j in range(count - 1):
            limbs[j + 1] += limbs[j] >> LIMB_BITS
            limbs[j] &= _LIMB_MASK
    modulus = math.prod(moduli)
    _, below_half = _subtract(limbs, _constant_limbs((modulus + 1) // 2, count, digits[0]))
    negative = below_half == 0
    complement, _ = _subtract(_constant_limbs(modulus, count, digits[0]), limbs)
    return torch.where(negative, complement, limbs), negative


def _bit_at(limbs: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Bit ``position`` (≥ 0, per element) of the limb number."""
    index = (position // LIMB_BITS).clamp(max=limbs.shape[0] - 1)
    limb = torch.gather(limbs, 0, index.unsqueeze(0)).squeeze(0)
    inside = position < LIMB_BITS * limbs.shape[0]
    return ((limb >> (position % LIMB_BITS)) & 1) * inside


def _any_below(limbs: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """Whether any bit strictly below ``position`` (≥ 0) is set."""
    index = (position // LIMB_BITS).clamp(max=limbs.shape[0] - 1)
    limb = torch.gather(limbs, 0, index.unsqueeze(0)).squeeze(0)
    low_mask = (torch.ones_like(position) << (position % LIMB_BITS)) - 1
    in_limb = (limb & low_mask) != 0
    nonzero_upto = torch.cummax((limbs != 0).to(torch.int64), dim=0).values  # any non-zero limb ≤ j
    below = torch.gather(nonzero_upto, 0, (index - 1).clamp(min=0).unsqueeze(0)).squeeze(0)
    return in_limb | ((index >= 1) & (below != 0))


def round_to_float64(digits: torch.Tensor, moduli: Sequence[int], exponent: torch.Tensor) -> torch.Tensor:
    """Y · 2^exponent rounded to float64 (nearest, ties to even), Y the signed CRT integer.

    An exact zero gives +0.0.
    """
    limbs, negative = signed_limbs(digits, moduli)
    count = limbs.shape[0]
    exponent = exponent.to(torch.int64).expand(limbs.shape[1:])
    # Bit length h of |Y| from its top non-zero limb (float64 holds a 32-bit limb exactly).
    nonzero = limbs != 0
    positions = torch.arange(count, device=limbs.device).reshape(count, *([1] * (limbs.dim() - 1)))
    top = torch.where(nonzero, positions, -1).amax(dim=0)
    top_limb = torch.gather(limbs, 0, top.clamp(min=0).unsqueeze(0)).squeeze(0)
    length = LIMB_BITS * top + torch.frexp(top_limb.to(torch.float64))[1].to(torch.int64)
    # Drop q bits: keep 53 significant bits, fewer where the result is subnormal (its last
    # bit may not weigh less than 2^-1074).
    drop = torch.maximum(torch.maximum(length - 53, -1074 - exponent), torch.zeros_like(length))
    kept = torch.zeros_like(length)
    for j in range(count):
        shift = LIMB_BITS * j - drop
        left = limbs[j] << shift.clamp(0, 62)
        right = limbs[j] >> (-shift).clamp(0, 63)
        kept += torch.where(shift >= 0, left, right)
    half_bit = torch.where(drop >= 1, _bit_at(limbs, (drop - 1).clamp(min=0)), 0)
    sticky = (drop >= 2) & _any_below(limbs, (drop - 1).clamp(min=0))
    round_up = (half_bit == 1) & (sticky | ((kept & 1) == 1))
    kept = kept + round_up.to(torch.int64)
    magnitude = ldexp(kept.to(torch.float64), drop + exponent)
    magnitude = torch.where(top < 0, 0.0, magnitude)
    return torch.where(negative, -magnitude, magnitude)
