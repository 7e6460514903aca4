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
    """|Y| as little-endian 21-bit limbs (shape (L, ...)) and the sign (True where Y < 0).

    Needs |Y| < M/4 (the pipeline asks for ∏m > 4·K·2^p·2^q): then X/M lies below ¼ or
    above ¾, and a float64 estimate of X/M, good to N·2^-52, tells the sign unambiguously.
    """
    _check_moduli(moduli)
    modulus = math.prod(moduli)
    weights = _radix_weights(moduli)
    v = digits.to(torch.float64)
    # X/M = Σ_i v_i·P_i/M (Python's int/int division rounds each weight once).
    fractions = torch.tensor([w / modulus for w in weights], dtype=torch.float64, device=v.device)
    estimate = torch.tensordot(fractions, v, dims=1)
    if bool(((estimate > 0.25) & (estimate < 0.75)).any()):
        raise ValueError("a CRT value reaches M/4 in magnitude: the moduli's capacity is too small for these products")
    negative = estimate > 0.5
    # Limb c of X before carries: Σ_i v_i·(limb c of P_i), each term below 2^(31 + 21).
    count = modulus.bit_length() // LIMB_BITS + 1
    chunks = [[(w >> (LIMB_BITS * c)) & _LIMB_MASK for w in weights] for c in range(count)]
    chunks = torch.tensor(chunks, dtype=torch.float64, device=v.device)
    limbs = torch.tensordot(chunks, v, dims=1).to(torch.int64)
    # |Y| = M − X where negative; borrows are settled by the signed carries below.
    modulus_limbs = [(modulus >> (LIMB_BITS * c)) & _LIMB_MASK for c in range(count)]
    for c in range(count):
        limbs[c] = torch.where(negative, modulus_limbs[c] - limbs[c], limbs[c])
    for c in range(count - 1):
        limbs[c + 1] += limbs[c] >> LIMB_BITS  # arithmetic shift: a negative limb borrows
        limbs[c] &= _LIMB_MASK
    return limbs, negative


def _low_bits(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """x mod 2^count for 0 ≤ count ≤ 63 (per element)."""
    return x & ((torch.ones_like(x) << count) - 1)


def round_to_float64(digits: torch.Tensor, moduli: Sequence[int], exponent: torch.Tensor) -> torch.Tensor:
    """Y · 2^exponent rounded to float64 (nearest, ties to even), Y the signed CRT integer.

    Only the top four limbs (84 bits) can hold the 53 kept bits and the rounding bit; every
    lower limb only matters through the sticky bit.  An exact zero gives +0.0.  Needs
    |Y| < M/4 (see :func:`signed_limbs`).
    """
    limbs, negative = signed_limbs(digits, moduli)
    count = limbs.shape[0]
    exponent = exponent.to(torch.int64).expand(limbs.shape[1:])

    nonzero = limbs != 0
    positions = torch.arange(count, device=limbs.device).reshape(count, *([1] * (limbs.dim() - 1)))
    top = torch.where(nonzero, positions, 0).amax(dim=0)
    bottom = (top - 3).clamp(min=0)  # the window: limbs bottom … bottom + 3
    window = torch.gather(limbs, 0, torch.stack([bottom, bottom + 1, bottom + 2, bottom + 3]).clamp(max=count - 1))
    window[1:] *= (torch.arange(1, 4, device=limbs.device).reshape(3, *([1] * (limbs.dim() - 1))) + bottom) < count
    high = (window[3] << LIMB_BITS) | window[2]  # bits 42…83 of the window
    low = (window[1] << LIMB_BITS) | window[0]  # bits 0…41
    below = nonzero.sum(dim=0) > (window != 0).sum(dim=0)  # a set bit under the window

    # |Y| has `length` bits; drop the window's lowest `drop` bits so that 53 remain, more
    # where the result is subnormal (its last bit may weigh no less than 2^-1074).
    base = LIMB_BITS * bottom
    top_limb = torch.gather(limbs, 0, top.unsqueeze(0)).squeeze(0)
    length = LIMB_BITS * top + torch.frexp(top_limb.to(torch.float64))[1].to(torch.int64)
    drop = (torch.maximum(length - 53, -1074 - exponent) - base).clamp(min=0, max=4 * LIMB_BITS + 1)
    high_part = drop >= 2 * LIMB_BITS
    kept = torch.where(
        high_part,
        high >> (drop - 2 * LIMB_BITS).clamp(0, 63),
        (high << (2 * LIMB_BITS - drop).clamp(min=0)) | (low >> drop.clamp(max=63)),
    )
    half_position = drop - 1
    half_bit = torch.where(
        half_position >= 2 * LIMB_BITS,
        high >> (half_position - 2 * LIMB_BITS).clamp(0, 63),
        low >> half_position.clamp(0, 63),
    ) & (half_position >= 0)
    sticky = below | torch.where(
        half_position >= 2 * LIMB_BITS,
        (low != 0) | (_low_bits(high, (half_position - 2 * LIMB_BITS).clamp(0, 63)) != 0),
        _low_bits(low, half_position.clamp(0, 63)) != 0,
    )
    kept = kept + ((half_bit == 1) & (sticky | ((kept & 1) == 1))).to(torch.int64)
    magnitude = ldexp(kept.to(torch.float64), base + drop + exponent)
    return torch.where(negative, -magnitude, magnitude)
