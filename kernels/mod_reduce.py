"""Reductions mod m inside the plane-GEMM kernels (:mod:`kernels.products` and
:mod:`kernels.wgmma_products` fold their exact chunk sums with the same code, so their residues
are the same integers).  Each function states the range in which it is exact; the launchers
keep every argument inside it.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["fold_chunk", "reduce_mod", "reduce_mod_fp32"]


@triton.jit
def reduce_mod(x, modulus, inverse):
    # x mod m in [0, m) for |x| < m * 2**50 without int64 division (a long emulated routine
    # on GPUs that cost as much as the K loop): the float64 quotient is within
    # 3 * 2**-53 * |x / m| < 1 of x / m, so its floor is off by at most one either way.
    q = tl.floor(x.to(tl.float64) * inverse).to(tl.int64)
    r = x - q * modulus
    r = tl.where(r < 0, r + modulus, r)
    return tl.where(r >= modulus, r - modulus, r)


@triton.jit
def reduce_mod_fp32(x, modulus, inverse):
    # x mod m in [0, m) for an integer-valued fp32 |x| <= 2**24 - 2**9 and m <= 2**8, in
    # single-precision registers (an int32 % is a long emulated routine): fl(x * fl(1/m)) is
    # within |x/m| * 2**-23 < 1 of x/m, so q = floor of it is floor(x/m) - 1, + 0 or + 1,
    # |q * m| <= |x| + m <= 2**24 is exact, and x - q * m is an exact integer in [-m, 2m).
    q = tl.floor(x * inverse)
    r = x - q * modulus
    r = tl.where(r < 0, r + modulus, r)
    return tl.where(r >= modulus, r - modulus, r)


@triton.jit
def fold_chunk(residue, part, coef, modulus, inverse, RESIDUE_BITS: tl.constexpr):
    # (residue + part * coef) mod m as int32 in [0, m), for residue in [0, m), coef in
    # [0, m) and an exact chunk sum |part| < 2**31 (int32, or an integer-valued fp32).
    if RESIDUE_BITS == 0:
        # Exact sums (kernels.products.exact_int8_matmul): coefficient 1 and a whole sum the
        # launcher keeps in [0, m) < 2**31, so the chunk sums add up exactly in int32 to its own
        # residue.  No reduction: the epilogue stores the accumulator.
        r = residue + part
    elif RESIDUE_BITS == 8:
        # m <= 2**8, in fp32: part = high * 2**16 + low with |high| <= 2**15, 0 <= low < 2**16,
        # so high * (2**16 mod m) + low lies in (-2**23, 2**23 + 2**16), and after the first
        # reduction residue + r * coef <= (m - 1) * m < 2**16: both inside reduce_mod_fp32's range.
        part32 = part.to(tl.int32)
        m32 = modulus.to(tl.int32)
        folded = (part32 >> 16) * (65536 % m32) + (part32 & 0xFFFF)
        m_f = modulus.to(tl.float32)
        inv_f = inverse.to(tl.float32)
        r = reduce_mod_fp32(folded.to(tl.float32), m_f, inv_f)
        r = reduce_mod_fp32(residue + r * coef.to(tl.float32), m_f, inv_f)
    elif RESIDUE_BITS == 16:
        # m <= 2**15: every intermediate stays below 2**30, in 32-bit registers (the 64-bit
        # path spills on 128 x 256 tiles).  % takes the dividend's sign; shift into [0, m).
        m32 = modulus.to(tl.int32)
        r = (residue + (part.to(tl.int32) % m32) * coef.to(tl.int32)) % m32
        r = tl.where(r < 0, r + m32, r)
    else:
        r = reduce_mod(tl.cast(residue, tl.int64) + reduce_mod(part.to(tl.int64), modulus, inverse) * coef, modulus,
                       inverse)
    return r.to(tl.int32)
