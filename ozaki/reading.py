"""Stage 1, the read: one pass over A and B giving what a plan decides from.

For each line (a row of A, a column of B read as a row of Bᵀ) the read finds its extents
(:func:`ozaki.scaling.row_extents`), its lossless width and the bits it keeps under the
accuracy asked for ("fp64": its level, :mod:`ozaki.accuracy`, plus the guard); then it sums
each side up over its lines in one vector that is copied to the host once.  The host side of
the read, :class:`Statistics`, is all :mod:`ozaki.planning` decides from; the lines stay on
the device for the pipeline, which scales by them.

:func:`start` queues the device's work and the summary's copy and returns at once
(:class:`PendingRead`), so that the pipeline can queue work of its own before the host waits
for the copy (:meth:`PendingRead.statistics`).
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass

import torch

from kernels import scaling as scaling_kernels
from kernels.accuracy import RowReading

from . import accuracy as fp64_rule
from .agreement import ONE_DEVICE, Agreement
from .scaling import Extents, exact_bits_of, row_extents

__all__ = ["Line", "PendingRead", "SideStatistics", "Statistics", "kernels_available", "row_bits", "start", "widen"]

# Above every bit count and guard: a minimum over no line (a device may hold none of a side).
NO_LINE = scaling_kernels.LINE_CAP
# The IEEE pattern of +inf: finite non-negative float64s' patterns lie below it, NaN's above.
_INF_PATTERN = scaling_kernels.INF_PATTERN


# A batch's products of fewer entries of A and B than this each are read together in torch
# (every pass one launch for the whole batch), larger ones one at a time by the Triton passes,
# whose few launches per product are then a small share of its read.
TRITON_READ_ENTRIES = 1 << 18


def kernels_available(device: torch.device) -> bool:
    """The Triton path runs on CUDA tensors.  (Triton's CPU interpreter runs it too, but one
    step per tile takes milliseconds: tests call it there on small shapes explicitly.)"""
    return device.type == "cuda"


def row_bits(x: torch.Tensor, accuracy) -> torch.Tensor:
    """Bits kept per row of x for "exact" or a number of bits (see :mod:`ozaki.scaling`);
    "fp64" takes both operands (:mod:`ozaki.accuracy`)."""
    if accuracy == "fp64":
        raise ValueError("accuracy='fp64' derives each row's bits from both operands: see ozaki.explain")
    return _kept(exact_bits_of(row_extents(x)), accuracy)


def _kept(lossless: torch.Tensor, accuracy) -> torch.Tensor:
    # "exact" keeps every row's lossless width, a number of bits at most that many
    # (ozaki.scaling.fixed_bits_of).
    return lossless if accuracy == "exact" else torch.clamp(lossless, max=accuracy)


@dataclass(frozen=True)
class Line:
    """The read of the rows of A (or of Bᵀ) of one product, on the device: their extents, the
    bits each keeps, its lossless width and, under "fp64", the bits it needs at guard 0
    (:func:`ozaki.accuracy.fp64_reading`)."""

    extents: Extents
    bits: torch.Tensor
    lossless: torch.Tensor
    level: torch.Tensor | None = None

    def widened(self, bits: int) -> Line:
        """Every row keeps ``bits`` bits, or its lossless width where that is fewer."""
        return self.with_bits(self.lossless.clamp(max=bits))

    def with_bits(self, bits: torch.Tensor) -> Line:
        return Line(self.extents, bits, self.lossless, self.level)

    def of_product(self, index: int) -> Line:
        """The rows of product ``index`` of a batch read together (views)."""
        return Line(Extents(self.extents.row_max[index], self.extents.lowest_bit[index]), self.bits[index],
                    self.lossless[index], None if self.level is None else self.level[index])


@dataclass(frozen=True)
class SideStatistics:
    """One side's summary over its lines, read from the device: its most and fewest bits, its
    widest lossless line, the highest and lowest tops, whether an entry is NaN or ±inf, under
    "fp64" the code sums of the magnitude bound, and per lossless width what its lines need."""

    most_bits: int
    widest: int
    highest_top: int  # of its rows (0 for none)
    lowest_top: int  # of its non-zero rows (0 for none)
    nonfinite: bool  # some entry is NaN or ±inf
    least_bits: int = NO_LINE  # NO_LINE for none
    code_sums: int = 0
    code_squares: int = 0
    widths: tuple[int, ...] = ()  # per lossless width: 0 none, 1 lossless lines only, else the most level + 2

    @classmethod
    def of(cls, summary: torch.Tensor) -> SideStatistics:
        """From one side's summary (int64 on the host).  Only the head and the widths up to the
        widest become Python integers: the slots past it, most of the 2100, are never read."""
        head = summary[:scaling_kernels.SUMMARY_WIDTHS].tolist()
        most_bits, widest, largest, below_inf, below_cap, sums, squares = head
        # The patterns of the largest row maximum and of the least non-zero one (inf's less the
        # largest of inf's less each): non-negative patterns order as their values, NaN's lie
        # above inf's, so the largest shows NaN or ±inf.
        if widest >= scaling_kernels.MAX_WIDTH and largest < _INF_PATTERN:
            # Finite float64 rows span at most 1024 + 1074 bits: the summary's slots hold them all.
            raise RuntimeError(f"a finite row's lossless width {widest} passes the summary's "
                               f"{scaling_kernels.MAX_WIDTH} slots: kernels.scaling.MAX_WIDTH is too small")
        # No line is wider than the widest (the slots past it are empty).
        widths = summary[scaling_kernels.SUMMARY_WIDTHS:][:widest + 1].tolist()
        return cls(most_bits, widest, _top_of(largest), _top_of(_INF_PATTERN - below_inf), largest >= _INF_PATTERN,
                   NO_LINE - below_cap if below_cap else NO_LINE, sums, squares, tuple(widths))

    def fewest_bits(self, widened: int | None) -> int:
        """The fewest bits of any line: as read, or once every line keeps min(lossless, widened)."""
        if widened is None:
            return self.least_bits
        narrowest = next((width for width, value in enumerate(self.widths) if value), None)
        return NO_LINE if narrowest is None else min(narrowest, widened)

    def guard(self, widened: int | None) -> int | None:
        """The least bits − level of a lossy line, None where every line is lossless.  A lossy
        line keeps level + FP64_GUARD bits; widened to P, the lines wider than P keep P."""
        lossy = [value - 2 for width, value in enumerate(self.widths) if value >= 2
                 and (widened is None or width > widened)]
        if not lossy:
            return None
        return fp64_rule.FP64_GUARD if widened is None else widened - max(lossy)


@dataclass(frozen=True)
class Statistics:
    """What a plan decides from (:func:`ozaki.planning.plan_for_statistics`): each side's summary
    over every product of the batch and, through the agreement, every device's lines;
    ``nonfinite``, whether some entry of A or B on any device is NaN or ±inf (the sides are
    then read again from operands with those entries zeroed, and the flag kept); whether this
    device's own A and B hold NaN or ±inf, which it zeroes before reading again; and, for a
    batch of several products, each product's own statistics, from which whatever its bits
    depend on is decided as if it were alone (its neighbours' data must not move them)."""

    a: SideStatistics
    b: SideStatistics
    nonfinite: bool = False
    local_nonfinite: tuple[bool, bool] = (False, False)
    products: tuple[Statistics, ...] = ()


def _top_of(pattern: int) -> int:
    # The top of a finite non-negative float64 given by its pattern; 0 for the pattern of inf,
    # which stands for "no non-zero row" (and a non-finite maximum's is never used: the
    # operands are read again, zeroed).
    if pattern >= _INF_PATTERN:
        return 0
    return math.frexp(struct.unpack("<d", struct.pack("<q", pattern))[0])[1]


class PendingRead:
    """A read queued on the device: its lines now, its :class:`Statistics` once the summary's
    copy has arrived (:meth:`statistics`, which waits for it)."""

    def __init__(self, lines: list[tuple[Line, Line]], summary: torch.Tensor, copied: torch.cuda.Event | None,
                 agreement: Agreement):
        self.lines = lines  # per product of the batch: (rows of A, rows of Bᵀ)
        self._summary, self._copied, self._agreement = summary, copied, agreement

    def statistics(self) -> Statistics:
        """Each side's summary, the whole product's through the agreement (a collective on a mesh);
        where the read kept each product's own summary too, theirs."""
        if self._copied is not None:
            self._copied.synchronize()
        local, *products = self._summary.reshape(-1, 2 * scaling_kernels.SUMMARY_LENGTH)
        agreed = self._agreement.agree("max", local)
        half, largest = scaling_kernels.SUMMARY_LENGTH, scaling_kernels.SUMMARY_FIELDS.index("largest")
        # Of this device's own summary only whether its operands hold NaN or ±inf (it zeroes them).
        local_nonfinite = tuple(int(local[i * half + largest]) >= _INF_PATTERN for i in range(2))
        return dataclasses.replace(_statistics(agreed), local_nonfinite=local_nonfinite,
                                   products=tuple(map(_statistics, products)))


def _statistics(summary: torch.Tensor) -> Statistics:
    side_a, side_b = (SideStatistics.of(half) for half in summary.reshape(2, -1))
    return Statistics(side_a, side_b, side_a.nonfinite or side_b.nonfinite)


def start(a: torch.Tensor, b: torch.Tensor, accuracy, agreement: Agreement = ONE_DEVICE) -> PendingRead:
    """Stage 1's read of every product of a (…, M, K) @ b (…, K, N) (equal batch shapes, finite
    or not: over NaN or ±inf the statistics say so and the rest is meaningless), queued: each
    side's summary over its lines (kernels.scaling's ``SUMMARY_FIELDS`` and widths) is copied
    to the host without waiting for it.  A batch of several products keeps each product's
    summary as well, behind the whole batch's (see :class:`Statistics`)."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    batch = math.prod(a.shape[:-2])
    flat_a, flat_bt = a.reshape(batch, m, k), b.reshape(batch, k, n).transpose(-1, -2)
    kernels = kernels_available(a.device)
    if batch > 1 and (not kernels or m * k + k * n < TRITON_READ_ENTRIES):
        # In torch every pass takes a batch dimension: the products are read together, in a
        # number of launches that does not grow with the batch.
        line_a, line_b, sums = _lines(flat_a, flat_bt, accuracy, agreement, kernels=False)
        products = _summary([(line_a, sums and sums[0::2]), (line_b, sums and sums[1::2])], None, per_product=True,
                            kernels=False)
        lines = [(line_a.of_product(index), line_b.of_product(index)) for index in range(batch)]
        local = torch.cat([products.amax(dim=0), products.reshape(-1)])
    else:
        read = [_lines(flat_a[index], flat_bt[index], accuracy, agreement, kernels=kernels) for index in range(batch)]
        if batch > 1:
            products = [_summary([(line_a, sums and sums[0::2]), (line_b, sums and sums[1::2])], None,
                                 kernels=kernels) for line_a, line_b, sums in read]
            local = torch.cat([torch.stack(products).amax(dim=0), *products])
        else:
            local = None
            for line_a, line_b, sums in read:
                local = _summary([(line_a, sums and sums[0::2]), (line_b, sums and sums[1::2])], local,
                                 kernels=kernels)
        lines = [(line_a, line_b) for line_a, line_b, _ in read]
    if not local.is_cuda:
        return PendingRead(lines, local, None, agreement)
    # Copied into pinned memory behind the read: whatever is queued next runs while the host
    # waits for it.
    host = torch.empty(local.shape, dtype=local.dtype, pin_memory=True)
    host.copy_(local, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(local.device))
    return PendingRead(lines, host, copied, agreement)


def widen(lines: list[tuple[Line, Line]], caps: tuple[tuple[int, int] | None, ...]
          ) -> tuple[list[tuple[Line, Line]], tuple]:
    """Per product, with caps (P, Q), every row of A keeps min(lossless, P) bits, every row of Bᵀ
    min(lossless, Q); a product whose cap is None keeps its rows as read.  On CUDA, for one
    product with a cap, with its shifts (:func:`ozaki.scaling.shifts_of`), in one launch
    (kernels.scaling.capped_shifts_kernel), which the pipeline then need not make; a batch's
    rows are widened together, in a number of launches that does not grow with the batch, and
    the pipeline makes their shifts in one launch; elsewhere no shifts (empty)."""
    if len(lines) > 1:
        return _widened_together(lines, caps), ()
    if not kernels_available(lines[0][0].bits.device) or None in caps:
        return [(line_a.widened(cap[0]), line_b.widened(cap[1])) if cap else (line_a, line_b)
                for (line_a, line_b), cap in zip(lines, caps)], ()
    ((line_a, line_b),), ((p, q),) = lines, caps
    (bits_a, shift_a), (bits_b, shift_b) = scaling_kernels.capped_shifts_kernel(
        (line_a.extents.row_max.reshape(-1), line_a.lossless.reshape(-1), p),
        (line_b.extents.row_max.reshape(-1), line_b.lossless.reshape(-1), q))
    widened = (line_a.with_bits(bits_a.reshape(line_a.bits.shape)), line_b.with_bits(bits_b.reshape(line_b.bits.shape)))
    return [widened], ((shift_a.reshape(line_a.bits.shape), shift_b.reshape(line_b.bits.shape)),)


def _widened_together(lines: list[tuple[Line, Line]], caps: tuple[tuple[int, int] | None, ...]
                      ) -> list[tuple[Line, Line]]:
    """:func:`widen` of a batch's products: one clamp per side for the whole batch, each
    product's rows then views of it."""
    device = lines[0][0].bits.device
    # Per product and side, its cap, or -1 where it keeps its rows as read.
    limits = torch.tensor([cap or (-1, -1) for cap in caps], dtype=torch.int64).to(device, non_blocking=True)
    sides = []
    for side in range(2):
        lossless, bits = (torch.stack([getattr(pair[side], name) for pair in lines]) for name in ("lossless", "bits"))
        limit = limits[:, side].reshape(-1, *(1,) * (lossless.dim() - 1))
        sides.append(torch.where(limit < 0, bits, torch.minimum(lossless, limit)))
    return [(line_a.with_bits(sides[0][index]), line_b.with_bits(sides[1][index]))
            for index, (line_a, line_b) in enumerate(lines)]


def _extents(a: torch.Tensor, bt: torch.Tensor, kernels: bool,
             row_a: RowReading | None = None) -> tuple[Extents, Extents]:
    """The extents of the rows of A and of Bᵀ (:func:`ozaki.scaling.row_extents`): with Triton
    in one pass of ``kernels.scaling`` each (for Bᵀ, B's columns in place: no transposed copy),
    the same integers, so the same bits, shifts, p, q and plan.  A device of a mesh may hold no
    row: its pass launches nothing.  ``row_a``: A's extents read already, with the rest of its
    "fp64" reading (ozaki.accuracy.row_reading)."""
    if row_a is not None:
        return row_a.extents, scaling_kernels.row_extents_kernel(bt)[0]
    if kernels:
        return scaling_kernels.row_extents_kernel(a, bt)
    return row_extents(a), row_extents(bt)


def _lines(a: torch.Tensor, bt: torch.Tensor, accuracy, agreement: Agreement, *,
           kernels: bool) -> tuple[Line, Line, fp64_rule.CodeSums | None]:
    """The two sides of one product (with ``kernels``, the Triton passes) or of a batch of
    them (in torch, whose passes take batch dimensions) and, under "fp64", the code sums of
    its bound on |A'||B'|."""
    # Under "fp64" on Triton, A's three passes in one launch where it can make them.
    row_a = fp64_rule.row_reading(a, bt.shape[0], agreement) if kernels and accuracy == "fp64" else None
    extents_a, extents_b = agreement.extents(*_extents(a, bt, kernels, row_a))
    if kernels:
        # The lossless widths and the tops of both sides in one launch.
        (lossless_a, top_a), (lossless_b, top_b) = scaling_kernels.exact_bits_kernel(extents_a, extents_b)
        tops = top_a, top_b
    else:
        (lossless_a, lossless_b), tops = (exact_bits_of(extents_a), exact_bits_of(extents_b)), None
    if accuracy != "fp64":
        return (Line(extents_a, _kept(lossless_a, accuracy), lossless_a),
                Line(extents_b, _kept(lossless_b, accuracy), lossless_b), None)
    # As extents: the Triton passes on CUDA tensors, the same integers and floats as torch's.
    level_a, level_b, sums = fp64_rule.fp64_reading(a, bt, extents_a, extents_b, agreement, kernels=kernels,
                                                    tops=tops, row_a=row_a)
    # Each line keeps min(level + FP64_GUARD, lossless) bits, which the summary's launch sets
    # as it reads them (_summary), so that no launch of its own writes them.
    return (Line(extents_a, torch.empty_like(level_a), lossless_a, level_a),
            Line(extents_b, torch.empty_like(level_b), lossless_b, level_b), sums)


def _summary(sides: list[tuple[Line, tuple[torch.Tensor, torch.Tensor] | None]],
             out: torch.Tensor | None, *, kernels: bool, per_product: bool = False) -> torch.Tensor:
    """Both sides' summaries (kernels.scaling.line_summary_kernel), side after side in one
    vector, added by maxima into ``out``; under "fp64" each line's bits are set first, from its
    level (see :func:`_lines`).  In torch where the kernels do not run, the same integers;
    there ``per_product`` summarizes each product of lines read as a batch (B, R) on its own,
    one row of the result each."""
    lines_of = (lambda x: x.reshape(x.shape[0], -1)) if per_product else (lambda x: x.reshape(-1))
    lines = [scaling_kernels.SummaryLines(lines_of(side.bits), lines_of(side.lossless),
                                          lines_of(side.extents.row_max),
                                          None if side.level is None else lines_of(side.level),
                                          code_sums and tuple(map(lines_of, code_sums)))
             for side, code_sums in sides]
    guard = None if lines[0].level is None else fp64_rule.FP64_GUARD
    if kernels:
        return scaling_kernels.line_summary_kernel(*lines, guard=guard, out=out)
    summary = torch.cat([_torch_summary(line, guard) for line in lines], dim=-1)
    return summary if out is None else torch.maximum(out, summary)


def _torch_summary(lines: scaling_kernels.SummaryLines, guard: int | None) -> torch.Tensor:
    """One side's summary of lines (…, R): (…, SUMMARY_LENGTH)."""
    bits, lossless, row_max, level, code_sums = lines
    if level is not None:
        torch.minimum(level + guard, lossless, out=bits)
    summary = torch.zeros((*bits.shape[:-1], scaling_kernels.SUMMARY_LENGTH), dtype=torch.int64,
                          device=bits.device)
    if bits.shape[-1]:
        largest = row_max.view(torch.int64)
        sums, squares = code_sums or (torch.zeros_like(bits),) * 2
        head = [bits, lossless, largest, torch.where(largest > 0, _INF_PATTERN - largest, 0),
                scaling_kernels.LINE_CAP - bits, sums, squares]
        summary[..., :len(head)] = torch.stack(head, dim=-2).amax(dim=-1)
        width_value = torch.ones_like(bits) if level is None else torch.where(bits < lossless, level + 2, 1)
        width = lossless.clamp(0, scaling_kernels.MAX_WIDTH - 1)
        summary[..., scaling_kernels.SUMMARY_WIDTHS:].scatter_reduce_(-1, width, width_value, "amax")
    return summary
