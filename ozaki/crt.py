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

LIMB_BITS = 21
_LIMB_MASK = (1 << LIMB_BITS) - 1
# Garner's sums and the limb expansion run as float64 GEMMs of integers: exact while every
# partial sum stays below 2^53.
_FLOAT64_EXACT = 2**53


def _radix_weights(moduli: Sequence[int]) -> list[int]:
    """P_i = m_0 ⋯ m_{i-1}, the weight of mixed-radix digit i."""
    return [math.prod(moduli[:i]) for i in range(len(moduli))]


def _check_moduli(moduli: Sequence[int]) -> None:
    for m in moduli:
        if not 2 <= m < 2**31:
            raise ValueError(f"modulus {m} outside [2, 2^31): Garner's products must stay in int64")
    # Garner sums N terms below max(m)², the limb expansion N terms below max(m)·2^21.
    biggest = max(moduli)
    if len(moduli) * biggest * max(biggest, 1 << LIMB_BITS) >= _FLOAT64_EXACT:
        raise ValueError(
            f"{len(moduli)} moduli up to {biggest}: N·max(m)·max(m, 2^{LIMB_BITS}) reaches 2^53, so the CRT's "
            "float64 sums would round; use fewer or smaller moduli"
        )


def garner(c: torch.Tensor, moduli: Sequence[int]) -> torch.Tensor:
    """Mixed-radix digits v (shape of ``c``, int64) of X ≡ c_i (mod m_i); c may hold any integers.

        v_i = (c_i − Σ_{j<i} v_j·(P_j mod m_i)) · (P_i mod m_i)⁻¹  mod m_i
    """
    if c.shape[0] != len(moduli):
        raise ValueError(f"{c.shape[0]} residue planes for {len(moduli)} moduli")
    _check_moduli(moduli)
    weights = _radix_weights(moduli)
    digits = torch.empty(c.shape, dtype=torch.float64, device=c.device)
    for i, m in enumerate(moduli):
        t = c[i]
        if i:
            # The lower digits' part of X mod m_i, as one exact float64 product.
            lower = torch.tensor([w % m for w in weights[:i]], dtype=torch.float64, device=c.device)
            t = t - torch.tensordot(lower, digits[:i], dims=1).to(torch.int64)
            inverse = pow(weights[i] % m, -1, m)  # ValueError here: the moduli are not coprime
            t = torch.remainder(t, m) * inverse
        digits[i] = torch.remainder(t, m)
    return digits.to(torch.int64)


def signed_limbs(digits: torch.Tensor, moduli: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """|Y| as little-endian 21-bit limbs (shape (L, ...)) and the sign (True where Y < 0)."""
    _check_moduli(moduli)
    modulus = math.prod(moduli)
    weights = _radix_weights(moduli)
    # X > ⌊M/2⌋ (so Y = X − M < 0): compare the mixed-radix digits from the top.
    half, half_digits = modulus // 2, []
    for m in moduli:
        half, digit = divmod(half, m)
        half_digits.append(digit)
    greater = torch.zeros(digits.shape[1:], dtype=torch.bool, device=digits.device)
    equal = torch.ones_like(greater)
    for v, h in zip(reversed(digits), reversed(half_digits)):
        greater |= equal & (v > h)
        equal &= v == h
    negative = greater
    # M − X = Σ (m_i − 1 − v_i)·P_i + 1: complement the digits, add the 1 to the lowest limb.
    top = torch.tensor([m - 1 for m in moduli], dtype=torch.int64, device=digits.device)
    top = top.reshape(-1, *([1] * (digits.dim() - 1)))
    magnitude = torch.where(negative, top - digits, digits)
    # Limb c of |Y| before carries: Σ_i w_i·(limb c of P_i), each term < 2^(31 + 21).
    count = modulus.bit_length() // LIMB_BITS + 1
    chunks = [[(w >> (LIMB_BITS * c)) & _LIMB_MASK for w in weights] for c in range(count)]
    chunks = torch.tensor(chunks, dtype=torch.float64, device=digits.device)
    limbs = torch.tensordot(chunks, magnitude.to(torch.float64), dims=1).to(torch.int64)
    limbs[0] += negative
    for c in range(count - 1):
        limbs[c + 1] += limbs[c] >> LIMB_BITS
        limbs[c] &= _LIMB_MASK
    return limbs, negative


def _low_bits(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """x mod 2^count for 0 ≤ count ≤ 63 (per element)."""
    return x & ((torch.ones_like(x) << count) - 1)


def round_to_float64(digits: torch.Tensor, moduli: Sequence[int], exponent: torch.Tensor) -> torch.Tensor:
    """Y · 2^exponent rounded to float64 (nearest, ties to even), Y the signed CRT integer.

    Only the top four limbs (84 bits) can hold the 53 kept bits and the rounding bit; every
    lower limb only matters through the sticky bit.  An exact zero gives +0.0.
    """
    limbs, negative = signed_limbs(digits, moduli)
    # Three zero limbs below the lowest make the four-limb window exist for every value.
    pad = torch.zeros((3, *limbs.shape[1:]), dtype=torch.int64, device=limbs.device)
    limbs = torch.cat([pad, limbs])
    exponent = exponent.to(torch.int64).expand(limbs.shape[1:]) - 3 * LIMB_BITS
    count = limbs.shape[0]

    nonzero = limbs != 0
    positions = torch.arange(count, device=limbs.device).reshape(count, *([1] * (limbs.dim() - 1)))
    top = torch.where(nonzero, positions, 3).amax(dim=0)  # a zero value reads the (zero) bottom window
    window = torch.gather(limbs, 0, torch.stack([top - 3, top - 2, top - 1, top]))
    high = (window[3] << LIMB_BITS) | window[2]  # bits 42…83 of the window
    low = (window[1] << LIMB_BITS) | window[0]  # bits 0…41
    below = nonzero.sum(dim=0) > (window != 0).sum(dim=0)  # a set bit under the window

    # |Y| has `length` bits; drop the lowest `drop` of the window's bits so 53 remain, more
    # where the result is subnormal (its last bit may weigh no less than 2^-1074).
    base = LIMB_BITS * (top - 3)
    length = LIMB_BITS * top + torch.frexp(window[3].to(torch.float64))[1].to(torch.int64)
    drop = torch.maximum(length - 53, -1074 - exponent) - base
    drop = drop.clamp(min=1, max=4 * LIMB_BITS + 1)  # ≥ 11 for a non-zero value; 85 drops all
    high_part = drop >= 2 * LIMB_BITS
    kept = torch.where(
        high_part,
        high >> (drop - 2 * LIMB_BITS).clamp(max=63),
        (high << (2 * LIMB_BITS - drop).clamp(min=0)) | (low >> drop.clamp(max=63)),
    )
    half_position = drop - 1
    half_bit = torch.where(
        half_position >= 2 * LIMB_BITS,
        high >> (half_position - 2 * LIMB_BITS).clamp(0, 63),
        low >> half_position.clamp(max=63),
    ) & 1
    sticky = below | torch.where(
        half_position >= 2 * LIMB_BITS,
        (low != 0) | (_low_bits(high, (half_position - 2 * LIMB_BITS).clamp(0, 63)) != 0),
        _low_bits(low, half_position.clamp(0, 63)) != 0,
    )
    kept = kept + ((half_bit == 1) & (sticky | ((kept & 1) == 1))).to(torch.int64)
    magnitude = ldexp(kept.to(torch.float64), base + drop + exponent)
    return torch.where(negative, -magnitude, magnitude)
