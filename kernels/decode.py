"""Fused decode: residue products -> Garner's mixed-radix digits -> one correctly rounded
float64, in one kernel.

Per entry, with the residues c_i (mod m_i) of the exact product Y and its scale 2**e:

1. Garner: v_0 = c_0, then every later residue becomes (c_i - v_j) * m_j^-1 mod m_i, so
   X = v_0 + m_0 (v_1 + m_1 (v_2 + ...)) in [0, M).  The moduli run along the first axis
   of a [moduli, entries] tile; row j is picked out with a masked sum.
2. Sign: Y = X - M when X/M > 1/2 (float64 estimate; |Y| < M/4 keeps it unambiguous).
3. |Y| in 21-bit limbs, carries settled, then one rounding to nearest even of |Y| * 2**e
   from the top four limbs plus a sticky bit, subnormals and overflow included.

The bits are those of ``ozaki.crt.garner`` + ``ozaki.crt.round_to_float64``, which the
tests check entry for entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from kernels.modular import _reduce

__all__ = ["DECODE_BLOCK", "LIMB_BITS", "decode_residues"]

DECODE_BLOCK = 64  # entries per program
LIMB_BITS = 21


@triton.jit
def _row(tile, index, j):
    # Row j of a [rows, entries] tile, rows numbered by ``index`` (broadcast against the
    # tile; per entry when 2-D); 0 where no row is numbered j.
    return tl.sum(tl.where(index == j, tile, 0), axis=0)


@triton.jit
def _pow2(e):
    # 2**e for e in [-1022, 1023] from its bit pattern (clamped outside), exact.
    e = tl.minimum(tl.maximum(e, -1022), 1023)
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _decode_kernel(
    c_ptr, row_exp_ptr, col_exp_ptr, moduli_ptr, inverse_ptr, fraction_ptr, chunk_ptr, modulus_limb_ptr,
    out_ptr, flag_ptr,
    n_moduli, n_limbs, total, cols, stride_c,
    NP: tl.constexpr, LP: tl.constexpr, LIMB: tl.constexpr, BLOCK: tl.constexpr,
):
    offs = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < total
    exponent = tl.load(row_exp_ptr + offs // cols, mask=mask, other=0) + tl.load(col_exp_ptr + offs % cols,
                                                                                  mask=mask, other=0)
    mi = tl.arange(0, NP)
    live = mi < n_moduli
    modulus = tl.load(moduli_ptr + mi, mask=live, other=1)[:, None]
    inverse = 1.0 / modulus.to(tl.float64)
    residue = tl.load(c_ptr + tl.cast(mi, tl.int64)[:, None] * stride_c + offs[None, :],
                      mask=live[:, None] & mask[None, :], other=0)
    residue = _reduce(residue.to(tl.int64), modulus, inverse)

    # 1. Garner, one digit per step; rows past j are updated, rows up to j are final.
    for j in range(n_moduli):
        v = _row(residue, mi[:, None], j)
        factor = tl.load(inverse_ptr + mi * NP + j, mask=live, other=0)[:, None]  # m_j^-1 mod m_i
        later = _reduce(_reduce(residue - v[None, :], modulus, inverse) * factor, modulus, inverse)
        residue = tl.where(mi[:, None] > j, later, residue)
    digits = residue

    # 2. Sign from X/M = sum v_i P_i / M.
    estimate = tl.sum(digits.to(tl.float64) * tl.load(fraction_ptr + mi, mask=live, other=0.0)[:, None], axis=0)
    ambiguous = (estimate > 0.25) & (estimate < 0.75) & mask
    tl.store(flag_ptr + tl.program_id(0), tl.max(ambiguous.to(tl.int32), axis=0))
    negative = estimate > 0.5

    # 3. Limbs of X (each below n * 2**52), then of M - X where negative, then carries.
    li = tl.arange(0, LP)
    limbs = tl.zeros((LP, BLOCK), dtype=tl.int64)
    for i in range(n_moduli):
        chunks = tl.load(chunk_ptr + li * NP + i, mask=li < n_limbs, other=0)
        limbs += chunks[:, None] * _row(digits, mi[:, None], i)[None, :]
    modulus_limbs = tl.load(modulus_limb_ptr + li, mask=li < n_limbs, other=0)[:, None]
    limbs = tl.where(negative[None, :] & (li[:, None] < n_limbs), modulus_limbs - limbs, limbs)
    for c in range(n_limbs - 1):
        # Arithmetic shift: a negative limb borrows from the next.
        carry = _row(limbs, li[:, None], c) >> LIMB
        limbs = tl.where(li[:, None] == c, limbs & ((1 << LIMB) - 1), limbs)
        limbs = tl.where(li[:, None] == c + 1, limbs + carry[None, :], limbs)

    # Rounding window: the top four limbs hold the 53 kept bits and the rounding bit.
    nonzero = limbs != 0
    top = tl.max(tl.where(nonzero, li[:, None], 0), axis=0)
    bottom = tl.maximum(top - 3, 0)
    w0 = _row(limbs, li[:, None] - bottom[None, :], 0)
    w1 = _row(limbs, li[:, None] - bottom[None, :], 1)
    w2 = _row(limbs, li[:, None] - bottom[None, :], 2)
    w3 = _row(limbs, li[:, None] - bottom[None, :], 3)
    high = (w3 << LIMB) | w2
    low = (w1 << LIMB) | w0
    below = tl.sum(tl.where(nonzero & (li[:, None] < bottom[None, :]), 1, 0), axis=0) > 0

    base = LIMB * bottom
    top_limb = _row(limbs, li[:, None] - top[None, :], 0)
    top_bits = ((top_limb.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022
    length = LIMB * top + tl.where(top_limb == 0, 0, top_bits)
    drop = tl.minimum(tl.maximum(tl.maximum(length - 53, -1074 - exponent) - base, 0), 4 * LIMB + 1)
    kept = tl.where(
        drop >= 2 * LIMB,
        high >> tl.minimum(tl.maximum(drop - 2 * LIMB, 0), 63),
        (high << tl.maximum(2 * LIMB - drop, 0)) | (low >> tl.minimum(drop, 63)),
    )
    half_position = drop - 1
    in_high = half_position >= 2 * LIMB
    high_shift = tl.minimum(tl.maximum(half_position - 2 * LIMB, 0), 63)
    low_shift = tl.minimum(tl.maximum(half_position, 0), 63)
    half_bit = tl.where(in_high, high >> high_shift, low >> low_shift) & 1
    half_bit = tl.where(half_position >= 0, half_bit, 0)
    one = tl.full(drop.shape, 1, tl.int64)
    sticky = below | tl.where(
        in_high,
        (low != 0) | ((high & ((one << high_shift) - 1)) != 0),
        (low & ((one << low_shift) - 1)) != 0,
    )
    kept = kept + ((half_bit == 1) & (sticky | ((kept & 1) == 1))).to(tl.int64)
    scale = base + drop + exponent
    first = tl.minimum(tl.maximum(scale, -1022), 1023)
    magnitude = kept.to(tl.float64) * _pow2(first) * _pow2(scale - first)
    tl.store(out_ptr + offs, tl.where(negative, -magnitude, magnitude), mask=mask)


def decode_residues(c: torch.Tensor, moduli: Sequence[int], row_exponent: torch.Tensor,
           col_exponent: torch.Tensor) -> torch.Tensor:
    """float64 ``[R, C]``: the signed integer Y with ``Y ≡ c[i] (mod moduli[i])`` and
    ``|Y| < M/4`` (M = prod(moduli)), times ``2**(row_exponent[r] + col_exponent[c])``,
    rounded once to nearest even.  ``c`` is an integer tensor ``[len(moduli), R, C]``."""
    if not isinstance(c, torch.Tensor) or c.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"c must be an int32 or int64 tensor, got {getattr(c, 'dtype', type(c).__name__)}")
    moduli = list(moduli)
    if c.dim() != 3 or c.shape[0] != len(moduli):
        raise ValueError(f"c has shape {tuple(c.shape)}: expected [{len(moduli)} moduli, R, C]")
    rows, cols = c.shape[1:]
    for name, exp, size in (("row_exponent", row_exponent, rows), ("col_exponent", col_exponent, cols)):
        if not isinstance(exp, torch.Tensor) or exp.dtype != torch.int64 or exp.shape != (size,):
            raise ValueError(f"{name} must be an int64 tensor of shape ({size},)")
    if c.numel() and int(c.abs().max()) >= 2**50:
        raise ValueError("c holds entries of magnitude 2**50 or more: pass residues (the kernel reduces "
                         "values below m * 2**50)")
    for m in moduli:
        if isinstance(m, bool) or not isinstance(m, int) or not 2 <= m < 2**31:
            raise ValueError(f"modulus {m!r} must be an int in [2, 2**31)")
    if not moduli:
        raise ValueError("decode needs at least one modulus")
    product = math.prod(moduli)
    n_limbs = product.bit_length() // LIMB_BITS + 1
    # Limb sums: n terms below 2**31 * 2**21 must stay inside int64.
    if len(moduli) * 2**(31 + LIMB_BITS) >= 2**63:
        raise ValueError(f"{len(moduli)} moduli: limb sums could overflow int64; use at most 2047 moduli")
    np_ = triton.next_power_of_2(len(moduli))
    weights = [math.prod(moduli[:i]) for i in range(len(moduli))]
    inverses = torch.zeros((np_, np_), dtype=torch.int64)
    for i, m in enumerate(moduli):
        for j in range(i):
            try:
                inverses[i, j] = pow(moduli[j], -1, m)
            except ValueError:
                raise ValueError(f"moduli {moduli[j]} and {m} are not coprime: the CRT needs pairwise coprime "
                                 f"moduli") from None
    mask = (1 << LIMB_BITS) - 1
    lp = triton.next_power_of_2(n_limbs)
    chunks = torch.zeros((lp, np_), dtype=torch.int64)
    for limb in range(n_limbs):
        for i, w in enumerate(weights):
            chunks[limb, i] = (w >> (LIMB_BITS * limb)) & mask
    device = c.device
    out = torch.empty((rows, cols), dtype=torch.float64, device=device)
    if out.numel() == 0:
        return out
    grid = (triton.cdiv(rows * cols, DECODE_BLOCK),)
    flags = torch.zeros(grid[0], dtype=torch.int32, device=device)
    flat = c.reshape(len(moduli), rows * cols).contiguous()
    _decode_kernel[grid](
        flat, row_exponent.contiguous(), col_exponent.contiguous(),
        torch.tensor(moduli, dtype=torch.int64, device=device), inverses.to(device),
        torch.tensor([w / product for w in weights], dtype=torch.float64, device=device), chunks.to(device),
        torch.tensor([(product >> (LIMB_BITS * limb)) & mask for limb in range(n_limbs)], dtype=torch.int64,
                     device=device),
        out, flags,
        len(moduli), n_limbs, rows * cols, cols, flat.stride(0),
        NP=np_, LP=lp, LIMB=LIMB_BITS, BLOCK=DECODE_BLOCK,
    )
    if bool(flags.any()):
        raise ValueError("a CRT value reaches M/4 in magnitude: the moduli's capacity is too small for these products")
    return out
