"""Fused encode: float64 rows -> scaled integers -> residues -> digit planes, one pass.

Each tile takes one of two paths to the residues of round(x * 2**shift) (ties to even), and
both give the same integers:

* Float tiles, where every entry is finite and |y| = |x * 2**shift| < 2**62 (every tile of
  rows kept to at most 62 bits, as the "fp64" rule's int8 plans keep them): y is formed
  exactly by two multiplications by powers of two, and round(y) = high * 2**32 + low with
  float64 integers |high| < 2**30 and |low| <= 2**31, each rounded by adding and
  subtracting 1.5 * 2**52.  Per modulus m, one integer c = high * (2**32 mod m) + low and
  the quotient q = round(c / m) cost two float64 multiply-adds; the residue c - q * m itself
  is formed in int32 from the bit patterns of high, low and q (it is small, so its low 32
  bits are all of it), and a power of two m needs only low's bits.  About 37 float64
  operations per entry for 16 moduli.
* Integer tiles (non-finite entries, or scaled values past 2**62, as the "exact" rule's wide
  rows have): the integer n * 2**p with |n| < 2**53 and p >= 0 from the float64 bit pattern
  in int64.  A small p (up to 10) goes into n itself; a larger one is looked up per modulus in
  a table of 2**p mod m, read only by tiles that hold such entries.  Per modulus, c, q and
  c - q * m in float64 (``_integer_residue``), six operations.

No float rounding or conversion instruction is used: they run at a quarter of the float rate
or less.  Every intermediate is exact or rounds where the argument of its comment allows, so
the result does not depend on whether the compiler, or Triton's interpreter, fuses a
multiply and an add into one rounding.  The kernel writes the value each plane of that
modulus' encoding stores for the residue: where every encoding's one plane stores the residue
itself (every int8 plan) the kernel computes the value, else it looks it up in the encodings'
plane tables.  The moduli and the windows of their values are constexprs: each set compiles
its own kernel, with its constants in the instructions.  The output is the plane GEMM's
operand layout: ``[planes, ..., rows, K]`` with K contiguous; the input may be any strided
view (Bᵀ is read in place).  An inf or nan sets a flag in the kernel; the launcher raises.

The per-row shift comes from the caller (``ozaki.scaling.row_shifts``, which the pipeline
computes anyway), so the kernel reads the input once.  The bits are those of the staged
torch path (``ozaki.scaling.scale_rows`` -> ``ozaki.residues.residues`` ->
``ozaki.products.digit_planes``), which the tests check entry for entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import ptx
from kernels.crt import ldexp_factors
from kernels.dispatch import launch

__all__ = ["ENCODE_LAUNCHES", "MAX_MODULUS", "MAX_SHIFT", "compile_kernel", "compile_ptx", "encode_planes",
           "stores_residues"]

# Rows x K per program, warps per program and the registers a thread may hold (None: as the
# compiler likes), by the input's unit-stride axis ("k": rows of A; "rows": Bᵀ read in place):
# the kernel is elementwise, so any power-of-two tile is correct; encode_planes takes others
# (block=, num_warps=) for a sweep on the GPU.  Each is the fastest of the tiles timed for its
# operand (see benchmarks/kernels.md, "Float tiles in the encode, float64 sums in the upper
# pass" and "Tiles and register caps, again").  Bᵀ's tile, whose planes go through shared
# memory to leave K-contiguous, takes 98 registers a thread, four programs per SM; its encode
# is bound by the loads in flight, so it is capped at 96 (two spill), where five fit.
ENCODE_LAUNCHES = {"k": ((2, 256), 4, None), "rows": ((8, 128), 4, 96)}
# The residue step keeps |c| < 2**45 and rounds c/m within 1/(2m) (see _encode_kernel).
MAX_MODULUS = 2**12
# Programs along a grid's third axis (CUDA's limit): the products of a batch per launch.
_GRID_ITEMS = 65535
# Bounds the exponents (int32 in the kernel) and the table of 2**p mod m, whose p reach
# max(shift) + 971 (the weight of the last significand bit of the largest float64 is 2**971).
# The pipeline's shifts lie in [-1025, 3171]: a row keeps at most 2098 bits (a float64 row
# spans 2**1024 … 2**-1074) and its top lies in [-1073, 1024].
MAX_SHIFT = 2**15
_TOP_ULP_EXPONENT = 971
# The kernel splits each scaled integer n (|n| < 2**63) as high * 2**SPLIT_BITS + low.
_SPLIT_BITS = 32
# Powers up to this go into the int64 integer (|n| < 2**53 times 2**10 < 2**63); larger ones
# are looked up in the table of 2**p mod m.
_SMALL_POWER = 10
# 1.5 * 2**52: added to a float64 of magnitude below 2**51 it rounds to an integer (the ulp
# there is 1), whose bit pattern is 0x4338000000000000 plus that integer.
_ROUNDER = tl.constexpr(1.5 * 2**52)
# The float tiles split y = x * 2**shift at 2**SPLIT_BITS too.
_TWO_TO_SPLIT = tl.constexpr(2.0**_SPLIT_BITS)
_TWO_TO_MINUS_SPLIT = tl.constexpr(2.0**-_SPLIT_BITS)
# A tile whose scaled entries all lie below this takes the float path: high = round(y / 2**32)
# then stays below 2**30, c = high * w + low below 2**42 (see _float_residue).
_FLOAT_TILE_BOUND = tl.constexpr(2.0**62)
# ldexp_factors scales by 2**shift exactly in two powers of the normal range for shifts in
# [-2044, 2046]; launches whose shifts leave it (rows near the ends of the float64 range under
# the "exact" rule) take the integer path everywhere.
_FLOAT_SHIFTS = (-2044, 2046)


@triton.jit
def _store_value(value, out_ptrs, mask, g, plane_start_ptr, table_ptr, stride_table, stride_plane,
                 COMPUTED: tl.constexpr):
    # value: modulus g's representative of the entry in its window (int32).
    if COMPUTED:
        # Every encoding stores one plane holding the input itself (plane g): the value.
        tl.store(out_ptrs + g * stride_plane, value.to(out_ptrs.dtype.element_ty), mask=mask)
    else:
        # The value is the index into the encoding's plane tables, in [0, m).
        for t in range(tl.load(plane_start_ptr + g), tl.load(plane_start_ptr + g + 1)):
            tl.store(out_ptrs + t * stride_plane, tl.load(table_ptr + t * stride_table + value, mask=mask, other=0),
                     mask=mask)


@triton.jit
def _integer_residue(c, MODULUS: tl.constexpr, BASE: tl.constexpr):
    # c is an integer congruent to the scaled entry, |c| < 2**45 (see _integer_tile), exact in
    # float64.  The value is c - q * m, the representative of c in [base, base + m), with the
    # window's center z = base + (m - 1)/2 and q = round((c - z) / m): c - z - q*m lies in
    # [-m/2, m/2] and is an integer (m odd) or half an odd one (m even), so it lies in
    # [-(m - 1)/2, (m - 1)/2], and (c - z)/m is at least 1/(2m) from any half-integer, where
    # rounding could tie.  So any s within 1/(2m) of (c - z)/m rounds to q: s = c * inverse +
    # center, inverse = fl(1/m), center = fl(-z/m), is off by at most 3.01u (|c| + |z|)/m
    # (u = 2**-53: the roundings of inverse, center, the product and the sum, fused or not),
    # below 1/(2m) for |c| < 2**45 and |z| < 2**16.  Adding 1.5 * 2**52 to s (|s| < 2**45)
    # rounds it to the nearest integer, as the float's ulp there is 1, and subtracting it
    # again is exact (Sterbenz): q without a float-to-integer conversion.  q * m is an integer
    # with |q * m| <= |c| + |z| + m < 2**46, so c - q * m is exact, fused or not; plus
    # 1.5 * 2**52 (|value| < 2**51) it is exact again and has the bit pattern of the int64
    # 0x4338000000000000 + value: the low 32 bits are value.  (Python's float division rounds
    # the constants once; tl.full keeps them float64.)
    inverse = tl.full((), 1.0 / MODULUS, tl.float64)
    center = tl.full((), -(BASE + (MODULUS - 1) / 2) / MODULUS, tl.float64)
    s = c * inverse + center
    q = (s + _ROUNDER) - _ROUNDER
    return ((c - q * MODULUS) + _ROUNDER).to(tl.int64, bitcast=True).to(tl.int32)


@triton.jit
def _float_residue(high, low, high_bits, low_bits, MODULUS: tl.constexpr, BASE: tl.constexpr):
    # The representative in [base, base + m) of n = high * 2**32 + low (float64 integers,
    # |high| < 2**30, |low| <= 2**31; high_bits and low_bits their int32 patterns modulo 2**32).
    if MODULUS & (MODULUS - 1) == 0:
        # m divides 2**32: n mod m is low mod m, in integers alone.
        return ((low_bits - BASE) & (MODULUS - 1)) + BASE
    else:
        # w = 2**32 mod m, centered (|w| <= m/2 <= 2**11): c = high * w + low ≡ n (mod m) is an
        # integer with |c| < 2**41 + 2**31, exact in float64, fused into an fma or not.
        # q = round(c * fl(1/m)) by one add of 1.5 * 2**52 (the ulp there is 1): c * fl(1/m),
        # rounded or not before the add (fused or not), is within 2 * |c| * 2**-53 / m
        # < 2**-10 / m of c / m, and c / m lies at least 1/(2m) from a half-integer for odd m,
        # or is one (either neighbour then serves) or lies at least 1/m from one for even m,
        # so q is c / m rounded to nearest and the exact v = c - q * m lies in [-m/2, m/2].  Its low 32 bits are those of
        # high_bits * w + low_bits - q * m in wrapping int32 arithmetic: no float-to-integer
        # conversion, no more float64 work.  One step by m brings v into the window.
        w: tl.constexpr = (2**32 % MODULUS) - MODULUS * ((2**32 % MODULUS) > MODULUS // 2)
        c = high * w + low
        t = c * tl.full((), 1.0 / MODULUS, tl.float64) + _ROUNDER
        q = t.to(tl.int64, bitcast=True).to(tl.int32)
        value = high_bits * w + low_bits - q * MODULUS
        if BASE > -(MODULUS // 2):
            value = tl.where(value < BASE, value + MODULUS, value)
        if BASE + MODULUS - 1 < MODULUS // 2:
            value = tl.where(value >= BASE + MODULUS, value - MODULUS, value)
        return value


@triton.jit
def _float_tile(y, out_ptrs, mask, plane_start_ptr, table_ptr, stride_table, stride_plane,
                MODULI: tl.constexpr, BASES: tl.constexpr, COMPUTED: tl.constexpr):
    # y = x * 2**shift exactly, |y| < 2**62.  round(y) (ties to even) = high * 2**32 + low with
    # high = round(y / 2**32) (|high| < 2**30) and low = round(y - high * 2**32): y - high * 2**32
    # is exact (at most 2**31 in magnitude, a multiple of y's ulp) and shifting by a multiple
    # of 2**32 keeps the parity that ties round to.  Each rounding adds and subtracts
    # 1.5 * 2**52, whose sum's low 32 bits are the integer's (modulo 2**32).
    high_rounded = y * _TWO_TO_MINUS_SPLIT + _ROUNDER
    high = high_rounded - _ROUNDER
    low_rounded = (y - high * _TWO_TO_SPLIT) + _ROUNDER
    low = low_rounded - _ROUNDER
    high_bits = high_rounded.to(tl.int64, bitcast=True).to(tl.int32)
    low_bits = low_rounded.to(tl.int64, bitcast=True).to(tl.int32)
    for g in tl.static_range(len(MODULI)):
        value = _float_residue(high, low, high_bits, low_bits, MODULI[g], BASES[g])
        _store_value(value, out_ptrs, mask, g, plane_start_ptr, table_ptr, stride_table, stride_plane, COMPUTED)


@triton.jit
def _integer_tile(x, shift, mask, out_ptrs, pow_ptr, plane_start_ptr, table_ptr, flag_ptr, stride_table,
                  stride_plane, MODULI: tl.constexpr, BASES: tl.constexpr, COMPUTED: tl.constexpr,
                  SPLIT_BITS: tl.constexpr, SMALL_POWER: tl.constexpr):
    # Any tile, non-finite entries and huge powers included.  Once per entry, in int64:
    # x = ±significand * 2**exponent from the IEEE fields (subnormals: no hidden bit), then the
    # integer round(|x| * 2**shift) = integer * 2**power.
    N_MODULI: tl.constexpr = len(MODULI)
    pattern = x.to(tl.int64, bitcast=True)
    biased = ((pattern >> 52) & 0x7FF).to(tl.int32)
    # Exponent field 0x7FF: inf or nan.  Only such entries touch the flag (the launcher raises),
    # so a finite launch pays no atomic; they go on as 0, which keeps every read in bounds.
    finite = biased != 0x7FF
    tl.atomic_max(flag_ptr + tl.zeros_like(biased), 1, mask=mask & ~finite, sem="relaxed")
    pattern = tl.where(finite, pattern, 0)
    biased = tl.where(finite, biased, 0)
    fraction = pattern & 0xFFFFFFFFFFFFF
    significand = tl.where(biased == 0, fraction, fraction | 0x10000000000000)
    exponent = tl.where(biased == 0, -1074, biased - 1075) + shift[:, None]
    # A negative exponent leaves a fraction: round to nearest, ties to even.  Shifts past
    # 54 leave a quotient of 0 and a remainder below half, which the clamp keeps.
    drop = tl.minimum(tl.maximum(-exponent, 1), 62).to(tl.int64)
    quotient = significand >> drop
    remainder = significand & ((tl.full(drop.shape, 1, tl.int64) << drop) - 1)
    half = tl.full(drop.shape, 1, tl.int64) << (drop - 1)
    up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    integer = tl.where(exponent < 0, quotient + up.to(tl.int64), significand)
    # |n| < 2**53 (a significand, or one shifted right and rounded up to at most 2**52).
    n = tl.where(pattern < 0, -integer, integer)
    # A small power goes into the integer itself: |n * 2**power| < 2**53 * 2**SMALL_POWER
    # = 2**63 is exact in int64 and needs no table.  Only larger powers (the "exact" rule's
    # wide rows) are looked up per modulus below.
    power = tl.maximum(exponent, 0)
    tabled = (power > SMALL_POWER) & (n != 0)
    n = n << tl.where(tabled, 0, power).to(tl.int64)
    # n = high * 2**32 + low (SPLIT_BITS = 32; floor division: 0 <= low < 2**32, |high| <= 2**31),
    # both exact in float64.
    high = (n >> SPLIT_BITS).to(tl.int32).to(tl.float64)
    low = (n & ((1 << SPLIT_BITS) - 1)).to(tl.float64)
    # 2**p mod m sits at pow_ptr[p * N_MODULI + g]: the tabled lanes need p = power (the
    # weight of low) and p = power + SPLIT_BITS (that of high).  power <= max(shift) + 971
    # indexes the table (int32: the launcher checks the table has fewer than 2**31 entries).
    pow_offsets = power * N_MODULI
    # Per modulus, c = high * (2**(power + 32) mod m) + low * (2**power mod m) is congruent to
    # the scaled integer, |c| < 2**31 * 2**12 + 2**32 * 2**12 < 2**45: an integer, exact in
    # float64, fused into an fma or not.  A tile without tabled lanes takes the weights of
    # power 0 and reads no table.  Two loops rather than a branch per modulus: the gathers
    # may compile to a layout of their own (Triton 3.6), which then stays in the tabled loop
    # instead of costing every tile a shuffle per modulus.
    if tl.max(tabled.to(tl.int32)) != 0:
        for g in tl.static_range(N_MODULI):
            # Masked: the lanes of small powers read nothing and take the weights of power 0.
            high_weight = tl.load(pow_ptr + pow_offsets + SPLIT_BITS * N_MODULI + g, mask=tabled,
                                  other=(2**SPLIT_BITS) % MODULI[g])
            low_weight = tl.load(pow_ptr + pow_offsets + g, mask=tabled, other=1.0)
            value = _integer_residue(high * high_weight + low * low_weight, MODULI[g], BASES[g])
            _store_value(value, out_ptrs, mask, g, plane_start_ptr, table_ptr, stride_table, stride_plane, COMPUTED)
    else:
        for g in tl.static_range(N_MODULI):
            value = _integer_residue(high * ((2**SPLIT_BITS) % MODULI[g]) + low, MODULI[g], BASES[g])
            _store_value(value, out_ptrs, mask, g, plane_start_ptr, table_ptr, stride_table, stride_plane, COMPUTED)


@triton.jit
def _encode_kernel(
    x_ptr, shift_ptr, pow_ptr, plane_start_ptr, table_ptr, out_ptr, flag_ptr,
    rows, K, stride_xb, stride_xr, stride_xk, stride_table, stride_plane,
    MODULI: tl.constexpr, BASES: tl.constexpr, COMPUTED: tl.constexpr, FLOAT_TILES: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_BITS: tl.constexpr, SMALL_POWER: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_r[:, None] < rows) & (offs_k[None, :] < K)
    # The third axis walks a batch's products: each one's rows, shifts and planes follow the last's.
    item = tl.program_id(2).to(tl.int64)
    x_ptr += item * stride_xb
    shift_ptr += item * rows
    out_ptr += item * rows * K
    x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * stride_xr + offs_k[None, :].to(tl.int64) * stride_xk,
                mask=mask, other=0.0)
    # |shift| <= MAX_SHIFT (the launcher's check): int32 from here on.
    shift = tl.load(shift_ptr + offs_r, mask=offs_r < rows, other=0).to(tl.int32)
    out_ptrs = out_ptr + offs_r[:, None].to(tl.int64) * K + offs_k[None, :]
    stride_plane = tl.cast(stride_plane, tl.int64)  # planes * rows * K passes 2**31
    if FLOAT_TILES:
        # The common tile: every entry finite and scaled below 2**62 (rows of at most 62 bits,
        # as the "fp64" rule's int8 plans keep them) takes the float path, about 37 float64
        # operations per entry for 16 moduli against the integer path's 96 and its int64
        # prologue.  y = x * 2**shift is exact (shifts within _FLOAT_SHIFTS: two powers of two
        # in the normal range; where the first product underflows, |y| < 1/2 and the
        # rounding of y is 0 either way), or inf; a nan or inf fails the test.
        first, second = ldexp_factors(shift)
        y = x * first[:, None] * second[:, None]
        if tl.min((tl.abs(y) < _FLOAT_TILE_BOUND).to(tl.int32)) != 0:
            _float_tile(y, out_ptrs, mask, plane_start_ptr, table_ptr, stride_table, stride_plane, MODULI, BASES,
                        COMPUTED)
        else:
            _integer_tile(x, shift, mask, out_ptrs, pow_ptr, plane_start_ptr, table_ptr, flag_ptr, stride_table,
                          stride_plane, MODULI, BASES, COMPUTED, SPLIT_BITS, SMALL_POWER)
    else:
        _integer_tile(x, shift, mask, out_ptrs, pow_ptr, plane_start_ptr, table_ptr, flag_ptr, stride_table,
                      stride_plane, MODULI, BASES, COMPUTED, SPLIT_BITS, SMALL_POWER)


@lru_cache(maxsize=32)
def _encode_launch(encodings: tuple, side: str, device: torch.device, lowest: int,
                   highest: int) -> tuple[_EncodingTables, torch.Tensor, bool]:
    """What a launch for these encodings, side and range of shifts reads besides the data (its
    tables and powers of two) and whether its tiles may take the float path: checked and built
    once, as a product's encodes repeat them while the device waits for the first."""
    if not encodings:
        raise ValueError("encode_planes needs at least one encoding")
    for encoding in encodings:
        if encoding.modulus is None or not 2 <= encoding.modulus <= MAX_MODULUS:
            raise ValueError(f"encoding {encoding.name} is no residue encoding with a modulus in [2, {MAX_MODULUS}] "
                             "(the float64 residue step is exact only up to there)")
    tables = _encoding_tables(encodings, side, device)
    moduli = tables.moduli
    # Every scaled integer is integer * 2**power with power <= max(shift) + 971; the kernel
    # also reads 2**(power + SPLIT_BITS) mod m.
    count = max(highest + _TOP_ULP_EXPONENT, 0) + 1 + _SPLIT_BITS
    size = max(1024, 1 << (count - 1).bit_length())
    if size * len(moduli) >= 2**31:
        raise ValueError(f"{size} powers of two for {len(moduli)} moduli pass int32 table offsets; encode fewer "
                         "moduli per call")
    return tables, _power_table(moduli, size, device), _float_tiles(moduli, tables.bases, (lowest, highest))


@lru_cache(maxsize=8)
def _unwritten_flag(device: torch.device) -> torch.Tensor:
    # The flag of launches told their data is finite: one per device, never read (a launch over
    # inf or nan whose planes its caller drops may write it).
    return torch.zeros(1, dtype=torch.int32, device=device)


@lru_cache(maxsize=8)
def _power_table(moduli: tuple[int, ...], size: int, device: torch.device) -> torch.Tensor:
    """[size, moduli] float64 with 2**p mod m at [p, i], by square and multiply over p's bits
    (products below m**2 <= 2**24 in int64; values below m, exact in float64).  Laid out by
    power: the values one entry needs for all moduli share a cache line.  Sizes are powers
    of two, so a few tables serve every call."""
    m = torch.tensor(moduli, dtype=torch.int64)
    p = torch.arange(size, dtype=torch.int64)[:, None]
    table = torch.ones((size, len(moduli)), dtype=torch.int64)
    square = 2 % m
    for bit in range(size.bit_length()):
        table = torch.where((p >> bit) & 1 == 1, table * square % m, table)
        square = square * square % m
    return table.to(torch.float64).to(device)


def _is_identity(table: list[list[int]], low: int, modulus: int) -> bool:
    """One plane whose value for input low + i is low + i: the kernel computes it, no lookup.
    Only indices below m are ever read."""
    return len(table) == 1 and table[0][:modulus] == list(range(low, low + modulus))


class _EncodingTables(NamedTuple):
    """What a launch for one list of encodings and one side reads besides the data, on its device."""

    moduli: tuple[int, ...]
    bases: tuple[int, ...]  # each modulus' window [base, base + m) of the values the kernel computes
    computed: bool  # every plane stores its input: the kernel computes the values, no table
    out_dtype: torch.dtype
    plane_count: int
    plane_start: torch.Tensor
    table: torch.Tensor


@lru_cache(maxsize=32)
def _encoding_tables(encodings: tuple, side: str, device: torch.device) -> _EncodingTables:
    """The launch's tables, built and copied to the device once per (encodings, side, device):
    a repeated product queues no host-to-device copy."""
    moduli = tuple(e.modulus for e in encodings)
    lows = [(e.a if side == "a" else e.b).min for e in encodings]
    plane_tables = [e.plane_table(side) for e in encodings]
    fits_int8 = all(-128 <= v <= 127 for t in plane_tables for plane in t for v in plane)
    # Every plane stores its input (every int8 plan): the kernel computes each value, in
    # [low, low + m), which the output type holds, so |low| <= 2**15.  Otherwise it computes
    # the residue in [0, m) and looks the planes up in tables indexed by it: column j holds
    # what each plane stores for the input congruent to j in [low, low + m).
    computed = all(_is_identity(t, low, m) for t, low, m in zip(plane_tables, lows, moduli))
    bases = tuple(lows) if computed else (0,) * len(moduli)
    width = max(moduli)
    out_dtype = torch.int8 if fits_int8 else torch.int16
    table = torch.cat([torch.nn.functional.pad(torch.tensor(t, dtype=torch.int64)[:, [(j - low) % m for j in range(m)]],
                                               (0, width - m))
                       for t, low, m in zip(plane_tables, lows, moduli)])
    plane_start = [0]
    for t in plane_tables:
        plane_start.append(plane_start[-1] + len(t))
    return _EncodingTables(moduli, bases, computed, out_dtype, plane_start[-1],
                           torch.tensor(plane_start, dtype=torch.int32, device=device),
                           table.to(device=device, dtype=out_dtype))


def _float_tiles(moduli: Sequence[int], bases: Sequence[int], span: tuple[int, int]) -> bool:
    """Whether a launch may take the float path for its tiles of small scaled entries: the
    shifts within ldexp_factors' exact range, and each window where one step by m takes the
    float path's v in [-m/2, m/2] (_float_residue): m//2 - 2m < base <= m - m//2."""
    return (_FLOAT_SHIFTS[0] <= span[0] and span[1] <= _FLOAT_SHIFTS[1]
            and all(m // 2 - 2 * m < base <= m - m // 2 for m, base in zip(moduli, bases)))


def shift_range(*shifts: torch.Tensor) -> tuple[int, int]:
    """(lowest, highest) over every entry of ``shifts`` (int64 tensors of one device), in one
    read (a host synchronisation): what :func:`encode_planes` needs to know of the shifts,
    for callers that encode several operands or blocks with them."""
    present = [s for s in shifts if s.numel()]
    if not present:
        return 0, 0
    ranges = torch.stack([torch.stack(s.aminmax()) for s in present]).tolist()
    return min(low for low, _ in ranges), max(high for _, high in ranges)


def encode_planes(x: torch.Tensor, shift: torch.Tensor, encodings: Sequence, side: str, *,
                  span: tuple[int, int] | None = None, known_finite: bool = False, karatsuba: bool = False,
                  block: tuple[int, int] | None = None, num_warps: int | None = None) -> torch.Tensor:
    """Digit planes ``[sum of plane counts, ..., rows, K]`` of the integers
    round(x * 2**shift) (ties to even, one shift per row), for each residue encoding in turn
    (int8 when every plane value fits, else int16).  ``x`` is float64 ``[..., rows, K]``, any
    strides (for B pass Bᵀ: rows are B's columns); ``shift`` is int64 ``[..., rows]`` with
    |shift| <= MAX_SHIFT, normally ``ozaki.scaling.row_shifts(x, bits)``; ``side`` is "a" or "b".
    ``block`` (BLOCK_R, BLOCK_K, powers of two) and ``num_warps`` change the speed, never the
    result (default: :data:`ENCODE_LAUNCHES` for x's unit-stride axis).  An inf or nan in x
    raises ValueError (found by the kernel, after the launch).

    Each of those checks reads the device: ``span``, a (lowest, highest) that holds every
    entry of ``shift`` (:func:`shift_range` of it, or of the shifts it is a block of), and
    ``known_finite=True`` where the caller has made x finite (or drops the planes of an x that
    is not: its inf and nan are encoded as 0), skip them, so that a call queues its work
    without waiting for the device.

    ``karatsuba``: x is ``[2, rows, K]``, a complex operand's real and imaginary parts scaled by
    one shift per row (``shift`` ``[2, rows]``, its two halves equal), and the result is
    ``[planes, 3, rows, K]``: the planes of X_re', X_im' and of (X_re' + X_im') mod m, the
    operands of Karatsuba's three products, for encodings whose one plane stores the residue
    itself (:func:`stores_residues`: the int8 plans)."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
        raise TypeError(f"x must be a float64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"x has shape {tuple(x.shape)}: expected [..., rows, K]")
    if not isinstance(shift, torch.Tensor) or shift.dtype != torch.int64 or shift.shape != x.shape[:-1]:
        raise ValueError(f"shift must be an int64 tensor of shape {tuple(x.shape[:-1])} (one entry per row)")
    # The shifts' range (unless given, one read): the check, and the table's size below.
    lowest, highest = shift_range(shift) if span is None else span
    if max(-lowest, highest) > MAX_SHIFT:
        raise ValueError(f"shift per row must lie in [-{MAX_SHIFT}, {MAX_SHIFT}] (int32 exponents, a bounded "
                         f"table of powers of two); got {lowest} … {highest}")
    if side not in ("a", "b"):
        raise ValueError(f"side must be 'a' or 'b', got {side!r}")
    if block is not None and (len(block) != 2 or any(b < 1 or b & (b - 1) for b in block)):
        raise ValueError(f"block must be two powers of two (BLOCK_R, BLOCK_K), got {block}")
    tables, powers, float_tiles = _encode_launch(tuple(encodings), side, x.device, lowest, highest)
    if karatsuba and (x.dim() != 3 or len(x) != 2 or not tables.computed):
        raise ValueError("Karatsuba's planes take x of shape [2, rows, K] and encodings whose one plane stores the "
                         f"residue (stores_residues, the int8 plans); got x of shape {tuple(x.shape)} and encodings "
                         f"{[e.name for e in encodings]}")

    (rows, k), items = x.shape[-2:], math.prod(x.shape[:-2])
    out = torch.empty((tables.plane_count, 3 if karatsuba else items, rows, k), dtype=tables.out_dtype,
                      device=x.device)
    if out.numel() == 0:
        return out if karatsuba else out.view(tables.plane_count, *x.shape)
    # A view for 2-D input and a batch of one leading dimension: Bᵀ is read in place.
    batch = x.reshape(items, rows, k)
    default_block, default_warps, max_registers = ENCODE_LAUNCHES["k" if batch.stride(2) == 1 else "rows"]
    # The register cap was chosen for the default launch: other tiles would spill under it.
    max_registers = max_registers if block is None and num_warps is None else None
    block, num_warps = block or default_block, num_warps or default_warps
    # The kernel flags a non-finite entry; finite x never writes the flag, nor is it read then.
    flag = _unwritten_flag(x.device) if known_finite else torch.zeros(1, dtype=torch.int32, device=x.device)
    shifts = shift.reshape(items, rows).contiguous()
    # A grid's third axis holds at most _GRID_ITEMS programs: a larger batch takes a launch per slice.
    for first in range(0, items, _GRID_ITEMS):
        part = slice(first, first + _GRID_ITEMS)
        grid = (triton.cdiv(rows, block[0]), triton.cdiv(k, block[1]), len(range(items)[part]))
        launch(_encode_kernel, grid,
            batch[part], shifts[part], powers, tables.plane_start, tables.table, out[:, part], flag,
            rows, k, batch.stride(0), batch.stride(1), batch.stride(2), tables.table.stride(0), out.stride(0),
            MODULI=tables.moduli, BASES=tables.bases, COMPUTED=tables.computed, FLOAT_TILES=float_tiles,
            BLOCK_R=block[0], BLOCK_K=block[1], SPLIT_BITS=_SPLIT_BITS, SMALL_POWER=_SMALL_POWER,
            num_warps=num_warps, maxnreg=max_registers, **ptx.LAUNCH_OPTIONS,
        )
    if karatsuba:
        # 2'. The third operand, (X_re' + X_im') mod m, from the planes of the two parts.
        table = _sum_table(tables.moduli, tables.bases, x.device)
        launch(_sum_planes_kernel, (triton.cdiv(rows * k, _SUM_BLOCK), len(tables.moduli)),
               out, table, table[len(tables.moduli):], rows * k, out.stride(0), BLOCK=_SUM_BLOCK, num_warps=4,
               **ptx.LAUNCH_OPTIONS)
    if not known_finite and int(flag):
        raise ValueError("x holds inf or nan: only finite rows can be scaled to integers")
    return out if karatsuba else out.view(tables.plane_count, *x.shape)


def stores_residues(encodings: Sequence, side: str) -> bool:
    """Whether every encoding's one plane stores the residue itself (every int8 plan), so that
    the sum of two operands' planes, brought back into the window, is the sum's plane
    (``encode_planes(..., karatsuba=True)``)."""
    return _encoding_tables(tuple(encodings), side, torch.device("cpu")).computed


# Entries of one plane per program of the sum.
_SUM_BLOCK = 1024


@triton.jit
def _sum_planes_kernel(planes_ptr, moduli_ptr, bases_ptr, size, stride_plane, BLOCK: tl.constexpr):
    # Plane g of [planes, 3, rows, K]: item 2 = item 0 + item 1, back into the plane's window
    # [base, base + m), which -m < base <= 0 reaches from the sum's [2 base, 2 base + 2m - 2]
    # in one step by m.
    plane = tl.program_id(1)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < size
    first = planes_ptr + plane.to(tl.int64) * stride_plane + offs
    total = (tl.load(first, mask=mask, other=0).to(tl.int32)
             + tl.load(first + size, mask=mask, other=0).to(tl.int32))
    modulus = tl.load(moduli_ptr + plane)
    base = tl.load(bases_ptr + plane)
    total = tl.where(total >= base + modulus, total - modulus, total)
    total = tl.where(total < base, total + modulus, total)
    tl.store(first + 2 * size, total.to(planes_ptr.dtype.element_ty), mask=mask)


@lru_cache(maxsize=32)
def _sum_table(moduli: tuple[int, ...], bases: tuple[int, ...], device: torch.device) -> torch.Tensor:
    if not all(-m < base <= 0 for m, base in zip(moduli, bases)):
        raise ValueError(f"windows {bases} of moduli {moduli}: the sum of planes needs -m < base <= 0")
    return torch.tensor(moduli + bases, dtype=torch.int32, device=device)


def compile_ptx(moduli: Sequence[int], capability: int = 90, operand: str = "a", computed: bool = True,
                float_tiles: bool = True) -> str:
    """PTX of :func:`compile_kernel`."""
    return compile_kernel(moduli, capability, operand, computed, float_tiles).asm["ptx"]


def compile_kernel(moduli: Sequence[int], capability: int = 90, operand: str = "a", computed: bool = True,
                   float_tiles: bool = True):
    """The encode kernel for ``moduli`` on ``sm_<capability>``, compiled without a GPU as
    a launch at n = 16384 specializes it (16-byte aligned data, sizes and strides multiples of
    16) for int8 planes and the operand's unit stride, with its default launch: "a" reads K
    contiguous (rows of A), "b" rows contiguous (Bᵀ).  ``computed``: every plane stores its
    input, in the balanced window [-(m//2), m - m//2) (int8 plans), else planes come from
    tables.  ``float_tiles``: shifts that allow the float path.  Triton's compiled kernel: its
    ``asm`` holds the PTX and the cubin.  Needs a process without ``TRITON_INTERPRET=1`` (see
    :func:`kernels.ptx.compile_kernel`)."""
    unit, other = {"a": ("stride_xk", "stride_xr"), "b": ("stride_xr", "stride_xk")}.get(operand, (None, None))
    if unit is None:
        raise ValueError(f"operand must be 'a' or 'b', got {operand!r}")
    moduli = tuple(moduli)
    block, warps, max_registers = ENCODE_LAUNCHES["k" if operand == "a" else "rows"]
    pointers = {"x_ptr": "*fp64", "shift_ptr": "*i64", "pow_ptr": "*fp64", "plane_start_ptr": "*i32",
                "table_ptr": "*i8", "out_ptr": "*i8", "flag_ptr": "*i32"}
    constexprs = {"MODULI": moduli, "BASES": tuple(-(m // 2) if computed else 0 for m in moduli),
                  "COMPUTED": computed, "FLOAT_TILES": float_tiles, "BLOCK_R": block[0], "BLOCK_K": block[1],
                  "SPLIT_BITS": _SPLIT_BITS, "SMALL_POWER": _SMALL_POWER, unit: 1}
    signature = {name: pointers.get(name, "i32") for name in _encode_kernel.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    divisible = [*pointers, "rows", "K", other, "stride_plane"]
    return ptx.compile_kernel(_encode_kernel, signature, constexprs, divisible=divisible, capability=capability,
                              num_warps=warps, maxnreg=max_registers)
