"""Fused decode: residue products -> one correctly rounded float64, in one pass with a
linear (one-step) CRT.

Per entry, with residues c_i of the exact product Y and its scale 2**e, Y the
representative in (-M/2, M/2) (M = prod m_i; |Y| < M/2 is the capacity the pipeline asks
for, 2 * K * (2**p - 1) * (2**q - 1) < M):

1. Linear CRT.  With w_i' the representative in (-M/2, M/2] of (M/m_i) * ((M/m_i)^-1 mod
   m_i) mod M, X' = sum_i c_i * w_i' is congruent to Y mod M.  It is never formed: the kernel
   accumulates its limbs S_l = sum_i c_i * digit_l(w_i') (w_i' in balanced digits of b bits,
   the sums unnormalized) in float64, then the estimate
   E = sum_l S_l * (2**(b*l) / M) of X' / M from them.  q = round(E) is within
   1/2 + 2**-4 of X' / M (see _constants), so Y0 = X' - q * M, whose limbs are
   S_l - q * digit_l(M), lies in (-M, M).  N * L + 2 * L multiply-adds per entry and no
   modular reduction.
2. Carries settle the limbs of Y0 into [0, 2**b), the top limb signed, in int64 (exact:
   every limb is an integer below 2**53), and constant shifts gather them into 64-bit
   words of two's complement (_words).  Y0 ≡ Y (mod M) and |Y0 - Y| < 3M/2, so Y0 is Y,
   Y + M or Y - M: exactly one of Y0, Y0 - M, Y0 + M lies in (-M/2, M/2), and with
   G = floor(M/2) it is Y0 - M where Y0 > G, Y0 + M where Y0 < -G, and Y0 itself otherwise
   (for even M, Y0 = ±G = ±M/2 is the class without a representative: flagged).  The
   comparisons with the words of ±G are exact integer comparisons, word by word.  The
   float64 estimate only has to pick q within one; where it is off by one -- Y within about
   2**-4 * M of +-M/2, the only entries the rounding of E can mislead -- the correction
   adds +-M in the same pass.  Where E lies within 3/8 of q, Y0 is Y (|Y0| < M/2): a block
   whose entries all do -- every block of a product well inside its capacity -- skips the
   comparisons, by one block-wide minimum (uniform, so no divergence).  |Y| is -Y0 or Y0,
   plus M where Y0 was beyond: one sum of words.
3. One rounding to nearest even of |Y| * 2**e from a 63-bit word normalized from the top
   two words plus a sticky bit, subnormals and overflow included (_round); a block whose
   results are all normal and finite rounds with constant shifts and one exact scaling.
   Before any word: a block whose entries are all certain sums Y's limbs in float64
   (_float_round: hi + lo within 2**-98 of Y) and, where every hi is sure to be RN(Y) and
   every result normal and finite, stores hi * 2**e and builds no word at all.

The words are bound by the integer pipe (half the lanes of float32's on Hopper): their
64-bit operations are pairs of 32-bit ones.  The block-wide fast paths are what spares most
of them (benchmarks/kernels.md, "The decode's fast blocks", "The decode's float rounding").

The limb width b is picked per moduli set: the fewest limbs L whose exact bounds on the
partial sums keep them within 2**53, then 32 bits where they do, else the widest (int8 sets:
3 limbs of 42 bits for 16 moduli, 5 of 42 bits for 23: balanced digits of weights in
(-M/2, M/2] hold the sums' bounds at half or less of those of digits in [0, 2**b) of weights
in [0, M), which took 4 limbs of 32 bits for 16 moduli).  The words are as
many as Y0's two's complement needs: 2 for 16 int8 moduli, 3 for 23.

Per entry the limbs are a tuple of 1-D tensors, so there is no limb axis to pad to a power
of two or to index by data: every limb is a register, every step a static sequence of
register operations (the tests check the PTX for the absence of shared memory, shuffles
and local memory).  The tables (digits of w_i' and of M, words of ±G, M, the scales 2**(b*l) / M)
are constexprs: they compile into the instructions, with no table loads and no registers
held for them; each moduli set compiles its own kernel.

The bits are those of :func:`reference_decode` (the CRT in exact integers, one correct
rounding) and of the library's staged torch path (``ozaki.crt.garner`` +
``ozaki.crt.round_to_float64``), which the tests check entry for entry.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from functools import cache, lru_cache
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import ptx
from kernels.dispatch import launch
from kernels.float64 import FLOAT64_EXACT, round_dyadic
from kernels.moduli import check_modulus

__all__ = ["DBL_MAX", "DECODE_BLOCK", "DECODE_WARPS", "HALF_MODULUS_ERROR", "compile_kernel",
           "compile_ptx", "decode_residues", "ldexp_factors", "new_flag", "raise_for_flag", "reference_decode",
           "slack_exponent"]

# Here, below both decoders (this kernel and ozaki.crt's staged path), so that they refuse
# the class of M/2 for even M with one message.
HALF_MODULUS_ERROR = (
    "a CRT value is congruent to M/2 with M even: ±M/2 lie outside (−M/2, M/2), so the product "
    "reaches M/2 in magnitude and the moduli's capacity is too small for these products"
)

# Both decoders' saturation (see slack_exponent) sets a result that rounds past the largest
# finite float64 to it; the kernel works on its bit pattern, and on that of +inf it replaces.
DBL_MAX = sys.float_info.max
_DBL_MAX_PATTERN = tl.constexpr(0x7FEFFFFFFFFFFFFF)
_INF_PATTERN = tl.constexpr(0x7FF0000000000000)


def slack_exponent(slack: int) -> int:
    """The σ of both decoders' saturation for a ``slack`` S ≥ 0: the least with 2^σ ≥ S, or −1
    for S = 0 (no saturation: every result correctly rounded, ±inf past the range).

    ``slack`` bounds how far the decoded integer Y may lie from the exact product it stands
    for, on Y's scale: |Y − Y_exact| ≤ S (``ozaki.scaling.rounding_slack``: what the rounding
    of the rows to their bits moves it by).  A result whose Y·2^e rounds past ±DBL_MAX is
    ±DBL_MAX, not ±inf, unless (|Y| − 2^σ)·2^e rounds past it too: then the exact product
    certainly overflows, and only then is the result ±inf.  So a finite exact product always
    gives a finite result, and it is within the caller's bound: DBL_MAX lies between it and
    Y·2^e, or within half an ulp of it.  Both decoders use the power 2^σ, so their bits agree."""
    if not isinstance(slack, int) or slack < 0:
        raise ValueError(f"slack must be a non-negative int, got {slack!r}")
    return (slack - 1).bit_length() if slack else -1


# Entries per program and warps: every thread holds DECODE_BLOCK / (32 * DECODE_WARPS)
# whole entries (all their limbs), see the module docstring.  Four per thread in programs of
# one warp were the fastest on the H200 at n = 8192 and 16384 (benchmarks/kernels.md, "Tiles
# and register caps, again"; two warps were, before the float rounding).
DECODE_BLOCK = 128
DECODE_WARPS = 1
# The residue types decode_residues reads (kernels.products.residue_dtype writes the narrowest).
_RESIDUE_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)
# Limb widths tried (_constants): 21 bits keep the limb sums of the largest spread accepted,
# sum(m - 1) <= 2**31, within 2**53; 51 is the most any admits.
_MIN_LIMB_BITS = 21
_MAX_LIMB_BITS = 51
# Exponent sums saturate at +-2**26 in the kernel, past every product's bits (at most
# _MAX_PRODUCT_BITS); see the proof there.
_MAX_PRODUCT_BITS = 2**24
_EXPONENT_CLAMP = 2**26
# The rounding drops the 10 bits under a normal result's last place from its 63-bit word;
# half of their unit, less one, is what the rounding by addition adds.
_NORMAL_DROP = tl.constexpr(10)
_NORMAL_HALF = tl.constexpr((1 << 9) - 1)
# Where the estimate E lies within this of q, Y0 is Y (the kernel's step 2).
_CERTAIN = tl.constexpr(0.375)
# z + 1.5 * 2**52 - 1.5 * 2**52 rounds a float64 z with |z| <= 2**51 to an integer (the nearest).
_RINT = tl.constexpr(1.5 * 2.0**52)
# The float rounding's error, a fraction of |Y| (_float_round): at most (L - 1) * 2**-103.99 * |Y|
# for L limbs, under 2**-98 * |hi| for the L <= 32 it is taken for (_constants).
_FLOAT_MARGIN = tl.constexpr(2.0**-98)
_FRACTION_MASK = tl.constexpr((1 << 52) - 1)
_EXPONENT_FIELD = tl.constexpr(0x7FF)
# Rows go on the grid's second and third axes, at most this many on the second (CUDA's limit
# on each), the column blocks on its first: no program divides its index into row and block.
_GRID_ROWS = 65535


@triton.jit
def _pow2(e):
    # 2**e for e in [-1022, 1023] from its bit pattern (clamped outside), exact.
    e = tl.minimum(tl.maximum(e, -1022), 1023).to(tl.int64)
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def ldexp_factors(e):
    """The two powers of two whose product with x is x * 2**e rounded once (ozaki._bits.ldexp,
    which multiplies by them in this order): the first exact over the normal exponents, the
    second taking the rest into the subnormal range or to overflow."""
    first = tl.minimum(tl.maximum(e, -1022), 1023)
    return _pow2(first), _pow2(e - first)


@triton.jit
def _words(limbs, LIMB: tl.constexpr, WORDS: tl.constexpr):
    # The two's complement 64-bit words (bottom first) of Y0 = sum_l limb_l * 2**(LIMB * l),
    # from its limbs (float64 integers, |limb| <= 2**53: _constants).
    # Carries settle the limbs below the top into [0, 2**LIMB), the top one keeps the signed
    # rest, all exact in int64; each word then gathers the bits of the limbs it overlaps by
    # constant shifts (the top limb's arithmetic shifts extend the sign), so no two
    # contributions share a bit and OR adds them.
    settled = ()
    carry = tl.zeros(limbs[0].shape, tl.int64)
    for l in tl.static_range(len(limbs)):
        value = limbs[l].to(tl.int64) + carry
        if l < len(limbs) - 1:
            settled += (value & ((1 << LIMB) - 1),)
            carry = value >> LIMB
        else:
            settled += (value,)
    words = ()
    for j in tl.static_range(WORDS):
        word = tl.zeros(limbs[0].shape, tl.int64)
        for l in tl.static_range(len(limbs)):
            # The limb's bit 0 sits at bit LIMB * l - 64 * j of the word; a limb that starts
            # under the word reaches into it by its width, the top one by its sign too, and
            # a word lies less than 64 bits above the top limb's start (|Y0| < M).
            if LIMB * l - 64 * j >= 0:
                if LIMB * l - 64 * j < 64:
                    word |= settled[l] << (LIMB * l - 64 * j)
            elif l == len(limbs) - 1:
                tl.static_assert(64 * j - LIMB * l < 64, "a word past the top limb's reach")
                word |= settled[l] >> (64 * j - LIMB * l)
            elif 64 * j - LIMB * l < LIMB:
                word |= settled[l] >> (64 * j - LIMB * l)
        words += (word,)
    return words


@triton.jit
def _word(words, j):
    # Word j of a multiword integer as its comparisons read it: the top one signed, the
    # others unsigned.
    if j == len(words) - 1:
        word = words[j]
    else:
        word = words[j].to(tl.uint64, bitcast=True)
    return word


@triton.jit
def _beyond(words, bound, ABOVE: tl.constexpr):
    # Whether the multiword Y0 lies above (ABOVE) or under a constant's words (bottom first,
    # the top one signed): from the bottom up, a word decides unless it ties, when the words
    # under it do.
    beyond = (_word(words, 0) > bound[0]) if ABOVE else (_word(words, 0) < bound[0])
    for j in tl.static_range(1, len(words)):
        word = _word(words, j)
        beyond = ((word > bound[j]) if ABOVE else (word < bound[j])) | ((word == bound[j]) & beyond)
    return beyond


@triton.jit
def _equal(words, bound):
    equal = _word(words, 0) == bound[0]
    for j in tl.static_range(1, len(words)):
        equal &= _word(words, j) == bound[j]
    return equal


@triton.jit
def _add(x, y):
    # The multiword sum of two tuples of uint64 words (bottom first), modulo 2**(64 * words):
    # a carry leaves a word exactly when its sum wraps below either addend.
    total = ()
    carry = tl.zeros(x[0].shape, tl.uint64)
    for j in tl.static_range(len(x)):
        partial = x[j] + y[j]
        word = partial + carry
        if j < len(x) - 1:
            carry = ((partial < x[j]) | (word < partial)).to(tl.uint64)
        total += (word,)
    return total


@triton.jit
def _round(words, exponent):
    # |Y| * 2**exponent rounded to nearest even, from the uint64 words of |Y| (bottom first).
    # A result under 2**-1022 keeps fewer bits (its last one weighs 2**-1074), so it is
    # rounded once, straight to the subnormal grid.
    #
    # A window of two words holds the top non-zero word and the word under it: static steps
    # move it down one word while its top word is zero (words under index 0 are zeros).  Whether
    # step s moves it depends on the entry, but the word it brings in is fixed, since once the
    # top is non-zero no later step moves.  Every step is a comparison and selects in registers.
    n_words: tl.constexpr = len(words)
    zero = tl.zeros_like(words[0])
    high = words[n_words - 1]
    if n_words > 1:
        low = words[n_words - 2]
    else:
        low = zero
    # below[j]: a non-zero word at or under index j (for the sticky bit).
    below = (words[0] != 0,)
    for j in tl.static_range(1, n_words):
        below += (below[j - 1] | (words[j] != 0),)
    if n_words > 2:
        lost = below[n_words - 3]
    else:
        lost = tl.zeros(words[0].shape, tl.int1)
    moves = tl.zeros(words[0].shape, tl.int32)
    for entering in tl.static_range(n_words - 3, -2, -1):
        empty = high == 0
        if entering >= 0:
            coming = words[entering]
        else:
            coming = zero
        high, low = tl.where(empty, low, high), tl.where(empty, coming, low)
        if entering >= 1:
            lost = tl.where(empty, below[entering - 1], lost)
        elif entering == 0:
            lost = tl.where(empty, False, lost)
        moves += empty.to(tl.int32)

    # Leading zeros of the top word, from the float64 exponent of its top non-zero half
    # (exact: under 2**32); 0 for |Y| = 0, whose word stays 0.
    upper = (high >> 32).to(tl.uint32)
    half = tl.where(upper != 0, upper, high.to(tl.uint32))
    half_bits = (half.to(tl.float64).to(tl.int64, bitcast=True) >> 52).to(tl.int32) - 1022
    lz = tl.where(upper != 0, 32, 64) - tl.where(half != 0, half_bits, 64)
    lz = tl.minimum(tl.maximum(lz, 0), 63)
    # W = the window's top 64 bits shifted to a leading bit at 62 (63 bits, so that the sum
    # below stays under 2**64), the bits under it in the sticky bit.
    left = lz.to(tl.uint64)
    full = (high << left) | ((low >> 1) >> (63 - left))
    lost |= ((low << left) != 0) | ((full & 1) != 0)
    word = full >> 1
    # |Y| = (word + f) * 2**base with f in [0, 1), f > 0 exactly where lost.
    base = 64 * (n_words - 2 - moves) + 65 - lz
    # Bits of word under the result's last place: 10 for a normal result (word has 63
    # bits), more toward the subnormal grid; from 64 on the value is under half of
    # 2**-1074 and rounds to 0.  With at least 10 dropped bits the sticky bit can sit in
    # word's lowest bit, under the half bit: word | lost rounds as |Y| does (round to odd).
    odd = word | lost.to(tl.uint64)
    # Nearest even by addition: half - 1 plus the kept value's last bit carries exactly when
    # the dropped part exceeds half or is a tie with an odd kept value.  odd < 2**63, so the
    # sum stays below 2**64.
    last = base + _NORMAL_DROP + exponent
    if tl.min(((last >= -1022) & (last <= 1023 - 53)).to(tl.int32), axis=0) == 1:
        # Every result of the block is normal and finite (kept ≤ 2**53 at a last place of
        # 2**last, a normal power of two): the general steps below with their constant drop,
        # as shifts by a constant and one exact scaling.  The minimum is block-uniform, so
        # the branch costs one reduction and no divergence.
        kept = (odd + _NORMAL_HALF + ((odd >> _NORMAL_DROP) & 1)) >> _NORMAL_DROP
        magnitude = kept.to(tl.float64) * _pow2(last)
    else:
        drop = tl.minimum(tl.maximum(-1074 - exponent - base, _NORMAL_DROP), 64)
        shift = tl.minimum(drop, 63).to(tl.uint64)
        kept = (odd + ((tl.full(odd.shape, 1, tl.uint64) << (shift - 1)) - 1) + ((odd >> shift) & 1)) >> shift
        kept = tl.where(drop > 63, 0, kept)
        first, second = ldexp_factors(base + drop + exponent)
        magnitude = kept.to(tl.float64) * first * second
    return magnitude


@triton.jit
def _within_slack(words, exponent, slack_bits):
    # Whether |Y| - 2**slack_bits, from the uint64 words of |Y| (bottom first), is negative or
    # rounds times 2**exponent to a finite float64: the exact product may then be finite
    # (slack_exponent).  The launcher keeps slack_bits <= 64 * words - 2, above |Y| < M/2, so
    # the difference's top bit is its sign.
    ones = tl.full(words[0].shape, -1, tl.int64).to(tl.uint64, bitcast=True)
    lowest = ones << (slack_bits & 63).to(tl.uint64)
    index = slack_bits >> 6
    minus = ()
    for j in tl.static_range(len(words)):
        # The words of -2**slack_bits in two's complement: zeros under its bit, ones from it up.
        minus += (tl.where(index > j, tl.zeros_like(ones), tl.where(index == j, lowest, ones)),)
    rest = _add(words, minus)
    short = rest[len(words) - 1].to(tl.int64, bitcast=True) < 0
    return short | (_round(rest, exponent).to(tl.int64, bitcast=True) != _INF_PATTERN)


@triton.jit
def _float_round(limbs, exponent, RADIX: tl.constexpr, INVERSE_RADIX: tl.constexpr, DIGIT_SCALES: tl.constexpr):
    # Y = sum_l limbs[l] * 2**(b * l), RADIX = 2**b (float64 integers; a certain block, Y0 = Y),
    # times 2**exponent rounded once in float64 arithmetic alone: the signed result's bits, and
    # where that rounding is sure (else the block takes the words).  The float pipe issues
    # these where the words' 64-bit integer steps take two instructions each.
    #
    # 1. Digits: each limb under the top carries its nearest multiple of 2**b up, leaving
    # |d_l| <= 2**(b - 1); every sum stays an integer under 2**53 (_constants), so exact.
    # Y = sum_l x_l with x_l = d_l * 2**(b * l): a non-zero partial sum from the top,
    # S_l = sum_{j >= l} x_j, is a multiple of 2**(b * l) at least that in magnitude, and the
    # digits under it add at most about half of that, so |S_l| <= 2.01 * |Y|.
    n: tl.constexpr = len(limbs)
    radix = tl.full((), RADIX, tl.float64)
    inverse = tl.full((), INVERSE_RADIX, tl.float64)
    rint = tl.full((), _RINT, tl.float64)
    digits = ()
    carry = tl.zeros_like(limbs[0])
    for l in tl.static_range(n):
        value = limbs[l] + carry
        if l < n - 1:
            carry = (value * inverse + rint) - rint
            digits += (value - carry * radix,)
        else:
            digits += (value,)
    # 2. hi + lo = Y within 2**-98 * |hi|, |lo| <= ulp(hi) / 2, from the top digit down: each
    # step adds a digit by Fast2Sum (exact: a non-zero S_(l+1) outweighs x_l), its error to lo
    # (rounded once: at most 2**-106 * (|hi| + |s|) <= 2**-104 * |Y|), and renormalizes.
    hi = digits[n - 1] * tl.full((), DIGIT_SCALES[n - 1], tl.float64)
    lo = tl.zeros_like(hi)
    for j in tl.static_range(1, n):
        x = digits[n - 1 - j] * tl.full((), DIGIT_SCALES[n - 1 - j], tl.float64)
        total = hi + x
        lo += x - (total - hi)
        hi = total + lo
        lo -= hi - total
    # 3. RN(Y) is hi where Y, within the error of hi + lo, lies inside hi's rounding interval:
    # half an ulp each way, a quarter toward zero from a power of two.  Y is an integer, so
    # a non-zero Y has |hi| >= 1 (a normal exponent field); hi = 0 is Y = 0.
    pattern = hi.to(tl.int64, bitcast=True)
    field = (pattern >> 52) & _EXPONENT_FIELD
    ulp = ((field - 52) << 52).to(tl.float64, bitcast=True)
    toward_zero = (lo != 0) & ((lo < 0) != (hi < 0))
    power = (pattern & _FRACTION_MASK) == 0
    reach = tl.where(power & toward_zero, 0.25, 0.5) * ulp - tl.abs(hi) * _FLOAT_MARGIN
    # The result's exponent field: normal and finite, so hi * 2**exponent is exact and is
    # RN(Y * 2**exponent).  (|exponent| <= 2**26, _EXPONENT_CLAMP: no wrap.)
    scaled = field + exponent.to(tl.int64)
    zero = hi == 0
    sure = zero | ((tl.abs(lo) < reach) & (scaled >= 1) & (scaled <= 2046))
    return tl.where(zero, 0, pattern + (exponent.to(tl.int64) << 52)), sure


@triton.jit
def _decode_kernel(
    c_ptr, row_exp_ptr, col_exp_ptr, slack_ptr, out_ptr, flag_ptr, rows, cols, item_rows, stride_cn, stride_cr,
    stride_cc, stride_ct,
    MODULI: tl.constexpr, WEIGHTS: tl.constexpr, SCALES: tl.constexpr, MODULUS: tl.constexpr, HALF: tl.constexpr,
    NEGATIVE_HALF: tl.constexpr, MODULUS_WORDS: tl.constexpr, MODULUS_PLUS_ONE: tl.constexpr, ONE: tl.constexpr,
    LIMB: tl.constexpr, EVEN: tl.constexpr, SMALL_MODULI: tl.constexpr, FLOAT_ROUND: tl.constexpr,
    RADIX: tl.constexpr, INVERSE_RADIX: tl.constexpr, DIGIT_SCALES: tl.constexpr,
    EXPONENT_CLAMP: tl.constexpr, SATURATE: tl.constexpr, KARATSUBA: tl.constexpr, BLOCK: tl.constexpr,
):
    # One program: BLOCK consecutive columns of one row (no per-entry division).  The tables
    # are constexprs: they become instruction operands, with no loads and no registers.
    # A program past the last row (in the third axis's last slice) touches no entry.
    row = tl.program_id(1) + tl.program_id(2) * tl.num_programs(1)
    live_cols = tl.where(row < rows, cols, 0)
    # The rows of a batch's products follow one another, item_rows each: a row's product
    # gives its column exponents and its slack.
    item = tl.where(row < rows, row, 0) // item_rows
    offs_c = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs_c < live_cols
    # |Y| < 2**bits(M) with bits(M) <= 2**24 (_constants), so past +-2**26 the result is 0
    # or inf either way: the exponent saturates there, which keeps every later exponent sum
    # inside int32.  The int64 sum wraps; a wrap (both terms of one sign, the sum of the
    # other) saturates by the sign of the terms.
    row_exp = tl.load(row_exp_ptr + row, mask=row < rows, other=0)
    col_exp = tl.load(col_exp_ptr + tl.cast(item, tl.int64) * cols + offs_c, mask=mask, other=0)
    exponent = row_exp + col_exp
    wrapped = ((row_exp ^ exponent) & (col_exp ^ exponent)) < 0
    exponent = tl.where(wrapped, tl.where(col_exp < 0, -EXPONENT_CLAMP, EXPONENT_CLAMP),
                        tl.minimum(tl.maximum(exponent, -EXPONENT_CLAMP), EXPONENT_CLAMP)).to(tl.int32)

    # 1. Linear CRT: the limb sums of X', one residue at a time (a tuple of 1-D tensors:
    # no padding to a power of two; zero weight limbs cost nothing).
    if KARATSUBA:
        # Karatsuba's block products P1, P2, P3 (stride_ct apart) of a complex product: column j
        # of [Re | Im] is P1 − P2 at j, column half + j is P3 − P1 − P2 at j.
        half = cols // 2
        imaginary = offs_c >= half
        c_ptrs = c_ptr + tl.cast(row, tl.int64) * stride_cr + tl.cast(offs_c - tl.where(imaginary, half, 0),
                                                                     tl.int64) * stride_cc
    else:
        c_ptrs = c_ptr + tl.cast(row, tl.int64) * stride_cr + tl.cast(offs_c, tl.int64) * stride_cc
    # Residues of at most 16 bits (the plane GEMM's) of moduli under 2**16 are worked on in
    # int32, where c_i -+ m_i cannot wrap; others in int64.  Karatsuba's differences are signed.
    SIGNED: tl.constexpr = c_ptr.dtype.element_ty.is_int_signed() or KARATSUBA
    NARROW: tl.constexpr = (c_ptr.dtype.element_ty.primitive_bitwidth <= 16) and SMALL_MODULI
    # The largest c_i - m_i and the least c_i + m_i: a residue is out of range where the one
    # is >= 0 or the other <= 0 (one min or max per residue, where comparisons and ORs take
    # two integer instructions; unsigned residues are never below range).
    if NARROW:
        above_range = tl.full((BLOCK,), -1, tl.int32)
    else:
        above_range = tl.full((BLOCK,), -1, tl.int64)
    below_range = tl.full(above_range.shape, 1, above_range.dtype)
    sums = ()
    for i in tl.static_range(len(MODULI)):
        residue = tl.load(c_ptrs, mask=mask, other=0).to(above_range.dtype)
        if KARATSUBA:
            # Products in [0, m): P1 − P2 lies in (−m, m), P3 − P1 − P2 in (−2m, m), moved by m
            # into (−m, m) where it is not.
            second = tl.load(c_ptrs + stride_ct, mask=mask, other=0).to(above_range.dtype)
            third = tl.load(c_ptrs + 2 * stride_ct, mask=mask & imaginary, other=0).to(above_range.dtype)
            residue = tl.where(imaginary, third - residue - second, residue - second)
            residue = tl.where(residue <= -MODULI[i], residue + MODULI[i], residue)
        # An entry with a residue out of range gets a meaningless value, which the launcher
        # never returns (it raises); every shift amount below is clamped, so such an entry
        # cannot fault either.
        above_range = tl.maximum(above_range, residue - MODULI[i])
        if SIGNED:
            below_range = tl.minimum(below_range, residue + MODULI[i])
        value = residue.to(tl.float64)
        terms = ()
        for l in tl.static_range(len(MODULUS)):
            if i == 0:
                terms += (value * WEIGHTS[0][l],)
            elif WEIGHTS[i][l] == 0:
                terms += (sums[l],)
            else:
                terms += (sums[l] + value * WEIGHTS[i][l],)
        sums = terms
        c_ptrs += stride_cn
    # The estimate of X'/M from the limb sums, the top first; any integer within 1 of X'/M
    # will do (see _constants): E + 1/2 may round.
    top: tl.constexpr = len(MODULUS) - 1
    estimate = sums[top] * tl.full((), SCALES[top], tl.float64)
    for j in tl.static_range(1, len(MODULUS)):
        estimate += sums[top - j] * tl.full((), SCALES[top - j], tl.float64)
    nearest = tl.floor(estimate + 0.5)
    # Where E lies within 3/8 of q, |X'/M - q| < 3/8 + 2**-4 < 1/2 (the estimate's error,
    # _constants): Y0 below is Y itself, inside (-M/2, M/2).  Every entry with |Y| under
    # about 0.6 * M/2 is so: the pipeline sizes M/2 above a bound of sum |A'||B'|, which a
    # sum of mixed signs stays far below.
    certain = tl.abs(estimate - nearest) <= _CERTAIN

    # 2. Y0 = X' - q * M in (-M, M), its limbs S_l - q * digit_l(M).
    limbs = ()
    for l in tl.static_range(len(MODULUS)):
        limbs += (sums[l] - nearest * MODULUS[l],)
    # Flag 2: a residue out of range.  Only flagged entries touch the flag, so a clean launch
    # pays no reduction or atomic.
    outside = (above_range >= 0) | (below_range <= 0)
    if FLOAT_ROUND:
        # 3. One rounding in float64 (_float_round) where every entry of the block is certain
        # (Y0 is Y) and sure of its rounding and normal and finite: a block of a product well
        # inside its capacity, with an entry within 2**-98 of a rounding boundary about once in
        # 2**40 blocks.  The minima are block-uniform: reductions, no divergence; a block with
        # an entry that is not certain (products near the capacity, random residues) goes
        # straight to the words.
        floating = tl.min(certain.to(tl.int32), axis=0) == 1
        floated = tl.zeros_like(offs_c).to(tl.int64)
        if floating:
            floated, sure = _float_round(limbs, exponent, RADIX, INVERSE_RADIX, DIGIT_SCALES)
            floating = tl.min(sure.to(tl.int32), axis=0) == 1
    else:
        floating = False
    if floating:
        code = tl.where(outside, 2, 0)
        signed = floated
    else:
        code, signed = _exact_round(limbs, exponent, certain, outside, slack_ptr + item, LIMB, HALF, NEGATIVE_HALF,
                                    MODULUS_WORDS, MODULUS_PLUS_ONE, ONE, EVEN, SATURATE)
    # The block's worst code, then one atomic where it is not 0: an atomic over the block's
    # entries would move them into a layout of one per thread first (through shared memory).
    worst = tl.max(tl.where(mask, code, 0), axis=0)
    if worst != 0:
        tl.atomic_max(flag_ptr, worst, sem="relaxed")
    # Each thread's four consecutive results go out as two pairs, each a 16-byte store: a store
    # of the whole block takes Triton's layout for 16-byte vectors, two entries per thread, and
    # reaches it through shuffles (benchmarks/kernels.md, "The decode's stores and flag").
    quads = tl.permute(tl.reshape(signed.to(tl.float64, bitcast=True), [BLOCK // 4, 2, 2]), (0, 2, 1))
    low, high = tl.split(quads)
    offs_pair = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK // 4)[:, None] * 4 + tl.arange(0, 2)[None, :]
    out_ptrs = out_ptr + tl.cast(row, tl.int64) * cols + offs_pair
    tl.store(out_ptrs, low, mask=offs_pair < live_cols)
    tl.store(out_ptrs + 2, high, mask=offs_pair + 2 < live_cols)


@triton.jit
def _exact_round(limbs, exponent, certain, outside, slack_bits_ptr, LIMB: tl.constexpr, HALF: tl.constexpr,
                 NEGATIVE_HALF: tl.constexpr, MODULUS_WORDS: tl.constexpr, MODULUS_PLUS_ONE: tl.constexpr,
                 ONE: tl.constexpr, EVEN: tl.constexpr, SATURATE: tl.constexpr):
    # Steps 2–3 in words: Y0 as words of two's complement (_words), its sign the top word's;
    # the flag's code (2: a residue out of range, 1: Y0 = +-M/2 with M even, no representative
    # in (-M/2, M/2)) and the signed result's bits.
    words = _words(limbs, LIMB, len(HALF))
    # |Y| = -Y0 or Y0, plus M where Y0 was beyond +-G (M - Y0 for Y0 > G, Y0 + M for
    # Y0 < -G), as one sum of words: Y0's bits flipped where Y is negative (-Y0 - 1), plus 1
    # there and M where Y0 was beyond.  |Y| < M/2 fits the words, so the sum's wrap never bites.
    if tl.min(certain.to(tl.int32), axis=0) == 1:
        # Every entry of the block is certain: no comparison with +-G.  The minimum is
        # block-uniform, so the branch costs one reduction and no divergence.
        negative = words[len(HALF) - 1] < 0
        half = tl.zeros_like(negative)
        addend = ()
        for j in tl.static_range(len(HALF)):
            addend += (tl.where(negative, ONE[j], 0).to(tl.uint64),)
    else:
        # Y0 > G needs Y0 > 0, Y0 < -G needs Y0 < 0: comparing with both bounds needs no sign.
        above = _beyond(words, HALF, True)
        under = _beyond(words, NEGATIVE_HALF, False)
        # Y0 beyond +-G (and |Y0| < M): the representative is Y0 -+ M, of the other sign.
        beyond = above | under
        negative = (words[len(HALF) - 1] < 0) != beyond
        half = _equal(words, HALF) | _equal(words, NEGATIVE_HALF)
        addend = ()
        for j in tl.static_range(len(HALF)):
            addend += (tl.where(beyond, tl.where(negative, MODULUS_PLUS_ONE[j], MODULUS_WORDS[j]),
                                tl.where(negative, ONE[j], 0)).to(tl.uint64),)
    code = tl.where(outside, 2, tl.where(half & EVEN, 1, 0))
    flip = negative.to(tl.int64) * -1
    flipped = ()
    for j in tl.static_range(len(HALF)):
        flipped += ((words[j] ^ flip).to(tl.uint64, bitcast=True),)
    magnitude_words = _add(flipped, addend)

    # 3. One rounding.
    magnitude = _round(magnitude_words, exponent).to(tl.int64, bitcast=True)
    if SATURATE:
        # Past the range, DBL_MAX where the exact product may be finite (slack_exponent).  An
        # overflow never takes the float rounding (its results are finite), so only here.
        overflow = magnitude == _INF_PATTERN
        if tl.max(overflow.to(tl.int32), axis=0) == 1:
            # A product of the batch without slack (-1) never saturates.
            slack_bits = tl.load(slack_bits_ptr)
            within = _within_slack(magnitude_words, exponent, tl.maximum(slack_bits, 0)) & (slack_bits >= 0)
            magnitude = tl.where(overflow & within, _DBL_MAX_PATTERN, magnitude)
    # The sign goes in as a bit.  On the H200 the float select of -magnitude returned +0.0
    # for a negative Y that underflows to zero (tests/test_kernels_crt.py, subnormal
    # exponents; the interpreter keeps -0.0): an integer OR leaves no float rule about
    # signed zeros for the compiler to relax.
    return code, magnitude | (negative.to(tl.int64) << 63)


class _Layout(NamedTuple):
    """What a moduli set compiles into the kernel: its constexpr tables."""
    limb_bits: int
    weights: tuple[tuple[int, ...], ...]  # digits of w_i' ≡ (M/m_i) * ((M/m_i)^-1 mod m_i) (mod M), |w_i'| <= M/2
    scales: tuple[float, ...]  # 2**(b * l) / M, rounded once
    modulus: tuple[int, ...]  # digits of M
    # Words of 64 bits, bottom first (words_of below): the lower ones unsigned, the top one signed.
    half: tuple[int, ...]  # G = floor(M/2)
    negative_half: tuple[int, ...]  # -G
    modulus_words: tuple[int, ...]  # M
    modulus_plus_one: tuple[int, ...]  # M + 1
    one: tuple[int, ...]  # 1
    even: bool  # M is even: Y0 = +-M/2 is flagged
    float_round: bool  # the float rounding's bounds hold (_float_round)


def _digits(x: int, limb_bits: int, n_limbs: int) -> tuple[int, ...]:
    """x = sum_l d_l * 2**(b * l) with the digits below the top balanced, in [-2**(b-1), 2**(b-1)),
    and the top one the signed rest."""
    half = 1 << (limb_bits - 1)
    digits = []
    for _ in range(n_limbs - 1):
        digit = ((x + half) & ((1 << limb_bits) - 1)) - half
        digits.append(digit)
        x = (x - digit) >> limb_bits
    return (*digits, x)


def _balanced(x: int, modulus: int) -> int:
    """The representative of x mod ``modulus`` in (-modulus/2, modulus/2]."""
    x %= modulus
    return x - modulus if 2 * x > modulus else x


class _LimbBounds(NamedTuple):
    """One limb width's digits and the bounds of its arithmetic (_constants): exact integers."""
    weights: tuple[tuple[int, ...], ...]  # digits of each w_i'
    modulus: tuple[int, ...]  # digits of M
    sums: tuple[int, ...]  # of every partial sum of S_l
    limbs: tuple[int, ...]  # of every partial sum of S_l - q * M_l
    slack: Fraction  # of |E - X'/M|


def _limb_bounds(reach: Sequence[int], weights: Sequence[int], product: int, limb_bits: int,
                 n_limbs: int) -> _LimbBounds:
    digits = tuple(_digits(w, limb_bits, n_limbs) for w in weights)
    modulus = _digits(product, limb_bits, n_limbs)
    sums = tuple(sum(r * abs(d[l]) for r, d in zip(reach, digits)) for l in range(n_limbs))
    # |X'/M| <= sum_i r_i * |w_i'| / M, and |q| <= |E| + 1/2 (rounded) <= that + 1.
    quotient = sum(r * abs(w) for r, w in zip(reach, weights)) // product + 1
    limbs = tuple(s + quotient * abs(m) for s, m in zip(sums, modulus))
    # L products and sums, each rounded once (relative error u = 2**-53; fused multiply-adds
    # only tighten it), on terms of magnitude at most sums[l] * 2**(b*l) / M.
    terms = sum(Fraction(s << (limb_bits * l), product) for l, s in enumerate(sums))
    return _LimbBounds(digits, modulus, sums, limbs, 2 * (n_limbs + 2) * terms / FLOAT64_EXACT)


@cache
def _constants(moduli: tuple[int, ...]) -> _Layout:
    """Limb layout and the tables of the kernel."""
    for m in moduli:
        check_modulus(m)
    for i, m in enumerate(moduli):
        for other in moduli[:i]:
            if math.gcd(m, other) != 1:
                raise ValueError(f"moduli {other} and {m} are not coprime: the CRT needs pairwise coprime moduli")
    product = math.prod(moduli)
    if product.bit_length() > _MAX_PRODUCT_BITS:
        raise ValueError(f"moduli whose product has {product.bit_length()} bits: the decode handles products of at "
                         f"most 2**24 bits (its exponents are int32); use fewer moduli")
    # Exactness of the limb sums.  Residues satisfy |c_i| <= m_i - 1 = r_i (checked per entry;
    # an entry that fails gets a meaningless value, never returned).  The weights are taken
    # as w_i' ≡ w_i (mod M) with |w_i'| <= M/2 and written in balanced digits, so X' =
    # sum_i c_i * w_i' ≡ Y (mod M) and every partial sum of S_l = sum_i c_i * digit_l(w_i')
    # is an integer of magnitude at most sum_i r_i * |digit_l(w_i')|; |X'/M| <= sum_i r_i *
    # |w_i'| / M, so |q| at most that plus 1 (below), and every partial sum of S_l - q *
    # digit_l(M) at most the two bounds' sum (_limb_bounds, exact integers).  A limb width
    # is admitted where those stay within 2**53, exact in float64 (and so in int64 with the
    # carries of the settling, _words), and the estimate's slack (below) under 2**-4.
    spread = sum(m - 1 for m in moduli)
    if spread > 2**31:
        raise ValueError(
            f"moduli sum(m - 1) = {spread} passes 2**31, the most the decode's bounds are derived for (its "
            "estimate of X'/M stays under 2**30 + 1); use fewer or smaller moduli"
        )
    reach = [m - 1 for m in moduli]
    weights = [_balanced((product // m) * pow(product // m, -1, m), product) for m in moduli]
    admitted = {}
    for b in range(_MIN_LIMB_BITS, _MAX_LIMB_BITS + 1):
        bounds = _limb_bounds(reach, weights, product, b, _limb_count(product, b))
        if max(bounds.limbs) <= FLOAT64_EXACT and bounds.slack < Fraction(1, 16):
            admitted[b] = bounds
    if not admitted:
        raise ValueError(f"moduli {moduli}: no limb width from {_MIN_LIMB_BITS} to {_MAX_LIMB_BITS} bits keeps "
                         "the limb sums within 2**53 (exact) and the estimate of X'/M within 2**-4; use fewer or "
                         "smaller moduli")
    # The fewest limbs (the multiply-adds are n * L), then 32 bits, whose limbs pair into the
    # words with no shifts across them, else the widest.  |Y0| < M fits: the top limb is a
    # float64 integer, signed, whose bound the admission checked.
    limb_bits = max(admitted, key=lambda b: (-_limb_count(product, b), b == 32, b))
    n_limbs, bounds = _limb_count(product, limb_bits), admitted[limb_bits]
    # The estimate E = sum_l S_l * fl(2**(b*l) / M) of X'/M = sum_l S_l * 2**(b*l) / M lies
    # within slack < 2**-4 of it, and |E| < sum_i r_i / 2 + 1 <= 2**30 + 1 (|w_i'| <= M/2).  The
    # kernel's q = floor(fl(E + 1/2)) errs from E by at most 1/2 plus half an ulp of E + 1/2
    # (at most 2**-22): |X'/M - q| < 1/2 + 2**-22 + 2**-4 < 1 and Y0 = X' - q * M lies in
    # (-M, M).  Nothing here depends on where Y lies: the exact comparison of Y0 with
    # +-floor(M/2) settles the representative (module docstring).

    # Words enough for Y0 in (-M, M) in two's complement: bits(M) + 1 bits.
    n_words = -(-(product.bit_length() + 1) // 64)

    def words_of(x: int) -> tuple[int, ...]:
        """x's words in two's complement, bottom first: below the top in [0, 2**64), the top
        one signed."""
        return tuple((x >> (64 * j)) & ((1 << 64) - 1) if j < n_words - 1 else x >> (64 * j) for j in range(n_words))

    # The float rounding (_float_round) carries each limb's nearest multiple of 2**b into the
    # next: exact while every limb plus its carry stays at most 2**53 (and the rounding by
    # 1.5 * 2**52 sees at most 2**51); its digits times 2**(b * l) stay finite; its error,
    # (L - 1) * 2**-103.99 * |Y|, stays under its margin 2**-98 * |hi| while L <= 32.
    carry, carries_exact = 0, True
    for bound in bounds.limbs:
        value = bound + carry
        carries_exact &= value <= FLOAT64_EXACT and value >> limb_bits <= 2**51
        carry = (value >> limb_bits) + 1
    float_round = carries_exact and limb_bits * (n_limbs - 1) + 53 <= 1023 and n_limbs <= 32

    return _Layout(
        limb_bits=limb_bits,
        weights=bounds.weights,
        scales=tuple((1 << (limb_bits * j)) / product for j in range(n_limbs)),  # int / int rounds once
        modulus=bounds.modulus,
        half=words_of(product // 2),
        negative_half=words_of(-(product // 2)),
        modulus_words=words_of(product),
        modulus_plus_one=words_of(product + 1),
        one=words_of(1),
        even=product % 2 == 0,
        float_round=float_round,
    )


def _limb_count(product: int, limb_bits: int) -> int:
    return max(1, -(-product.bit_length() // limb_bits))


def _constexprs(moduli: tuple[int, ...], block: int, saturate: bool = False,
                karatsuba: bool = False) -> dict[str, object]:
    layout = _constants(moduli)
    return dict(MODULI=moduli, WEIGHTS=layout.weights, SCALES=layout.scales, MODULUS=layout.modulus,
                HALF=layout.half, NEGATIVE_HALF=layout.negative_half, MODULUS_WORDS=layout.modulus_words,
                MODULUS_PLUS_ONE=layout.modulus_plus_one, ONE=layout.one, LIMB=layout.limb_bits,
                EVEN=layout.even, SMALL_MODULI=max(moduli) < 2**16, FLOAT_ROUND=layout.float_round,
                RADIX=2.0**layout.limb_bits, INVERSE_RADIX=2.0**-layout.limb_bits,
                DIGIT_SCALES=tuple(2.0 ** (layout.limb_bits * l) for l in range(len(layout.modulus)))
                if layout.float_round else (),
                EXPONENT_CLAMP=_EXPONENT_CLAMP, SATURATE=saturate, KARATSUBA=karatsuba, BLOCK=block)


def decode_residues(c: torch.Tensor, moduli: Sequence[int], row_exponent: torch.Tensor,
                    col_exponent: torch.Tensor, *, block: int = DECODE_BLOCK,
                    num_warps: int = DECODE_WARPS, out: torch.Tensor | None = None,
                    flag: torch.Tensor | None = None, slack: int | Sequence[int] = 0,
                    karatsuba: bool = False) -> torch.Tensor:
    """float64 ``[R, C]``: the signed integer Y with ``Y ≡ c[i] (mod moduli[i])`` and
    ``-M/2 < Y < M/2`` (M = prod(moduli)), times ``2**(row_exponent[r] + col_exponent[c])``,
    rounded once to nearest even.  ``c`` is an integer tensor (uint8, int16, int32 or int64,
    as narrow as the plane GEMM writes them) ``[len(moduli), R, C]`` of residues, any
    representative with ``|c[i]| < moduli[i]`` (``[0, m)`` or balanced).  Raises ValueError for a residue out of that range and, for
    even M, where Y ≡ M/2 (mod M), the one class without a representative in the window:
    the product reached M/2 in magnitude, the moduli's capacity too small.  Every other
    product past the capacity is indistinguishable from its representative, which is what
    the result rounds: the caller guarantees the capacity (the pipeline asks for
    M > 2 * K * (2**p - 1) * (2**q - 1)).  ``block`` (entries per program) and ``num_warps``
    tune the launch, not the bits.  ``out``: a contiguous float64 ``[R, C]`` tensor on c's
    device to write the result into (rows of a larger result, say), returned.

    A batch of B products decodes in one launch: their R = B * M rows one product after the
    other, ``col_exponent`` ``[B, C]`` (each product's columns) and ``slack`` one per product.

    The checks read the device after the launch.  ``flag``: a zeroed int32 ``[1]`` tensor on
    c's device (:func:`new_flag`) that collects them instead, over several decodes (the row
    blocks of one product), for the caller to pass to :func:`raise_for_flag` once after the
    last, so that the launches queue without waiting for the device.

    ``slack``: a bound on |Y − Y_exact| for the exact product Y stands for (0: Y is exact): a
    result that rounds past ±DBL_MAX saturates there unless the exact product certainly
    overflows (:func:`slack_exponent`).

    ``karatsuba``: c is ``[len(moduli), 3, R, C/2]``, the residues in [0, m) of Karatsuba's
    products P1 = Ar'·Br', P2 = Ai'·Bi' and P3 = (Ar' + Ai')·(Br' + Bi') of one complex
    product, and the result is its real embedding's [Re C | Im C], the residues
    [P1 − P2 | P3 − P1 − P2] decoded in the same pass."""
    if not isinstance(c, torch.Tensor) or c.dtype not in _RESIDUE_DTYPES:
        raise TypeError(f"c must be a uint8, int16, int32 or int64 tensor, got "
                        f"{getattr(c, 'dtype', type(c).__name__)}")
    moduli = tuple(moduli)
    if not moduli:
        raise ValueError("decode needs at least one modulus")
    if karatsuba:
        if c.dim() != 4 or c.shape[:2] != (len(moduli), 3):
            raise ValueError(f"c has shape {tuple(c.shape)}: Karatsuba's products are [{len(moduli)} moduli, 3, R, C/2]")
        rows, cols = c.shape[2], 2 * c.shape[3]
        strides = (c.stride(0), c.stride(2), c.stride(3), c.stride(1))
    elif c.dim() != 3 or c.shape[0] != len(moduli):
        raise ValueError(f"c has shape {tuple(c.shape)}: expected [{len(moduli)} moduli, R, C]")
    else:
        rows, cols = c.shape[1:]
        strides = (*c.stride(), 0)
    items = 1 if col_exponent.dim() == 1 else col_exponent.shape[0]
    if karatsuba and items != 1:
        raise ValueError("Karatsuba's products decode one complex product at a time: pass col_exponent of shape (C,)")
    if items < 1 or rows % items:
        raise ValueError(f"col_exponent of shape {tuple(col_exponent.shape)} for {rows} rows: pass ({cols},), or "
                         f"(B, {cols}) for a batch of B products of {rows} // B rows each")
    for name, exp, shape in (("row_exponent", row_exponent, (rows,)),
                             ("col_exponent", col_exponent, (cols,) if col_exponent.dim() == 1 else (items, cols))):
        if not isinstance(exp, torch.Tensor) or exp.dtype != torch.int64 or exp.shape != shape:
            raise ValueError(f"{name} must be an int64 tensor of shape {shape}")
        if exp.device != c.device:
            raise ValueError(f"{name} is on {exp.device}, c on {c.device}: pass both on one device")
    slacks = (slack,) * items if isinstance(slack, int) else tuple(slack)
    if len(slacks) != items:
        raise ValueError(f"{len(slacks)} slacks for a batch of {items} products: pass one per product")
    _check_launch(block, num_warps)
    sigmas = tuple(map(slack_exponent, slacks))
    constexprs = _constexprs(moduli, block, saturate=max(sigmas) >= 0, karatsuba=karatsuba)
    # 2**(64 * words - 2) is above every |Y| already (_within_slack): a larger slack saturates alike.
    words = len(constexprs["HALF"])
    slack_bits = _slack_table(tuple(min(sigma, 64 * words - 2) for sigma in sigmas), c.device)
    device = c.device
    if out is None:
        out = torch.empty((rows, cols), dtype=torch.float64, device=device)
    elif (not isinstance(out, torch.Tensor) or out.dtype != torch.float64 or out.shape != (rows, cols)
          or out.device != device or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous float64 tensor of shape ({rows}, {cols}) on {device}")
    if out.numel() == 0:
        return out
    collected = flag is not None
    if collected and (not isinstance(flag, torch.Tensor) or flag.dtype != torch.int32 or flag.shape != (1,)
                      or flag.device != device):
        raise ValueError(f"flag must be an int32 tensor of shape (1,) on {device} (kernels.crt.new_flag)")
    grid = (triton.cdiv(cols, block), min(rows, _GRID_ROWS), triton.cdiv(rows, _GRID_ROWS))
    flag = flag if collected else new_flag(device)
    launch(_decode_kernel, grid,
        c, row_exponent.contiguous(), col_exponent.contiguous(), slack_bits, out, flag,
        rows, cols, rows // items, *strides, **constexprs, num_warps=num_warps,
        **ptx.LAUNCH_OPTIONS,
    )
    if not collected:
        raise_for_flag(flag)
    return out


@lru_cache(maxsize=256)
def _slack_table(slack_bits: tuple[int, ...], device: torch.device) -> torch.Tensor:
    # Each product's σ (-1: none), copied to the device once per distinct batch of slacks, so
    # that a repeated product queues no copy.
    return torch.tensor(slack_bits, dtype=torch.int64, device=device)


def new_flag(device: torch.device) -> torch.Tensor:
    """A zeroed flag for :func:`decode_residues` to collect its checks in."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def raise_for_flag(flag: torch.Tensor) -> None:
    """Reads the checks :func:`decode_residues` collected in ``flag`` (one host synchronisation)
    and raises ValueError for the worst: a residue out of range, or the half-modulus class."""
    worst = int(flag)
    if worst >= 2:
        raise ValueError("c holds a residue with |c[i]| >= moduli[i]: reduce it first, e.g. torch.remainder(c, m)")
    if worst == 1:
        raise ValueError(HALF_MODULUS_ERROR)


def reference_decode(c: torch.Tensor, moduli: Sequence[int], row_exponent: torch.Tensor,
                     col_exponent: torch.Tensor, slack: int = 0) -> torch.Tensor:
    """What :func:`decode_residues` computes, in exact Python integers (small shapes): per
    entry, the CRT integer Y in (-M/2, M/2) of the residues, raising
    ``ValueError(HALF_MODULUS_ERROR)`` for the class of M/2 (even M), then
    ``Y * 2**(row_exponent[r] + col_exponent[c])`` rounded once to nearest even, saturated
    at ±DBL_MAX as ``slack`` allows (:func:`slack_exponent`)."""
    moduli = tuple(moduli)
    sigma = slack_exponent(slack)
    residues = c.detach().cpu().to(torch.int64).tolist()
    out = [[_saturated(_signed_crt([plane[r][j] for plane in residues], moduli), row + col, sigma)
            for j, col in enumerate(col_exponent.tolist())]
           for r, row in enumerate(row_exponent.tolist())]
    return torch.tensor(out, dtype=torch.float64).reshape(c.shape[1:]).to(c.device)


def _saturated(y: int, exponent: int, sigma: int) -> float:
    """y·2^exponent rounded, ±DBL_MAX in place of ±inf where (|y| − 2^σ)·2^exponent is below
    the overflow threshold or negative (σ ≥ 0; :func:`slack_exponent`)."""
    rounded = round_dyadic(y, exponent)
    if sigma >= 0 and math.isinf(rounded):
        rest = abs(y) - (1 << sigma)
        if rest < 0 or not math.isinf(round_dyadic(rest, exponent)):
            return math.copysign(DBL_MAX, y)
    return rounded


def _signed_crt(residues: list[int], moduli: tuple[int, ...]) -> int:
    big = math.prod(moduli)
    y = sum(r * (big // m) * pow(big // m, -1, m) for r, m in zip(residues, moduli)) % big
    if 2 * y == big:
        raise ValueError(HALF_MODULUS_ERROR)
    return y - big if 2 * y > big else y


def _check_launch(block: int, num_warps: int) -> None:
    # Every thread holds whole entries: block / (32 * num_warps) of them.
    if num_warps < 1 or num_warps & (num_warps - 1) or block < 32 * num_warps or block & (block - 1):
        raise ValueError(f"block {block} and num_warps {num_warps}: need powers of two with block >= 32 * num_warps")


def compile_ptx(moduli: Sequence[int], capability: int = 90, *, residues: str = "i32", block: int = DECODE_BLOCK,
                num_warps: int = DECODE_WARPS, aligned: bool = False, karatsuba: bool = False) -> str:
    """PTX of the decode kernel for ``moduli`` on ``sm_<capability>``, compiled without a
    GPU (``residues``: Triton's name of their type, unit column stride).  ``aligned``
    specializes as a launch at n = 16384 does (16-byte aligned data, sizes and strides
    multiples of 16): its loads and stores are then vectors, redistributed through shared
    memory.  ``karatsuba``: the decode of Karatsuba's three products (:func:`decode_residues`).
    Needs a process without ``TRITON_INTERPRET=1`` (see :func:`kernels.ptx.compile_kernel`)."""
    return compile_kernel(moduli, capability, residues=residues, block=block, num_warps=num_warps,
                          aligned=aligned, karatsuba=karatsuba).asm["ptx"]


def compile_kernel(moduli: Sequence[int], capability: int = 90, *, residues: str = "i32", block: int = DECODE_BLOCK,
                   num_warps: int = DECODE_WARPS, aligned: bool = False, karatsuba: bool = False):
    """:func:`compile_ptx`'s compiled kernel (its ``asm`` holds the PTX and the cubin)."""
    _check_launch(block, num_warps)
    constexprs = _constexprs(tuple(moduli), block, karatsuba=karatsuba)
    pointers = {"c_ptr": f"*{residues}", "out_ptr": "*fp64", "flag_ptr": "*i32"}
    signature = {name: pointers.get(name, "*i64" if name.endswith("_ptr") else "i32")
                 for name in _decode_kernel.arg_names if name not in constexprs}
    # What a launch on a contiguous c specializes: the column stride is 1.
    signature["stride_cc"] = "constexpr"
    constexprs["stride_cc"] = 1
    signature.update({name: "constexpr" for name in constexprs})
    sizes = ["row_exp_ptr", "col_exp_ptr", "rows", "cols", "stride_cn", "stride_cr"]
    divisible = [*pointers, *sizes] if aligned else []
    return ptx.compile_kernel(_decode_kernel, signature, constexprs, divisible=divisible, capability=capability,
                              num_warps=num_warps)
