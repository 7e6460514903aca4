"""Stage 1, scaling: a row of float64 values becomes a row of integers.

    A'_ik = round(A_ik · 2^s_i),   s_i = p_i − top_i,   |A'_ik| ≤ 2^p_i − 1

``p_i`` is the number of bits kept for the row: every integer fits p_i bits, which is what
the CRT's capacity 2·K·(2^p − 1)(2^q − 1) counts (the ``input_bits`` of a plan).  ``top_i``
is the smallest integer with every |A_ik| < 2^top_i, plus one where rounding would carry
the row maximum up to 2^p_i (see :func:`row_shifts`; never in lossless mode).  Rounding is
to nearest, ties to even; it is the only lossy step of the whole emulation, so the choice
of ``p_i`` decides the accuracy.  Columns of B are rows of Bᵀ.

Bits and shifts read two numbers of a row, its :class:`Extents` (largest magnitude, lowest
set bit): :func:`exact_bits_of`, :func:`fixed_bits_of` and :func:`shifts_of` take them from
:func:`row_extents` here, or from the one-pass Triton kernel ``kernels.scaling`` on CUDA.

Every integer is kept as ``mantissa · 2^exponent`` (``exponent ≥ 0``, ``|mantissa| ≤ 2^53``)
so rows may keep any number of bits — far more than int64 holds — and residues are taken
straight from that form (see :mod:`ozaki.residues`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.float64 import EXPONENT_BIAS, FRACTION_BITS, MAGNITUDE_MASK, MAX_EXPONENT, SIGNIFICAND_BITS, ULP_BIAS
from kernels.scaling import NO_SET_BIT, Extents, exact_bits_kernel, row_shifts_kernel

from ._bits import blocks, ldexp, pow2, round_

__all__ = [
    "NO_SET_BIT",
    "Extents",
    "Scaled",
    "exact_bits",
    "exact_bits_of",
    "fixed_bits",
    "fixed_bits_of",
    "row_extents",
    "rounding_slack",
    "row_shifts",
    "scale_rows",
    "shifts_of",
    "sides_shifts",
    "slack_bound",
]

@dataclass(frozen=True)
class Scaled:
    """Rows of integers ``mantissa · 2^exponent`` equal to ``round(x · 2^shift)``."""

    mantissa: torch.Tensor  # int64, |mantissa| ≤ 2^53
    exponent: torch.Tensor  # int64, ≥ 0
    shift: torch.Tensor  # int64, one per row
    bits: torch.Tensor  # int64, one per row: every |integer| ≤ 2^bits − 1


_HIDDEN_BIT = 1 << FRACTION_BITS
_EXPONENT_FIELD = 0x7FF
# A set bit's weight in row_extents, 1023 + t + max(E, 1), is 2^(weight − _WEIGHT_BIAS)
# (a float64 is significand·2^(max(E, 1) − ULP_BIAS), kernels.float64).
_WEIGHT_BIAS = EXPONENT_BIAS + ULP_BIAS


def _decompose(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x = m · 2^e exactly with m an int64 of at most 53 bits (zero gives m = 0)."""
    fraction, exponent = torch.frexp(x)
    mantissa = (fraction * 2.0**SIGNIFICAND_BITS).to(torch.int64)
    return mantissa, exponent.to(torch.int64) - SIGNIFICAND_BITS


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as one row per matrix row, (R, K), viewed as the int64 bit patterns."""
    return x.reshape(-1, x.shape[-1]).view(torch.int64)


def _top(row_max: torch.Tensor) -> torch.Tensor:
    """The smallest integer t with row_max < 2^t: frexp's exponent (0 for 0.0)."""
    return torch.frexp(row_max)[1].to(torch.int64)


def _row_max(x: torch.Tensor) -> torch.Tensor:
    """Per row, the largest |x| (float64).  IEEE patterns of non-negative floats order as
    their values, so it is the largest masked pattern."""
    rows = _rows(x)
    row_max = torch.empty(rows.shape[0], dtype=torch.int64, device=x.device)
    for block in blocks(rows.shape[0], rows.shape[1], x.device):
        row_max[block] = (rows[block] & MAGNITUDE_MASK).amax(dim=-1)
    return row_max.view(torch.float64).reshape(x.shape[:-1])


def row_extents(x: torch.Tensor) -> Extents:
    """Per row of x (..., K): the largest |x| and the exponent of the lowest set bit of any
    non-zero entry (subnormals included, zeros of either sign ignored)."""
    rows = _rows(x)
    count = rows.shape[0]
    row_max, lowest = (torch.zeros(count, dtype=torch.int64, device=x.device) for _ in range(2))
    for block in blocks(count, rows.shape[1], x.device):
        magnitude = rows[block] & MAGNITUDE_MASK
        row_max[block] = magnitude.amax(dim=-1)
        zero = magnitude == 0
        # The lowest set bit of the significand (2^52 | fraction) is 2^t; converted to
        # float64 its exponent field is 1023 + t, and the bit weighs 2^(t + max(E, 1) − 1075).
        # (Zeros get the weight that the bias below turns into NO_SET_BIT.)
        significand = magnitude | _HIDDEN_BIT
        lowest_set = (significand & -significand).to(torch.float64).view(torch.int64) >> FRACTION_BITS
        weight = lowest_set.add_((magnitude >> FRACTION_BITS).clamp_(min=1))
        lowest[block] = weight.masked_fill_(zero, NO_SET_BIT + _WEIGHT_BIAS).amin(dim=-1)
    shape = x.shape[:-1]
    return Extents(row_max.view(torch.float64).reshape(shape), (lowest - _WEIGHT_BIAS).reshape(shape))


def exact_bits_of(extents: Extents) -> torch.Tensor:
    """:func:`exact_bits` of the rows these are the extents of."""
    if extents.row_max.is_cuda and extents.row_max.dim() == 1:
        return exact_bits_kernel(extents)[0][0]  # one launch of the same operations (kernels.scaling)
    return torch.where(extents.has_nonzero, _top(extents.row_max) - extents.lowest_bit, 0)


def exact_bits(x: torch.Tensor) -> torch.Tensor:
    """Bits per row that make the scaling lossless: the span from the row's highest bit
    to its lowest set bit (0 for an all-zero row).

    This is what ``accuracy="exact"`` keeps, and the most ``accuracy="fp64"`` keeps
    (:mod:`ozaki.accuracy`).
    """
    return exact_bits_of(row_extents(x))


def fixed_bits_of(extents: Extents, bits: int) -> torch.Tensor:
    """:func:`fixed_bits` of the rows these are the extents of."""
    return torch.clamp(exact_bits_of(extents), max=bits)


def fixed_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``bits`` per row (fast mode), never more than the row's lossless width.

    Error: an entry moves by less than max_k |A_ik| / (2^bits − 1) (half a unit of the
    row's grid 2^-s_i, see :func:`row_shifts`), so with ε = 1/(2^bits − 1)
    |Ĉ_ij − C_ij| ≤ ε (max|A_i:|·Σ_k|B_kj| + Σ_k|A_ik|·max|B_:j|) + ε²·K·max|A_i:|·max|B_:j| + u|C_ij|.
    """
    return fixed_bits_of(row_extents(x), bits)


def rounding_slack(k: int, side_a: tuple[Extents, torch.Tensor], side_b: tuple[Extents, torch.Tensor]) -> int:
    """A bound S on how far the scaling moves each entry of a K-long product on the decode's
    scale: |Σ_k A'_ik·B'_kj − 2^(s_i + t_j)·C_ij| ≤ S, each side given as the (extents, bits)
    of its rows (A's rows, Bᵀ's).  It is the ``slack`` of the decoders
    (``ozaki.crt.round_to_float64``, ``kernels.crt.decode_residues``): with it a result that
    rounds past ±DBL_MAX saturates there wherever the exact product may be finite, as the
    bounds of the lossy accuracies promise a finite result within them.

    Per term, a·b − a'·b'·2^-(s+t) = a'·2^-s·δb + δa·b with |δa| ≤ 2^(−s−1), zero on a
    lossless row, |a'| ≤ 2^p − 1 and |b| < 2^(q−t) (:func:`row_shifts`, carry included), so a
    term moves by at most 2^(−s−t−1)·(2^q·[A's row lossy] + 2^p·[B's column lossy]):
    S = ⌈K·(2^Q·[a row of A lossy] + 2^P·[a column of B lossy])/2⌉, P and Q the most bits of
    a row of each side.  0 where every row is lossless ("exact"): results then round
    correctly, to ±inf past the range.
    """
    (extents_a, bits_a), (extents_b, bits_b) = side_a, side_b

    def widest_and_lossy(extents: Extents, bits: torch.Tensor) -> tuple[int, bool]:
        if bits.numel() == 0:
            return 0, False
        return int(bits.max()), bool((bits < exact_bits_of(extents)).any())

    p, lossy_a = widest_and_lossy(extents_a, bits_a)
    q, lossy_b = widest_and_lossy(extents_b, bits_b)
    return slack_bound(k, p, q, lossy_a, lossy_b)


def slack_bound(k: int, p: int, q: int, lossy_a: bool, lossy_b: bool) -> int:
    """:func:`rounding_slack`'s S = ⌈K·(2^Q·[a row of A lossy] + 2^P·[a column of B lossy])/2⌉
    from what a plan reads of the rows (``ozaki.planning``): P and Q the most bits of a row of
    each side, and whether some row of each keeps fewer bits than its lossless width."""
    return -(-k * ((lossy_a << q) + (lossy_b << p)) // 2)


def row_shifts(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """s_i = p_i − top_i per row (0 for a zero row): every |round(x_ik · 2^s_i)| ≤ 2^p_i − 1.

    With t the smallest integer with every |x_ik| < 2^t, the shift p − t puts every
    |x_ik·2^s| below 2^p, but rounding may carry the row maximum up to 2^p itself, one bit
    too many for the CRT's capacity.  Rounding is monotone, so that happens exactly when
    the row maximum rounds to 2^p; then top = t + 1 puts every |x_ik·2^s| below 2^(p−1),
    whose rounding stays ≤ 2^(p−1) ≤ 2^p − 1 (below ½, so 0, when p = 0).  The row keeps
    one bit less, and an entry moves by at most 2^(t−p) against a maximum of at least
    2^t − 2^(t−p−1): less than max/(2^p − 1), as without the carry (2^(t−p−1) against at
    least 2^(t−1)).  Lossless rows never carry: their entries scale to integers below 2^p,
    which rounding leaves alone; nor does any row of p ≥ 53 bits, as a float64 maximum has
    at most 53 significant bits.
    """
    if x.dtype != torch.float64:
        raise TypeError(f"scaling needs float64 input, got {x.dtype}")
    return shifts_of(_row_max(x), bits)


def shifts_of(row_max: torch.Tensor, bits: torch.Tensor, fewest: int | None = None) -> torch.Tensor:
    """:func:`row_shifts` of rows whose largest |x| is ``row_max`` (float64, one per row,
    e.g. ``Extents.row_max``): the shift and the carry rule need nothing else of a row.
    ``fewest``: the least entry of ``bits`` where the caller has read it (a plan's
    ``bits_a[0]``), which saves this call's read of the device."""
    return sides_shifts((row_max, bits, fewest))[0]


def sides_shifts(*sides: tuple[torch.Tensor, torch.Tensor, int | None]) -> tuple[torch.Tensor, ...]:
    """:func:`shifts_of` of each side's (``row_max``, ``bits``, ``fewest``): on CUDA of one or
    two sides (A's rows and Bᵀ's) in one launch, where the device waits for them."""
    for row_max, bits, fewest in sides:
        if bits.shape != row_max.shape:
            raise ValueError(f"bits has shape {tuple(bits.shape)}, expected one entry per row {tuple(row_max.shape)}")
        if bits.numel() and (int(bits.min()) if fewest is None else fewest) < 0:
            raise ValueError("bits per row must be non-negative")
    if all(row_max.is_cuda for row_max, _, _ in sides):
        # One launch of the same operations (kernels.scaling), where torch takes some twenty per side.
        shifts = row_shifts_kernel(*((row_max.reshape(-1), bits.reshape(-1)) for row_max, bits, _ in sides))
        return tuple(shift.reshape(bits.shape) for shift, (_, bits, _) in zip(shifts, sides))
    return tuple(_torch_shifts(row_max, bits) for row_max, bits, _ in sides)


def _torch_shifts(row_max: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    has_nonzero = row_max > 0
    shift = torch.where(has_nonzero, bits - _top(row_max), 0)
    # Below 53 bits the scaled maximum lies in [2^(p−1), 2^p) ⊂ [½, 2^52): exact, and round_'s range.
    narrow = has_nonzero & (bits < SIGNIFICAND_BITS)
    scaled = ldexp(row_max, torch.where(narrow, shift, 0))
    carry = narrow & (round_(scaled, keep=~narrow) == pow2(bits.clamp(max=SIGNIFICAND_BITS - 1)))
    return shift - carry.to(torch.int64)


def scale_rows(x: torch.Tensor, bits: torch.Tensor, shift: torch.Tensor | None = None) -> Scaled:
    """Round each row of ``x`` (float64, finite, shape (..., M, K)) to ``bits`` (shape (..., M)) bits.

    ``shift``: where x holds only some of each row's K entries (a shard, ``ozaki.distributed``),
    the shifts of the whole rows (:func:`shifts_of` their maxima), which x's own maxima may not give."""
    shift = row_shifts(x, bits) if shift is None else shift
    rows = x.reshape(-1, x.shape[-1])
    row_shift, row_bits = shift.reshape(-1, 1), bits.reshape(-1)
    mantissa = torch.empty(rows.shape, dtype=torch.int64, device=x.device)
    exponent = torch.empty(rows.shape, dtype=torch.int64, device=x.device)
    for block in blocks(rows.shape[0], rows.shape[1], x.device):
        scale = _scale_block if int(row_bits[block].max()) <= MAX_EXPONENT else _scale_block_wide
        mantissa[block], exponent[block] = scale(rows[block], row_shift[block])
    return Scaled(
        mantissa=mantissa.reshape(x.shape),
        exponent=exponent.reshape(x.shape),
        shift=shift,
        bits=bits,
    )


def _scale_block(x: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows whose integers stay below 2^1023: y = x·2^shift is finite, and exact wherever
    |y| ≥ 2^52 (no fraction bits there: y·2^-exponent is an integer below 2^53).  Below,
    float64 holds x·2^shift exactly too (or it is far below ½ and rounds to zero either
    way), and round_ rounds half to even."""
    y = ldexp(x, shift.expand_as(x))
    field = (y.view(torch.int64) >> FRACTION_BITS) & _EXPONENT_FIELD
    # The weight of y's last significand bit, 2^(E − 1075), when it is at least 1.
    exponent = (field - ULP_BIAS).clamp_(min=0)
    mantissa = round_(y, keep=field >= ULP_BIAS).mul_(pow2(-exponent)).to(torch.int64)
    return mantissa, exponent


def _scale_block_wide(x: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of any width: the 53-bit mantissa of each entry with its scaled exponent, and
    the rounded value where that exponent is negative (the entry is below 2^53 then)."""
    mantissa, exponent = _decompose(x)
    scaled_exponent = exponent + shift
    fractional = scaled_exponent < 0  # there |x·2^shift| < 2^52
    rounded = round_(ldexp(x, shift.expand_as(x)), keep=~fractional).to(torch.int64)
    return torch.where(fractional, rounded, mantissa), torch.where(fractional, 0, scaled_exponent)
