"""The decision: how one call computes its product, apart from computing it.

A plan is a pure function of the call's shape, its options, the device's cost profile and,
where the shape alone does not decide, stage 1's statistics of A and B
(:class:`ozaki.reading.Statistics`): no device work here.  :func:`plan_for_shape` decides the
calls the shape settles (native DGEMM by the cost model, an empty product);
:func:`plan_for_statistics` decides the rest from the read: each row's bits, so the CRT
capacity, so the moduli or exponent bands, and, once more, native or emulated on the moduli
the data needs.  :func:`ozaki.pipeline.prepare` makes the read and asks both;
``ozaki.explain`` returns the plan :func:`ozaki.matmul` runs.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Union

import torch

from kernels import residues as residue_kernels
from kernels.float64 import FRACTION_BITS, MAX_EXPONENT, MIN_NORMAL_EXPONENT, SIGNIFICAND_BITS

from . import accuracy as fp64_rule
from . import bands, catalog, cost, reading
from .agreement import ONE_DEVICE, Agreement
from .capacity import crt_capacity, has_capacity
from .formats import Encoding
from .reading import Statistics
from .residues import reference_moduli
from .scaling import slack_bound

__all__ = ["COMPLEX_BOTH", "COMPLEX_ONE", "ENGINES", "Moduli", "ProductPlan", "Shape", "device_profile", "moduli_for", "native_verdict",
           "plan_for_shape", "plan_for_statistics"]

log = logging.getLogger("ozaki")

Accuracy = Union[str, int]
PLAN_ENGINES = ("int8", "fp8", "fp4")
# Under "fp64" rows keep every bit the int8 plan for their need pays for, on every engine.
_FILL_ENGINE = "int8"
ENGINES = ("auto", "reference", *PLAN_ENGINES)

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


# The real products a complex one runs as (ozaki.operands.complex_embedding): with both operands
# complex, each product is the real M×2K×2N embedding [Ar Ai]·[[Br, Bi], [−Bi, Br]]; with one,
# the complex operand's real and imaginary parts are a leading batch of two real products.
COMPLEX_BOTH, COMPLEX_ONE = "both", "one"


@dataclass(frozen=True)
class Shape:
    """A call's (batch of) M×K×N product(s) on a device; ``whole`` is the M×K×N of the whole
    product where this device holds a share of it (:mod:`ozaki.distributed`), else the same.
    ``complex``: None for a real product, else how the real products hold a complex one
    (:data:`COMPLEX_BOTH`, :data:`COMPLEX_ONE`); M×K×N and the batch are the real products'."""

    m: int
    k: int
    n: int
    batch: int
    whole: tuple[int, int, int]
    device: torch.device
    complex: str | None = None

    @classmethod
    def of(cls, a: torch.Tensor, b: torch.Tensor, agreement: Agreement = ONE_DEVICE,
           complex: str | None = None) -> Shape:
        """Of a (…, M, K) @ b (…, K, N) with equal batch shapes."""
        (m, k), n = a.shape[-2:], b.shape[-1]
        return cls(m, k, n, math.prod(a.shape[:-2]), agreement.whole_shape(m, k, n), a.device, complex)


@dataclass(frozen=True)
class ProductPlan:
    """How one call computes its (batch of) M×K×N product(s), decided before any residue exists.

    ``path`` is "native" (torch.matmul: cuBLAS DGEMM) or "emulated".  A native path decided from
    the shape alone read no data: ``moduli``, ``bits_a`` and ``bits_b`` are then None.  ``bits_a``
    and ``bits_b`` are the (fewest, most) bits kept per row of A and per column of B; ``bands``
    is the split into exponent bands when the product is wider than every plan of the engine
    (``moduli`` is then each band pair's plan).  ``predicted`` is the cost model's verdict where
    the device has a profile.  ``guard`` is the g of accuracy="fp64"'s bound (:mod:`ozaki.accuracy`)
    on the emulated path, None where every row is lossless (the result is then correctly rounded).
    ``nonfinite``: A or B holds NaN or ±inf, which the emulation reads as 0 and the caller
    overlays after.  ``complex``: as :attr:`Shape.complex`; M×K×N and ``batch`` are then those
    of the real products that hold the complex one.  ``complex_blocks``: with both operands
    complex, the GEMMs of K/2×N/2 blocks per plane GEMM of the embedding: 3 where the torch
    stages form Karatsuba's three block products (the B-side shifts of columns j and N/2 + j
    agree, as they do under "exact", a number of bits and "fp64" rows widened to the plan's);
    4 where the run multiplies the embedding as it is (the fused GPU path, exponent bands, and
    "fp64" rows kept at the read's bits, whose shifts may differ).  The run takes the plan's
    number, checking the shifts before it forms Karatsuba's products.  ``str(plan)`` is a
    short readable account."""

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
    nonfinite: bool = False
    # Under "fp64", per product of the batch, the (P, Q) every row of A and of Bᵀ keeps (or its
    # lossless width where fewer): the bits the moduli of its need pay for; None where its rows
    # keep the bits the read gave them.  Empty under the other accuracies.
    widen_to: tuple[tuple[int, int] | None, ...] = field(default=(), repr=False)
    # A range holding every row's shift (ozaki.scaling.shifts_of) on the emulated path.
    shift_span: tuple[int, int] | None = field(default=None, repr=False)
    # Per product of the batch, how far the rows' rounding may move its integers
    # (ozaki.scaling.slack_bound): the decoders' slack, past which a result that rounds beyond
    # ±DBL_MAX is ±inf, short of it ±DBL_MAX.  0 where every row is lossless.
    slack: tuple[int, ...] = field(default=(), repr=False)
    complex: str | None = None
    complex_blocks: int = 0

    @property
    def products(self) -> int:
        """Low-precision (or, for the reference engine, float64) GEMMs the call runs; 0 on the native path.
        With both operands complex, GEMMs of the complex product's M×K/2×N/2 blocks
        (``complex_blocks`` per plane GEMM of the embedding)."""
        if self.moduli is None:
            return 0
        per_product = self.bands.products if self.bands is not None else self.moduli.planes
        return self.batch * per_product * (self.complex_blocks if self.complex == COMPLEX_BOTH else 1)

    def _title(self) -> str:
        options = f"accuracy={self.accuracy!r}, engine={self.engine!r}"
        if self.complex == COMPLEX_BOTH:
            batch = f"{self.batch} x " if self.batch != 1 else ""
            return (f"{batch}{self.m}x{self.k // 2}x{self.n // 2} complex product as its real embedding "
                    f"{self.m}x{self.k}x{self.n}, {options}")
        if self.complex == COMPLEX_ONE:
            batch = f"{self.batch // 2} x " if self.batch != 2 else ""
            return (f"{batch}{self.m}x{self.k}x{self.n} complex product of a real and a complex operand as the real "
                    f"products of the complex one's two parts, {options}")
        batch = f"{self.batch} x " if self.batch != 1 else ""
        return f"{batch}{self.m}x{self.k}x{self.n} product, {options}"

    def __str__(self) -> str:
        lines = [self._title(), f"  path       {self.path}: {self.reason}"]
        if self.moduli is not None and self.path == "emulated":
            moduli = self.moduli.moduli
            lines += [f"  engine     {self.moduli.engine}",
                      f"  moduli     {len(moduli)}, from {min(moduli)} to {max(moduli)}"
                      + (f" ({', '.join(map(str, moduli))})" if len(moduli) <= 24 else ""),
                      f"  products   {self.products} GEMMs"
                      + (f" ({self.bands.count_a} x {self.bands.count_b} exponent bands)" if self.bands else "")
                      + (f" of {self.m}x{self.k // 2}x{self.n // 2} blocks, {self.complex_blocks} per plane GEMM"
                         + (" (Karatsuba)" if self.complex_blocks == 3 else " (the embedding's 2x2 blocks)")
                         if self.complex == COMPLEX_BOTH else "")]
        if self.bits_a is not None:
            lines.append(f"  bits       rows of A {self.bits_a[0]}..{self.bits_a[1]}, "
                         f"columns of B {self.bits_b[0]}..{self.bits_b[1]}")
        lines.append(f"  bound      {self.error_bound}")
        if self.nonfinite:
            lines.append("  NaN/inf    placed where numpy's matmul puts them")
        if self.predicted is not None:
            lines.append(f"  time       {self.predicted}")
        else:
            lines.append("  time       no prediction: " + ("the device has no cost profile (ozaki.cost)"
                                                    if self.engine == "auto" and self.accuracy == "fp64"
                                                    else "only engine='auto' with accuracy='fp64' may run DGEMM"))
        return "\n".join(lines)


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
    # once per catalog folder: a plan looks up several times between the device's read and the
    # first encode, which waits for it.
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


def native_verdict(shape: Shape, accuracy: Accuracy, engine: str, profile: cost.Profile | None,
                   moduli: Moduli | None = None, complex_blocks: int | None = None) -> cost.Verdict | None:
    """The cost model's verdict (:mod:`ozaki.cost`) on emulating the whole call of ``shape`` (its
    batch of products, each the whole product where this device holds a share of it) with
    ``moduli`` (default: the plan for rows of 53 bits, which general float64 data needs) against
    the native product, or None where native is no option: only ``engine="auto"`` with
    ``accuracy="fp64"`` may run native float64 matmul, as "exact", a number of bits and an
    explicit engine promise the emulated bits; only on a device with a cost ``profile``
    (:func:`device_profile`; on the CPU auto is the reference engine, see moduli_for).  A
    product of two complex operands is judged against ZGEMM, its embedding's plane GEMMs as
    ``complex_blocks`` block products (default: those the moduli run, :func:`_complex_blocks`)."""
    m, k, n = shape.whole
    if engine != "auto" or accuracy != "fp64" or min(m, k, n, shape.batch) < 1 or profile is None:
        return None
    if moduli is None:
        return _general_verdict(profile, m, k, n, shape.batch, shape.complex, shape.device.type)
    if complex_blocks is None:
        complex_blocks = _complex_blocks(shape.complex, moduli, shape.device, shape.batch)
    return cost.verdict(profile, m, k, n, digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli),
                        batch=shape.batch, complex_blocks=complex_blocks)


@functools.lru_cache(maxsize=1024)
def _general_verdict(profile: cost.Profile, m: int, k: int, n: int, batch: int, complex: str | None,
                     device_type: str) -> cost.Verdict | None:
    """The verdict for rows of 53 bits, a function of the shape alone: kept, so that a call
    the shape sends to native DGEMM costs a lookup, not a plan."""
    device = torch.device(device_type)
    moduli = moduli_for("auto", k, crt_capacity(k, SIGNIFICAND_BITS, SIGNIFICAND_BITS), device)
    return cost.verdict(profile, m, k, n, digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli),
                        batch=batch, complex_blocks=_complex_blocks(complex, moduli, device, batch))


def _complex_blocks(complex: str | None, moduli: Moduli, device: torch.device, batch: int, banded: bool = False,
                    same_shifts: bool = True) -> int:
    """With both operands complex, the block products per plane GEMM of the embedding
    (:attr:`ProductPlan.complex_blocks`); 0 otherwise.  Karatsuba's three need columns j and
    N/2 + j of B to share their shift (``same_shifts``), so that Br' + Bi' lies on one grid.
    The torch stages (ozaki.pipeline) take them then; the fused path takes them for one
    product whose planes store the residues themselves (the int8 plans: the sum of two
    operands' planes is then the sum's plane, ``kernels.residues.stores_residues``).  Exponent
    bands (``banded``), a fused batch and planes of digits multiply the embedding as it is,
    four."""
    if complex != COMPLEX_BOTH:
        return 0
    if banded or not same_shifts:
        return 4
    if moduli.encodings is None or not reading.kernels_available(device):
        return 3
    karatsuba = batch == 1 and all(residue_kernels.stores_residues(moduli.encodings, side) for side in "ab")
    return 3 if karatsuba else 4


def device_profile(device: torch.device) -> cost.Profile | None:
    """The cost profile of ``device`` (:func:`ozaki.cost.profile_for`), None off CUDA and for a
    GPU the model has no figures for: the one input of a plan that is read from the device."""
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


def plan_for_shape(shape: Shape, accuracy: Accuracy, engine: str, profile: cost.Profile | None) -> ProductPlan | None:
    """The plan where the shape alone decides, None where the data must be read
    (:func:`plan_for_statistics`): native DGEMM where the cheapest plan general float64 data can
    get is predicted slower, reading no data; zeros for an empty product."""
    basis = dict(m=shape.m, k=shape.k, n=shape.n, batch=shape.batch, accuracy=accuracy, engine=engine,
                 complex=shape.complex)
    verdict = native_verdict(shape, accuracy, engine, profile)
    if verdict is not None and verdict.native:
        return _logged(ProductPlan(**basis, path="native", reason=_NATIVE_REASON, error_bound=_NATIVE_BOUND,
                                   predicted=verdict))
    if shape.batch == 0 or min(shape.whole) == 0:
        return ProductPlan(**basis, path="emulated", reason="empty product: zeros", error_bound=_CORRECTLY_ROUNDED)
    return None


def plan_for_statistics(shape: Shape, statistics: Statistics, accuracy: Accuracy, engine: str,
                        profile: cost.Profile | None) -> ProductPlan:
    """The plan for a product the shape did not decide, from stage 1's ``statistics`` of its
    finite entries (NaN and ±inf read as 0).  Where ``shape`` is one device's share of a
    product spread over a mesh and the statistics the whole product's (:mod:`ozaki.agreement`),
    it is that device's share of the plan one device would make of the gathered matrices."""
    whole_m, whole_k, whole_n = shape.whole
    # 1. Scale: row i of A keeps bits_i, so |A'| ≤ 2^p − 1 with p = max bits_i; B's columns, q.
    # |A'B'| ≤ K·(2^p − 1)(2^q − 1); the CRT recovers it exactly, sign included, when
    # ∏m > 2·K·(2^p − 1)(2^q − 1): the capacity a plan advertises for k_max and input_bits.
    # Under "fp64" each product's rows keep the bits its own need pays for (_fp64_rows), so that
    # a product of a batch has the bits it has alone; the moduli hold every product's need.
    products = statistics.products or (statistics,)
    rows = [_fp64_rows(product, whole_k) if accuracy == "fp64" else _kept_rows(product, whole_k, accuracy)
            for product in products]
    capacity = max(row.need for row in rows)
    p, q = max(row.p for row in rows), max(row.q for row in rows)
    widen_to = tuple((row.p, row.q) if row.widened else None for row in rows) if accuracy == "fp64" else ()
    sides = [(product.a, product.b, row.p if row.widened else None, row.q if row.widened else None)
             for product, row in zip(products, rows)]
    split = None
    if engine in PLAN_ENGINES and _plan_moduli(engine, capacity) is None:
        # Wider than every plan of the engine: a sum of band products (ozaki.bands).
        split = bands.split(whole_k, p, q, [(plan.capacity, plan.products) for plan in catalog.plans_for(engine)])
        capacity = crt_capacity(whole_k, split.width_a, split.width_b)
    moduli = moduli_for(engine, whole_k, capacity, shape.device)
    # A column's shift follows from its maximum and bits, and columns j and N/2 + j of a complex
    # product's B hold the same magnitudes (Br_:j, Bi_:j), so the same maximum and lossless width;
    # "exact" and b bits keep a function of that width, and so does "fp64" once its rows are
    # widened to (P, Q).  Rows kept at the read's "fp64" level may differ: the level reads |A||B|
    # column by column.
    complex_blocks = _complex_blocks(shape.complex, moduli, shape.device, shape.batch, banded=split is not None,
                                     same_shifts=accuracy != "fp64" or None not in widen_to)
    # The shape alone did not send the call to DGEMM; the moduli these data need may.
    verdict = native_verdict(shape, accuracy, engine, profile, moduli, complex_blocks)
    native = verdict is not None and verdict.native
    # The fewest bits of any row and the guard, from the same read: a row ends with
    # min(lossless, P) bits once widened to P.
    fewest_a = min(side_a.fewest_bits(wide_p) for side_a, _, wide_p, _ in sides)
    fewest_b = min(side_b.fewest_bits(wide_q) for _, side_b, _, wide_q in sides)
    # Every row's shift s = bits − top (less one where rounding carries; 0 for a zero row)
    # lies in this range, which the encode checks and sizes its table of powers by without a
    # read (tests/test_explain.py holds it to every row's shift on rows from the subnormals up).
    read_a, read_b = statistics.a, statistics.b
    span = (min(0, fewest_a - read_a.highest_top - 1, fewest_b - read_b.highest_top - 1),
            max(0, p - read_a.lowest_top, q - read_b.lowest_top))
    guard = None
    if native:
        bound = _NATIVE_BOUND
    elif accuracy == "fp64":
        guard = min((g for side_a, side_b, wide_p, wide_q in sides
                     for g in (side_a.guard(wide_p), side_b.guard(wide_q)) if g is not None), default=None)
        bound = _CORRECTLY_ROUNDED if guard is None else _fp64_bound(guard)
    else:
        bound = _CORRECTLY_ROUNDED if isinstance(accuracy, str) else _fixed_bound(accuracy)
    return _logged(ProductPlan(
        m=shape.m, k=shape.k, n=shape.n, batch=shape.batch, accuracy=accuracy, engine=engine,
        complex=shape.complex, complex_blocks=complex_blocks,
        path="native" if native else "emulated", reason=f"plan for rows of p={p}, q={q} bits", error_bound=bound,
        moduli=moduli, bits_a=(fewest_a, p), bits_b=(fewest_b, q), bands=split, predicted=verdict, guard=guard,
        nonfinite=statistics.nonfinite and not native, widen_to=widen_to, shift_span=span,
        slack=tuple(slack_bound(whole_k, row.p, row.q, row.lossy_a, row.lossy_b) for row in rows),
    ))


class _Rows(NamedTuple):
    """What one product's rows need: the capacity its moduli must pass; the most bits (P, Q) a
    row of A and of Bᵀ keeps, widened (``widened``) where under "fp64" an int8 plan reaches
    them; whether some row of each side keeps fewer bits than its lossless width."""

    need: int
    p: int
    q: int
    widened: bool
    lossy_a: bool
    lossy_b: bool


def _kept_rows(statistics: Statistics, k: int, accuracy: Accuracy) -> _Rows:
    """"exact" keeps every row lossless, b bits every row at most b (ozaki.reading.row_bits)."""
    side_a, side_b = statistics.a, statistics.b
    p, q = side_a.most_bits, side_b.most_bits
    lossy_a, lossy_b = (accuracy != "exact" and side.widest > accuracy for side in (side_a, side_b))
    return _Rows(crt_capacity(k, p, q), p, q, False, lossy_a, lossy_b)


def _fp64_rows(statistics: Statistics, k: int) -> _Rows:
    """The data's own bound on Σ_k |A'_ik||B'_kj| (ozaki.accuracy) is often far below
    K·(2^p − 1)(2^q − 1), and the rows then keep every bit the int8 plan of that need pays
    for, whatever the engine, so that every engine keeps the same bits and returns the same
    result."""
    side_a, side_b = statistics.a, statistics.b
    p, q = side_a.most_bits, side_b.most_bits
    magnitude = fp64_rule.MagnitudeBound.from_code_sums(side_a.code_sums, side_b.code_sums, side_a.code_squares,
                                                        side_b.code_squares, k)
    needed = lambda p_, q_: min(crt_capacity(k, p_, q_), magnitude.capacity(p_, q_))  # noqa: E731
    filled = _plan_moduli(_FILL_ENGINE, needed(p, q))
    if filled is None:
        return _Rows(needed(p, q), p, q, False, side_a.guard(None) is not None, side_b.guard(None) is not None)
    # Rows end with at most P bits, and some row has them (P ≤ the widest lossless row): p and
    # q stay the largest bits of any row.
    p, q = _filled(needed, math.prod(filled.moduli), p, q, side_a.widest, side_b.widest)
    return _Rows(needed(p, q), p, q, True, side_a.guard(p) is not None, side_b.guard(q) is not None)


# frexp's exponent of a row's maximum as kernels.scaling computes it: from the least
# subnormal's, 2^-1074 = 2^(−1073 − 1), up to the all-ones exponent field's (inf, NaN),
# 2047 − 1022 = 1025.
_LEAST_TOP = MIN_NORMAL_EXPONENT - FRACTION_BITS + 1
_MOST_TOP = MAX_EXPONENT + 2


def any_row_span(p: int, q: int) -> tuple[int, int]:
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
