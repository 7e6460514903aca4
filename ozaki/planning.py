"""Deciding how one call computes its product, apart from computing it.

:func:`plan_product` reads what the decision needs (each row's extents, so its bits, so the
CRT capacity, so the moduli or exponent bands) and asks the cost model whether native float64
matmul is faster; it returns a :class:`ProductPlan`, which :func:`ozaki.pipeline.run` carries
out, the frontend asks for once per call, ``ozaki.explain`` returns and the benchmark reads.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import torch

from kernels import scaling as scaling_kernels
from kernels.accuracy import RowReading
from kernels.float64 import FRACTION_BITS, MAX_EXPONENT, MIN_NORMAL_EXPONENT, SIGNIFICAND_BITS

from . import bands, catalog, cost
from .agreement import ONE_DEVICE, Agreement
from .formats import Encoding
from .capacity import crt_capacity, has_capacity
from . import accuracy as fp64_rule
from .residues import reference_moduli
from .scaling import Extents, exact_bits_of, row_extents

__all__ = ["ENGINES", "Moduli", "ProductPlan", "moduli_for", "native_verdict", "plan_product", "row_bits"]

log = logging.getLogger("ozaki")

Accuracy = Union[str, int]
PLAN_ENGINES = ("int8", "fp8", "fp4")
# Under "fp64" rows keep every bit the int8 plan for their need pays for, on every engine.
_FILL_ENGINE = "int8"
ENGINES = ("auto", "reference", *PLAN_ENGINES)
# Above every bit count and guard: a minimum over no line (a device may hold none of a side).
_NO_LINE = scaling_kernels.LINE_CAP
# The IEEE pattern of +inf: finite non-negative float64s' patterns lie below it, NaN's above.
_INF_PATTERN = scaling_kernels.INF_PATTERN

# The elementwise error bound each accuracy documents (README, ozaki.matmul), u = 2^-53.
_CORRECTLY_ROUNDED = "correctly rounded: |C^ - C| <= u|C| + 2^-1075 (u = 2^-53)"
_NATIVE_BOUND = "DGEMM's: |C^ - C| <= K*u*(|A||B|) + u|C| (u = 2^-53); bits may differ across devices"
_NATIVE_REASON = f"plan for rows of {SIGNIFICAND_BITS} bits"


def _fixed_bound(bits: int) -> str:
    return (f"|C^ - C| <= e*(max|A_i:|*sum|B_:j| + sum|A_i:|*max|B_:j|) + e^2*K*max|A_i:|*max|B_:j| + u|C| "
            f"+ 2^-1075, e = 1/(2^{bits} - 1), u = 2^-53")


def _fp64_bound(guard: int) -> str:
    return f"DGEMM-level: |C^ - C| <= u|C| + 2^-{guard}*(1 + 2^-19)*sqrt(K)*u*(|A||B|) + 2^-1075 (u = 2^-53)"


@dataclass(frozen=True)
class Moduli:
    """The moduli of one product and, for a plan engine, the encoding of each."""

    moduli: tuple[int, ...]
    encodings: tuple[Encoding, ...] | None = field(repr=False)  # None: direct float64 products
    engine: str

    @property
    def planes(self) -> int:
        """Plane GEMMs per product: one per modulus for direct products."""
        return len(self.moduli) if self.encodings is None else sum(len(e.planes) for e in self.encodings)


@dataclass(frozen=True)
class ProductPlan:
    """How one call computes its (batch of) M×K×N product(s), decided before any residue exists.

    ``path`` is "native" (torch.matmul: cuBLAS DGEMM) or "emulated".  A native path decided from
    the shape alone read no data: ``moduli``, ``bits_a`` and ``bits_b`` are then None.  ``bits_a``
    and ``bits_b`` are the (fewest, most) bits kept per row of A and per column of B; ``bands``
    is the split into exponent bands when the product is wider than every plan of the engine
    (``moduli`` is then each band pair's plan).  ``predicted`` is the cost model's verdict where
    the device has a profile.  ``guard`` is the g of accuracy="fp64"'s bound (:mod:`ozaki.accuracy`)
    on the emulated path, None where every row is lossless (the result is then correctly rounded)."""

    m: int
    k: int
    n: int
    batch: int
    accuracy: Accuracy
    engine: str
    path: str
    reason: str
    error_bound: str
    moduli: Moduli | None = None
    bits_a: tuple[int, int] | None = None
    bits_b: tuple[int, int] | None = None
    bands: bands.Split | None = None
    predicted: cost.Verdict | None = None
    guard: int | None = None
    # What the pipeline runs on: the operands (on the emulated path finite, non-finite entries
    # zeroed and overlaid after) and, per product of the batch, the rows' extents and bits of A
    # and of Bᵀ.
    operands: tuple[torch.Tensor, torch.Tensor] = field(default=(), repr=False, compare=False)
    nonfinite: bool = field(default=False, repr=False, compare=False)
    rows: tuple = field(default=(), repr=False, compare=False)
    # Per product of the batch, each row's shift of A and of Bᵀ (ozaki.scaling.shifts_of of its
    # bits) where the plan made them with the bits (widened "fp64" rows on CUDA); else empty.
    shifts: tuple = field(default=(), repr=False, compare=False)
    # A range holding every row's shift (ozaki.scaling.shifts_of) on the emulated path.
    shift_span: tuple[int, int] | None = field(default=None, repr=False, compare=False)
    # What plan_product's ``early`` queued on the last plan of this shape while the read was in
    # flight, where this plan turned out the same (see there); else None.
    early: object = field(default=None, repr=False, compare=False)

    @property
    def products(self) -> int:
        """Low-precision (or, for the reference engine, float64) GEMMs the call runs; 0 on the native path."""
        if self.moduli is None:
            return 0
        per_product = self.bands.products if self.bands is not None else self.moduli.planes
        return self.batch * per_product


def row_bits(x: torch.Tensor, accuracy: Accuracy) -> torch.Tensor:
    """Bits kept per row of x for "exact" or a number of bits (see :mod:`ozaki.scaling`);
    "fp64" takes both operands (:mod:`ozaki.accuracy`)."""
    if accuracy == "fp64":
        raise ValueError("accuracy='fp64' derives each row's bits from both operands: see ozaki.explain")
    return bits_of(row_extents(x), accuracy)


def bits_of(extents: Extents, accuracy: Accuracy) -> torch.Tensor:
    return _kept(exact_bits_of(extents), accuracy)


def _kept(lossless: torch.Tensor, accuracy: Accuracy) -> torch.Tensor:
    # "exact" keeps every row's lossless width, a number of bits at most that many
    # (ozaki.scaling.fixed_bits_of).
    return lossless if accuracy == "exact" else torch.clamp(lossless, max=accuracy)


def _filled(capacity: Callable[[int, int], int], product: int, p: int, q: int, widest_a: int,
            widest_b: int) -> tuple[int, int]:
    """The widest (P, Q) ≥ (p, q), at most the widest lossless row of each side, that moduli
    of this ``product`` still recover exactly (``capacity(P, Q)`` below it): one bit at a time
    to the side that has gained fewer so far (A on ties), so the spare capacity is shared evenly."""
    wide_p, wide_q = p, q
    while True:
        grow_a = wide_p < widest_a and has_capacity(product, capacity(wide_p + 1, wide_q))
        grow_b = wide_q < widest_b and has_capacity(product, capacity(wide_p, wide_q + 1))
        if grow_a and (not grow_b or wide_p - p <= wide_q - q):
            wide_p += 1
        elif grow_b:
            wide_q += 1
        else:
            return wide_p, wide_q


def kernels_available(device: torch.device) -> bool:
    """The Triton path runs on CUDA tensors.  (Triton's CPU interpreter runs it too, but one
    step per tile takes milliseconds: tests call it there on small shapes explicitly.)"""
    return device.type == "cuda"


def _extents(a: torch.Tensor, bt: torch.Tensor, row_a: RowReading | None = None) -> tuple[Extents, Extents]:
    """What stage 1 reads of the rows of A and of Bᵀ (:func:`ozaki.scaling.row_extents`): with
    Triton in one pass of ``kernels.scaling`` each (for Bᵀ, B's columns in place: no transposed
    copy), the same integers, so the same bits, shifts, p, q and plan.  A device of a mesh may
    hold no row: its pass launches nothing.  ``row_a``: A's extents read already, with the rest
    of its "fp64" reading (ozaki.accuracy.row_reading)."""
    if row_a is not None:
        return row_a.extents, scaling_kernels.row_extents_kernel(bt)[0]
    if kernels_available(a.device):
        return scaling_kernels.row_extents_kernel(a, bt)
    return row_extents(a), row_extents(bt)


def _plan_moduli(digits: str, min_product: int) -> Moduli | None:
    """The cheapest catalog plan over ``digits`` with capacity above ``min_product``."""
    capacities, plans = _plan_frontier(catalog.catalog_dir(), digits)
    # The first capacity past min_product (has_capacity's strict comparison).
    index = bisect.bisect_right(capacities, min_product)
    return plans[index] if index < len(plans) else None


@functools.cache
def _plan_frontier(folder: Path, digits: str) -> tuple[tuple[int, ...], tuple[Moduli, ...]]:
    # The plans, cheapest first, that hold more than every cheaper plan, with their capacities
    # (increasing): for any need, the first of them past it is the cheapest plan past it.  Built
    # once per catalog folder: the planning of one product looks up three times, between the
    # device's read and the first encode, while the device waits unless it started on a guessed
    # plan (plan_product's ``early``; benchmarks/RESULTS.md, the 8192 timelines).
    capacities, plans = [], []
    for plan in catalog.plans_for(digits):
        if not capacities or plan.capacity > capacities[-1]:
            capacities.append(plan.capacity)
            plans.append(Moduli(tuple(m for m, _ in plan.moduli), catalog.encodings_of(plan), digits))
    return tuple(capacities), tuple(plans)


def moduli_for(engine: str, k: int, min_product: int, device: torch.device) -> Moduli:
    """Moduli with ∏m > min_product for the engine; ``auto`` takes the fastest exact engine
    the device has: an int8 plan on CUDA, the float64 reference on the CPU, where one calls
    ozaki for its exactness (numpy.matmul is the DGEMM there).  Whether ``auto`` emulates at
    all is :func:`native_verdict`'s call."""
    if engine in PLAN_ENGINES:
        chosen = _plan_moduli(engine, min_product)
        if chosen is None:
            raise ValueError(
                f"no {engine!r} plan in the catalog has capacity above 2^{min_product.bit_length() - 1} "
                f"(needed for these inputs with K = {k}); add one with `ozaki-search plan --digits {engine} "
                f"--input-bits N --k-max K` or use engine='reference'"
            )
        return chosen
    if engine == "auto" and device.type == "cuda":
        chosen = _plan_moduli("int8", min_product)
        if chosen is not None:
            return chosen
        log.debug("no int8 plan reaches 2^%d: using the reference engine", min_product.bit_length() - 1)
    return Moduli(reference_moduli(k, min_product), None, "reference")


def native_verdict(m: int, k: int, n: int, accuracy: Accuracy, engine: str, device: torch.device,
                   moduli: Moduli | None = None) -> cost.Verdict | None:
    """The cost model's verdict (:mod:`ozaki.cost`) on emulating the M×K×N product with
    ``moduli`` (default: the plan for rows of 53 bits) against native DGEMM, or None where
    native is no option: only ``engine="auto"`` with ``accuracy="fp64"`` may run native float64
    matmul, as "exact", a number of bits and an explicit engine promise the emulated bits; only
    on a device with a cost profile (on the CPU auto is the reference engine, see moduli_for)."""
    if engine != "auto" or accuracy != "fp64" or min(m, k, n) < 1:
        return None
    profile = _cost_profile(device)
    if profile is None:
        return None
    if moduli is None:
        return _general_verdict(profile, m, k, n, device.type)
    return cost.verdict(profile, m, k, n, digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli))


@functools.lru_cache(maxsize=1024)
def _general_verdict(profile: cost.Profile, m: int, k: int, n: int, device_type: str) -> cost.Verdict | None:
    """The verdict for rows of 53 bits, a function of the shape alone: kept, so that a call
    the shape sends to native DGEMM costs a lookup, not a plan."""
    moduli = moduli_for("auto", k, crt_capacity(k, SIGNIFICAND_BITS, SIGNIFICAND_BITS), torch.device(device_type))
    return cost.verdict(profile, m, k, n, digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli))


def _cost_profile(device: torch.device) -> cost.Profile | None:
    if device.type != "cuda":
        return None
    return _cuda_profile(torch.cuda.current_device() if device.index is None else device.index)


@functools.cache
def _cuda_profile(index: int) -> cost.Profile | None:
    name, capability = torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index)
    profile = cost.profile_for(name, capability)
    if profile is None:
        log.debug("no cost profile for %s (sm_%d%d): engine='auto' always emulates there", name, *capability)
    return profile


def _zeroed(x: torch.Tensor, nonfinite: int) -> torch.Tensor:
    """x with NaN and ±inf read as 0 (numpy's matmul places them, see ozaki.frontend)."""
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if nonfinite else x


def plan_product(a: torch.Tensor, b: torch.Tensor, accuracy: Accuracy = "fp64", engine: str = "auto",
                 agreement: Agreement = ONE_DEVICE, *, early: Callable | None = None) -> ProductPlan:
    """The plan for a (…, M, K) @ b (…, K, N), float64 with equal batch shapes on one device
    (validated by the frontend).  Reads the data only where the shape does not decide.

    ``early(a, bt, moduli, shift_a, shift_b, span)``: work on the plan's behalf that the device
    may start while the plan's read is in flight (``ozaki.pipeline.early_encodes``), where the
    device waits otherwise (benchmarks/RESULTS.md, the 8192 timelines).  Where this device
    made a plan for this shape and these options before (accuracy "fp64", one product, one
    device, CUDA), and that plan repeated the one before it or had none before it, the rows
    are widened to its P and Q and ``early`` is called with its moduli, the shifts and a span
    that holds them, before the read.  Its result rides on the plan (``early``) only where the
    read yields the same moduli, P and Q, so the same shifts: the bits are those of a plan
    made without it.  Otherwise it is dropped, and its work was the only cost.

    Where a and b are this device's shards of a product spread over a mesh, ``agreement``
    (:mod:`ozaki.agreement`, :mod:`ozaki.distributed`) makes every statistic the plan reads
    the whole product's: the plan is then this device's share of the plan one device would
    make of the gathered matrices (its rows' bits, moduli, bands and path), with m, k, n the
    shape of this device's product."""
    (m, k), n, device = a.shape[-2:], b.shape[-1], a.device
    whole_m, whole_k, whole_n = agreement.whole_shape(m, k, n)
    batch = math.prod(a.shape[:-2])

    # Native from the shape alone: the cheapest plan general float64 data can get is slower.
    # The plan for rows of 53 bits stands for general float64 data: under "fp64", phi = 0.5
    # data at K = 16384 take its 16 int8 moduli (benchmarks/RESULTS.md).
    verdict = native_verdict(whole_m, whole_k, whole_n, accuracy, engine, device)
    if verdict is not None and verdict.native:
        return _logged(ProductPlan(m, k, n, batch, accuracy, engine, "native", _NATIVE_REASON, _NATIVE_BOUND,
                                   predicted=verdict, operands=(a, b)))
    basis = dict(m=m, k=k, n=n, batch=batch, accuracy=accuracy, engine=engine)
    if batch == 0 or min(whole_m, whole_k, whole_n) == 0:
        return ProductPlan(**basis, path="emulated", reason="empty product: zeros", error_bound=_CORRECTLY_ROUNDED,
                           operands=(a, b))

    # 1. Scale: row i of A keeps bits_i, so |A'| ≤ 2^p − 1 with p = max bits_i; B's columns, q.
    # An operand's NaN and ±inf come to light in the same read as the maxima; the product is
    # then read again from zeroed operands (the rare path pays the passes twice, so that the
    # common one reads the device once here).
    # Where this shape was planned before, the rows widened to its last plan's P and Q and the
    # early work on its moduli are queued behind the read (see ``early`` above).
    fa, fb = a, b
    key = (m, k, n, engine, device)
    remembered = (early is not None and accuracy == "fp64" and agreement is ONE_DEVICE and batch == 1
                  and kernels_available(device))
    guess = _LAST_PLANS.get(key) if remembered else None
    guess = guess if guess is not None and guess.trusted else None

    def on_guess(flat_a: torch.Tensor, flat_bt: torch.Tensor, sides: list) -> tuple:
        widened = _widened(sides, guess.p, guess.q)
        return widened, early(flat_a, flat_bt, guess.moduli, *widened[1][0], _any_row_span(guess.p, guess.q))

    sides, local, (read_a, read_b), queued = _read_rows(fa, fb, batch, accuracy, agreement,
                                                        on_guess if guess else None)
    nonfinite = read_a.nonfinite or read_b.nonfinite
    if nonfinite:
        fa, fb = _zeroed(a, local[0]), _zeroed(b, local[1])
        sides, _, (read_a, read_b), queued = _read_rows(fa, fb, batch, accuracy, agreement)
    p, q = read_a.most_bits, read_b.most_bits

    # |A'B'| ≤ K·(2^p − 1)(2^q − 1); the CRT recovers it exactly, sign included, when
    # ∏m > 2·K·(2^p − 1)(2^q − 1): the capacity a plan advertises for k_max and input_bits.
    # Under "fp64" the data's own bound on Σ_k |A'_ik||B'_kj| (ozaki.accuracy) is often far
    # below it, and every row keeps the bits the int8 plan of its need pays for, whatever
    # the engine, so that every engine keeps the same bits and returns the same result.
    needed = functools.partial(crt_capacity, whole_k)
    widened, shifts, guessed = False, (), False
    if accuracy == "fp64":
        # The largest code sums over every product of the batch and every device's lines.
        magnitude = fp64_rule.MagnitudeBound.from_code_sums(read_a.code_sums, read_b.code_sums,
                                                            read_a.code_squares, read_b.code_squares, whole_k)
        needed = lambda p_, q_: min(crt_capacity(whole_k, p_, q_), magnitude.capacity(p_, q_))  # noqa: E731
        filled = _plan_moduli(_FILL_ENGINE, needed(p, q))
        if filled is not None:
            # Rows end with at most P bits, and some row has them (P ≤ the widest lossless row):
            # p and q stay the largest bits of any row.
            p, q = _filled(needed, math.prod(filled.moduli), p, q, read_a.widest, read_b.widest)
            guessed = queued is not None and (guess.p, guess.q) == (p, q)
            sides, shifts = queued[0] if guessed else _widened(sides, p, q)
            widened = True
    capacity = needed(p, q)
    split = None
    if engine in PLAN_ENGINES and _plan_moduli(engine, capacity) is None:
        # Wider than every plan of the engine: a sum of band products (ozaki.bands).
        split = bands.split(whole_k, p, q, [(plan.capacity, plan.products) for plan in catalog.plans_for(engine)])
        capacity = crt_capacity(whole_k, split.width_a, split.width_b)
    moduli = moduli_for(engine, whole_k, capacity, device)
    verdict = native_verdict(whole_m, whole_k, whole_n, accuracy, engine, device, moduli)
    native = verdict is not None and verdict.native
    # The fewest bits of any row and the guard, from the same read: a row ends with
    # min(lossless, P) bits once widened to P.
    fewest_a, fewest_b = read_a.fewest_bits(p if widened else None), read_b.fewest_bits(q if widened else None)
    # Every row's shift s = bits − top (less one where rounding carries; 0 for a zero row)
    # lies in this range, which the encode checks and sizes its table of powers by without a
    # read (tests/test_explain.py holds it to every row's shift on rows from the subnormals up).
    span = (min(0, fewest_a - read_a.highest_top - 1, fewest_b - read_b.highest_top - 1),
            max(0, p - read_a.lowest_top, q - read_b.lowest_top))
    guard = None
    if native:
        bound = _NATIVE_BOUND
    elif accuracy == "fp64":
        guards = [g for g in (read_a.guard(p if widened else None), read_b.guard(q if widened else None))
                  if g is not None]
        guard = min(guards, default=None)
        bound = _CORRECTLY_ROUNDED if guard is None else _fp64_bound(guard)
    else:
        bound = _CORRECTLY_ROUNDED if isinstance(accuracy, str) else _fixed_bound(accuracy)
    if remembered:
        # A plan early's work cannot start on (native, banded, NaN or ±inf read) leaves none to
        # guess from: the next call of the shape then queues nothing that would be dropped.
        if widened and not native and split is None and not nonfinite:
            _remember(key, moduli, p, q)
        else:
            _LAST_PLANS.pop(key, None)
    guessed = guessed and guess.moduli is moduli and split is None and not native
    return _logged(ProductPlan(
        **basis, path="native" if native else "emulated", reason=f"plan for rows of p={p}, q={q} bits",
        error_bound=bound, moduli=moduli, bits_a=(fewest_a, p), bits_b=(fewest_b, q), bands=split, predicted=verdict,
        guard=guard, operands=(a, b) if native else (fa, fb), nonfinite=nonfinite and not native,
        rows=tuple((side_a.extents, side_b.extents, side_a.bits, side_b.bits) for side_a, side_b in sides),
        shifts=shifts, shift_span=span, early=queued[1] if guessed else None,
    ))


@dataclass(frozen=True)
class _LastPlan:
    """What plan_product's ``early`` is called with on the next call of a shape: the moduli and
    the widened P and Q of its last plan (the shifts follow from them and the rows' extents).
    ``trusted``: the plan before it was the same, or there was none; a shape whose plans
    change (data of alternating spreads) is not guessed for until one repeats, so that its
    calls do not all pay for dropped work."""

    moduli: Moduli
    p: int
    q: int
    trusted: bool = True


# The last plan of each product shape and options on each device, the oldest let go first.
_LAST_PLANS: dict[tuple, _LastPlan] = {}
_LAST_PLANS_KEPT = 64


def _remember(key: tuple, moduli: Moduli, p: int, q: int) -> None:
    last = _LAST_PLANS.pop(key, None)
    _LAST_PLANS[key] = _LastPlan(moduli, p, q, last is None or (last.moduli is moduli and (last.p, last.q) == (p, q)))
    if len(_LAST_PLANS) > _LAST_PLANS_KEPT:
        _LAST_PLANS.pop(next(iter(_LAST_PLANS)), None)


def _read_rows(a: torch.Tensor, b: torch.Tensor, batch: int, accuracy: Accuracy, agreement: Agreement,
               while_reading: Callable | None = None
               ) -> tuple[list, tuple[bool, bool], tuple[_Reading, _Reading], object]:
    """Stage 1's reading of every product of the batch and, in one read of the device, each
    side's summary over its lines (kernels.scaling's ``SUMMARY_FIELDS`` and widths: the most
    and the fewest bits, the widest lossless row, the highest and lowest tops, NaN or ±inf,
    under "fp64" the code sums of the magnitude bound and what the guard needs), the whole
    product's through ``agreement``, and whether this device's A and B hold NaN or ±inf.
    (Over non-finite operands the rest is meaningless: the caller reads them again, zeroed.)
    ``while_reading(a, bt, sides)`` of the first product runs after the summary's copy is
    queued and before the host waits for it; what it returns comes last (else None)."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    flat_a, flat_bt = a.reshape(batch, m, k), b.reshape(batch, k, n).transpose(-1, -2)
    read = [_sides(flat_a[index], flat_bt[index], accuracy, agreement) for index in range(batch)]
    sides = [(side_a, side_b) for side_a, side_b, _ in read]
    local = None
    for side_a, side_b, sums in read:
        local = _summary([(side_a, sums and sums[0::2]), (side_b, sums and sums[1::2])], local)
    if while_reading is not None and local.is_cuda:
        # The summary's copy goes first, the work queued on the read's behalf behind it, and
        # only then does the host wait for the copy: the device runs that work meanwhile.
        host = torch.empty(local.shape, dtype=local.dtype, pin_memory=True)
        host.copy_(local, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record(torch.cuda.current_stream(local.device))
        queued = while_reading(flat_a[0], flat_bt[0], sides)
        copied.synchronize()
        local = host
    else:
        queued = None if while_reading is None else while_reading(flat_a[0], flat_bt[0], sides)
        local = local.cpu()
    agreed = agreement.agree("max", local)
    half, largest = scaling_kernels.SUMMARY_LENGTH, scaling_kernels.SUMMARY_FIELDS.index("largest")
    # Of this device's own summary only whether its operands hold NaN or ±inf (it zeroes them).
    local_nonfinite = tuple(int(local[i * half + largest]) >= _INF_PATTERN for i in range(2))
    return sides, local_nonfinite, tuple(_Reading.of(agreed[i * half:(i + 1) * half]) for i in range(2)), queued


def _summary(sides: list[tuple[_Side, tuple[torch.Tensor, torch.Tensor] | None]],
             out: torch.Tensor | None) -> torch.Tensor:
    """Both sides' summaries (kernels.scaling.line_summary_kernel), side after side in one
    vector, added by maxima into ``out``; under "fp64" each line's bits are set first, from its
    level (see :func:`_sides`).  In torch where the kernels do not run, the same integers."""
    lines = [scaling_kernels.SummaryLines(side.bits.reshape(-1), side.lossless.reshape(-1),
                                          side.extents.row_max.reshape(-1),
                                          None if side.level is None else side.level.reshape(-1), code_sums)
             for side, code_sums in sides]
    guard = None if lines[0].level is None else fp64_rule.FP64_GUARD
    if kernels_available(lines[0].bits.device):
        return scaling_kernels.line_summary_kernel(*lines, guard=guard, out=out)
    summary = torch.cat([_torch_summary(line, guard) for line in lines])
    return summary if out is None else torch.maximum(out, summary)


def _torch_summary(lines: scaling_kernels.SummaryLines, guard: int | None) -> torch.Tensor:
    bits, lossless, row_max, level, code_sums = lines
    if level is not None:
        torch.minimum(level + guard, lossless, out=bits)
    summary = torch.zeros(scaling_kernels.SUMMARY_LENGTH, dtype=torch.int64, device=bits.device)
    if bits.numel():
        largest = row_max.view(torch.int64)
        sums, squares = code_sums or (torch.zeros_like(bits),) * 2
        head = [bits, lossless, largest, torch.where(largest > 0, _INF_PATTERN - largest, 0),
                scaling_kernels.LINE_CAP - bits, sums, squares]
        summary[:len(head)] = torch.stack(head).amax(dim=1)
        width_value = torch.ones_like(bits) if level is None else torch.where(bits < lossless, level + 2, 1)
        width = lossless.clamp(0, scaling_kernels.MAX_WIDTH - 1)
        summary[scaling_kernels.SUMMARY_WIDTHS:].scatter_reduce_(0, width, width_value, "amax")
    return summary


@dataclass(frozen=True)
class _Reading:
    """One side's summary over its lines, read from the device (see :func:`_read_rows`)."""

    most_bits: int
    widest: int
    highest_top: int  # of its rows (0 for none)
    lowest_top: int  # of its non-zero rows (0 for none)
    nonfinite: bool  # some entry is NaN or ±inf
    least_bits: int  # _NO_LINE for none
    code_sums: int
    code_squares: int
    widths: tuple[int, ...]  # per lossless width: 0 none, 1 lossless lines only, else the most level + 2

    @classmethod
    def of(cls, summary: torch.Tensor) -> _Reading:
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
                   _NO_LINE - below_cap if below_cap else _NO_LINE, sums, squares, tuple(widths))

    def fewest_bits(self, widened: int | None) -> int:
        """The fewest bits of any line: as read, or once every line keeps min(lossless, widened)."""
        if widened is None:
            return self.least_bits
        narrowest = next((width for width, value in enumerate(self.widths) if value), None)
        return _NO_LINE if narrowest is None else min(narrowest, widened)

    def guard(self, widened: int | None) -> int | None:
        """The least bits − level of a lossy line, None where every line is lossless.  A lossy
        line keeps level + FP64_GUARD bits; widened to P, the lines wider than P keep P."""
        lossy = [value - 2 for width, value in enumerate(self.widths) if value >= 2
                 and (widened is None or width > widened)]
        if not lossy:
            return None
        return fp64_rule.FP64_GUARD if widened is None else widened - max(lossy)


def _top_of(pattern: int) -> int:
    # The top of a finite non-negative float64 given by its pattern; 0 for the pattern of inf,
    # which stands for "no non-zero row" (and a non-finite maximum's is never used: the
    # operands are read again, zeroed).
    if pattern >= _INF_PATTERN:
        return 0
    return math.frexp(struct.unpack("<d", struct.pack("<q", pattern))[0])[1]


@dataclass(frozen=True)
class _Side:
    """Stage 1's reading of the rows of A (or of Bᵀ) of one product: their extents, the bits
    each keeps, its lossless width and, under "fp64", the bits it needs at guard 0
    (:func:`ozaki.accuracy.fp64_reading`)."""

    extents: Extents
    bits: torch.Tensor
    lossless: torch.Tensor
    level: torch.Tensor | None = None

    def widened(self, bits: int) -> _Side:
        """Every row keeps ``bits`` bits, or its lossless width where that is fewer."""
        return self.with_bits(self.lossless.clamp(max=bits))

    def with_bits(self, bits: torch.Tensor) -> _Side:
        return _Side(self.extents, bits, self.lossless, self.level)


def _sides(a: torch.Tensor, bt: torch.Tensor, accuracy: Accuracy,
           agreement: Agreement) -> tuple[_Side, _Side, fp64_rule.CodeSums | None]:
    """The two sides of one product and, under "fp64", the code sums of its bound on |A'||B'|."""
    kernels = kernels_available(a.device)
    # Under "fp64" on Triton, A's three passes in one launch where it can make them.
    row_a = fp64_rule.row_reading(a, bt.shape[0], agreement) if kernels and accuracy == "fp64" else None
    extents_a, extents_b = agreement.extents(*_extents(a, bt, row_a))
    if kernels:
        # The lossless widths and the tops of both sides in one launch, where six were.
        (lossless_a, top_a), (lossless_b, top_b) = scaling_kernels.exact_bits_kernel(extents_a, extents_b)
        tops = top_a, top_b
    else:
        (lossless_a, lossless_b), tops = (exact_bits_of(extents_a), exact_bits_of(extents_b)), None
    if accuracy != "fp64":
        return (_Side(extents_a, _kept(lossless_a, accuracy), lossless_a),
                _Side(extents_b, _kept(lossless_b, accuracy), lossless_b), None)
    # As extents: the Triton passes on CUDA tensors, the same integers and floats as torch's.
    level_a, level_b, sums = fp64_rule.fp64_reading(a, bt, extents_a, extents_b, agreement, kernels=kernels,
                                                    tops=tops, row_a=row_a)
    # Each line keeps min(level + FP64_GUARD, lossless) bits, which the summary's launch sets
    # as it reads them (_summary): two launches fewer per side.
    return (_Side(extents_a, torch.empty_like(level_a), lossless_a, level_a),
            _Side(extents_b, torch.empty_like(level_b), lossless_b, level_b), sums)


def _widened(sides: list[tuple[_Side, _Side]], p: int, q: int) -> tuple[list[tuple[_Side, _Side]], tuple]:
    """Every row of A keeps min(lossless, ``p``) bits, every row of Bᵀ min(lossless, ``q``); on
    CUDA with their shifts, in one launch per product (kernels.scaling.capped_shifts_kernel),
    which the pipeline then need not make: made after the plan's read, the device waits for
    them before its first encode, unless they were made before it on a guessed P and Q
    (plan_product's ``early``; benchmarks/RESULTS.md, the 8192 timelines)."""
    if not kernels_available(sides[0][0].bits.device):
        return [(side_a.widened(p), side_b.widened(q)) for side_a, side_b in sides], ()
    widened, shifts = [], []
    for side_a, side_b in sides:
        (bits_a, shift_a), (bits_b, shift_b) = scaling_kernels.capped_shifts_kernel(
            (side_a.extents.row_max.reshape(-1), side_a.lossless.reshape(-1), p),
            (side_b.extents.row_max.reshape(-1), side_b.lossless.reshape(-1), q))
        widened.append((side_a.with_bits(bits_a.reshape(side_a.bits.shape)),
                        side_b.with_bits(bits_b.reshape(side_b.bits.shape))))
        shifts.append((shift_a.reshape(side_a.bits.shape), shift_b.reshape(side_b.bits.shape)))
    return widened, tuple(shifts)


# frexp's exponent of a row's maximum as kernels.scaling computes it: from the least
# subnormal's, 2^-1074 = 2^(−1073 − 1), up to the all-ones exponent field's (inf, NaN),
# 2047 − 1022 = 1025.
_LEAST_TOP = MIN_NORMAL_EXPONENT - FRACTION_BITS + 1
_MOST_TOP = MAX_EXPONENT + 2


def _any_row_span(p: int, q: int) -> tuple[int, int]:
    """The range of the shift of any row that keeps at most p (A) or q (Bᵀ) bits, read or
    not: bits − top, less one where rounding carries (ozaki.scaling.row_shifts), 0 for a zero
    row, with a top in [_LEAST_TOP, _MOST_TOP]; a row that carries is finite, its top at most
    _MOST_TOP − 1, so the carry does not reach below −_MOST_TOP."""
    return -_MOST_TOP, max(p, q) - _LEAST_TOP


def _logged(plan: ProductPlan) -> ProductPlan:
    """Says which path a product takes and why on the "ozaki" logger (debug)."""
    if not log.isEnabledFor(logging.DEBUG):  # the message costs host time on every call
        return plan
    if plan.predicted is not None:
        outcome = str(plan.predicted)
    else:
        outcome = f"engine {plan.moduli.engine}, {len(plan.moduli.moduli)} moduli, {plan.products} GEMMs"
    log.debug("%s for %dx%dx%d (%s): %s", "native float64 matmul" if plan.path == "native" else "emulating",
              plan.m, plan.k, plan.n, plan.reason, outcome)
    return plan
