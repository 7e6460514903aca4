"""The Ozaki scheme II on one call: the read, the decision and the run, stage by stage.

:func:`prepare` reads A and B (stage 1's statistics, :mod:`ozaki.reading`), has
:mod:`ozaki.planning` decide from them, and scales the rows to the bits decided: a
:class:`Call`.  :func:`run` carries it out.  The result is the correctly rounded value of the
exact product of the *quantized* inputs A', B'; every engine computes the same integers and
so returns the same bits.

Where this device planned a product of the same shape and options before, the work the
pipeline would start first (B's planes and the first block's, on that plan's moduli and
rows' bits) is queued while the read is in flight, so that the device does not wait for the
host's decision; it is kept only where the decision is that same plan, so the bits are those
of a plan made without it.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import torch

from kernels import crt as crt_kernels
from kernels import residues as residue_kernels
from kernels.autotune import tuned_plane_config
from kernels.products import encoded_modular_matmul, select_operand

from . import bands, cost, planning, reading
from .agreement import ONE_DEVICE, Agreement
from .capacity import crt_capacity
from .crt import garner, round_to_float64, signed_residues
from .formats import Encoding
from .planning import Accuracy, Moduli, ProductPlan
from .products import complex_residue_products, plane_products, residue_products
from .residues import reference_moduli, residues
from .scaling import Extents, scale_rows, sides_shifts
from .timing import collecting, stage

__all__ = ["Call", "EarlyPlanes", "emulated_matmul", "fused_residues", "prepare", "run"]

log = logging.getLogger("ozaki")


def emulated_matmul(a: torch.Tensor, b: torch.Tensor, *, accuracy: Accuracy = "fp64", engine: str = "auto") -> torch.Tensor:
    """a (…, M, K) @ b (…, K, N), float64 with equal batch shapes: prepared, then run."""
    return run(prepare(a, b, accuracy, engine))


class EarlyPlanes:
    """B's planes and those of A's first block of rows (``cost.stream_rows``, as :func:`run`
    streams them), encoded with a plan's moduli and shifts (:func:`_early_encodes`), for
    :func:`run` to take once."""

    def __init__(self, moduli: Moduli, planes_b: torch.Tensor, planes_a: torch.Tensor):
        self.moduli, self._planes = moduli, (planes_b, planes_a)

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The planes of B and of the first block, let go here so that the block's memory is
        reused once its products are done (``cost.workspace_bytes``)."""
        planes, self._planes = self._planes, None
        if planes is None:
            raise RuntimeError("these early planes were taken already")
        return planes


@dataclass(frozen=True)
class Call:
    """A planned call and what :func:`run` runs it on: the operands (on the emulated path
    finite: NaN and ±inf read as 0, for the caller to overlay after, ``plan.nonfinite``); per
    product of the batch, the rows' extents and bits of A and of Bᵀ, and their shifts where
    stage 1 made them with the bits (widened "fp64" rows on CUDA); the early planes, where
    the work queued on the last plan of the shape was this plan's."""

    plan: ProductPlan
    operands: tuple[torch.Tensor, torch.Tensor]
    lines: tuple = ()
    shifts: tuple = ()
    early: EarlyPlanes | None = None


def prepare(a: torch.Tensor, b: torch.Tensor, accuracy: Accuracy = "fp64", engine: str = "auto",
            agreement: Agreement = ONE_DEVICE, *, early: bool = True, complex: str | None = None) -> Call:
    """Stage 1 and the decision for a (…, M, K) @ b (…, K, N), float64 with equal batch shapes
    on one device (validated by the frontend).  Reads the data only where the shape does not
    decide.  Where a and b are this device's shards of a product spread over a mesh,
    ``agreement`` (:mod:`ozaki.agreement`) makes every statistic the whole product's, so the
    plan is this device's share of the one-device plan.  ``early``: queue the work of the
    last plan of this shape while the read is in flight (see the module docstring).
    ``complex``: a and b are the real products of a complex one (:attr:`planning.Shape.complex`,
    made by ``ozaki.operands.complex_embedding``); they are planned and run as real products,
    which with both operands complex the torch stages multiply in Karatsuba's form."""
    shape = planning.Shape.of(a, b, agreement, complex)
    profile = planning.device_profile(a.device)
    decided = planning.plan_for_shape(shape, accuracy, engine, profile)
    if decided is not None:
        return Call(decided, (a, b))

    # 1. Read: every row's extents and bits, each side's summary.  An operand's NaN and ±inf
    # come to light in the same read; the product is then read again from zeroed operands (the
    # rare path pays the read twice, so that the common one reads the device once).
    key = (shape.m, shape.k, shape.n, engine, a.device)
    # (Not for a complex product, whose planes may take Karatsuba's layout.)
    remembered = (early and accuracy == "fp64" and agreement is ONE_DEVICE and shape.batch == 1
                  and shape.complex is None and reading.kernels_available(a.device))
    guess = _LAST_PLANS.get(key) if remembered else None
    guess = guess if guess is not None and guess.trusted else None
    pending = reading.start(a, b, accuracy, agreement)
    queued = _queue_early(a, b, pending.lines, guess) if guess is not None else None
    statistics = pending.statistics()
    fa, fb = a, b
    if statistics.nonfinite:
        fa, fb = (_zeroed(x, nonfinite) for x, nonfinite in zip((a, b), statistics.local_nonfinite))
        pending, queued = reading.start(fa, fb, accuracy, agreement), None
        statistics = dataclasses.replace(pending.statistics(), nonfinite=True)

    decided = planning.plan_for_statistics(shape, statistics, accuracy, engine, profile)

    # The rows widened to the bits the moduli pay for, with their shifts where the device makes them.
    lines, shifts, early_planes = pending.lines, (), None
    if any(decided.widen_to):
        if queued is not None and decided.widen_to == ((guess.p, guess.q),):
            (lines, shifts), early_planes = queued
            if guess.moduli is not decided.moduli or decided.bands is not None or decided.path == "native":
                early_planes = None
        else:
            lines, shifts = reading.widen(lines, decided.widen_to)
    if remembered:
        # A plan the early work cannot start on (native, banded, NaN or ±inf read) leaves none to
        # guess from: the next call of the shape then queues nothing that would be dropped.
        (widened,) = decided.widen_to
        if widened is not None and decided.path == "emulated" and decided.bands is None and not statistics.nonfinite:
            _remember(key, decided.moduli, *widened)
        else:
            _LAST_PLANS.pop(key, None)
    return Call(decided, (a, b) if decided.path == "native" else (fa, fb),
                tuple((line_a.extents, line_b.extents, line_a.bits, line_b.bits) for line_a, line_b in lines),
                shifts, early_planes)


def _zeroed(x: torch.Tensor, nonfinite: bool) -> torch.Tensor:
    """x with NaN and ±inf read as 0 (numpy's matmul places them, see ozaki.frontend)."""
    return torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) if nonfinite else x


@dataclass(frozen=True)
class _LastPlan:
    """What the next call of a shape queues its early work on: the moduli and the widened P
    and Q of its last plan (the shifts follow from them and the rows' extents).  ``trusted``:
    the plan before it was the same, or there was none; a shape whose plans change (data of
    alternating spreads) is not guessed for until one repeats, so that its calls do not all
    pay for dropped work."""

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


def _queue_early(a: torch.Tensor, b: torch.Tensor, lines: list, guess: _LastPlan) -> tuple:
    """The rows widened to the guess's P and Q, with their shifts, and the planes
    :func:`_early_encodes` makes on them, queued behind the read's copy of its summary."""
    widened = reading.widen(lines, ((guess.p, guess.q),))
    shift_a, shift_b = widened[1][0]
    return widened, _early_encodes(a.reshape(a.shape[-2:]), b.reshape(b.shape[-2:]).transpose(-1, -2), guess.moduli,
                                   shift_a, shift_b, planning.any_row_span(guess.p, guess.q))


def _early_encodes(a: torch.Tensor, bt: torch.Tensor, moduli: Moduli, shift_a: torch.Tensor, shift_b: torch.Tensor,
                   span: tuple[int, int]) -> EarlyPlanes | None:
    """What :func:`run` encodes first for A (M, K) and Bᵀ (N, K) with these moduli and shifts
    (``span`` holds every shift): B's planes and the first block's.  None where the stages are
    being timed, so that each keeps its own time."""
    if moduli.encodings is None or collecting():
        return None
    (m, k), n = a.shape, bt.shape[0]
    rows = min(_block_rows(m, k, n, moduli), m)
    # Tuned before B's planes exist, as run does.
    _plane_config(moduli.encodings, rows, n, k, a.device)
    encode = _encoder(moduli.encodings, span)
    return EarlyPlanes(moduli, encode(bt, shift_b, "b"), encode(a[:rows], shift_a[:rows], "a"))


def run(call: Call) -> torch.Tensor:
    """The product ``call`` was planned for, of its operands; non-finite entries, which an
    emulated plan read as zeros, are left for the caller to overlay (``call.plan.nonfinite``)."""
    plan, (fa, fb) = call.plan, call.operands
    if plan.path == "native":
        return torch.matmul(fa, fb)
    shape = (*fa.shape[:-1], fb.shape[-1])
    if plan.moduli is None:  # an empty product
        return torch.zeros(shape, dtype=torch.float64, device=fa.device)
    flat_a, flat_bt = fa.reshape(-1, plan.m, plan.k), fb.reshape(-1, plan.k, plan.n).transpose(-1, -2)
    fused = plan.moduli.encodings is not None and reading.kernels_available(fa.device)
    if plan.bands is None and not fused:
        return _unfused(plan.moduli, flat_a, flat_bt, call.lines, plan.slack,
                        plan.complex_blocks == 3).reshape(shape)
    # The fused path (and exponent bands) multiply a complex product's embedding as it is, four
    # K×N blocks per plane GEMM: the same integers as Karatsuba's three, so the same bits.
    if plan.batch == 1:
        # One product: its result is the output (a second M×N buffer would count against the
        # workspace budget, cost.WORKSPACE_BUDGET).
        return _product(call, 0, flat_a[0], flat_bt[0], *call.lines[0]).reshape(shape)
    if plan.bands is None and _block_rows(plan.m, plan.k, plan.n, plan.moduli) >= plan.m:
        return _fused_batch(call, flat_a, flat_bt).reshape(shape)
    # Products too large to encode whole within the workspace stream their own blocks of rows,
    # one product after another.
    out = torch.empty(shape, dtype=torch.float64, device=fa.device)
    flat_out = out.view(-1, plan.m, plan.n)
    for index in range(plan.batch):
        flat_out[index] = _product(call, index, flat_a[index], flat_bt[index], *call.lines[index])
    return out


def _product(call: Call, index: int, a: torch.Tensor, bt: torch.Tensor, extents_a: Extents,
             extents_b: Extents, bits_a: torch.Tensor, bits_b: torch.Tensor) -> torch.Tensor:
    """C = A·B for the plan's product ``index``, one finite pair, A (M, K) and Bᵀ (N, K), in
    exponent bands or, with Triton, fused; stage 1 (extents, bits and, where it made them,
    shifts per row) is the call's."""
    plan = call.plan
    if plan.bands is not None:
        return _banded(a, bt, bits_a, bits_b, plan.bands, plan.moduli, plan.slack[index])
    device, moduli = a.device, plan.moduli
    # With Triton, stages 2–5 run fused and streamed over blocks of A's rows.
    with stage("encode", device):
        # 1. Scale: A' = round(diag(2^s) A), B' = round(B diag(2^t)), |A'| ≤ 2^p − 1, |B'| ≤ 2^q − 1.
        shift_a, shift_b = call.shifts[index] if call.shifts else sides_shifts(
            (extents_a.row_max, bits_a, plan.bits_a[0]), (extents_b.row_max, bits_b, plan.bits_b[0]))
    return _fused_by_row_blocks(a, bt, shift_a, shift_b, moduli, plan.shift_span, plan.slack[index], call.early,
                                karatsuba=plan.complex_blocks == 3)


# Entries of A, B and C a batch's products bring to the torch stages at a time: each stage is
# then one call over many products, where a call per product costs its own overhead.
_BATCH_ENTRIES = 1 << 21


def _unfused(moduli: Moduli, a: torch.Tensor, bt: torch.Tensor, lines: tuple, slack: tuple[int, ...],
             complex: bool = False) -> torch.Tensor:
    """Stages 2–5 in torch for a batch, A (B, M, K) and Bᵀ (B, N, K), the lines of each product
    read by stage 1 and its decoders' ``slack``: the stages take batch dimensions, so the
    products go through them together, as many at a time as hold :data:`_BATCH_ENTRIES`
    entries.  Each entry of C is a function of its own row's and column's integers and its
    product's slack, so the bits are those of one product at a time.  ``complex``: each
    product is a complex product's real embedding that the plan multiplies in Karatsuba's
    three block products (``ProductPlan.complex_blocks``, see :func:`_scaled_product`)."""
    (batch, m, k), n = a.shape, bt.shape[1]
    if batch == 1:
        return _scaled_product(moduli, a[0], bt[0], lines[0][2], lines[0][3], slack[0], complex)
    bits_a, bits_b = (torch.stack([line[side] for line in lines]) for side in (2, 3))
    step = max(1, _BATCH_ENTRIES // max(1, m * k + k * n + m * n))
    out = torch.empty((batch, m, n), dtype=torch.float64, device=a.device)
    for start in range(0, batch, step):
        part = slice(start, start + step)
        out[part] = _scaled_product(moduli, a[part], bt[part], bits_a[part], bits_b[part], 0, complex)
    # A slack changes only results that round past ±DBL_MAX (ozaki.crt.round_to_float64): the
    # products holding one are decoded again with their own.
    for index in out.isinf().flatten(1).any(dim=1).nonzero().flatten().tolist():
        if slack[index]:
            out[index] = _scaled_product(moduli, a[index], bt[index], bits_a[index], bits_b[index], slack[index],
                                         complex)
    return out


def _scaled_product(moduli: Moduli, a: torch.Tensor, bt: torch.Tensor, bits_a: torch.Tensor,
                    bits_b: torch.Tensor, slack: int, complex: bool = False) -> torch.Tensor:
    """C = A·B, A (…, M, K) and Bᵀ (…, N, K) finite, rows keeping ``bits_a`` and ``bits_b`` bits,
    the decode saturating by ``slack`` (:func:`ozaki.crt.round_to_float64`).  ``complex``: A and
    B are a complex product's real embedding, [Ar Ai] and [[Br, Bi], [−Bi, Br]]; where the
    columns j and N/2 + j of B got the same shift, their integers are Br', −Bi' and Bi', Br'
    (rounding is odd), and the products stage forms Karatsuba's three block products instead
    of the embedding's four: the same residues, so the same bits."""
    device = a.device
    with stage("encode", device):
        # 1. Scale: A' = round(diag(2^s) A), B' = round(B diag(2^t)), |A'| ≤ 2^p − 1, |B'| ≤ 2^q − 1.
        sa, sb = scale_rows(a, bits_a), scale_rows(bt, bits_b)
        # 2. Residues: A'_i = A' mod m_i, B'_i = B' mod m_i.
        ra = residues(sa, moduli.moduli)
        rb = residues(sb, moduli.moduli).transpose(-1, -2)

    with stage("products", device):
        # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact.
        half = sb.shift.shape[-1] // 2
        if complex and torch.equal(sb.shift[..., :half], sb.shift[..., half:]):
            c = complex_residue_products(ra, rb, moduli.moduli, moduli.encodings)
        else:
            c = residue_products(ra, rb, moduli.moduli, moduli.encodings)

    with stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
        exponent = -(sa.shift[..., :, None] + sb.shift[..., None, :])
        return round_to_float64(garner(c, moduli.moduli), moduli.moduli, exponent, slack)


def _banded(a: torch.Tensor, bt: torch.Tensor, bits_a: torch.Tensor, bits_b: torch.Tensor, split: bands.Split,
            plan: Moduli, slack: int) -> torch.Tensor:
    """Stages 2–5 for products wider than every plan of the engine, in exponent bands
    (:mod:`ozaki.bands`): each band pair is one exact ``plan`` product, the pairs are added
    modulo moduli wide enough for the whole A'·B', and the sum is rounded once (saturating by
    ``slack``), so the bits are those of a single product.  Runs unfused on any device: the
    rare path."""
    (m, k), n, device = a.shape, bt.shape[0], a.device
    p, q = int(bits_a.max()), int(bits_b.max())
    # The sum's moduli: those of the reference engine for the whole product, all below 2^22.
    whole = reference_moduli(k, crt_capacity(k, p, q))
    log.debug("engine %s: p=%d q=%d K=%d past every plan: %dx%d bands of %d and %d bits, %d moduli each",
              plan.engine, p, q, k, split.count_a, split.count_b, split.width_a, split.width_b, len(plan.moduli))
    targets = torch.tensor(whole, dtype=torch.int64, device=device)[:, None, None]

    with stage("encode", device):
        # 1–2. Bands and residues: A' = Σ_i 2^(w_a·i) A'_i, B' = Σ_j 2^(w_b·j) B'_j, each band mod m.
        sa, sb = scale_rows(a, bits_a), scale_rows(bt, bits_b)
        bands_a = [bands.band(sa, split.width_a, i) for i in range(split.count_a)]
        bands_b = [bands.band(sb, split.width_b, j) for j in range(split.count_b)]
        rb = {j: residues(band, plan.moduli).transpose(-1, -2) for j, band in enumerate(bands_b) if band.mantissa.any()}
    total = torch.zeros((len(whole), m, n), dtype=torch.int64, device=device)
    for i, band_a in enumerate(bands_a):
        if not band_a.mantissa.any():
            continue
        with stage("encode", device):
            ra = residues(band_a, plan.moduli)
        for j, rb_j in rb.items():
            with stage("products", device):
                # 3. Products: C'_ij = A'_i · B'_j mod m, each exact.
                c = plane_products(ra, rb_j, plan.encodings)
            with stage("decode", device):
                # 4. Sum: A'B' ≡ Σ_ij 2^(w_a·i + w_b·j) C'_ij modulo the whole product's moduli.
                weight = torch.tensor([pow(2, split.width_a * i + split.width_b * j, r) for r in whole],
                                      dtype=torch.int64, device=device)[:, None, None]
                moved = signed_residues(garner(c, plan.moduli), plan.moduli, whole)
                total = torch.remainder(total.add_(moved.mul_(weight)), targets)

    with stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) A'B' diag(2^-t), rounded once.
        exponent = -(sa.shift[:, None] + sb.shift[None, :])
        return round_to_float64(garner(total, whole), whole, exponent, slack)


def _fused_by_row_blocks(a: torch.Tensor, bt: torch.Tensor, shift_a: torch.Tensor, shift_b: torch.Tensor,
                         plan: Moduli, span: tuple[int, int] | None, slack: int,
                         early: EarlyPlanes | None = None, *, karatsuba: bool = False) -> torch.Tensor:
    """Stages 2–5 with Triton, streamed over blocks of ``cost.stream_rows`` rows of A so that
    the workspace stays within ``cost.WORKSPACE_BUDGET`` wherever it can: B's planes are encoded once;
    each block is encoded, multiplied against all of B's planes and decoded into its rows of C.
    ``span`` holds every shift (the plan's ``shift_span``; None: their range is read from the device).
    ``slack``: the decode's (``kernels.crt.decode_residues``).  ``early``: B's planes and the
    first block's, encoded already with these moduli and shifts.

    The bits are those of one block of all rows.  Entry (i, j) is a function of s_i, t_j, row
    i of A and column j of B alone: the shifts (like p, q and the plan) come from all of A and
    B before any block; the encode is elementwise given a row's shift, so a block's planes
    are those rows of A's planes; each plane GEMM returns the exact integer
    Σ_k A'_ik·B'_kj mod m_i whatever M, tile, config or K chunk (kernels.products); and the
    decode rounds each entry from its own residues and exponents.

    ``karatsuba``: A (M, 2K') = [Ar Ai] and Bᵀ (2N', 2K') = [[Brᵀ, −Biᵀ], [Biᵀ, Brᵀ]] are a
    complex product's real embedding whose columns j and N' + j of B share their shift (the
    plan's ``complex_blocks`` is 3); each side is encoded as Karatsuba's three K'-wide
    operands (``kernels.residues.encode_planes``), multiplied as a batch of three, and the
    decode forms [P1 − P2 | P3 − P1 − P2]: the embedding's residues, so the same bits."""
    (m, k), n = a.shape, bt.shape[0]
    device, encodings = a.device, plan.encodings
    rows = _block_rows(m, k, n, plan, karatsuba)
    encode = _encoder(encodings, span)
    half_k, half_n = k // 2, n // 2

    def encode_a(block: slice) -> torch.Tensor:
        if karatsuba:  # the planes of Ar, Ai and Ar + Ai of the block's rows
            return encode(a[block].view(-1, 2, half_k).transpose(0, 1), shift_a[block].expand(2, -1), "a",
                          karatsuba=True)
        return encode(a[block], shift_a[block], "a")

    def encode_b() -> torch.Tensor:
        if karatsuba:  # the planes of Br, Bi and Br + Bi (Bᵀ's top half of columns, read in place)
            return encode(bt[:, :half_k].reshape(2, half_n, half_k), shift_b.view(2, half_n), "b", karatsuba=True)
        return encode(bt, shift_b, "b")

    if karatsuba:
        # Karatsuba's operands need one shift for both columns of a pair: checked after the
        # last decode, where the device is waited for anyway.
        unshared = shift_b[:half_n].ne(shift_b[half_n:]).any()
        # The tuner times the three block products; the early planes are the embedding's.
        config = _plane_config(encodings, min(rows, m), half_n, half_k, device)
        early = None
    else:
        # Tuned before B's planes exist: the tuner's first run times operands as large as a block's.
        config = _plane_config(encodings, min(rows, m), n, k, device)
    if early is not None and early.moduli is plan:
        # 2. Residues of B and of the first block, queued while the plan's read was in flight.
        planes_b, first_block = early.take()
    else:
        first_block = None
        with stage("encode", device):
            # 2. Residues: B'_i = B' mod m_i as each modulus' digit planes, once (Bᵀ read in place).
            planes_b = encode_b()
    # Queued behind B's encode, so that the device starts on it first.
    row_exponent, col_exponent = -shift_a, -shift_b
    c = torch.empty((m, n), dtype=torch.float64, device=device)
    flag = crt_kernels.new_flag(device)
    for start in range(0, m, rows):
        block = slice(start, start + rows)
        if first_block is not None:
            planes_a, first_block = first_block, None
        else:
            with stage("encode", device):
                # 2. Residues: A'_i = A' mod m_i for the block's rows, straight from float64.
                planes_a = encode_a(block)
        with stage("products", device):
            # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact, all moduli in one launch.
            block_residues = encoded_modular_matmul(planes_a, planes_b, encodings, config=config)
        # Each block's planes and residues are let go as soon as used, so that the next
        # block reuses their memory: the peak cost.workspace_bytes models.
        del planes_a
        with stage("decode", device):
            # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
            crt_kernels.decode_residues(block_residues, plan.moduli, row_exponent[block], col_exponent, out=c[block],
                                        flag=flag, slack=slack, karatsuba=karatsuba)
        del block_residues
    # The decodes' checks (the capacity the plan guaranteed), read once, after the last block.
    crt_kernels.raise_for_flag(flag)
    if karatsuba and bool(unshared):
        raise RuntimeError("a complex product planned in Karatsuba's form has columns j and N + j of B scaled by "
                           "different shifts: its plan should have kept the embedding's four blocks")
    return c


def _fused_batch(call: Call, a: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
    """Stages 2–5 with Triton for a batch whose products each fit the workspace whole, A (B, M, K)
    and Bᵀ (B, N, K): every stage is one launch over the whole batch (the products a grid
    dimension), so their count does not grow with B, and the workspace, proportional to the
    batch as A, B and C are, stays within ``cost.WORKSPACE_BUDGET`` as one product's does.

    The bits are each product's alone: its shifts are its own rows' (stage 1), its planes an
    elementwise function of them, its residues exact integers of its own planes, and its decode
    takes its own column exponents and slack (``kernels.crt.decode_residues``)."""
    plan = call.plan
    (batch, m, k), n, device, moduli = a.shape, bt.shape[1], a.device, plan.moduli
    config = _plane_config(moduli.encodings, m, n, k, device)
    encode = _encoder(moduli.encodings, plan.shift_span)
    with stage("encode", device):
        # 1. Scale: A' = round(diag(2^s) A), B' = round(B diag(2^t)), |A'| ≤ 2^p − 1, |B'| ≤ 2^q − 1.
        shift_a, shift_b = _batch_shifts(call)
        # 2. Residues: A'_i = A' mod m_i, B'_i = B' mod m_i as digit planes (Bᵀ read in place).
        planes_a, planes_b = encode(a, shift_a, "a"), encode(bt, shift_b, "b")
    with stage("products", device):
        # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact, all moduli and products in one launch.
        residues = encoded_modular_matmul(planes_a, planes_b, moduli.encodings, config=config)
    del planes_a, planes_b
    with stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
        c = torch.empty((batch, m, n), dtype=torch.float64, device=device)
        crt_kernels.decode_residues(residues.view(len(moduli.moduli), batch * m, n), moduli.moduli,
                                    -shift_a.reshape(-1), -shift_b, out=c.view(batch * m, n), slack=plan.slack)
    return c


def _batch_shifts(call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """Each product's row shifts of A and of Bᵀ, (B, M) and (B, N): stage 1's where it made them,
    else from its lines' extents and bits in one launch for the batch."""
    if call.shifts:
        return tuple(torch.stack(side) for side in zip(*call.shifts))
    plan = call.plan
    row_max_a, row_max_b, bits_a, bits_b = (torch.stack(side) for side in zip(
        *((extents_a.row_max, extents_b.row_max, line_a, line_b) for extents_a, extents_b, line_a, line_b
          in call.lines)))
    return sides_shifts((row_max_a, bits_a, plan.bits_a[0]), (row_max_b, bits_b, plan.bits_b[0]))


def fused_residues(a: torch.Tensor, bt: torch.Tensor, shift_a: torch.Tensor, shift_b: torch.Tensor,
                   plan: Moduli) -> torch.Tensor:
    """Stages 2–3 with Triton, all rows at once, stopping before the decode: the residues
    C'_i = A'_i · B'_i mod m_i, ``[len(plan.moduli), M, N]`` in [0, m_i) of
    ``kernels.products.residue_dtype``, for callers that combine residues of several products
    before one decode (a split K sums them over ranks, ``ozaki.distributed``).  ``a`` is A
    (M, K), ``bt`` Bᵀ (N, K), the shifts those of stage 1."""
    (m, k), n = a.shape, bt.shape[0]
    config = _plane_config(plan.encodings, m, n, k, a.device)
    with stage("encode", a.device):
        # 2. Residues: A'_i = A' mod m_i, B'_i = B' mod m_i as digit planes, straight from float64.
        encode = _encoder(plan.encodings, residue_kernels.shift_range(shift_a, shift_b))
        planes_a, planes_b = encode(a, shift_a, "a"), encode(bt, shift_b, "b")
    with stage("products", a.device):
        # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact, all moduli in one launch.
        return encoded_modular_matmul(planes_a, planes_b, plan.encodings, config=config)


def _block_rows(m: int, k: int, n: int, moduli: Moduli, karatsuba: bool = False) -> int:
    """Rows of A per block of the fused path (``cost.stream_rows``)."""
    return cost.stream_rows(m, k, n, digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli),
                            complex_blocks=3 if karatsuba else 0)


def _encoder(encodings: tuple[Encoding, ...], span: tuple[int, int] | None):
    """``encode_planes`` for the operands of one product whose shifts lie in ``span`` (None:
    each call reads their range), never reading the device after a launch: the plan's operands
    are finite (ozaki.planning zeroes NaN and ±inf, which the frontend overlays after).  Those
    :func:`_early_encodes` takes before the read may not be; a plan that finds NaN or ±inf drops
    their planes (the encode reads such an entry as 0, so it stays in bounds)."""
    return lambda x, shift, side, karatsuba=False: residue_kernels.encode_planes(
        x, shift, encodings, side, span=span, known_finite=True, karatsuba=karatsuba)


def _plane_config(encodings: tuple[Encoding, ...], m: int, n: int, k: int, device: torch.device):
    """The plane GEMMs' config for [planes, m, K] × [planes, n, K].  The tuner times only
    configurations the bitwise checker proves equivalent, so the choice never changes a bit;
    the encodings bound every plane product."""
    return tuned_plane_config(
        select_operand(encodings[0].digits, device), m, n, k, [len(e.planes) for e in encodings],
        max(e.max_plane_product for e in encodings), device, moduli=[e.modulus for e in encodings],
    )
