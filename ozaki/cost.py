"""Cost model: predicted seconds of the emulated product and of native DGEMM on one device.

    plan     = ((MK + KN)·(3·8 + 1) + MN·2·4) / (bandwidth · plan efficiency) + 2MNK / plane-GEMM rate + fixed
    encode   = (MK + KN)·(8 + planes·plane bytes) / (bandwidth · encode efficiency) + fixed
    products = planes·2MNK / plane-GEMM rate + moduli·MN·residue bytes / bandwidth + fixed
    decode   = MN·(moduli·residue bytes + 8) / (bandwidth · decode efficiency) + fixed
    call     = plan + encode + products + decode − overlap
    DGEMM    = 2MNK / fp64 rate

A batch of B products (…, M, K) @ (…, K, N) runs each stage once over the whole batch (the batch a
grid dimension of its launches): every size-dependent term above times B, each fixed part and
the overlap once per call; its native product is cuBLAS's strided-batched DGEMM, B·2MNK at the
fp64 rate.  A complex product with both operands complex runs as its real embedding, an
M×2K×2N product (``ozaki.operands.complex_embedding``) whose traffic the stages above count;
its plane GEMMs form ``complex_blocks`` of the embedding's four K×N blocks (three in Karatsuba's
form, ``ozaki.planning.ProductPlan.complex_blocks``), so the products' arithmetic is that share
of 2·M·2K·2N.  Its native product is ZGEMM, 8MNK: four real products at the fp64 rate.  (A real
operand against a complex one is a batch of two real products, judged as such.)

The plan is what ``accuracy="fp64"`` reads before any residue exists (``ozaki.accuracy``):
three passes over the float64 operands (extents, which show NaN and inf too; upper code sums;
lower codes) writing one int8 code per entry, one int8 GEMM of codes on the plane-GEMM kernel
and one pass over its int32 product.  Encode reads the
float64 operands and writes one plane value per entry and plane; the products write one
byte residue per entry and modulus, which the decode reads back before writing the float64
result.  Each stage's fixed part is what it costs whatever the size (launches, host reads,
lookups); the stages are as timed between synchronisations, and the overlap is what a whole
call hides of them.  The efficiencies, fixed parts, overlap and DGEMM's rate are fitted to a
device's recorded runs where it has them (:data:`RECORDS`: the H200's and the H100's), the
plane rate to what they reached on the arithmetic; other devices take their datasheet figures
(:data:`DEVICES`) times the H200's efficiencies.  Nothing is timed at call
time: the same shape on the same device always gets the same prediction, so a choice made
from it never changes a result's bits from run to run.

:func:`workspace_bytes` predicts the device memory the emulated path holds at its peak,
and :func:`stream_rows` picks the height of the blocks of A's rows the fused path streams
over to keep that within a budget of twice the bytes of A, B and C (``WORKSPACE_BUDGET``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import NamedTuple

__all__ = [
    "DEVICES", "EMULATION_MARGIN", "H100_RECORD", "H200_RECORD", "PLANNED_SHARE", "RECORDS", "RESIDUE_BYTES", "Device",
    "Prediction", "Profile", "Verdict", "device_key", "dgemm_seconds", "predict", "profile_for", "stream_rows",
    "verdict", "workspace_bytes", "zgemm_seconds",
]  # fmt: skip


@dataclass(frozen=True)
class Device:
    """Datasheet figures: dense rates in operations per second, bytes per second; the compute
    capability (major) the name must come with to be taken for this device."""

    name: str
    fp64: float
    rates: dict  # digits -> dense tensor-core rate, None where the device has no such unit worth using
    bandwidth: float
    source: str
    major: int


# Blackwell figures are vendor leads, not measured here; where they give a range, the end that does not
# flatter the emulation is taken.
DEVICES = {
    "h200": Device(
        "H200", 67e12, {"int8": 1979e12, "fp8": 1979e12, "fp4": None}, 4.8e12,
        "H200 SXM datasheet: FP64 tensor 67 TFLOP/s, INT8/FP8 dense 1979 T, HBM3e 4.8 TB/s; no FP4 units", 9,
    ),
    "h100": Device(
        "H100", 67e12, {"int8": 1979e12, "fp8": 1979e12, "fp4": None}, 3.35e12,
        "H100 SXM datasheet: FP64 tensor 67 TFLOP/s, INT8/FP8 dense 1979 T, HBM3 3.35 TB/s; no FP4 units "
        "(PCIe and NVL parts are slower in every figure, in about the same ratios)", 9,
    ),
    "b200": Device(
        "B200", 40e12, {"int8": 4.5e15, "fp8": 4.5e15, "fp4": 9e15}, 8e12,
        "B200 vendor leads: dense FP4 9 P, FP8/INT8 4.5 P, FP64 37-40 T (40 taken); HBM3e 8 TB/s (datasheet)", 10,
    ),
    "b300": Device(
        "B300", 1.25e12, {"int8": None, "fp8": 4.5e15, "fp4": 13e15}, 8e12,
        "B300 vendor leads: dense FP4 13-15 P (13 taken), INT8 cut to a small fraction (not projected), FP64 "
        "1.25 T; FP8 4.5 P assumed equal to B200 (no lead found); HBM3e 8 TB/s (datasheet)", 10,
    ),
    "a100": Device(
        "A100", 19.5e12, {"int8": 624e12, "fp8": None, "fp4": None}, 2.039e12,
        "A100 SXM 80GB datasheet: FP64 tensor 19.5 TFLOP/s, INT8 dense 624 T, HBM2e 2.04 TB/s; no FP8/FP4", 8,
    ),
}  # fmt: skip

# Stored bytes per plane value: the encode writes int8 planes (int16 past 127), the GEMM
# reads FP4 two to a byte.
PLANE_BYTES = {"int8": 1.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5, "reference": 8.0}

# The H200's record (benchmarks/RESULTS.md, "2026-12-06 04:09–04:11 UTC, one H200: the cost model's record;
# 1.23–1.25× DGEMM at 8192", which says how each figure was taken): ozaki.matmul with the int8 engine, accuracy
# fp64, phi = 0.5, A's reading in one launch (kernels.accuracy.row_reading_kernel); per (M, K, N): the plan's
# moduli, the seconds of (plan, encode, products, decode) each timed between synchronisations (one call each), of
# the whole call, and of DGEMM in the same run.  Each figure is a median over runs where there are more than two,
# so that one slow call's stages do not move the fit.  A call of a shape planned before starts its encodes while
# the plan's read is in flight (ozaki.pipeline.prepare's ``early``), which the stages, timed between
# synchronisations, leave out.
H200_RECORD = {
    (4096, 4096, 4096): (16, 0.001673, 0.0005674, 0.001923, 0.0003429, 0.003799, 0.002287),
    (6144, 6144, 6144): (16, 0.00184, 0.0009305, 0.005392, 0.0006497, 0.007897, 0.007853),
    (7168, 7168, 7168): (16, 0.001951, 0.001168, 0.008275, 0.0007756, 0.01122, 0.01307),
    (8192, 8192, 8192): (16, 0.002626, 0.001579, 0.01169, 0.001049, 0.01584, 0.01967),
    (10240, 10240, 10240): (16, 0.003862, 0.00244, 0.02733, 0.001701, 0.02967, 0.03803),
    (12288, 12288, 12288): (16, 0.005599, 0.003031, 0.04117, 0.002015, 0.05029, 0.06609),
    (16384, 16384, 16384): (16, 0.01149, 0.005322, 0.09683, 0.003557, 0.1172, 0.1602),
    (24576, 24576, 24576): (16, 0.03201, 0.01127, 0.3353, 0.008061, 0.3874, 0.5657),
    (65536, 4096, 256): (16, 0.002474, 0.002274, 0.002089, 0.0003506, 0.005995, 0.0024),
    (4096, 65536, 4096): (16, 0.005886, 0.005099, 0.02424, 0.0005558, 0.03404, 0.04071),
}

# The H100's record (benchmarks/RESULTS.md, "2026-12-07 00:45–00:50 UTC, one H100: launches without Triton's
# dispatch; `auto` at 6144³", which says how each figure was taken, from its own runs and those of "2026-12-05
# 19:10–19:11 UTC, one H100: the cost model's record"): the same columns as H200_RECORD, with A's reading in one
# launch, per shape the mean of two H100 80GB HBM3 machines' figures.  Two machines, because where a call waits
# for the host's launches (6144³ and below) its time follows the host, enough to put the emulation on either
# side of DGEMM: a fit to one host would place the crossing where only that host has it.
H100_RECORD = {
    (4096, 4096, 4096): (16, 0.00149, 0.000584, 0.001977, 0.0003491, 0.003909, 0.002307),
    (6144, 6144, 6144): (16, 0.001865, 0.001041, 0.005473, 0.0006406, 0.008044, 0.008029),
    (7168, 7168, 7168): (16, 0.001967, 0.001247, 0.008326, 0.0007934, 0.0114, 0.01319),
    (8192, 8192, 8192): (16, 0.002387, 0.001515, 0.01182, 0.0008723, 0.01614, 0.01964),
    (10240, 10240, 10240): (16, 0.004279, 0.002347, 0.02679, 0.00145, 0.03162, 0.03918),
    (12288, 12288, 12288): (16, 0.006201, 0.003269, 0.04196, 0.00195, 0.0522, 0.06852),
    (16384, 16384, 16384): (16, 0.01225, 0.005633, 0.09806, 0.00346, 0.1202, 0.1644),
    (65536, 4096, 256): (16, 0.002498, 0.002581, 0.002386, 0.0003669, 0.006673, 0.002484),
    (4096, 65536, 4096): (16, 0.006819, 0.005522, 0.02626, 0.0004006, 0.03668, 0.04236),
}

# The devices whose profile is fitted to their own record (the others are projected from the H200's).
RECORDS = {"h200": H200_RECORD, "h100": H100_RECORD}


class _RecordedRun(NamedTuple):
    """One entry of a record (:data:`RECORDS`): moduli, then seconds."""

    moduli: int
    plan: float
    encode: float
    products: float
    decode: float
    call: float
    dgemm: float


@dataclass(frozen=True, eq=False)  # hashed by identity: profiles key caches of verdicts
class Profile:
    """What one device reaches: rates in operations per second, ``bandwidth`` in bytes per
    second for plain traffic, the plan's, encode's and decode's efficiency on their traffic
    relative to it, and each stage's fixed cost per emulated call in seconds (launches, host
    reads, the tuner's cache lookup), by stage name, with the call's "overlap"
    (:class:`Prediction`)."""

    name: str
    fp64: float
    rates: dict  # digits -> plane-GEMM rate; None where the device has none
    bandwidth: float
    plan_efficiency: float
    encode_efficiency: float
    decode_efficiency: float
    overhead: dict  # "plan", "encode", "products", "decode" -> seconds
    source: str


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds per stage of one emulated call (a product or a batch of them), each as
    timed between synchronisations, and ``overlap``, what a whole call takes less than its stages
    timed so (the host's latency at each stage boundary, which a call hides behind the device's
    work)."""

    plan: float
    encode: float
    products: float
    decode: float
    overlap: float = 0.0

    @property
    def total(self) -> float:
        """The whole call."""
        return self.plan + self.encode + self.products + self.decode - self.overlap


@dataclass(frozen=True)
class Verdict:
    """The model's comparison for one call: ``native`` when the native product is predicted
    faster; ``native_seconds`` its predicted time, of DGEMM (strided-batched over ``batch``
    products), or of ZGEMM where ``zgemm`` (a product of two complex operands)."""

    native: bool
    emulated: Prediction
    native_seconds: float
    profile: str
    batch: int = 1
    zgemm: bool = False

    def __str__(self) -> str:
        e = self.emulated
        products = f" of {self.batch} products" if self.batch != 1 else ""
        kind = "ZGEMM" if self.zgemm else "DGEMM"
        native = kind if self.batch == 1 else f"strided-batched {kind}{products}"
        rate = " (4 real products at the DGEMM rate)" if self.zgemm else ""
        fixed = ", fixed costs once for the batch" if self.batch != 1 else ""
        return (f"predicted emulation{products} {e.total:.3g} s (plan {e.plan:.3g}, encode {e.encode:.3g}, products "
                f"{e.products:.3g}, decode {e.decode:.3g}, less {e.overlap:.3g} overlapped{fixed}) "
                f"{'>' if self.native else '<='} {EMULATION_MARGIN} x "
                f"{native} {self.native_seconds:.3g} s{rate} on {self.profile}")


def _encode_traffic(m: int, k: int, n: int, planes: int, plane_bytes: float) -> float:
    return (m * k + k * n) * (8 + planes * plane_bytes)


def _decode_traffic(m: int, n: int, moduli: int) -> float:
    return m * n * (moduli * RESIDUE_BYTES + 8)


def _plan_traffic(m: int, k: int, n: int) -> float:
    # Three reads of A and B (extents, which also show NaN and inf; the upper sums; the lower
    # codes) and the lower codes written, one byte an entry; the code GEMM's int32 product
    # written and read again by the quotient pass.  Where kernels.accuracy.row_reading_kernel
    # applies, A's three reads are one launch whose later walks hit L2 in part: the traffic stays
    # a measure of the work, and each record's fitted efficiency says how fast it runs (both
    # records were taken with A's reading in one launch).
    return (m * k + k * n) * (3 * 8 + 1) + m * n * 2 * 4


# The plan's int8 GEMM of codes (ozaki.accuracy).
_CODE_GEMMS = 1


def predict(profile: Profile, m: int, k: int, n: int, *, digits: str, planes: int, moduli: int, batch: int = 1,
            complex_blocks: int = 0) -> Prediction | None:
    """Seconds per stage of the emulated M×K×N product, or of a ``batch`` of them in one call,
    with ``planes`` plane GEMMs over ``moduli`` moduli in ``digits`` ("reference": float64 GEMMs
    of residues); None where the device has no rate for those digits.  ``complex_blocks`` (3 or
    4; 0 for a real product): the M×K×N product is a complex product's real embedding, whose
    plane GEMMs form that many of its four K/2×N/2 blocks."""
    rate = profile.fp64 if digits == "reference" else profile.rates.get(digits)
    # The code GEMM is int8; a device without int8 units worth using (the B300) is taken at its
    # fastest tensor unit, where a port would run it.
    code_rate = profile.rates.get("int8") or max(r for r in profile.rates.values() if r is not None)
    if rate is None:
        return None
    bandwidth = profile.bandwidth
    fixed = profile.overhead
    share = complex_blocks / 4 if complex_blocks else 1
    return Prediction(
        plan=batch * (_plan_traffic(m, k, n) / (bandwidth * profile.plan_efficiency)
                      + _CODE_GEMMS * 2 * m * n * k / code_rate) + fixed.get("plan", 0.0),
        encode=batch * _encode_traffic(m, k, n, planes, PLANE_BYTES[digits]) / (bandwidth * profile.encode_efficiency)
        + fixed.get("encode", 0.0),
        products=batch * (share * planes * 2 * m * n * k / rate + moduli * m * n * RESIDUE_BYTES / bandwidth)
        + fixed.get("products", 0.0),
        decode=batch * _decode_traffic(m, n, moduli) / (bandwidth * profile.decode_efficiency)
        + fixed.get("decode", 0.0),
        overlap=fixed.get("overlap", 0.0),
    )


def dgemm_seconds(profile: Profile, m: int, k: int, n: int, batch: int = 1) -> float:
    """Native float64 matmul of a ``batch`` of M×K×N products (cuBLAS's strided-batched DGEMM)."""
    return batch * 2 * m * n * k / profile.fp64


def zgemm_seconds(profile: Profile, m: int, k: int, n: int, batch: int = 1) -> float:
    """Native complex128 matmul of a ``batch`` of complex M×K×N products: ZGEMM's four real
    products.  They take the DGEMM rate until recorded ZGEMM runs fit one of its own: no run of
    :data:`RECORDS` times ZGEMM (``python -m ozaki bench --dtype complex128`` does)."""
    return 4 * dgemm_seconds(profile, m, k, n, batch)


# The emulation is chosen where it is predicted this much faster than DGEMM or more.  On the
# record the predicted ratio of the two times errs toward the emulation by at most 4% from
# 7168³ up, where they cross and runs of one shape on one machine differ by several percent
# (benchmarks/RESULTS.md, "2026-12-03 19:10–19:27 UTC, one H200 per run: the cost model on a
# sweep of sizes; `auto` emulates from 8192³"), and machines differ by a few percent more: a
# closer call could go either way, and engine="auto" should never be the slower of the two by
# more than a few percent.
EMULATION_MARGIN = 0.95


def verdict(profile: Profile, m: int, k: int, n: int, *, digits: str, planes: int, moduli: int, batch: int = 1,
            complex_blocks: int = 0) -> Verdict | None:
    """Whether the native product is taken: unless the emulation (:func:`predict`, the same
    arguments) is predicted faster by :data:`EMULATION_MARGIN`; None where the model has no
    rate for ``digits`` on this device (it then makes no claim).  The native product is DGEMM,
    or, for a complex product's embedding (``complex_blocks``), ZGEMM of the complex
    M×K/2×N/2 product."""
    emulated = predict(profile, m, k, n, digits=digits, planes=planes, moduli=moduli, batch=batch,
                       complex_blocks=complex_blocks)
    if emulated is None:
        return None
    native = (zgemm_seconds(profile, m, k // 2, n // 2, batch) if complex_blocks
              else dgemm_seconds(profile, m, k, n, batch))
    return Verdict(emulated.total > EMULATION_MARGIN * native, emulated, native, profile.name, batch,
                   complex_blocks > 0)


# The emulation's workspace: at most twice the bytes of its float64 A, B and C.
WORKSPACE_BUDGET = 2
# The plane GEMM's residues of the catalog's moduli (all at most 2^8): uint8.
RESIDUE_BYTES = 1
# The share of the budget the blocks are planned to: the allocator rounds blocks up and small
# tensors (shifts, tables) live beside the modelled ones.
PLANNED_SHARE = 0.98
# Block heights are multiples of the plane GEMM's tile height (128 or 256 rows in
# kernels.products.CONFIGS): only the last block of a product ends in a partial tile.
ROW_GRANULE = 128
# Where no block height meets the budget (B's planes alone past it), the blocks this many:
# each block costs launches, syncs and a check of all of B's planes, so blocks of one granule
# would cost far more time than the little memory they save (benchmarks/RESULTS.md,
# "2026-11-29 19:50 UTC, one H200 (issues 4, 6): exact CRT sign, float encode, streamed fused
# path, native fallback").
BLOCKS_PAST_BUDGET = 8


def _phases(k: int, n: int, *, digits: str, planes: int, moduli: int,
            complex_blocks: int = 0) -> tuple[tuple[float, float], ...]:
    """(bytes held throughout, bytes per row of the block) of the two peaks of one block of
    the streamed product.  B's encoded planes (one byte per value) live throughout.  During
    the plane GEMM: the block's planes of A, the operand copies the GEMM converts both sides
    to (none for int8 planes, which it reads in place; E4M3 or packed E2M1 otherwise) and
    the block's residues, one byte per entry and modulus (``kernels.products.residue_dtype``
    of the catalog's moduli, all at most 2^8).  During the decode: the residues (it writes
    the block's rows of C in place).

    A complex product's embedding (K and N twice the complex ones) in Karatsuba's three
    products (``complex_blocks`` 3) holds three K/2-wide operands where the embedding holds
    two halves: B's planes 3/4 of the embedding's, a row's planes and residues 3/2."""
    copy = 0.0 if digits == "int8" else PLANE_BYTES[digits]
    held, per_row = (0.75, 1.5) if complex_blocks == 3 else (1.0, 1.0)
    residues = RESIDUE_BYTES * moduli * n * per_row
    return (
        (planes * k * n * (1.0 + copy) * held, planes * k * (1.0 + copy) * per_row + residues),
        (planes * k * n * held, residues),
    )


def stream_rows(m: int, k: int, n: int, *, digits: str, planes: int, moduli: int, complex_blocks: int = 0) -> int:
    """Rows of A per block of the fused path, which streams over blocks of A's rows against
    all of B's planes: the most, in multiples of :data:`ROW_GRANULE` and spread evenly over
    the blocks, whose peak (:func:`workspace_bytes`) stays within :data:`WORKSPACE_BUDGET`
    times the bytes of A, B and C; :data:`BLOCKS_PAST_BUDGET` blocks where no height does
    (B's planes alone past the budget: very wide B, or many planes); all of A where all fits.
    The reference engine does not stream: m."""
    if digits == "reference":
        return m
    budget = PLANNED_SHARE * WORKSPACE_BUDGET * 8 * (m * k + k * n + m * n)
    fitting = min((budget - fixed) // per_row for fixed, per_row in _phases(k, n, digits=digits, planes=planes,
                                                                             moduli=moduli,
                                                                             complex_blocks=complex_blocks))
    most = int(fitting) // ROW_GRANULE * ROW_GRANULE
    if most < ROW_GRANULE:
        most = -(-m // (BLOCKS_PAST_BUDGET * ROW_GRANULE)) * ROW_GRANULE
    if most >= m:
        return max(m, 1)
    # As many blocks as the budget needs, each as low as that allows: a lower peak, and no
    # runt block at the end.
    blocks = -(-m // most)
    return -(-m // (blocks * ROW_GRANULE)) * ROW_GRANULE


def workspace_bytes(m: int, k: int, n: int, *, digits: str, planes: int, moduli: int,
                    block_rows: int | None = None, complex_blocks: int = 0) -> int:
    """Device memory the emulated path holds at its peak beyond A, B and C, streamed over
    blocks of ``block_rows`` rows of A (default: :func:`stream_rows`, the pipeline's choice):
    the larger of the plane GEMM's and the decode's peak of a block (see :func:`_phases`)."""
    rows = (stream_rows(m, k, n, digits=digits, planes=planes, moduli=moduli, complex_blocks=complex_blocks)
            if block_rows is None else block_rows)
    return round(max(fixed + per_row * min(rows, m)
                     for fixed, per_row in _phases(k, n, digits=digits, planes=planes, moduli=moduli,
                                                   complex_blocks=complex_blocks)))


def _fitted(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(speed, fixed) of seconds = fixed + work / speed through the (work, seconds) points, by least
    squares of the relative error Σ ((fixed + work/speed) / t − 1)²: the normal equations of a
    linear fit weighted by 1/t²."""
    sums = [sum(w**i / t**2 for w, t in points) for i in range(3)]
    targets = [sum(w**i / t for w, t in points) for i in range(2)]
    determinant = sums[0] * sums[2] - sums[1] ** 2
    fixed = (targets[0] * sums[2] - targets[1] * sums[1]) / determinant
    slope = (sums[0] * targets[1] - sums[1] * targets[0]) / determinant
    return 1 / slope, fixed


@cache
def _fit(key: str) -> tuple[float, float, dict, float, float, float]:
    """(DGEMM rate, int8 plane rate, fixed seconds per stage and the overlap, plan, encode and
    decode efficiency) from the record of device ``key`` (:data:`RECORDS`), each by least squares
    of the relative error over every recorded call: each stage as a fixed part plus its traffic
    (for the products, its arithmetic) at one rate, fitted to the stage's times; the plan's traffic
    is its time less the code GEMM at the products' rate; the overlap, one constant, fitted to the
    whole calls' times less the stages' predictions; DGEMM, one rate, to its times (cuBLAS runs
    slower on the larger shapes, held to the power cap: no one shape's rate stands for the rest).
    The model aims at the measured times (benchmarks/RESULTS.md compares it with each run), neither
    flattering the emulation nor DGEMM; the tests hold every recorded call to a fifth of its time."""
    device = DEVICES[key]
    runs = {shape: _RecordedRun(*entry) for shape, entry in RECORDS[key].items()}

    def through(work, seconds) -> tuple[float, float]:
        # Both take (m, k, n) and the recorded run.
        return _fitted([(work(*shape, run), seconds(*shape, run)) for shape, run in runs.items()])

    rate, products = through(lambda m, k, n, run: run.moduli * 2 * m * k * n,
                             lambda m, k, n, run: run.products - run.moduli * m * n * RESIDUE_BYTES / device.bandwidth)
    plan, plan_fixed = through(lambda m, k, n, run: _plan_traffic(m, k, n),
                               lambda m, k, n, run: run.plan - _CODE_GEMMS * 2 * m * k * n / rate)
    encode, encode_fixed = through(lambda m, k, n, run: _encode_traffic(m, k, n, run.moduli, 1.0),
                                   lambda m, k, n, run: run.encode)
    decode, decode_fixed = through(lambda m, k, n, run: _decode_traffic(m, n, run.moduli),
                                   lambda m, k, n, run: run.decode)
    fixed = {"plan": plan_fixed, "encode": encode_fixed, "products": products, "decode": decode_fixed}
    efficiencies = plan / device.bandwidth, encode / device.bandwidth, decode / device.bandwidth
    stages = Profile("fit", device.fp64, {"int8": rate}, device.bandwidth, *efficiencies, fixed, "")
    # The overlap o minimises Σ ((S − o) / t − 1)² for the stages' predicted sum S and the call's t.
    calls = [(predict(stages, *shape, digits="int8", planes=run.moduli, moduli=run.moduli).total, run.call)
             for shape, run in runs.items()]
    fixed["overlap"] = sum((s / t - 1) / t for s, t in calls) / sum(1 / t**2 for _, t in calls)
    # DGEMM: seconds = 2MNK / rate, 1/rate minimising Σ (w / (rate·t) − 1)² over the record.
    dgemm = [(2 * m * k * n / run.dgemm) for (m, k, n), run in runs.items()]
    dgemm_rate = sum(v**2 for v in dgemm) / sum(dgemm)
    return dgemm_rate, rate, fixed, *efficiencies


@cache
def _profile(key: str) -> Profile:
    device = DEVICES[key]
    # A device without a record of its own is projected from the H200's.
    measured = key if key in RECORDS else "h200"
    reference = DEVICES[measured]
    dgemm_rate, rate, fixed, plan, encode, decode = _fit(measured)
    # The measured fraction of the datasheet rate, carried to this device's datasheet rates (every
    # digit set at int8's measured fraction: the auto engine runs int8 plans only).
    tensor = rate / reference.rates["int8"]
    fp64 = dgemm_rate / reference.fp64
    calibration = ("measured (benchmarks/RESULTS.md)" if key in RECORDS
                   else "datasheet × H200's measured efficiencies")
    return Profile(
        name=device.name, fp64=fp64 * device.fp64,
        rates={d: None if r is None else tensor * r for d, r in device.rates.items()},
        bandwidth=device.bandwidth, plan_efficiency=plan, encode_efficiency=encode, decode_efficiency=decode,
        overhead=fixed,
        source=f"{device.name}: {calibration}; {device.source}",
    )  # fmt: skip


def device_key(name: str, capability: tuple[int, int]) -> str | None:
    """The key in :data:`DEVICES` of the CUDA device with this name (``torch.cuda.get_device_name``)
    and compute capability, or None for a device the table does not know."""
    return next((key for key, device in DEVICES.items()
                 if device.name in name.upper() and capability[0] == device.major), None)


def profile_for(name: str, capability: tuple[int, int]) -> Profile | None:
    """The profile of the CUDA device with this name and compute capability (:func:`device_key`),
    or None for a device the table does not know."""
    key = device_key(name, capability)
    return None if key is None else _profile(key)
