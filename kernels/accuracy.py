"""accuracy="fp64"'s reads of the operands and of the code product, in three Triton passes.

The rule (``ozaki.accuracy``, whose docstring derives it) reads each operand twice and one
int8 product of codes once:

* :func:`upper_reading_kernel`, one pass over A (or Bᵀ) that needs only each row's top t:
  the upper sum U = Σ over non-zero entries of 2^max(W − d, 0), d = t − e (e the frexp
  exponent of the entry), and the row sums and sums of squares of the upper codes
  ⌈|x|·2^(D_U − t)⌉ (at least 1 for a non-zero entry), which bound their product by
  Cauchy–Schwarz: the codes themselves are never written;
* :func:`lower_codes_kernel`, one pass writing the lower codes min(⌊|x|·2^(D − r)⌋, 127)
  once each row's window top r is known (it depends on U);
* :func:`least_quotients_kernel`, one pass over the lower codes' product G giving, per row
  of A and per column of B, the least quotient G_ij·2^off / U of the other side's lines.

For rows held K-contiguous (A's, row-major) :func:`row_reading_kernel` makes both passes, the
extents before them (``kernels.scaling.row_extents_kernel``) and the per-line steps between
them in one launch: each program reads its row three times, the second and third time partly
from L2, rather than three launches each reading it from memory.

Each pass reads the input through its strides (Bᵀ's rows, B's columns, in place); the lower
pass writes its codes K-contiguous and zero-padded to the shape the int8 GEMM takes
(``padded``), so the GEMM needs no copy.  Every result is the torch path's bit for bit,
whatever the tile shape or the split of K: the sums are integer sums (atomics in any order
give the same int64),
each code is one entry's function, and each quotient is the same float64 operations in the
same order as ``ozaki.accuracy`` (a power-of-two scaling by two exact factors, as
``ozaki._bits.ldexp``, then a product by the line's correctly rounded 1/U), whose minimum over lines does
not depend on their order.  :func:`reference_upper_reading`, :func:`reference_lower_codes`
and :func:`reference_least_quotients` compute the same from the definitions in Python's
integers and floats, which the tests check against both layers.

The code constants live here, below both layers, as :class:`~kernels.scaling.Extents` does:
the library reads the same codes from either path.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import ptx, scaling
from kernels.crt import ldexp_factors
from kernels.dispatch import launch
from kernels.float64 import EXPONENT_BIAS, FLOAT64_EXACT, FRACTION_BITS

__all__ = ["CODES_WARPS", "CODE_LEVELS", "CODE_MAX", "LINES_BLOCK", "LINES_WARPS", "LOWER_BLOCK", "QUOTIENTS_BLOCK",
           "QUOTIENT_MARGIN", "QUOTIENTS_WARPS", "ROW_READING_LAUNCH", "RowReading", "UNBOUNDED", "UPPER_BLOCKS",
           "UPPER_CODE_MAX", "UPPER_LEVELS", "UPPER_MAX_K", "UpperReading", "WINDOW_LIFT", "compile_kernel",
           "compile_ptx", "least_quotients_kernel", "levels_kernel", "lower_codes_kernel", "reference_least_quotients",
           "reference_levels", "reference_lower_codes", "reference_upper_reading", "reference_window_tops",
           "row_reading_kernel", "upper_reading_kernel", "window_tops_kernel"]

# D: the lower codes count in units of 2^(r − D) up to int8's 127.
CODE_LEVELS = 7
CODE_MAX = 127
# D_U: the upper codes count in units of 2^(t − D_U), at most 2^D_U as every |x| < 2^t.  No
# GEMM takes them (only their sums and sums of squares, in int64, up to K·2^(2·D_U)), so they
# are fine: 2^16 levels leave the rounding up of any entry above 2^-10 of its row's top under
# 2^-6 of it, where int8's 64 levels cost phi = 0.5 rows about a third of their mass.
UPPER_LEVELS = 16
UPPER_CODE_MAX = 1 << UPPER_LEVELS
# The codes' sums of squares stay int64 while K·UPPER_CODE_MAX² < 2^63: the largest K.
UPPER_MAX_K = (2**63 - 1) // UPPER_CODE_MAX**2


class UpperReading(NamedTuple):
    """What the rule reads of an operand's rows given only their tops, from either path."""

    sums: torch.Tensor  # int64, one per row: U
    code_sums: torch.Tensor  # int64, one per row: the sum of the row's upper codes
    code_squares: torch.Tensor  # int64, one per row: the sum of their squares


# K x rows per tile of the operand passes, and their warps.  As in kernels.scaling, the
# compiler lays the load out with the input's unit-stride axis fastest, so A and Bᵀ are both
# read coalesced; the lower codes leave K-contiguous (for Bᵀ through a layout change in
# shared memory).  The upper pass keeps three float64 accumulators per entry (U, the code
# sums and squares); its tile depends on the input's unit-stride axis ("k": rows of A;
# "rows": Bᵀ read in place).  Tiles are empirical: each is the fastest of those timed for its
# pass and layout (see benchmarks/kernels.md, "The rule's passes and conversions" for the
# lower pass and "Float tiles in the encode, float64 sums in the upper pass" for the upper).
UPPER_BLOCKS = {"k": (64, 16), "rows": (8, 128)}
LOWER_BLOCK = (64, 16)
CODES_WARPS = 4
# Rows x columns of G per program of the quotient pass: each program writes its tile's
# minima per row and per column, which torch's amin finishes over the tiles.  The fastest of
# the tiles timed (see benchmarks/kernels.md, "Float tiles in the encode, float64 sums in the
# upper pass").
QUOTIENTS_BLOCK = (128, 32)
QUOTIENTS_WARPS = 4
# The upper pass sums in float64 integers: a program's chunk of K holds at most this many
# entries of a row, so that its sum of squared codes (each at most 2^(2·D_U) = 2^32) stays
# within 2^53, exact.
_EXACT_CHUNK = FLOAT64_EXACT >> (2 * UPPER_LEVELS)
_CODE_LEVELS = tl.constexpr(CODE_LEVELS)
_CODE_MAX = tl.constexpr(float(CODE_MAX))
_UPPER_LEVELS = tl.constexpr(UPPER_LEVELS)
# 1.5·2^52 and its bit pattern.  Floats in [2^52, 2^53) are the integers, so for |x| < 2^51
# the sum x + 1.5·2^52 is x rounded to an integer n (ties to even), exactly 1.5·2^52 + n,
# whose pattern is 0x4338… + n.
_MAGIC = tl.constexpr(1.5 * 2**52)
_MAGIC_BITS = tl.constexpr(0x4338000000000000)
# float64's exponent bias and fraction width: 2^e has the bit pattern (e + bias) << 52.
_EXPONENT_BIAS = tl.constexpr(EXPONENT_BIAS)
_FRACTION_BITS = tl.constexpr(FRACTION_BITS)
_NO_SET_BIT = tl.constexpr(scaling.NO_SET_BIT)


@triton.jit
def _nearest_integer(x):
    # x rounded to the nearest integer (ties to even), |x| < 2^51: two adds, where a rounding
    # instruction runs at a quarter of the float64 rate on Hopper (16 against 64 per clock and
    # SM, CUDA's table of instruction throughputs).
    return (x + _MAGIC) - _MAGIC


@triton.jit
def _float_to_int(x):
    # The float64 integer x, |x| < 2^51, as int64: a float add and an integer add, no
    # conversion instruction (a quarter of the float64 rate too).
    return (x + _MAGIC).to(tl.int64, bitcast=True) - _MAGIC_BITS


# The codes are rounded and made integers by magic-number adds, not by conversion
# instructions: every value rounded lies in [0, 2^16] (|x| < 2^t, and the lower codes are
# clamped to 127 first).
@triton.jit
def _upper_terms(x, top, scale_first, scale_second, levels):
    # Per entry of x under its row's top t (scale_first · scale_second = 2^(D_U − t)): the
    # upper code and U's term 2^max(W − d, 0), d = t − e, both float64 integers, 0 for a zero.
    # The scaling's last factor is 1 here (t ≤ 1024), so the compiler's fusing it into the
    # rounding add rounds the same product.
    nonzero = x != 0
    scaled = tl.abs(x) * scale_first * scale_second
    nearest = _nearest_integer(scaled)
    ceiling = nearest + tl.where(nearest < scaled, 1.0, 0.0)
    codes = tl.where(nonzero, tl.maximum(ceiling, 1.0), 0.0)
    # The term built from its exponent field.
    below = top - scaling.frexp_exponent(tl.abs(x))
    term = ((tl.maximum(levels - below, 0) + _EXPONENT_BIAS) << _FRACTION_BITS).to(tl.float64, bitcast=True)
    return codes, tl.where(nonzero, term, 0.0)


@triton.jit
def _lower_codes(x, scale_first, scale_second):
    # Per entry of x under its row's window top r (scale_first · scale_second = 2^(D − r)):
    # min(⌊|x|·2^(D − r)⌋, 127) as int64.
    clamped = tl.minimum(tl.abs(x) * scale_first * scale_second, _CODE_MAX)
    nearest = _nearest_integer(clamped)
    return _float_to_int(nearest - tl.where(nearest > clamped, 1.0, 0.0))


@triton.jit
def _codes_kernel(
    x_ptr, top_ptr, codes_ptr, sums_ptr, code_sums_ptr, code_squares_ptr,
    rows, K, rows_out, k_out, stride_xr, stride_xk, stride_cr, levels, k_chunk,
    UPPER: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = offs_r < rows
    out_rows = offs_r < rows_out
    # The row's top t (upper pass) or window top r (lower pass); a padding row reads 0 and,
    # holding only zeros, gets zero codes whatever its scale.
    top = tl.load(top_ptr + offs_r, mask=row_mask, other=0)
    # 2^(levels - top), the tensor written first: Triton 3.8's interpreter makes a constexpr
    # minus a tensor a constexpr, which a called function cannot take.
    if UPPER:
        scale_first, scale_second = ldexp_factors(-top + _UPPER_LEVELS)
    else:
        scale_first, scale_second = ldexp_factors(-top + _CODE_LEVELS)
    k_start = tl.program_id(1) * k_chunk
    k_stop = tl.minimum(k_start + k_chunk, k_out)
    # Elementwise running sums over this program's K chunk, reduced across the tile once.  They
    # are float64 integers, exact: a chunk of at most _EXACT_CHUNK entries per row keeps every
    # partial sum of squares (codes up to 2^16) and of U's terms (K·2^W < 2^53, the launcher's
    # check) at most 2^53; one add or multiply-add each, where int64 takes two or more.
    sums = tl.zeros([BLOCK_K, BLOCK_R], dtype=tl.float64)
    code_sums = tl.zeros([BLOCK_K, BLOCK_R], dtype=tl.float64)
    code_squares = tl.zeros([BLOCK_K, BLOCK_R], dtype=tl.float64)
    for k0 in range(k_start, k_stop, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        # Past the operand (K or rows) entries read as 0.0: zero codes, nothing summed.
        x = tl.load(x_ptr + offs_k[:, None].to(tl.int64) * stride_xk + offs_r[None, :].to(tl.int64) * stride_xr,
                    mask=(offs_k[:, None] < K) & row_mask[None, :], other=0.0)
        if UPPER:
            codes, term = _upper_terms(x, top[None, :], scale_first[None, :], scale_second[None, :], levels)
            code_sums += codes
            code_squares += codes * codes
            sums += term
        else:
            codes = _lower_codes(x, scale_first[None, :], scale_second[None, :])
            tl.store(codes_ptr + offs_r[None, :].to(tl.int64) * stride_cr + offs_k[:, None], codes.to(tl.int8),
                     mask=(offs_k[:, None] < k_stop) & out_rows[None, :])
    if UPPER:
        # Integer sums: the order in which the chunks' atomics land changes nothing.
        tl.atomic_add(sums_ptr + offs_r, tl.sum(sums, axis=0).to(tl.int64), mask=row_mask)
        tl.atomic_add(code_sums_ptr + offs_r, tl.sum(code_sums, axis=0).to(tl.int64), mask=row_mask)
        tl.atomic_add(code_squares_ptr + offs_r, tl.sum(code_squares, axis=0).to(tl.int64), mask=row_mask)


def _check_operand(x: torch.Tensor, scale: torch.Tensor | None, padded: tuple[int, int] | None = None) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
        raise TypeError(f"x must be a float64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() != 2:
        raise ValueError(f"x has shape {tuple(x.shape)}: expected [rows, K]")
    if scale is not None and (scale.shape != x.shape[:1] or scale.dtype != torch.int64 or scale.device != x.device):
        raise ValueError(f"the row tops must be int64 of shape {tuple(x.shape[:1])} on {x.device}, got "
                         f"{scale.dtype} {tuple(scale.shape)} on {scale.device}")
    if padded is not None and (len(padded) != 2 or padded[0] < x.shape[0] or padded[1] < x.shape[1]):
        raise ValueError(f"padded {tuple(padded)} must hold x's shape {tuple(x.shape)}")


def _launch_codes(x: torch.Tensor, scale: torch.Tensor, padded: tuple[int, int], levels: int,
                  codes: torch.Tensor | None, sums: tuple[torch.Tensor, ...] | None, block: tuple[int, int],
                  chunks: int | None, num_warps: int) -> None:
    # The grid covers ``padded`` (the lower codes' buffer, or x's shape); the kernel reads x
    # only within its shape.
    chunking = scaling.chunked_grid(*padded, block, chunks)
    if chunking is not None and sums is not None and chunking[1] > _EXACT_CHUNK:
        # More chunks, so that each program's float64 sums stay exact.
        chunking = scaling.chunked_grid(*padded, block, max(chunks or 1, triton.cdiv(padded[1], _EXACT_CHUNK)))
    if chunking is not None:
        grid, k_chunk = chunking
        launch(_codes_kernel, grid,
            x, scale, codes, *(sums or (None, None, None)), x.shape[0], x.shape[1], padded[0], padded[1],
            x.stride(0), x.stride(1), 0 if codes is None else codes.stride(0), levels, k_chunk,
            UPPER=sums is not None, BLOCK_K=block[0], BLOCK_R=block[1], num_warps=num_warps, **ptx.LAUNCH_OPTIONS,
        )


def upper_reading_kernel(x: torch.Tensor, top: torch.Tensor, levels: int, *,
                         block: tuple[int, int] | None = None, chunks: int | None = None,
                         num_warps: int = CODES_WARPS) -> UpperReading:
    """The :class:`UpperReading` of x ``[rows, K]`` (float64, finite, any strides: for B pass
    Bᵀ, a view) in one pass: U with W = ``levels``, and the row sums and sums of squares of
    the upper codes.  ``top`` (int64, one per row) must be at least every entry's frexp
    exponent (the row maximum's: ``ozaki.accuracy``), so that every code is at most 2^D_U
    and every d ≥ 0; K·2^W must stay within 2^53, so that U is exact as a float64.
    ``block`` (default: :data:`UPPER_BLOCKS` for x's unit-stride axis), ``chunks`` (K split
    over at least this many programs per block of rows) and ``num_warps`` change the speed,
    never the result."""
    _check_operand(x, top)
    if x.shape[1] > UPPER_MAX_K:
        raise ValueError(f"K = {x.shape[1]} passes {UPPER_MAX_K}, where the codes' sums of squares leave int64")
    if levels < 0 or x.shape[1] << levels > FLOAT64_EXACT:
        raise ValueError(f"levels = {levels} with K = {x.shape[1]}: levels must be non-negative and K·2^levels at "
                         "most 2^53 (U ≤ K·2^levels is summed exactly in float64)")
    # The three sums start at zero: one fill for them all.
    reading = UpperReading(*torch.zeros((3, x.shape[0]), dtype=torch.int64, device=x.device))
    block = block or UPPER_BLOCKS["k" if x.stride(1) == 1 else "rows"]
    _launch_codes(x, top, tuple(x.shape), levels, None, reading, block, chunks, num_warps)
    return reading


def lower_codes_kernel(x: torch.Tensor, window_top: torch.Tensor, padded: tuple[int, int], *,
                       block: tuple[int, int] = LOWER_BLOCK, chunks: int | None = None,
                       num_warps: int = CODES_WARPS) -> torch.Tensor:
    """The lower codes min(⌊|x|·2^(D − r)⌋, 127) of x ``[rows, K]`` (float64, any strides)
    for the window top r per row (``window_top``, int64) in an int8 ``padded`` (rows, K)
    buffer, zeros past x, in one pass.  ``block``, ``chunks`` and ``num_warps`` change the
    speed, never the result."""
    _check_operand(x, window_top, padded)
    codes = torch.empty(padded, dtype=torch.int8, device=x.device)
    _launch_codes(x, window_top, padded, 0, codes, None, block, chunks, num_warps)
    return codes


class RowReading(NamedTuple):
    """What :func:`row_reading_kernel` reads of rows in one launch: each what its own pass
    gives (``kernels.scaling.row_extents_kernel``, :func:`upper_reading_kernel`,
    :func:`window_tops_kernel`, :func:`lower_codes_kernel`)."""

    extents: scaling.Extents
    upper: UpperReading
    window_top: torch.Tensor  # int64, one per row: r
    window_offset: torch.Tensor  # int64, one per row: r − t
    codes: torch.Tensor  # int8, ``padded``: the lower codes


# (K per tile, rows per program) and warps of :func:`row_reading_kernel`: one row per program,
# so that a program's second and third walks find part of its row still in L2; the fastest of
# the launches timed (see benchmarks/kernels.md, "The rule's reading of A in one launch").
ROW_READING_LAUNCH = ((2048, 1), 8)


@triton.jit
def _row_reading_kernel(
    x_ptr, max_ptr, lowest_ptr, sums_ptr, code_sums_ptr, code_squares_ptr, window_ptr, offset_ptr, codes_ptr,
    rows, K, rows_out, k_out, stride_xr, stride_cr, levels, k_bits,
    BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_mask = offs_r < rows
    row_offsets = x_ptr + offs_r[:, None].to(tl.int64) * stride_xr
    # Past the operand (K or rows) entries read as 0.0: they change no extent, sum or code.
    # 1. The extents, and the row's top t.
    largest = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.int64)
    lowest = tl.full([BLOCK_R, BLOCK_K], _NO_SET_BIT, dtype=tl.int32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(row_offsets + offs_k[None, :], mask=row_mask[:, None] & (offs_k[None, :] < K), other=0.0)
        magnitude, bit = scaling.entry_extents(x)
        largest = tl.maximum(largest, magnitude)
        lowest = tl.minimum(lowest, bit)
    row_largest = tl.max(largest, axis=1)
    tl.store(max_ptr + offs_r, row_largest, mask=row_mask)
    tl.store(lowest_ptr + offs_r, tl.min(lowest, axis=1).to(tl.int64), mask=row_mask)
    top = scaling.row_top(row_largest.to(tl.float64, bitcast=True))
    # 2. The upper reading under t.  Each lane's float64 sums hold K / BLOCK_K entries, exact
    # (the launcher's check); they become int64 before the sum across lanes, which may not be.
    scale_first, scale_second = ldexp_factors(-top + _UPPER_LEVELS)
    sums = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float64)
    code_sums = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float64)
    code_squares = tl.zeros([BLOCK_R, BLOCK_K], dtype=tl.float64)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(row_offsets + offs_k[None, :], mask=row_mask[:, None] & (offs_k[None, :] < K), other=0.0)
        codes, term = _upper_terms(x, top[:, None], scale_first[:, None], scale_second[:, None], levels)
        code_sums += codes
        code_squares += codes * codes
        sums += term
    upper_sums = tl.sum(sums.to(tl.int64), axis=1)
    tl.store(sums_ptr + offs_r, upper_sums, mask=row_mask)
    tl.store(code_sums_ptr + offs_r, tl.sum(code_sums.to(tl.int64), axis=1), mask=row_mask)
    tl.store(code_squares_ptr + offs_r, tl.sum(code_squares.to(tl.int64), axis=1), mask=row_mask)
    # 3. The window top r from U, and the lower codes under it, zero-padded.
    window = _window_top(top, upper_sums, levels, k_bits)
    tl.store(window_ptr + offs_r, window, mask=row_mask)
    tl.store(offset_ptr + offs_r, window - top, mask=row_mask)
    scale_first, scale_second = ldexp_factors(-window + _CODE_LEVELS)
    out_rows = offs_r < rows_out
    for k0 in range(0, k_out, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(row_offsets + offs_k[None, :], mask=row_mask[:, None] & (offs_k[None, :] < K), other=0.0)
        codes = _lower_codes(x, scale_first[:, None], scale_second[:, None])
        tl.store(codes_ptr + offs_r[:, None].to(tl.int64) * stride_cr + offs_k[None, :], codes.to(tl.int8),
                 mask=out_rows[:, None] & (offs_k[None, :] < k_out))


def row_reading_kernel(x: torch.Tensor, levels: int, padded: tuple[int, int], *,
                       block: tuple[int, int] | None = None, num_warps: int | None = None) -> RowReading:
    """The :class:`RowReading` of x ``[rows, K]`` (float64, finite, K-contiguous rows: A of a
    product on one device, whose depth is x's K) in one launch: its extents, its upper reading
    with W = ``levels``, the window tops (``window_tops_kernel``'s) and the lower codes under
    them in an int8 ``padded`` buffer, each equal to its own pass's result.  ``block``
    (BLOCK_K, BLOCK_R, powers of two; default :data:`ROW_READING_LAUNCH`) and ``num_warps``
    change the speed, never the result."""
    _check_operand(x, None, padded)
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise ValueError(f"x must hold its rows K-contiguous (stride 1 along K), got strides {tuple(x.stride())}: "
                         "read other layouts with the separate passes")
    (block_k, block_r), warps = block or ROW_READING_LAUNCH[0], num_warps or ROW_READING_LAUNCH[1]
    if any(b < 1 or b & (b - 1) for b in (block_k, block_r)):
        raise ValueError(f"block must be two powers of two (BLOCK_K, BLOCK_R), got {(block_k, block_r)}")
    rows, row_k = x.shape
    if levels < 0 or row_k << levels > FLOAT64_EXACT:
        raise ValueError(f"levels = {levels} with K = {row_k}: levels must be non-negative and K·2^levels at most "
                         "2^53 (U ≤ K·2^levels, exact in float64)")
    if triton.cdiv(row_k, block_k) > _EXACT_CHUNK:
        raise ValueError(f"K = {row_k} in tiles of {block_k}: a lane would sum more than {_EXACT_CHUNK} codes, "
                         "past float64's exact integers; take a wider BLOCK_K")
    if max(padded) >= 2**31 - max(block_k, block_r):
        raise ValueError(f"a pass over {padded}: rows and K must stay below 2**31 (int32 offsets in a tile)")
    # max, lowest bit, U, code sums and squares, r, r − t: every slot is written.
    lines = torch.empty((7, rows), dtype=torch.int64, device=x.device)
    codes = torch.empty(padded, dtype=torch.int8, device=x.device)
    if padded[0]:
        launch(_row_reading_kernel, (triton.cdiv(padded[0], block_r),),
            x, *lines, codes, rows, row_k, padded[0], padded[1], x.stride(0), codes.stride(0), levels,
            row_k.bit_length(), BLOCK_K=block_k, BLOCK_R=block_r, num_warps=warps, **ptx.LAUNCH_OPTIONS,
        )
    extents = scaling.Extents(row_max=lines[0].view(torch.float64), lowest_bit=lines[1])
    return RowReading(extents, UpperReading(*lines[2:5]), lines[5], lines[6], codes)


@triton.jit
def _line_quotient_factors(sums_ptr, offset_ptr, offs, mask):
    # Per line of one side: the factor F = ldexp(fl(1/U), offset) of its quotients (one
    # division and two exact scalings per line, not per entry) and what the quotient adds:
    # 0, or inf where U = 0 (a line past the matrix counts as U = 0), so that each quotient is
    # one fused multiply-add with no select: G·F + 0 rounds as G·F does, G·F + inf is inf.
    sums = tl.load(sums_ptr + offs, mask=mask, other=0)
    first, second = ldexp_factors(tl.load(offset_ptr + offs, mask=mask, other=0))
    counted = sums > 0
    factor = 1.0 / tl.where(counted, sums, 1).to(tl.float64) * first * second
    return factor, tl.where(counted, 0.0, float("inf"))


@triton.jit
def _least(quotients, axis: tl.constexpr):
    # Every quotient is +0 or positive (G ≥ 0, F ≥ 0, +0 or +inf added), and such float64
    # values order as their bit patterns do as int64: an integer minimum, compares and selects
    # of 32-bit halves, where tl.min's float minimum also quiets NaNs and moves registers (36
    # SASS instructions per entry of the kernel against 44).
    return tl.min(quotients.to(tl.int64, bitcast=True), axis=axis).to(tl.float64, bitcast=True)


@triton.jit
def _quotients_kernel(
    g_ptr, sums_a_ptr, offset_a_ptr, sums_b_ptr, offset_b_ptr, least_a_ptr, least_b_ptr,
    M, N, stride_gm, stride_gn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m, mask_n = offs_m < M, offs_n < N
    # G's integers are below 2^53 (K·127² with K ≤ 2^22), so exact as float64.
    g = tl.load(g_ptr + offs_m[:, None].to(tl.int64) * stride_gm + offs_n[None, :].to(tl.int64) * stride_gn,
                mask=mask_m[:, None] & mask_n[None, :], other=0).to(tl.float64)
    # ozaki.accuracy._least_quotients: G·ldexp(fl(1/U), offset), inf where U = 0, per line of the other side.
    factor, added = _line_quotient_factors(sums_b_ptr, offset_b_ptr, offs_n, mask_n)
    tl.store(least_a_ptr + pid_n.to(tl.int64) * M + offs_m, _least(g * factor[None, :] + added[None, :], 1),
             mask=mask_m)
    factor, added = _line_quotient_factors(sums_a_ptr, offset_a_ptr, offs_m, mask_m)
    tl.store(least_b_ptr + pid_m.to(tl.int64) * N + offs_n, _least(g * factor[:, None] + added[:, None], 0),
             mask=mask_n)


def least_quotients_kernel(g: torch.Tensor, sums_a: torch.Tensor, offset_a: torch.Tensor, sums_b: torch.Tensor,
                           offset_b: torch.Tensor, *, block: tuple[int, int] = QUOTIENTS_BLOCK,
                           num_warps: int = QUOTIENTS_WARPS) -> tuple[torch.Tensor, torch.Tensor]:
    """From G ``[M, N]`` (int32 or int64, non-negative integers below 2^53 as products of codes
    are, any strides) and per line of each side its U (int64) and offset (int64):
    per row i of A the minimum over columns j with U^B_j > 0 of G_ij·ldexp(fl(1/U^B_j), offset_b_j)
    and per column j the minimum over rows i with U^A_i > 0 of G_ij·ldexp(fl(1/U^A_i), offset_a_i)
    (``ozaki._bits.ldexp``: exact for offsets in [−958, 0], which hold the rule's), float64,
    inf where no line counts; in one pass over G.  ``block`` and ``num_warps`` change the
    speed, never the result."""
    if not isinstance(g, torch.Tensor) or g.dtype not in (torch.int32, torch.int64) or g.dim() != 2:
        raise TypeError(f"g must be a 2-D int32 or int64 tensor, got {getattr(g, 'dtype', type(g).__name__)} "
                        f"{tuple(getattr(g, 'shape', ()))}")
    (m, n), device = g.shape, g.device
    for name, line, size in (("sums_a", sums_a, m), ("offset_a", offset_a, m), ("sums_b", sums_b, n),
                             ("offset_b", offset_b, n)):
        if line.shape != (size,) or line.dtype != torch.int64 or line.device != device:
            raise ValueError(f"{name} must be int64 of shape ({size},) on {device}, got {line.dtype} "
                             f"{tuple(line.shape)} on {line.device}")
    if len(block) != 2 or any(b < 1 or b & (b - 1) for b in block):
        raise ValueError(f"block must be two powers of two (BLOCK_M, BLOCK_N), got {block}")
    if max(m, n) >= 2**31 - max(block):
        raise ValueError(f"g has shape {(m, n)}: M and N must stay below 2**31 (int32 offsets in a tile)")
    if m == 0 or n == 0:
        return torch.full((m,), torch.inf, dtype=torch.float64, device=device), torch.full(
            (n,), torch.inf, dtype=torch.float64, device=device)
    grid = (triton.cdiv(m, block[0]), triton.cdiv(n, block[1]))
    if grid[1] > scaling.MAX_GRID_Y:
        raise ValueError(f"{grid[1]} column blocks pass CUDA's grid limit {scaling.MAX_GRID_Y}: use wider blocks")
    # Per tile its minima; the minimum over tiles (amin) does not depend on their order.
    least_a = torch.empty((grid[1], m), dtype=torch.float64, device=device)
    least_b = torch.empty((grid[0], n), dtype=torch.float64, device=device)
    launch(_quotients_kernel, grid,
        g, sums_a, offset_a, sums_b, offset_b, least_a, least_b, m, n, g.stride(0), g.stride(1),
        BLOCK_M=block[0], BLOCK_N=block[1], num_warps=num_warps, **ptx.LAUNCH_OPTIONS,
    )
    return least_a.amin(dim=0), least_b.amin(dim=0)


# The per-line steps between the passes -------------------------------------------------------
#
# Between the passes the rule computes a few integers per line (row of A, column of B): the
# window tops from U and the levels from the least quotients.  In torch each is some ten
# elementwise launches per side over short vectors, paid in host time while the device waits
# for the next pass; here each is one launch per side, of the same operations on the same
# values (exact integers, and one float64 product and frexp for the levels), so the same
# integers as ``ozaki.accuracy``'s torch path.

# Lines per program: one line per thread of 4 warps.
LINES_BLOCK = 128
LINES_WARPS = 4
# The window of the lower codes sits 2^3 above a row's mean magnitude bound (ozaki.accuracy).
WINDOW_LIFT = 3
# The level of a line that no lower bound of |A||B| reaches: beyond every lossless width
# (2^1024 down to 2^-1074 spans under 2100 bits), so it keeps its lossless width.
UNBOUNDED = 1 << 20
# The quotient G·fl(1/U) is at most (1 + 2^-53)² times G/U (two roundings, where the product
# is normal) and its frexp could round up past a power of two: this margin keeps 2^e ≤ G/U.
QUOTIENT_MARGIN = 1.0 - 2.0**-50
_WINDOW_LIFT = tl.constexpr(WINDOW_LIFT)
_UNBOUNDED = tl.constexpr(UNBOUNDED)
_QUOTIENT_MARGIN = tl.constexpr(QUOTIENT_MARGIN)
_CARRY_BITS = tl.constexpr(FRACTION_BITS + 1)


@triton.jit
def _window_tops_side(top_ptr, sums_ptr, window_ptr, offset_ptr, lines, levels, k_bits, BLOCK: tl.constexpr):
    offs, mask = scaling.line_block(lines, BLOCK)
    top = tl.load(top_ptr + offs, mask=mask, other=0)
    window = _window_top(top, tl.load(sums_ptr + offs, mask=mask, other=0), levels, k_bits)
    tl.store(window_ptr + offs, window, mask=mask)
    tl.store(offset_ptr + offs, window - top, mask=mask)


@triton.jit
def _window_top(top, sums, levels, k_bits):
    # r = min(t − W + bit_length(U) − bit_length(K) + 1 + 3, t); U < 2^53 is exact as
    # float64, whose frexp exponent is U's bit length.
    bit_length = tl.where(sums > 0, scaling.frexp_exponent(sums.to(tl.float64)), 0)
    return tl.minimum(top - levels + bit_length - k_bits + 1 + _WINDOW_LIFT, top)


@triton.jit
def _window_tops_kernel(top_ptr, sums_ptr, window_ptr, offset_ptr, lines, other_top_ptr, other_sums_ptr,
                        other_window_ptr, other_offset_ptr, other_lines, levels, k_bits, BLOCK: tl.constexpr):
    # The grid's second axis picks the side (kernels.scaling.launch_sides).
    if tl.program_id(1) == 0:
        _window_tops_side(top_ptr, sums_ptr, window_ptr, offset_ptr, lines, levels, k_bits, BLOCK)
    else:
        _window_tops_side(other_top_ptr, other_sums_ptr, other_window_ptr, other_offset_ptr, other_lines, levels,
                          k_bits, BLOCK)


def window_tops_kernel(*sides: tuple[torch.Tensor, torch.Tensor], k: int,
                       levels: int) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """Per line of one or two sides (A's rows, Bᵀ's; each a pair of its lines' top t and upper
    sum U, int64, 0 ≤ U ≤ K·2^W ≤ 2^53 as :func:`upper_reading_kernel` sums it, W =
    ``levels``), the window top r = min(t − W + bit_length(U) − bit_length(K) + 1 + 3, t) of its
    lower codes (``ozaki.accuracy``) and r − t, int64: (r, r − t) per side, in one launch."""
    for top, sums in sides:
        _check_lines(top=top, sums=sums)
    if int(k) < 0 or levels < 0 or int(k) << levels > FLOAT64_EXACT:
        raise ValueError(f"k = {k} and levels = {levels}: both non-negative and K·2^levels at most 2^53 (U ≤ K·2^W "
                         "is read as a float64 for its bit length)")
    outs = [(torch.empty_like(top), torch.empty_like(top)) for top, _ in sides]
    scaling.launch_sides(_window_tops_kernel, [(top, sums, *out, top.numel()) for (top, sums), out in zip(sides, outs)],
                         LINES_BLOCK, levels, int(k).bit_length(), num_warps=LINES_WARPS)
    return tuple(outs)


@triton.jit
def _levels_side(least_ptr, top_ptr, window_ptr, level_ptr, lines, base, BLOCK: tl.constexpr):
    offs, mask = scaling.line_block(lines, BLOCK)
    least = tl.load(least_ptr + offs, mask=mask, other=0.0) * _QUOTIENT_MARGIN
    line_base = base + tl.load(top_ptr + offs, mask=mask, other=0) - tl.load(window_ptr + offs, mask=mask, other=0)
    # 2^e ≤ least with e one under its frexp exponent; below 53 bits one more for the carry.
    level = line_base - (scaling.frexp_exponent(least) - 1)
    level = tl.minimum(tl.maximum(tl.where(level < _CARRY_BITS, level + 1, level), 0), _UNBOUNDED)
    level = tl.where(least == 0, _UNBOUNDED, tl.where(least == float("inf"), 0, level))
    tl.store(level_ptr + offs, level, mask=mask)


@triton.jit
def _levels_kernel(least_ptr, top_ptr, window_ptr, level_ptr, lines, other_least_ptr, other_top_ptr,
                   other_window_ptr, other_level_ptr, other_lines, base, BLOCK: tl.constexpr):
    # The grid's second axis picks the side (kernels.scaling.launch_sides).
    if tl.program_id(1) == 0:
        _levels_side(least_ptr, top_ptr, window_ptr, level_ptr, lines, base, BLOCK)
    else:
        _levels_side(other_least_ptr, other_top_ptr, other_window_ptr, other_level_ptr, other_lines, base, BLOCK)


def levels_kernel(*sides: tuple[torch.Tensor, torch.Tensor, torch.Tensor], base: int) -> tuple[torch.Tensor, ...]:
    """Per line of one or two sides (each its lines' least quotient, float64, over the whole
    product (:func:`least_quotients_kernel`), top t and window top r, int64), the bits
    p = base + t − r − e it needs at guard 0 (one more below 53 bits, for the rounding carry;
    clamped to [0, UNBOUNDED]), with 2^e ≤ least·(1 − 2^-50) < 2^(e+1); UNBOUNDED where the
    least quotient is 0, 0 where it is inf (``ozaki.accuracy``'s levels): one per side, in one
    launch."""
    for least, top, window_top in sides:
        _check_lines(top=top, window_top=window_top)
        if not isinstance(least, torch.Tensor) or least.dtype != torch.float64 or least.shape != top.shape:
            raise ValueError(f"least must be float64 of shape {tuple(top.shape)}")
    levels = [torch.empty_like(top) for _, top, _ in sides]
    # The kernel reads each line's quotient at unit stride (a quotient pass's output is so already).
    scaling.launch_sides(_levels_kernel, [(least.contiguous(), top, window_top, level, level.numel())
                                          for (least, top, window_top), level in zip(sides, levels)],
                         LINES_BLOCK, base, num_warps=LINES_WARPS)
    return tuple(levels)


def _check_lines(**lines: torch.Tensor) -> None:
    first = next(iter(lines.values()))
    for name, line in lines.items():
        if (not isinstance(line, torch.Tensor) or line.dtype != torch.int64 or line.dim() != 1
                or line.shape != first.shape or line.device != first.device or not line.is_contiguous()):
            raise ValueError(f"{name} must be a contiguous 1-D int64 tensor like {next(iter(lines))}, got "
                             f"{getattr(line, 'dtype', type(line).__name__)} {tuple(getattr(line, 'shape', ()))}")


# Plain references, from the definitions, in Python integers and floats (small inputs) ------


def _rows(x: torch.Tensor, scale: torch.Tensor) -> list[tuple[list[float], int]]:
    return list(zip(x.detach().cpu().tolist(), scale.cpu().tolist()))


def _padded_codes(codes: list[list[int]], padded: tuple[int, int], device: torch.device) -> torch.Tensor:
    out = torch.zeros(padded, dtype=torch.int8)
    if codes and codes[0]:
        out[: len(codes), : len(codes[0])] = torch.tensor(codes, dtype=torch.int8)
    return out.to(device)


def reference_upper_reading(x: torch.Tensor, top: torch.Tensor, levels: int) -> UpperReading:
    """What :func:`upper_reading_kernel` computes, entry by entry: U = Σ 2^max(W − (t − e), 0)
    over non-zero entries (e from frexp), and the row sums and sums of squares of the exact
    upper codes ⌈|x|·2^(D_U − t)⌉ (at least 1) of the non-zero entries."""
    sums, codes = [], []
    for row, t in _rows(x, top):
        sums.append(sum(1 << max(levels - (t - math.frexp(v)[1]), 0) for v in row if v != 0))
        codes.append([max(math.ceil(Fraction(abs(v)) * Fraction(2) ** (UPPER_LEVELS - t)), 1) for v in row if v != 0])
    return UpperReading(*(torch.tensor(column, dtype=torch.int64, device=x.device) for column in (
        sums, [sum(row) for row in codes], [sum(c * c for c in row) for row in codes])))


def reference_lower_codes(x: torch.Tensor, window_top: torch.Tensor, padded: tuple[int, int]) -> torch.Tensor:
    """What :func:`lower_codes_kernel` computes, entry by entry: min(⌊|x|·2^(D − r)⌋, 127) exactly."""
    codes = [[min(math.floor(Fraction(abs(v)) * Fraction(2) ** (CODE_LEVELS - r)), CODE_MAX) for v in row]
             for row, r in _rows(x, window_top)]
    return _padded_codes(codes, padded, x.device)


def reference_least_quotients(g: torch.Tensor, sums_a: torch.Tensor, offset_a: torch.Tensor, sums_b: torch.Tensor,
                              offset_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`least_quotients_kernel` computes, entry by entry: G_ij times the correctly
    rounded 1/U scaled by 2^offset (math.ldexp, exact here), minimised per line."""
    rows = g.cpu().tolist()
    u_a, o_a, u_b, o_b = (line.cpu().tolist() for line in (sums_a, offset_a, sums_b, offset_b))
    least_a = [min((row[j] * math.ldexp(1.0 / u_b[j], o_b[j]) for j in range(len(u_b)) if u_b[j] > 0),
                   default=math.inf) for row in rows]
    least_b = [min((rows[i][j] * math.ldexp(1.0 / u_a[i], o_a[i]) for i in range(len(u_a)) if u_a[i] > 0),
                   default=math.inf) for j in range(len(u_b))]
    return (torch.tensor(least_a, dtype=torch.float64, device=g.device),
            torch.tensor(least_b, dtype=torch.float64, device=g.device))


def reference_window_tops(top: torch.Tensor, sums: torch.Tensor, k: int, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`window_tops_kernel` computes, from the definition in Python's integers."""
    window = [min(t - levels + u.bit_length() - int(k).bit_length() + 1 + WINDOW_LIFT, t)
              for t, u in zip(top.tolist(), sums.tolist())]
    offset = [r - t for r, t in zip(window, top.tolist())]
    return tuple(torch.tensor(line, dtype=torch.int64, device=top.device) for line in (window, offset))


def reference_levels(least: torch.Tensor, top: torch.Tensor, window_top: torch.Tensor, base: int) -> torch.Tensor:
    """What :func:`levels_kernel` computes, from the definition in Python's floats and integers."""
    levels = []
    for value, t, r in zip(least.tolist(), top.tolist(), window_top.tolist()):
        value *= QUOTIENT_MARGIN
        if value == 0 or math.isinf(value):
            levels.append(UNBOUNDED if value == 0 else 0)
            continue
        level = base + t - r - (math.frexp(value)[1] - 1)
        levels.append(min(max(level + 1 if level < FRACTION_BITS + 1 else level, 0), UNBOUNDED))
    return torch.tensor(levels, dtype=torch.int64, device=top.device)


def compile_ptx(capability: int = 90, kernel: str = "upper", operand: str = "a", aligned: bool = True) -> str:
    """PTX of :func:`compile_kernel`'s pass."""
    return compile_kernel(capability, kernel, operand, aligned).asm["ptx"]


def compile_kernel(capability: int = 90, kernel: str = "upper", operand: str = "a", aligned: bool = True):
    """One pass compiled for ``sm_<capability>`` without a GPU: ``kernel`` "upper" or
    "lower" (the operand passes, for ``operand`` "a", K contiguous, or "b", Bᵀ with rows
    contiguous), "rows" (:func:`row_reading_kernel`, "a" only) or "quotients" (over a
    row-major int32 G).  ``aligned`` specializes as the
    launch does for 16-byte aligned data with sizes and strides multiples of 16 (n = 16384),
    where the unit-stride axis is read in vector loads.  Needs a process without
    ``TRITON_INTERPRET=1`` (see :func:`kernels.ptx.compile_kernel`)."""
    if kernel == "quotients":
        pointers = {"g_ptr": "*i32", "sums_a_ptr": "*i64", "offset_a_ptr": "*i64", "sums_b_ptr": "*i64",
                    "offset_b_ptr": "*i64", "least_a_ptr": "*fp64", "least_b_ptr": "*fp64"}
        constexprs = {"BLOCK_M": QUOTIENTS_BLOCK[0], "BLOCK_N": QUOTIENTS_BLOCK[1], "stride_gn": 1}
        fn, sizes, warps = _quotients_kernel, ["M", "N", "stride_gm"], QUOTIENTS_WARPS
    elif kernel in ("upper", "lower"):
        unit, other = {"a": ("stride_xk", "stride_xr"), "b": ("stride_xr", "stride_xk")}.get(operand, (None, None))
        if unit is None:
            raise ValueError(f"operand must be 'a' or 'b', got {operand!r}")
        pointers = {"x_ptr": "*fp64", "top_ptr": "*i64"}
        block = UPPER_BLOCKS["k" if operand == "a" else "rows"] if kernel == "upper" else LOWER_BLOCK
        constexprs = {"BLOCK_K": block[0], "BLOCK_R": block[1], "UPPER": kernel == "upper", unit: 1}
        if kernel == "upper":  # as upper_reading_kernel launches it: sums, no codes
            pointers.update(sums_ptr="*i64", code_sums_ptr="*i64", code_squares_ptr="*i64")
            constexprs.update(codes_ptr=None)
        else:  # as lower_codes_kernel launches it: codes, no sums
            pointers.update(codes_ptr="*i8")
            constexprs.update(sums_ptr=None, code_sums_ptr=None, code_squares_ptr=None)
        fn, sizes, warps = _codes_kernel, ["rows", "K", "rows_out", "k_out", other, "stride_cr", "k_chunk"], CODES_WARPS
    elif kernel == "rows":  # as row_reading_kernel launches it, on A
        if operand != "a":
            raise ValueError(f"the row reading takes K-contiguous rows: operand 'a', got {operand!r}")
        pointers = {name: "*i64" for name in _row_reading_kernel.arg_names if name.endswith("_ptr")}
        pointers.update(x_ptr="*fp64", codes_ptr="*i8")
        (block_k, block_r), warps = ROW_READING_LAUNCH
        constexprs = {"BLOCK_K": block_k, "BLOCK_R": block_r}
        fn, sizes = _row_reading_kernel, ["rows", "K", "rows_out", "k_out", "stride_xr", "stride_cr"]
    else:
        raise ValueError(f"kernel must be 'upper', 'lower', 'rows' or 'quotients', got {kernel!r}")
    signature = {name: pointers.get(name, "i32") for name in fn.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    divisible = [*pointers, *sizes] if aligned else []
    return ptx.compile_kernel(fn, signature, constexprs, divisible=divisible, capability=capability, num_warps=warps)
