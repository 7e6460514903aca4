"""The Ozaki scheme II on one pair of finite float64 matrices: the algorithm, stage by stage.

The result is the correctly rounded value of the exact product of the *quantized* inputs
A', B'; every engine computes the same integers and so returns the same bits.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Union

import torch

from . import bands, catalog, cost
from .crt import garner, round_to_float64, signed_residues
from .formats import Encoding
from .products import direct_products, plane_products
from .residues import crt_capacity, has_capacity, reference_moduli, residues
from .scaling import Extents, exact_bits_of, fixed_bits_of, row_extents, scale_rows, shifts_of

__all__ = ["ENGINES", "Moduli", "choose_moduli", "emulated_matmul", "native_verdict", "prefers_native", "row_bits",
           "stage_times"]

log = logging.getLogger("ozaki")

Accuracy = Union[str, int]
PLAN_ENGINES = ("int8", "fp8", "fp4")
ENGINES = ("auto", "reference", *PLAN_ENGINES)


@dataclass(frozen=True)
class Moduli:
    """The moduli of one product and, for a plan engine, the encoding of each."""

    moduli: tuple[int, ...]
    encodings: tuple[Encoding, ...] | None  # None: direct float64 products
    engine: str

    @property
    def planes(self) -> int:
        """Plane GEMMs per product: one per modulus for direct products."""
        return len(self.moduli) if self.encodings is None else sum(len(e.planes) for e in self.encodings)


def row_bits(x: torch.Tensor, accuracy: Accuracy) -> torch.Tensor:
    """Bits kept per row of x for the requested accuracy (see :mod:`ozaki.scaling`)."""
    return _bits_of(row_extents(x), accuracy)


def _bits_of(extents: Extents, accuracy: Accuracy) -> torch.Tensor:
    if accuracy in ("fp64", "exact"):
        # The fp64 target needs each row's lossless width (see scaling.exact_bits).
        return exact_bits_of(extents)
    return fixed_bits_of(extents, accuracy)


def _plan_moduli(digits: str, min_product: int) -> Moduli | None:
    for plan in catalog.plans_for(digits):
        if has_capacity(plan.capacity, min_product):
            encodings = tuple(catalog.encoding(name) for _, name in plan.moduli)
            return Moduli(tuple(m for m, _ in plan.moduli), encodings, digits)
    return None


def choose_moduli(engine: str, k: int, min_product: int, device: torch.device) -> Moduli:
    """Moduli with ∏m > min_product for the engine; ``auto`` takes the fastest exact engine
    the device has: an int8 plan on CUDA, the float64 reference on the CPU, where one calls
    ozaki for its exactness (numpy.matmul is the DGEMM there).  Whether ``auto`` emulates at
    all is :func:`prefers_native`'s call."""
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


def emulated_matmul(a: torch.Tensor, b: torch.Tensor, *, accuracy: Accuracy = "fp64", engine: str = "auto") -> torch.Tensor:
    """C = A·B for finite float64 a (M, K) and b (K, N), K ≥ 1, on a's device; native float64
    matmul instead where :func:`prefers_native` says so for the plan these inputs need."""
    k, device = a.shape[-1], a.device
    bt = b.transpose(-1, -2)

    with _stage("encode", device):
        # 1. Scale: A' = round(diag(2^s) A), B' = round(B diag(2^t)), |A'| ≤ 2^p − 1, |B'| ≤ 2^q − 1.
        extents_a, extents_b = _extents(a), _extents(bt)
        bits_a, bits_b = _bits_of(extents_a, accuracy), _bits_of(extents_b, accuracy)
        p = int(bits_a.max()) if bits_a.numel() else 0
        q = int(bits_b.max()) if bits_b.numel() else 0

    # |A'B'| ≤ K·(2^p − 1)(2^q − 1); the CRT recovers it exactly, sign included, when
    # ∏m > 2·K·(2^p − 1)(2^q − 1): the capacity a plan advertises for k_max and input_bits.
    capacity = crt_capacity(k, p, q)
    if engine in PLAN_ENGINES and _plan_moduli(engine, capacity) is None:
        # Wider than every plan of the engine: a sum of band products (ozaki.bands).
        return _banded(a, bt, bits_a, bits_b, engine)
    plan = choose_moduli(engine, k, capacity, device)
    log.debug("engine %s: p=%d q=%d K=%d, %d moduli", plan.engine, p, q, k, len(plan.moduli),
              extra={"ozaki_plan": plan})  # read by the bench for its model columns
    if prefers_native(a.shape[0], k, b.shape[1], accuracy, engine, device, plan, f"rows of p={p}, q={q} bits"):
        return torch.matmul(a, b)

    # With Triton, stages 2–5 run fused and streamed over blocks of A's rows.
    fused = plan.encodings is not None and _kernels_available(device)
    with _stage("encode", device):
        if fused:
            shift_a, shift_b = shifts_of(extents_a.row_max, bits_a), shifts_of(extents_b.row_max, bits_b)
        else:
            # 2. Residues: A'_i = A' mod m_i, B'_i = B' mod m_i.
            sa, sb = scale_rows(a, bits_a), scale_rows(bt, bits_b)
            shift_a, shift_b = sa.shift, sb.shift
            ra = residues(sa, plan.moduli)
            rb = residues(sb, plan.moduli).transpose(-1, -2)
    if fused:
        return _fused_by_row_blocks(a, bt, shift_a, shift_b, plan)

    with _stage("products", device):
        # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact.
        if plan.encodings is None:
            c = direct_products(ra, rb, plan.moduli)
        else:
            c = plane_products(ra, rb, plan.encodings)

    with _stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
        exponent = -(shift_a[..., :, None] + shift_b[..., None, :])
        return round_to_float64(garner(c, plan.moduli), plan.moduli, exponent)


def _banded(a: torch.Tensor, bt: torch.Tensor, bits_a: torch.Tensor, bits_b: torch.Tensor, engine: str) -> torch.Tensor:
    """Stages 2–5 for products wider than every plan of ``engine``, in exponent bands
    (:mod:`ozaki.bands`): each band pair is one exact plan product, the pairs are added
    modulo moduli wide enough for the whole A'·B', and the sum is rounded once, so the bits
    are those of a single product.  Runs unfused on any device: the rare path."""
    (m, k), n, device = a.shape, bt.shape[0], a.device
    p, q = int(bits_a.max()), int(bits_b.max())
    split = bands.split(k, p, q, [(plan.capacity, plan.products) for plan in catalog.plans_for(engine)])
    plan = choose_moduli(engine, k, crt_capacity(k, split.width_a, split.width_b), device)
    # The sum's moduli: those of the reference engine for the whole product, all below 2^22.
    whole = reference_moduli(k, crt_capacity(k, p, q))
    log.debug("engine %s: p=%d q=%d K=%d past every plan: %dx%d bands of %d and %d bits, %d moduli each",
              engine, p, q, k, split.count_a, split.count_b, split.width_a, split.width_b, len(plan.moduli))
    targets = torch.tensor(whole, dtype=torch.int64, device=device)[:, None, None]

    with _stage("encode", device):
        # 1–2. Bands and residues: A' = Σ_i 2^(w_a·i) A'_i, B' = Σ_j 2^(w_b·j) B'_j, each band mod m.
        sa, sb = scale_rows(a, bits_a), scale_rows(bt, bits_b)
        bands_a = [bands.band(sa, split.width_a, i) for i in range(split.count_a)]
        bands_b = [bands.band(sb, split.width_b, j) for j in range(split.count_b)]
        rb = {j: residues(band, plan.moduli).transpose(-1, -2) for j, band in enumerate(bands_b) if band.mantissa.any()}
    total = torch.zeros((len(whole), m, n), dtype=torch.int64, device=device)
    for i, band_a in enumerate(bands_a):
        if not band_a.mantissa.any():
            continue
        with _stage("encode", device):
            ra = residues(band_a, plan.moduli)
        for j, rb_j in rb.items():
            with _stage("products", device):
                # 3. Products: C'_ij = A'_i · B'_j mod m, each exact.
                c = plane_products(ra, rb_j, plan.encodings)
            with _stage("decode", device):
                # 4. Sum: A'B' ≡ Σ_ij 2^(w_a·i + w_b·j) C'_ij modulo the whole product's moduli.
                weight = torch.tensor([pow(2, split.width_a * i + split.width_b * j, r) for r in whole],
                                      dtype=torch.int64, device=device)[:, None, None]
                moved = signed_residues(garner(c, plan.moduli), plan.moduli, whole)
                total = torch.remainder(total.add_(moved.mul_(weight)), targets)

    with _stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) A'B' diag(2^-t), rounded once.
        exponent = -(sa.shift[:, None] + sb.shift[None, :])
        return round_to_float64(garner(total, whole), whole, exponent)


# The width of one float64 significand.  Under accuracy="fp64" a row keeps its lossless width:
# at least 53 bits wherever it holds a float64 that uses its whole significand, as general
# float64 data does.  The plan for 53-bit rows is thus the cheapest such data can get, and
# when even it is predicted slower than DGEMM the data need not be read to know.
_SIGNIFICAND_BITS = 53


def native_verdict(m: int, k: int, n: int, accuracy: Accuracy, engine: str, device: torch.device,
                   plan: Moduli | None = None) -> cost.Verdict | None:
    """The cost model's verdict (:mod:`ozaki.cost`) on emulating the M×K×N product with ``plan``
    (default: the plan for rows of 53 bits) against native DGEMM, or None where native is no
    option: only ``engine="auto"`` with ``accuracy="fp64"`` may run native float64 matmul, as
    "exact", a number of bits and an explicit engine promise the emulated bits; only on a
    device with a cost profile (on the CPU auto is the reference engine, see choose_moduli)."""
    if engine != "auto" or accuracy != "fp64" or min(m, k, n) < 1:
        return None
    profile = _cost_profile(device)
    if profile is None:
        return None
    if plan is None:
        plan = choose_moduli("auto", k, crt_capacity(k, _SIGNIFICAND_BITS, _SIGNIFICAND_BITS), device)
    return cost.verdict(profile, m, k, n, digits=plan.engine, planes=plan.planes, moduli=len(plan.moduli))


def prefers_native(m: int, k: int, n: int, accuracy: Accuracy, engine: str, device: torch.device,
                   plan: Moduli | None = None, basis: str = f"rows of {_SIGNIFICAND_BITS} bits") -> bool:
    """Whether to compute the M×K×N product with native float64 matmul (:func:`native_verdict`),
    said in a debug log either way with the predicted times; ``basis`` names what the plan
    was chosen for."""
    verdict = native_verdict(m, k, n, accuracy, engine, device, plan)
    if verdict is None:
        return False
    log.debug("%s for %dx%dx%d (plan for %s): %s", "native float64 matmul" if verdict.native else "emulating",
              m, k, n, basis, verdict, extra={"ozaki_verdict": verdict})
    return verdict.native


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


_timing = threading.local()


@contextlib.contextmanager
def stage_times():
    """Collects seconds per stage ("encode", "products", "decode") of the products run inside,
    on this thread; CUDA is synchronized at each stage boundary only while collecting."""
    times: dict[str, float] = {}
    outer = getattr(_timing, "times", None)
    _timing.times = times
    try:
        yield times
    finally:
        _timing.times = outer


@contextlib.contextmanager
def _stage(name: str, device: torch.device):
    times = getattr(_timing, "times", None)
    if times is None:
        yield
        return
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    try:
        yield
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times[name] = times.get(name, 0.0) + time.perf_counter() - start


def _kernels_available(device: torch.device) -> bool:
    """The Triton path runs on CUDA tensors.  (Triton's CPU interpreter runs it too, but one
    step per tile takes milliseconds: tests call it there on small shapes explicitly.)"""
    return device.type == "cuda"


def _extents(x: torch.Tensor) -> Extents:
    """What stage 1 reads of x's rows (:func:`ozaki.scaling.row_extents`): with Triton in one
    pass of ``kernels.scaling`` (for Bᵀ, B's columns in place: no transposed copy), the same
    integers, so the same bits, shifts, p, q and plan."""
    if not _kernels_available(x.device):
        return row_extents(x)
    from kernels.scaling import row_extents_kernel  # noqa: PLC0415  (Triton is needed on this path only)

    return row_extents_kernel(x)


def _fused_by_row_blocks(a: torch.Tensor, bt: torch.Tensor, shift_a: torch.Tensor, shift_b: torch.Tensor,
                         plan: Moduli) -> torch.Tensor:
    """Stages 2–5 with Triton, streamed over blocks of ``cost.stream_rows`` rows of A so that
    the workspace stays within issue 6's budget wherever it can: B's planes are encoded once;
    each block is encoded, multiplied against all of B's planes and decoded into its rows of C.

    The bits are those of one block of all rows.  Entry (i, j) is a function of s_i, t_j, row
    i of A and column j of B alone: the shifts (like p, q and the plan) come from all of A and
    B before any block; the encode is elementwise given a row's shift, so a block's planes
    are those rows of A's planes; each plane GEMM returns the exact integer
    Σ_k A'_ik·B'_kj mod m_i whatever M, tile, config or K chunk (kernels.products); and the
    decode rounds each entry from its own residues and exponents."""
    from kernels.crt import decode_residues  # noqa: PLC0415  (Triton is needed on this path only)
    from kernels.residues import encode_planes  # noqa: PLC0415

    (m, k), n = a.shape, bt.shape[0]
    device, encodings = a.device, plan.encodings
    rows = cost.stream_rows(m, k, n, digits=plan.engine, planes=plan.planes, moduli=len(plan.moduli))
    # Tuned before B's planes exist: the tuner's first run times operands as large as a block's.
    config = _plane_config(encodings, min(rows, m), n, k, device)
    col_exponent = -shift_b
    with _stage("encode", device):
        # 2. Residues: B'_i = B' mod m_i as each modulus' digit planes, once (Bᵀ read in place).
        planes_b = encode_planes(bt, shift_b, encodings, "b")
    c = torch.empty((m, n), dtype=torch.float64, device=device)
    for start in range(0, m, rows):
        block = slice(start, start + rows)
        with _stage("encode", device):
            # 2. Residues: A'_i = A' mod m_i for the block's rows, straight from float64.
            planes_a = encode_planes(a[block], shift_a[block], encodings, "a")
        with _stage("products", device):
            # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact, all moduli in one launch.
            block_residues = _grouped_plane_products(planes_a, planes_b, encodings, config)
        # Each block's planes and residues are let go as soon as used, so that the next
        # block reuses their memory: the peak cost.workspace_bytes models.
        del planes_a
        with _stage("decode", device):
            # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
            c[block] = decode_residues(block_residues, plan.moduli, -shift_a[block], col_exponent)
        del block_residues
    return c


def _plane_config(encodings: tuple[Encoding, ...], m: int, n: int, k: int, device: torch.device):
    """The plane GEMMs' config for [planes, m, K] × [planes, n, K].  The tuner times only
    configurations the bitwise checker proves equivalent, so the choice never changes a bit;
    the encodings bound every plane product."""
    from kernels.autotune import tuned_plane_config  # noqa: PLC0415
    from kernels.products import select_operand  # noqa: PLC0415

    return tuned_plane_config(
        select_operand(encodings[0].digits, device), m, n, k, [len(e.planes) for e in encodings],
        max(e.max_plane_product for e in encodings), device, moduli=[e.modulus for e in encodings],
    )


def _grouped_plane_products(planes_a, planes_b, encodings: tuple[Encoding, ...], config) -> torch.Tensor:
    from kernels.products import grouped_modular_matmul  # noqa: PLC0415

    # Each modulus' planes are back-to-back slices of one tensor, which the launch reads in
    # place (kernels.products._joined): no copy of the operands.
    groups, start = [], 0
    for encoding in encodings:
        stop = start + len(encoding.planes)
        coefficients = [plane.coefficient for plane in encoding.planes]
        groups.append((planes_a[start:stop], planes_b[start:stop], coefficients, encoding.modulus))
        start = stop
    # Residues below 2^31 fit int32: half the memory of the default int64 for the same bits.
    return grouped_modular_matmul(groups, digits=encodings[0].digits, config=config, out_dtype=torch.int32)
