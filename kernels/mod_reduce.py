"""Reductions mod m inside the plane-GEMM kernels (:mod:`kernels.products` and
:mod:`kernels.wgmma_products` fold their exact chunk sums with the same code, so their residues
are the same integers).  Each function states the range in which it is exact; the launchers
keep every argument inside it.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["fold_chunk", "reduce_chunk", "reduce_mod", "reduce_mod_u24"]


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
def reduce_mod_u24(x, modulus, magic):
    # x mod m in [0, m) for int32 0 <= x < 2**24 and 2 <= m <= 2**8, magic = ceil(2**32 / m):
    # in integer multiply-adds (an int32 % is a long emulated routine).  With x = q * m + r,
    # x * magic / 2**32 = x / m + x * e / (m * 2**32) for e = magic * m - 2**32 < m, so it lies
    # in [q, q + (m - 1) / m + 2**-8) and, as 1/m >= 2**-8, its floor is q itself.
    q = tl.umulhi(x.to(tl.uint32), magic).to(tl.int32)
    return x - q * modulus


@triton.jit
def _u24_magic(m_u32):
    # ceil(2**32 / m) as floor((2**32 - 1) / m) + 1, once per tile, in one uint32 division (the
    # same instructions as ~0 // m, which Triton 3.8's interpreter cannot run: it builds ~0 from a
    # -1 that uint32 cannot hold).
    return tl.cast(0xFFFFFFFF, tl.uint32) // m_u32 + 1


@triton.jit
def reduce_chunk(part, modulus, inverse, RESIDUE_BITS: tl.constexpr):
    # part mod m as int32 in [0, m) for an exact chunk sum |part| < 2**31 (int32, or an
    # integer-valued fp32): fold_chunk(0, part, 1, ...), the whole epilogue of a single plane
    # of coefficient 1 in one K chunk (the int8 engine's), with no second reduction.
    if RESIDUE_BITS == 0:
        # Exact sums (kernels.products.exact_int8_matmul): the launcher keeps the whole sum in
        # [0, m) < 2**31, its own residue.  No reduction: the epilogue stores the accumulator.
        r = part
    elif RESIDUE_BITS == 8:
        # m <= 2**8, in 32-bit integers with no conversion instruction (Hopper runs those at a
        # quarter of the float32 rate, in an epilogue no MMA overlaps).  part = high * 2**16
        # + low with |high| <= 2**15, 0 <= low < 2**16; with c = 2**16 mod m <= m - 1,
        # y = high * c + low + m * 2**15 is congruent to part and lies in [2**15, 2**24): at
        # least 2**15 * (m - c), at most 2**15 * (2m - 1) + 2**16 < 2**24 for m <= 255, and
        # 2**23 + 2**16 for m = 2**8 (c = 0).  Below 2**24 the quotient by m is the high word
        # of y * ceil(2**32 / m), exactly (reduce_mod_u24).
        part32 = part.to(tl.int32)
        m32 = modulus.to(tl.int32)
        y = (part32 >> 16) * (65536 % m32) + (part32 & 0xFFFF) + m32 * 32768
        r = reduce_mod_u24(y, m32, _u24_magic(modulus.to(tl.uint32)))
    elif RESIDUE_BITS == 16:
        # m <= 2**15, in 32-bit registers (the 64-bit path spills on 128 x 256 tiles).  % takes
        # the dividend's sign; shift into [0, m).
        m32 = modulus.to(tl.int32)
        r = part.to(tl.int32) % m32
        r = tl.where(r < 0, r + m32, r)
    else:
        r = reduce_mod(part.to(tl.int64), modulus, inverse)
    return r.to(tl.int32)


@triton.jit
def fold_chunk(residue, part, coef, modulus, inverse, RESIDUE_BITS: tl.constexpr):
    # (residue + part * coef) mod m as int32 in [0, m), for residue in [0, m), coef in
    # [0, m) and an exact chunk sum |part| < 2**31 (int32, or an integer-valued fp32).
    r = reduce_chunk(part, modulus, inverse, RESIDUE_BITS)
    if RESIDUE_BITS == 0:
        # Exact sums: coefficient 1, and the chunk sums add up exactly in int32 to the whole.
        r = residue + r
    elif RESIDUE_BITS == 8:
        # residue + r * coef < 2**16: the quotient by m is exact as in reduce_chunk.
        m32 = modulus.to(tl.int32)
        r = reduce_mod_u24(residue + r * coef.to(tl.int32), m32, _u24_magic(modulus.to(tl.uint32)))
    elif RESIDUE_BITS == 16:
        # Every term non-negative and below 2**30.
        r = (residue + r * coef.to(tl.int32)) % modulus.to(tl.int32)
    else:
        r = reduce_mod(tl.cast(residue, tl.int64) + r.to(tl.int64) * coef, modulus, inverse)
    return r.to(tl.int32)
