"""Stage 1's reads of a float64 matrix in one pass: per row, the largest |x| and the lowest set bit;
and the rows' shifts from the largest |x| and the bits kept.

The scaling (``ozaki.scaling``) needs two numbers per row of A and per column of B: the
largest magnitude (for the row's top and the rounding carry of ``shifts_of``) and the
exponent of the lowest set bit of any non-zero entry (for the lossless width of
``exact_bits_of``).  In torch that is some ten elementwise passes over the operand plus a
copy of Bᵀ (``reshape`` of a transposed view); this kernel reads each entry once, through
the input's strides, so B's columns are read in place.

Both results are reductions of exact integers by max and min, which are associative and
commutative: the IEEE pattern of |x| (non-negative patterns order as their values) and the
lowest bit's exponent.  So neither depends on the tile shape, the order of the tiles, the
split of K over programs or the order in which their atomics land: every config gives the
bits of :func:`reference_row_extents` (and of the torch path, ``ozaki.scaling.row_extents``),
which the tests check entry for entry.  :class:`Extents` and ``NO_SET_BIT`` live here, below
both, because the library's scaling reads the same two numbers from either.

:func:`row_shifts_kernel` computes ``ozaki.scaling.shifts_of`` (the shift p − top of each row,
one less where rounding would carry the row's maximum up to 2^p) of both sides in one launch,
where torch takes some twenty small launches per side, each paid in host time while the device
waits for the encode that needs the shifts.  The same float64 operations on the same values
give the same integers (:func:`reference_row_shifts`, from the definition in Python's floats).
:func:`capped_shifts_kernel` does the same for rows whose bits are first capped at P (a plan
widened to P bits per row), writing the capped bits too.

:func:`line_summary_kernel` reduces what the plan reads of both sides' lines (their bits,
lossless widths, largest magnitudes and, under "fp64", levels and code sums) to int64
vectors of maxima, in one launch, so that the plan reads both sides in one transfer: the
fewest bits and the guard among them, which a second read of minima gave before
(:func:`reference_line_summary` holds the definition).  Under "fp64" the same launch sets
each line's bits from its level.  Such line kernels take both sides in one launch
(:func:`launch_sides`): on the host a launch costs more than the device spends on the lines.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import ptx
from kernels.crt import ldexp_factors
from kernels.dispatch import launch
from kernels.float64 import EXPONENT_BIAS, FRACTION_BITS, MAGNITUDE_MASK, SIGNIFICAND_BITS, ULP_BIAS

__all__ = ["EXTENTS_LAUNCHES", "INF_PATTERN", "LINE_CAP", "MAX_GRID_Y", "MAX_WIDTH", "NO_SET_BIT",
           "SHIFTS_BLOCK", "SUMMARY_FIELDS", "SUMMARY_LENGTH", "SUMMARY_WIDTHS", "Extents", "SummaryLines",
           "capped_shifts_kernel", "chunked_grid", "compile_ptx", "exact_bits_kernel", "frexp_exponent",
           "launch_sides", "line_block", "line_summary_kernel", "reference_line_summary", "reference_row_extents",
           "reference_row_shifts", "row_extents_kernel", "row_shifts_kernel"]

# The lowest bit of an all-zero row: the identity of the min over its entries, above every
# real lowest bit (≤ 1023): int32's largest value, the identity of the kernel's int32 minima.
NO_SET_BIT = 2**31 - 1


@dataclass(frozen=True)
class Extents:
    """What stage 1 reads of each row of x: bits and shifts are functions of these alone
    (``ozaki.scaling.exact_bits_of``, ``fixed_bits_of``, ``shifts_of``), whether they come
    from the torch path or from one pass of :func:`row_extents_kernel`."""

    row_max: torch.Tensor  # float64, one per row: the largest |x| (0.0 for an all-zero row)
    lowest_bit: torch.Tensor  # int64, one per row: the exponent of the lowest set bit of any entry (NO_SET_BIT if none)

    @property
    def has_nonzero(self) -> torch.Tensor:
        return self.row_max > 0


# (K x rows per tile, warps) by the input's unit-stride axis ("k": rows of A; "rows": Bᵀ
# read in place, whose rows are B's columns).  The load's layout puts that axis fastest, so
# any tile reads coalesced; these were the fastest of fourteen for each on the H200 at
# n = 8192 and 16384 (benchmarks/kernels.md, "Tiles and register caps, again").
EXTENTS_LAUNCHES = {"k": ((32, 64), 4), "rows": ((64, 16), 8)}
# Enough programs to keep every SM of an H200 (132) streaming: K is split over programs
# until the grid holds about this many (or each holds one tile of K).
_TARGET_PROGRAMS = 4096
# CUDA's limit on the grid's second axis (over which K is split).
MAX_GRID_Y = 65535
# A set bit 2**t of a significand, converted to float64, has exponent field bias + t; the
# bit weighs 2**(t + max(E, 1) - ULP_BIAS) (kernels.float64).
_WEIGHT_BIAS = tl.constexpr(EXPONENT_BIAS + ULP_BIAS)
_SIGN_MASK = tl.constexpr(MAGNITUDE_MASK)
_HIDDEN_BIT = tl.constexpr(1 << FRACTION_BITS)
_NO_SET_BIT = tl.constexpr(NO_SET_BIT)


@triton.jit
def entry_extents(x):
    """Per entry of a float64 tile: the pattern of |x| (int64, ordered as the magnitudes) and
    the exponent of its lowest set bit (int32, NO_SET_BIT for a zero), whose maximum and
    minimum over a row are its :class:`Extents`."""
    magnitude = x.to(tl.int64, bitcast=True) & _SIGN_MASK
    # The lowest set bit 2**t of the significand (hidden bit included; it is the lowest
    # only for a zero fraction, where a subnormal would be 0) is exact in float64, whose
    # exponent field then reads 1023 + t.
    significand = magnitude | _HIDDEN_BIT
    lowest_set = ((significand & -significand).to(tl.float64).to(tl.int64, bitcast=True) >> 52).to(tl.int32)
    biased = (magnitude >> 52).to(tl.int32)
    bit = lowest_set + tl.maximum(biased, 1) - _WEIGHT_BIAS
    return magnitude, tl.where(magnitude == 0, _NO_SET_BIT, bit)


@triton.jit
def _extents_kernel(
    x_ptr, max_ptr, lowest_ptr,
    rows, K, stride_xr, stride_xk, k_chunk,
    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = offs_r < rows
    k_start = tl.program_id(1) * k_chunk
    k_stop = tl.minimum(k_start + k_chunk, K)
    # Elementwise running max and min over this program's K chunk; reduced across the tile
    # once at the end, as a reduction over K crosses threads (for Bᵀ also warps).
    largest = tl.zeros([BLOCK_K, BLOCK_R], dtype=tl.int64)
    lowest = tl.full([BLOCK_K, BLOCK_R], _NO_SET_BIT, dtype=tl.int32)
    for k0 in range(k_start, k_stop, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        # k_chunk is a multiple of BLOCK_K, so a tile never crosses into the next chunk.
        mask = (offs_k[:, None] < K) & row_mask[None, :]
        x = tl.load(x_ptr + offs_k[:, None].to(tl.int64) * stride_xk + offs_r[None, :].to(tl.int64) * stride_xr,
                    mask=mask, other=0.0)
        # Masked-off entries read as 0.0 and, like zeros of either sign, change neither result.
        magnitude, bit = entry_extents(x)
        largest = tl.maximum(largest, magnitude)
        lowest = tl.minimum(lowest, bit)
    # Other programs hold other chunks of the same rows: max and min commute, so the order in
    # which the atomics land changes nothing.
    tl.atomic_max(max_ptr + offs_r, tl.max(largest, axis=0), mask=row_mask)
    tl.atomic_min(lowest_ptr + offs_r, tl.min(lowest, axis=0).to(tl.int64), mask=row_mask)


def row_extents_kernel(*xs: torch.Tensor, block: tuple[int, int] | None = None, chunks: int | None = None,
                       num_warps: int | None = None) -> tuple[Extents, ...]:
    """The :class:`Extents` of each x's rows, one pass (one launch) per x: each x is float64
    ``[rows, K]`` with any strides (for B pass Bᵀ, a view: its rows are B's columns, read in
    place), all on one device.  ``block`` (BLOCK_K, BLOCK_R, powers of two), ``chunks`` (K
    split over this many programs per block of rows; default: enough to fill the GPU) and
    ``num_warps`` change the speed, never the result (default: :data:`EXTENTS_LAUNCHES` for
    each x's unit-stride axis).  Only 2-D: the pipeline's products are
    (the frontend loops over batches), and flattening a batch of transposed views would copy
    it.  The results of all the xs start from one fill (the identities of their maxima and
    minima): a call's first launches are made while the device waits for them."""
    if not xs:
        raise ValueError("row_extents_kernel takes at least one tensor")
    launches = []
    for x in xs:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
            raise TypeError(f"x must be a float64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.dim() != 2:
            raise ValueError(f"x has shape {tuple(x.shape)}: expected [rows, K]")
        if x.device != xs[0].device:
            raise ValueError(f"every x must be on one device, got {xs[0].device} and {x.device}")
        default_block, default_warps = EXTENTS_LAUNCHES["k" if x.stride(1) == 1 else "rows"]
        tile = block or default_block
        launches.append((chunked_grid(*x.shape, tile, chunks), tile, num_warps or default_warps))
    # Row i of one x: its largest |x| pattern in row 0 of the fill, its lowest set bit in row 1.
    fill = torch.empty((2, sum(x.shape[0] for x in xs)), dtype=torch.int64, device=xs[0].device)
    fill.copy_(_identities(fill.device).expand_as(fill))
    out, start = [], 0
    for x, (chunking, tile, warps) in zip(xs, launches):
        rows, k = x.shape
        largest, lowest = fill[0, start:start + rows], fill[1, start:start + rows]
        start += rows
        if chunking is not None:
            grid, k_chunk = chunking
            launch(_extents_kernel, grid,
                x, largest, lowest, rows, k, x.stride(0), x.stride(1), k_chunk,
                BLOCK_K=tile[0], BLOCK_R=tile[1], num_warps=warps, **ptx.LAUNCH_OPTIONS,
            )
        out.append(Extents(row_max=largest.view(torch.float64), lowest_bit=lowest))
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _identities(device: torch.device) -> torch.Tensor:
    # The fill of the extents: 0 under every largest |x| pattern, NO_SET_BIT over every lowest bit.
    return torch.tensor([[0], [NO_SET_BIT]], dtype=torch.int64, device=device)


# Rows per program of the shifts: one entry per thread of 4 warps.
SHIFTS_BLOCK = 128
_FRACTION = tl.constexpr(FRACTION_BITS)
_FREXP_BIAS = tl.constexpr(EXPONENT_BIAS - 1)
_EXPONENT_BIAS = tl.constexpr(EXPONENT_BIAS)
# Rows of fewer bits may carry (a float64 maximum has at most 53 significant bits).
_CARRY_BITS = tl.constexpr(SIGNIFICAND_BITS)
# z + 2^52 − 2^52 rounds a float64 z in [0, 2^52) to the nearest integer, ties to even.
_ROUNDER = tl.constexpr(2.0**FRACTION_BITS)
# A subnormal times 2^64 is normal, exactly.
_SUBNORMAL_BITS = tl.constexpr(64)
_SUBNORMAL_SCALE = tl.constexpr(2.0**64)


@triton.jit
def frexp_exponent(magnitude):
    """frexp's exponent e of a finite float64 magnitude > 0 (2^(e−1) ≤ it < 2^e), from its
    exponent field, subnormals included (times 2^64 they are normal, exactly, their exponent
    64 higher): no conversion instruction.  A zero gets a meaningless value."""
    subnormal = (magnitude.to(tl.int64, bitcast=True) >> _FRACTION) == 0
    normalized = magnitude * tl.where(subnormal, _SUBNORMAL_SCALE, 1.0)
    return (normalized.to(tl.int64, bitcast=True) >> _FRACTION) - tl.where(subnormal, _SUBNORMAL_BITS, 0) - _FREXP_BIAS


@triton.jit
def line_block(lines, BLOCK: tl.constexpr):
    """This program's BLOCK lines of a kernel with one line (a row's or column's number) per
    entry, and which of them exist."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < lines


@triton.jit
def _line_shifts(max_ptr, bits_ptr, shift_ptr, kept_ptr, cap, rows, CAPPED: tl.constexpr, BLOCK: tl.constexpr):
    offs, mask = line_block(rows, BLOCK)
    row_max = tl.load(max_ptr + offs, mask=mask, other=0.0)
    bits = tl.load(bits_ptr + offs, mask=mask, other=0)
    if CAPPED:
        bits = tl.minimum(bits, cap)
        tl.store(kept_ptr + offs, bits, mask=mask)
    top = frexp_exponent(row_max)
    nonzero = row_max > 0
    shift = tl.where(nonzero, bits - top, 0)
    # As ozaki.scaling.shifts_of: below 53 bits the scaled maximum lies in [1/2, 2^52), exact
    # (two power-of-two factors, as ozaki._bits.ldexp), and rounds to 2^p exactly when the
    # row's rounding carries.  (Fusing the last factor into the rounding add changes nothing:
    # that product is exact.)
    narrow = nonzero & (bits < _CARRY_BITS)
    first, second = ldexp_factors(tl.where(narrow, shift, 0))
    rounded = (row_max * first * second + _ROUNDER) - _ROUNDER
    power = ((tl.minimum(bits, _CARRY_BITS - 1) + _EXPONENT_BIAS) << _FRACTION).to(tl.float64, bitcast=True)
    carry = narrow & (rounded == power)
    tl.store(shift_ptr + offs, shift - carry.to(tl.int64), mask=mask)


@triton.jit
def _shifts_kernel(max_ptr, bits_ptr, shift_ptr, kept_ptr, cap, rows, other_max_ptr, other_bits_ptr,
                   other_shift_ptr, other_kept_ptr, other_cap, other_rows, CAPPED: tl.constexpr, BLOCK: tl.constexpr):
    # The grid's second axis picks the side (launch_sides).
    if tl.program_id(1) == 0:
        _line_shifts(max_ptr, bits_ptr, shift_ptr, kept_ptr, cap, rows, CAPPED, BLOCK)
    else:
        _line_shifts(other_max_ptr, other_bits_ptr, other_shift_ptr, other_kept_ptr, other_cap, other_rows, CAPPED,
                     BLOCK)


def row_shifts_kernel(*sides: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """``ozaki.scaling.shifts_of`` of one or two sides (A's rows, Bᵀ's) in one launch: per
    row, int64 s = p − top (0 for an all-zero row), one less where the row's maximum would
    round up to 2^p.  Each side is (``row_max``, ``bits``): float64 (a row's largest |x|,
    finite and non-negative: ``Extents.row_max``) and int64 p ≥ 0, one per row, on one
    device; nothing is read back (the caller keeps p ≥ 0)."""
    return tuple(shift for shift, _ in _launch_shifts("row_shifts_kernel", [(*side, None) for side in sides]))


def capped_shifts_kernel(*sides: tuple[torch.Tensor, torch.Tensor, int]
                         ) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """:func:`row_shifts_kernel` of rows that keep at most ``cap`` bits: each side is
    (``row_max``, ``bits``, ``cap``), each row keeps p = min(bits, cap) ≥ 0; per side (p, s),
    both int64, in one launch for both sides (what a plan widened to P bits per row needs)."""
    for *_, cap in sides:
        if not isinstance(cap, int) or cap < 0:
            raise ValueError(f"cap must be a non-negative int, got {cap!r}")
    return tuple((kept, shift) for shift, kept in _launch_shifts("capped_shifts_kernel", sides))


def _launch_shifts(name: str, sides: list[tuple]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    if len(sides) not in (1, 2):
        raise ValueError(f"{name} takes one or two sides, got {len(sides)}")
    outs = []
    for row_max, bits, cap in sides:
        if not isinstance(row_max, torch.Tensor) or row_max.dtype != torch.float64 or row_max.dim() != 1:
            got = getattr(row_max, "dtype", type(row_max).__name__)
            raise TypeError(f"row_max must be a 1-D float64 tensor, got {got}")
        if (not isinstance(bits, torch.Tensor) or bits.dtype != torch.int64 or bits.shape != row_max.shape
                or bits.device != sides[0][0].device):
            raise ValueError(f"bits must be an int64 tensor of shape {tuple(row_max.shape)} on {sides[0][0].device}")
        outs.append((torch.empty_like(bits), None if cap is None else torch.empty_like(bits)))
    capped = sides[0][2] is not None
    launch_sides(_shifts_kernel, [(row_max.contiguous(), bits.contiguous(), shift, kept, cap or 0, shift.numel())
                                  for (row_max, bits, cap), (shift, kept) in zip(sides, outs)], SHIFTS_BLOCK,
                 CAPPED=capped)
    return outs


def launch_sides(kernel, sides: list[tuple], block: int, *shared, num_warps: int = 4, **constexprs) -> None:
    """One launch of a line kernel over one or two sides (A's rows, Bᵀ's), each side its
    arguments ending in its line count: the kernel takes the first side's, the last side's
    (the first's again for one side) and then ``shared``; the grid's second axis picks the
    side, in programs of ``block`` lines.  Each launch costs the host more than the device
    takes for a side's lines (benchmarks/RESULTS.md, the launchers' host times)."""
    if len(sides) not in (1, 2):
        raise ValueError(f"a line kernel takes one or two sides, got {len(sides)}")
    lines = max(side[-1] for side in sides)
    if lines:
        launch(kernel, (triton.cdiv(lines, block), len(sides)), *sides[0], *sides[-1], *shared, BLOCK=block,
               num_warps=num_warps, **constexprs, **ptx.LAUNCH_OPTIONS)


@triton.jit
def _line_exact_bits(max_ptr, lowest_ptr, bits_ptr, top_ptr, rows, BLOCK: tl.constexpr):
    offs, mask = line_block(rows, BLOCK)
    row_max = tl.load(max_ptr + offs, mask=mask, other=0.0)
    top = frexp_exponent(row_max)
    tl.store(bits_ptr + offs, tl.where(row_max > 0, top - tl.load(lowest_ptr + offs, mask=mask, other=0), 0),
             mask=mask)
    tl.store(top_ptr + offs, row_top(row_max), mask=mask)


@triton.jit
def row_top(row_max):
    """torch.frexp's exponent of a row's largest |x|: its top, 0 for a zero, an inf or a NaN
    maximum."""
    finite = row_max.to(tl.int64, bitcast=True) < _INF_PATTERN
    return tl.where((row_max > 0) & finite, frexp_exponent(row_max), 0)


@triton.jit
def _exact_bits_kernel(max_ptr, lowest_ptr, bits_ptr, top_ptr, rows, other_max_ptr, other_lowest_ptr, other_bits_ptr,
                       other_top_ptr, other_rows, BLOCK: tl.constexpr):
    # The grid's second axis picks the side (launch_sides).
    if tl.program_id(1) == 0:
        _line_exact_bits(max_ptr, lowest_ptr, bits_ptr, top_ptr, rows, BLOCK)
    else:
        _line_exact_bits(other_max_ptr, other_lowest_ptr, other_bits_ptr, other_top_ptr, other_rows, BLOCK)


def exact_bits_kernel(*sides: Extents) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """``ozaki.scaling.exact_bits_of`` of one or two sides (A's rows, Bᵀ's) in one launch,
    with each row's top: per side (bits, top), both int64, bits = top − lowest set bit (0 for
    an all-zero row), top the frexp exponent of the row's largest |x| (0 for an all-zero row,
    as torch.frexp), from the side's :class:`Extents` (1-D, all on one device), where torch
    takes five launches a side."""
    outs = []
    for extents in sides:
        row_max, lowest = extents.row_max, extents.lowest_bit
        if (row_max.dtype != torch.float64 or lowest.dtype != torch.int64 or row_max.dim() != 1
                or lowest.shape != row_max.shape or lowest.device != sides[0].row_max.device):
            raise ValueError(f"extents must hold a 1-D float64 row_max and an int64 lowest_bit of its shape, on one "
                             f"device, got {row_max.dtype} {tuple(row_max.shape)} and {lowest.dtype} "
                             f"{tuple(lowest.shape)}")
        outs.append((torch.empty_like(lowest), torch.empty_like(lowest)))
    launch_sides(_exact_bits_kernel, [(e.row_max.contiguous(), e.lowest_bit.contiguous(), bits, top, bits.numel())
                                      for e, (bits, top) in zip(sides, outs)], SHIFTS_BLOCK)
    return tuple(outs)


def reference_row_shifts(row_max: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """What :func:`row_shifts_kernel` computes, from the definition in Python's floats (exact
    here): s = p − top with 2^(top − 1) ≤ max < 2^top, less one where p < 53 and
    round(max · 2^s) (ties to even) is 2^p."""
    shifts = []
    for largest, p in zip(row_max.tolist(), bits.tolist()):
        shift = p - math.frexp(largest)[1] if largest > 0 else 0
        carry = largest > 0 and p < SIGNIFICAND_BITS and round(math.ldexp(largest, shift)) == 2**p
        shifts.append(shift - carry)
    return torch.tensor(shifts, dtype=torch.int64, device=bits.device)


# One side's summary: what the plan reads of its lines, maxima over them all in one int64
# vector, so that one transfer brings both sides' (and a batch's, whose launches add to one
# summary).  Each slot is a maximum, so a device mesh agrees on it with one more maximum; a
# minimum travels as the maximum of LINE_CAP less it.
SUMMARY_FIELDS = ("most_bits", "widest", "largest", "below_inf", "below_cap", "code_sums", "code_squares")
# Then, per lossless width w (0 ≤ w < MAX_WIDTH), the most of its lines' 1 (a line of that
# width) and level + 2 (a line kept lossy, with that level): what the plan's fewest bits and
# guard need once it knows the bits every line ends with.
SUMMARY_WIDTHS = len(SUMMARY_FIELDS)
# A lossless width is a top (at most 1024) less a lowest set bit (at least -1074).
MAX_WIDTH = 2100
SUMMARY_LENGTH = SUMMARY_WIDTHS + MAX_WIDTH
# Above every bit count: the minimum over no line.
LINE_CAP = 1 << 62
# The IEEE pattern of +inf: finite non-negative float64s' patterns lie below it, NaN's above.
INF_PATTERN = 0x7FF0000000000000
SUMMARY_BLOCK = 1024
_INF_PATTERN = tl.constexpr(INF_PATTERN)
_LINE_CAP = tl.constexpr(LINE_CAP)
_SUMMARY_WIDTHS = tl.constexpr(SUMMARY_WIDTHS)
_MAX_WIDTH = tl.constexpr(MAX_WIDTH)


class SummaryLines(NamedTuple):
    """One side's lines as the plan summarizes them, 1-D on one device: the bits each keeps,
    lossless widths (int64, ≥ 0), largest magnitudes (float64, ≥ 0, read as their IEEE
    patterns) and, under "fp64", levels and code sums and sums of squares (int64)."""

    bits: torch.Tensor
    lossless: torch.Tensor
    row_max: torch.Tensor
    level: torch.Tensor | None = None
    code_sums: tuple[torch.Tensor, torch.Tensor] | None = None


@triton.jit
def _line_summary(bits_ptr, lossless_ptr, largest_ptr, level_ptr, sums_ptr, squares_ptr, out_ptr, lines, guard,
                  HAS_LEVEL: tl.constexpr, HAS_SUMS: tl.constexpr, BLOCK: tl.constexpr):
    offs, mask = line_block(lines, BLOCK)
    lossless = tl.load(lossless_ptr + offs, mask=mask, other=0)
    largest = tl.load(largest_ptr + offs, mask=mask, other=0)
    if HAS_LEVEL:
        # Under "fp64" a line keeps min(level + guard, lossless) bits: written where they are read.
        level = tl.load(level_ptr + offs, mask=mask, other=0)
        bits = tl.minimum(level + guard, lossless)
        tl.store(bits_ptr + offs, bits, mask=mask)
        width_value = tl.where(bits < lossless, level + 2, 1)
    else:
        bits = tl.load(bits_ptr + offs, mask=mask, other=0)
        width_value = tl.full((BLOCK,), 1, tl.int64)
    # Maxima of non-negative integers: a line past the end counts as 0, the identity.
    tl.atomic_max(out_ptr + 0, tl.max(bits, axis=0))
    tl.atomic_max(out_ptr + 1, tl.max(lossless, axis=0))
    tl.atomic_max(out_ptr + 2, tl.max(largest, axis=0))
    tl.atomic_max(out_ptr + 3, tl.max(tl.where(largest > 0, _INF_PATTERN - largest, 0), axis=0))
    tl.atomic_max(out_ptr + 4, tl.max(tl.where(mask, _LINE_CAP - bits, 0), axis=0))
    if HAS_SUMS:
        tl.atomic_max(out_ptr + 5, tl.max(tl.load(sums_ptr + offs, mask=mask, other=0), axis=0))
        tl.atomic_max(out_ptr + 6, tl.max(tl.load(squares_ptr + offs, mask=mask, other=0), axis=0))
    # The clamp only keeps the address inside the vector (a non-finite line's width is
    # meaningless, and the plan reads such operands again, zeroed).
    width = tl.minimum(tl.maximum(lossless, 0), _MAX_WIDTH - 1)
    tl.atomic_max(out_ptr + _SUMMARY_WIDTHS + width, width_value, mask=mask)


@triton.jit
def _summary_kernel(bits_ptr, lossless_ptr, largest_ptr, level_ptr, sums_ptr, squares_ptr, out_ptr, lines,
                    other_bits_ptr, other_lossless_ptr, other_largest_ptr, other_level_ptr, other_sums_ptr,
                    other_squares_ptr, other_out_ptr, other_lines, guard,
                    HAS_LEVEL: tl.constexpr, HAS_SUMS: tl.constexpr, BLOCK: tl.constexpr):
    # The grid's second axis picks the side (launch_sides).
    if tl.program_id(1) == 0:
        _line_summary(bits_ptr, lossless_ptr, largest_ptr, level_ptr, sums_ptr, squares_ptr, out_ptr, lines, guard,
                      HAS_LEVEL, HAS_SUMS, BLOCK)
    else:
        _line_summary(other_bits_ptr, other_lossless_ptr, other_largest_ptr, other_level_ptr, other_sums_ptr,
                      other_squares_ptr, other_out_ptr, other_lines, guard, HAS_LEVEL, HAS_SUMS, BLOCK)


def line_summary_kernel(*sides: SummaryLines, guard: int | None = None,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    """The summaries (``SUMMARY_FIELDS``, then the widths' slots) of one or two sides'
    :class:`SummaryLines`, side after side in one int64 vector of ``len(sides)·SUMMARY_LENGTH``,
    in one launch, added by maxima into ``out`` (zeros, default a new one) and returned: the
    launches of a batch's products can share one.  Under "fp64" (every side with levels)
    each line keeps min(level + ``guard``, lossless) bits, which the launch writes into the
    side's ``bits`` (contiguous) as it summarizes them; otherwise ``bits`` is read."""
    if len(sides) not in (1, 2):
        raise ValueError(f"line_summary_kernel takes one or two sides, got {len(sides)}")
    fp64 = sides[0].level is not None
    if (guard is None) == fp64:
        raise ValueError("guard goes with levels: give both (accuracy='fp64') or neither")
    device = sides[0].bits.device
    for side in sides:
        if (side.level is not None) != fp64 or (side.code_sums is not None) != (sides[0].code_sums is not None):
            raise ValueError("every side has levels and code sums, or none has")
        lines = {"bits": side.bits, "lossless": side.lossless, "level": side.level,
                 **dict(zip(("code_sums", "code_squares"), side.code_sums or (None, None)))}
        for name, line in lines.items():
            if line is not None and (not isinstance(line, torch.Tensor) or line.dtype != torch.int64
                                     or line.shape != side.bits.shape or line.dim() != 1 or line.device != device):
                raise ValueError(f"{name} must be a 1-D int64 tensor like bits {tuple(side.bits.shape)} on {device}")
        if (not isinstance(side.row_max, torch.Tensor) or side.row_max.dtype != torch.float64
                or side.row_max.shape != side.bits.shape):
            raise ValueError(f"row_max must be a float64 tensor of shape {tuple(side.bits.shape)}")
        if fp64 and not side.bits.is_contiguous():
            raise ValueError("bits must be contiguous: the launch writes each line's bits into it")
    length = len(sides) * SUMMARY_LENGTH
    if out is None:
        out = torch.zeros(length, dtype=torch.int64, device=device)
    elif out.dtype != torch.int64 or out.shape != (length,) or out.device != device:
        raise ValueError(f"out must be an int64 tensor of shape ({length},) on {device}")
    launch_sides(_summary_kernel, [
        (side.bits.contiguous(), side.lossless.contiguous(), side.row_max.contiguous().view(torch.int64),
         *(None if line is None else line.contiguous() for line in (side.level, *(side.code_sums or (None, None)))),
         out[index * SUMMARY_LENGTH:], side.bits.numel())
        for index, side in enumerate(sides)], SUMMARY_BLOCK, guard or 0, HAS_LEVEL=fp64,
        HAS_SUMS=sides[0].code_sums is not None)
    return out


def reference_line_summary(bits: torch.Tensor, lossless: torch.Tensor, row_max: torch.Tensor,
                           level: torch.Tensor | None = None,
                           code_sums: tuple[torch.Tensor, torch.Tensor] | None = None) -> list[int]:
    """What :func:`line_summary_kernel` computes, from the definitions in Python's integers."""
    bits, lossless, level = bits.tolist(), lossless.tolist(), None if level is None else level.tolist()
    largest = row_max.contiguous().view(torch.int64).tolist()
    sums, squares = ([0] * len(bits), [0] * len(bits)) if code_sums is None else (t.tolist() for t in code_sums)
    widths = [0] * MAX_WIDTH
    for i, width in enumerate(lossless):
        lossy = level is not None and bits[i] < width
        slot = min(max(width, 0), MAX_WIDTH - 1)
        widths[slot] = max(widths[slot], level[i] + 2 if lossy else 1)
    head = [max(bits, default=0), max(lossless, default=0), max(largest, default=0),
            max((INF_PATTERN - x for x in largest if x > 0), default=0),
            max((LINE_CAP - b for b in bits), default=0), max(sums, default=0), max(squares, default=0)]
    return head + widths


def chunked_grid(rows: int, k: int, block: tuple[int, int],
                 chunks: int | None) -> tuple[tuple[int, int], int] | None:
    """The grid of a pass over a ``rows`` x ``k`` matrix in tiles of ``block`` (BLOCK_K,
    BLOCK_R, powers of two) whose programs each take one block of rows and one chunk of K,
    ``chunks`` per block of rows (default: enough to fill the GPU), and that chunk's length (a
    multiple of BLOCK_K, so a tile never crosses chunks); None for an empty matrix (no launch).
    Checks what the kernels assume: int32 offsets within a tile, CUDA's grid limit."""
    if len(block) != 2 or any(b < 1 or b & (b - 1) for b in block):
        raise ValueError(f"block must be two powers of two (BLOCK_K, BLOCK_R), got {block}")
    if chunks is not None and chunks < 1:
        raise ValueError(f"chunks must be at least 1, got {chunks}")
    if max(rows, k) >= 2**31 - max(block):
        raise ValueError(f"a pass over {rows} x {k}: rows and K must stay below 2**31 (int32 offsets in a tile)")
    if rows == 0 or k == 0:
        return None
    block_k, block_r = block
    row_blocks, k_tiles = triton.cdiv(rows, block_r), triton.cdiv(k, block_k)
    if chunks is None:
        chunks = triton.cdiv(_TARGET_PROGRAMS, row_blocks)
    tiles_per_chunk = triton.cdiv(k_tiles, min(chunks, k_tiles))
    grid = (row_blocks, triton.cdiv(k_tiles, tiles_per_chunk))
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"{grid[1]} chunks of K pass CUDA's grid limit {MAX_GRID_Y}: ask for fewer")
    return grid, tiles_per_chunk * block_k


def reference_row_extents(x: torch.Tensor) -> Extents:
    """What the kernel computes, entry by entry in Python integers (small inputs): per row of
    x ``[rows, K]``, the largest pattern of |x| and the exponent of the lowest set bit of any
    entry whose |x| pattern is non-zero (NO_SET_BIT if none)."""
    largest, lowest = [], []
    for row in x.detach().cpu().contiguous().view(torch.int64).tolist():
        magnitudes = [pattern & MAGNITUDE_MASK for pattern in row]
        largest.append(max(magnitudes, default=0))
        lowest.append(min((_lowest_set_bit(m) for m in magnitudes if m), default=NO_SET_BIT))
    return Extents(row_max=torch.tensor(largest, dtype=torch.int64).view(torch.float64).to(x.device),
                   lowest_bit=torch.tensor(lowest, dtype=torch.int64, device=x.device))


def _lowest_set_bit(magnitude: int) -> int:
    # IEEE: exponent field E and fraction f stand for s * 2**(max(E, 1) - 1075), where the
    # significand s = 2**52 + f for E >= 1 and s = f for subnormals (E = 0).
    field, fraction = magnitude >> FRACTION_BITS, magnitude & ((1 << FRACTION_BITS) - 1)
    significand = fraction | (1 << FRACTION_BITS if field else 0)
    return (significand & -significand).bit_length() - 1 + max(field, 1) - ULP_BIAS


def compile_ptx(capability: int = 90, operand: str = "a", aligned: bool = True) -> str:
    """PTX of the extents kernel on ``sm_<capability>``, compiled without a GPU, for the
    operand's unit stride: "a" reads K contiguous (rows of A), "b" rows contiguous (Bᵀ).
    ``aligned`` specializes as the launch does for 16-byte aligned data (torch's allocations)
    with rows, K and the other stride multiples of 16 (n = 16384): the case where the
    unit-stride axis, fastest in the layout, is read in vector loads.  Needs a process
    without ``TRITON_INTERPRET=1`` (see :func:`kernels.ptx.compile_kernel`)."""
    unit, other = {"a": ("stride_xk", "stride_xr"), "b": ("stride_xr", "stride_xk")}.get(operand, (None, None))
    if unit is None:
        raise ValueError(f"operand must be 'a' or 'b', got {operand!r}")
    pointers = {"x_ptr": "*fp64", "max_ptr": "*i64", "lowest_ptr": "*i64"}
    block, warps = EXTENTS_LAUNCHES["k" if operand == "a" else "rows"]
    constexprs = {"BLOCK_K": block[0], "BLOCK_R": block[1], unit: 1}
    signature = {name: pointers.get(name, "i32") for name in _extents_kernel.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    divisible = [*pointers, "rows", "K", other, "k_chunk"] if aligned else []
    return ptx.compile_ptx(_extents_kernel, signature, constexprs, divisible=divisible, capability=capability,
                           num_warps=warps)
