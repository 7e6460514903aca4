"""The Ozaki scheme II on one pair of finite float64 matrices: the algorithm, stage by stage.

The result is the correctly rounded value of the exact product of the *quantized* inputs
A', B'; every engine computes the same integers and so returns the same bits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Union

import torch

from . import catalog
from .crt import garner, round_to_float64
from .formats import Encoding
from .products import direct_products, plane_products
from .residues import reference_moduli, residues
from .scaling import exact_bits, fixed_bits, row_shifts, scale_rows

__all__ = ["ENGINES", "Moduli", "choose_moduli", "emulated_matmul", "row_bits", "stage_times"]

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


def row_bits(x: torch.Tensor, accuracy: Accuracy) -> torch.Tensor:
    """Bits kept per row of x for the requested accuracy (see :mod:`ozaki.scaling`)."""
    if accuracy in ("fp64", "exact"):
        # The fp64 target needs each row's lossless width (see scaling.exact_bits).
        return exact_bits(x)
    return fixed_bits(x, accuracy)


def _plan_moduli(digits: str, min_product: int) -> Moduli | None:
    for plan in catalog.plans_for(digits):
        if plan.capacity > min_product:
            encodings = tuple(catalog.encoding(name) for _, name in plan.moduli)
            return Moduli(tuple(m for m, _ in plan.moduli), encodings, digits)
    return None


def choose_moduli(engine: str, k: int, min_product: int, device: torch.device) -> Moduli:
    """Moduli with ∏m > min_product for the engine; ``auto`` takes the fastest exact engine
    the device has (a plan engine on CUDA, the float64 reference on the CPU)."""
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
    """C = A·B for finite float64 a (M, K) and b (K, N), K ≥ 1, on a's device."""
    k, device = a.shape[-1], a.device
    bt = b.transpose(-1, -2)
    fused = False

    with _stage("encode", device):
        # 1. Scale: A' = round(diag(2^s) A), B' = round(B diag(2^t)), |A'| ≤ 2^p, |B'| ≤ 2^q.
        bits_a, bits_b = row_bits(a, accuracy), row_bits(bt, accuracy)
        p = int(bits_a.max()) if bits_a.numel() else 0
        q = int(bits_b.max()) if bits_b.numel() else 0

        # |A'B'| ≤ K·2^p·2^q; the CRT recovers it exactly when ∏m > 2·K·2^p·2^q, and one more
        # bit of capacity lets the decode read the sign from a float64 estimate (crt.signed_limbs).
        plan = choose_moduli(engine, k, 4 * k << (p + q), device)
        log.debug("engine %s: p=%d q=%d K=%d, %d moduli", plan.engine, p, q, k, len(plan.moduli))

        # 2. Residues: A'_i = A' mod m_i, B'_i = B' mod m_i — with Triton, fused from the
        #    float64 input straight to each modulus' digit planes, one pass per operand.
        fused = plan.encodings is not None and _kernels_available(device)
        if fused:
            shift_a, shift_b = row_shifts(a, bits_a), row_shifts(bt, bits_b)
            planes_a, planes_b = _encode_planes(a, bt, bits_a, bits_b, plan.encodings)
        else:
            sa, sb = scale_rows(a, bits_a), scale_rows(bt, bits_b)
            shift_a, shift_b = sa.shift, sb.shift
            ra = residues(sa, plan.moduli)
            rb = residues(sb, plan.moduli).transpose(-1, -2)

    with _stage("products", device):
        # 3. Products: C'_i = A'_i · B'_i mod m_i, each exact.
        if fused:
            c = _grouped_plane_products(planes_a, planes_b, plan.encodings)
        elif plan.encodings is None:
            c = direct_products(ra, rb, plan.moduli)
        else:
            c = plane_products(ra, rb, plan.encodings)

    with _stage("decode", device):
        # 4–5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once.
        if fused:
            from kernels.decode import decode_residues  # noqa: PLC0415

            return decode_residues(c, plan.moduli, -shift_a, -shift_b)
        exponent = -(shift_a[..., :, None] + shift_b[..., None, :])
        return round_to_float64(garner(c, plan.moduli), plan.moduli, exponent)


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


def _encode_planes(a, bt, bits_a, bits_b, encodings):
    # Triton is needed on this path only.
    from kernels.encode import encode_planes  # noqa: PLC0415

    return encode_planes(a, bits_a, encodings, "a"), encode_planes(bt.contiguous(), bits_b, encodings, "b")


def _grouped_plane_products(planes_a, planes_b, encodings: tuple[Encoding, ...]) -> torch.Tensor:
    from kernels.autotune import tuned_plane_config  # noqa: PLC0415
    from kernels.modular import grouped_modular_matmul, select_operand  # noqa: PLC0415

    groups, start = [], 0
    for encoding in encodings:
        stop = start + len(encoding.planes)
        coefficients = [plane.coefficient for plane in encoding.planes]
        groups.append((planes_a[start:stop], planes_b[start:stop], coefficients, encoding.modulus))
        start = stop
    # The tuner times only configurations the bitwise checker proves equivalent, so the
    # choice never changes a bit; the encodings bound every plane product.
    digits, device = encodings[0].digits, planes_a.device
    (m, k), n = planes_a.shape[-2:], planes_b.shape[-2]
    config = tuned_plane_config(
        select_operand(digits, device), m, n, k, [len(e.planes) for e in encodings],
        max(e.max_plane_product for e in encodings), device, moduli=[e.modulus for e in encodings],
    )
    # Residues below 2^31 fit int32: half the memory of the default int64 for the same bits.
    return grouped_modular_matmul(groups, digits=digits, config=config, out_dtype=torch.int32)
