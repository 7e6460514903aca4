"""``python -m ozaki bench``: speed and accuracy of ``ozaki.matmul`` against the native float64 (complex128) product.

Two measurement modes, one CSV schema (:data:`COLUMNS`), one row per (shape, method):

* ``--cpu`` (the default without CUDA): numpy arrays; numpy's DGEMM against ozaki.matmul at each accuracy
  (default ``fp64``, ``exact`` and 40 bits), n = 256 … 2048.
* GPU (the default with CUDA): CUDA tensors; torch's float64 matmul (cuBLAS DGEMM) against each engine at
  ``accuracy="fp64"``, square n = 1024 … 16384 and two rectangular shapes, with the peak workspace
  (``torch.cuda.max_memory_allocated``), the stage breakdown (:func:`ozaki.timing.stage_times`), and the
  plane-GEMM rates of cuBLAS INT8/FP8 that calibrate the projection.  Next to each measured stage and
  workspace: what :mod:`ozaki.cost` predicts for the plan the call used, and whether ``engine="auto"`` ran
  the emulation or native DGEMM (``path``), both from the call's plan (:func:`ozaki.explain`).

Batches and complex products go through the same rows: ``--batch B`` (or ``--shapes BxMxKxN``) times each
call on (B, M, K) @ (B, K, N) against the native batched matmul (cuBLAS strided-batched DGEMM on a GPU);
``--dtype complex128`` times complex operands against the native complex128 matmul (ZGEMM), with each part's
error beside the whole block's (``rel_err_max_real``, ``rel_err_max_imag``).  ``tflops`` counts the native
product's real flops: 2MNK per real product, 8MNK per complex one.

Inputs are the usual test matrices of Ozaki-scheme papers, entries (rand − 0.5)·exp(phi·randn), each part of
a complex entry drawn so.  Accuracy is measured on a sample block (of the first and last product of a batch)
against the exact product (Python integers), so it does not trust any float64 product; a complex block is
compared in the real form ozaki.matmul computes, [Re C | Im C].  Each time is the median of ``--reps`` calls
after a warm-up; a shape's methods are timed in turns (one call of each per round, the order rotated by one
each round), so that the device's drift over the run (clocks, temperature) weighs on each alike.  On a GPU
each timed call follows an untimed call of the same method, so that no method is timed in the state another
one left (the clocks after an int8 burst, the allocator's cache): each time is that of a call among calls of
its own kind, as in a user's loop.

``--project b200,b300`` adds the modeled time of every catalog plan on those devices (assumptions written
into ``projection.md``), calibrated by this run's measurements when it ran on a device of the datasheet table
(``ozaki.cost.DEVICES``: the H200 or the H100, whose measured fractions of their own datasheet rates carry over).

The harness only calls ``ozaki.matmul`` with the options given; what it reports of the inside (the plan
and the path taken) it reads from ``ozaki.explain`` on the same inputs.
"""

from __future__ import annotations

import argparse
import functools
import math
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

import ozaki
from ozaki import catalog, cost, planning, timing
from ozaki.cost import DEVICES, Device
from ozaki.exact import exact_dyadic, to_fraction
from ozaki.operands import complex_embedding

from .common import (
    accuracy_list,
    call_seconds,
    device_name,
    finite_float,
    input_matrix,
    int_list,
    known_names,
    median_seconds,
    positive_int,
    print_table,
    versions,
    write_csv,
)

__all__ = ["COLUMNS", "DEVICES", "PROJECTION_COLUMNS", "Device", "main"]

COLUMNS = (
    "date", "device", "batch", "m", "k", "n", "dtype", "phi", "method", "accuracy", "engine", "status", "reps",
    "median_s", "tflops", "speedup", "rel_err_max", "rel_err_max_real", "rel_err_max_imag", "rel_err_median",
    "comp_err_max", "workspace_bytes", "operand_bytes", "workspace_ratio", "plan_s", "encode_s", "products_s",
    "decode_s", "path", "moduli", "model_s", "model_plan_s", "model_encode_s", "model_products_s", "model_decode_s",
    "model_workspace_ratio",
)  # fmt: skip
_STAGES = ("plan", "encode", "products", "decode")
PROJECTION_COLUMNS = (
    "device", "plan", "digits", "products", "moduli", "batch", "m", "k", "n", "dtype", "model_s", "model_tflops",
    "dgemm_model_s", "speedup", "measured_s", "calibration",
)  # fmt: skip

_CPU_SIZES = (256, 512, 1024, 2048)
_GPU_SIZES = (1024, 2048, 4096, 8192, 16384)
# (M, K, N): tall-skinny output, and a K far beyond one plan's k_max.
_GPU_SHAPES = ((65536, 4096, 256), (4096, 65536, 4096))
_CPU_ACCURACIES = ("fp64", "exact", 40)
# A call slower than this (warm-up included) is timed once: repetitions of it would not fit in a GPU lease.
_SLOW_CALL_S = 10.0


# Efficiencies assumed when the run measured nothing (a CPU run, or a failed calibration).
_ASSUMED = {"tensor": 0.7, "fp64": 0.9, "bandwidth": 0.8}


# ---------------------------------------------------------------------------------------------------------------
# Inputs and the exact reference


def _sample(size: int, count: int) -> np.ndarray:
    """Up to ``count`` indices spread over [0, size): the block errors are measured on."""
    return np.unique(np.linspace(0, size - 1, min(count, size)).round().astype(np.int64))


def _exact_product(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    """The exact product of finite float64 matrices a (S, K) and b (K, T), as rationals."""
    return [[to_fraction(s, e) for s, e in row] for row in exact_dyadic(a, b)]


def _errors(got: np.ndarray, exact: list[list[Fraction]], scale: np.ndarray) -> tuple[float, float, float]:
    """Max and median elementwise relative error (over non-zero exact entries) and the max componentwise
    error |Ĉ − C| / (|A||B|); a non-finite result counts as an infinite error."""
    relative, componentwise = [], []
    for i, row in enumerate(exact):
        for j, value in enumerate(row):
            if not math.isfinite(got[i, j]):
                relative.append(math.inf)
                componentwise.append(math.inf)
                continue
            error = abs(Fraction(float(got[i, j])) - value)
            if value:
                relative.append(float(error / abs(value)))
            if scale[i, j]:
                componentwise.append(float(error) / scale[i, j])
            elif error:
                componentwise.append(math.inf)
    median = statistics.median(relative) if relative else 0.0
    return max(relative, default=0.0), median, max(componentwise, default=0.0)


# ---------------------------------------------------------------------------------------------------------------
# Measurement


def _workspace_bytes(product: Callable) -> int:
    """Device memory one call needs beyond its operands and its result (the allocator's peak)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = product()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before - result.numel() * result.element_size()


def _stage_seconds(product: Callable) -> dict:
    """Seconds per stage of one call (``ozaki.timing.stage_times``)."""
    with timing.stage_times() as seconds:
        product()
    return dict(seconds)


@dataclass
class _Case:
    """One shape's operands, as the methods take them: ``batch`` products of M×K×N (a batch of one
    is a single product, 2-D operands) of ``dtype``; and the exact product of its sample block,
    rows ``rows`` and columns ``cols`` of products ``items``, in real form (see :func:`_real_form`)."""

    batch: int
    m: int
    k: int
    n: int
    dtype: str
    a: object
    b: object
    items: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    exact: list
    scale: np.ndarray

    @property
    def complex(self) -> bool:
        return self.dtype == "complex128"

    @property
    def flops(self) -> int:
        """Real flops of the native product: 2MNK per real product, 8MNK per complex one (ZGEMM's four)."""
        return self.batch * (8 if self.complex else 2) * self.m * self.k * self.n

    @property
    def operand_bytes(self) -> int:
        return self.batch * (16 if self.complex else 8) * (self.m * self.k + self.k * self.n + self.m * self.n)


def _cut(x, items: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Entries (item, row, column) of x (…, R, C), a single product being item 0, on the host:
    cut where x lives (a GPU result stays on the GPU)."""
    if isinstance(x, torch.Tensor):
        items, rows, cols = (torch.as_tensor(i, device=x.device) for i in (items, rows, cols))
        return x.reshape(-1, *x.shape[-2:])[items][:, rows][:, :, cols].cpu().numpy()
    return x.reshape(-1, *x.shape[-2:])[np.ix_(items, rows, cols)]


def _real_form(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Products a (I, S, K) @ b (I, K, T) as real ones: a complex product's real embedding, whose
    product is [Re C | Im C] (ozaki.operands.complex_embedding, the form ozaki.matmul computes)."""
    embedded_a, embedded_b, _ = complex_embedding(torch.from_numpy(a), torch.from_numpy(b))
    return embedded_a.numpy(), embedded_b.numpy()


def _real_parts(block: np.ndarray) -> np.ndarray:
    """A sample block (I, S, T) as rows of the real form: [Re | Im] side by side for a complex one."""
    if np.iscomplexobj(block):
        block = np.concatenate([block.real, block.imag], axis=-1)
    return block.reshape(-1, block.shape[-1])


def _case(shape, args, device: str, generator: torch.Generator) -> _Case:
    batch, m, k, n = shape
    dtype = getattr(torch, args.dtype)
    leading = (batch,) if batch > 1 else ()
    a = input_matrix((*leading, m, k), args.phi, generator, device, dtype)
    b = input_matrix((*leading, k, n), args.phi, generator, device, dtype)
    # Two products of a batch (its first and last) carry the sample block.
    items, rows, cols = _sample(batch, 2), _sample(m, args.sample), _sample(n, args.sample)
    real_a, real_b = _real_form(_cut(a, items, rows, np.arange(k)), _cut(b, items, np.arange(k), cols))
    exact = [row for item_a, item_b in zip(real_a, real_b) for row in _exact_product(item_a, item_b)]
    scale = np.concatenate([np.abs(item_a) @ np.abs(item_b) for item_a, item_b in zip(real_a, real_b)])
    if device == "cpu":
        a, b = a.numpy(), b.numpy()
    return _Case(batch, m, k, n, args.dtype, a, b, items, rows, cols, exact, scale)


def _block(result, case: _Case) -> np.ndarray:
    """The sample block of a result in the real form of the exact one."""
    return _real_parts(_cut(result, case.items, case.rows, case.cols))


def _model_columns(plan, profile: cost.Profile | None) -> dict:
    """The path the call takes (``ozaki.explain``'s plan), and the cost model's prediction for its moduli and its
    products as the plan holds them (a batch, a complex product's real embedding and its blocks; for a native call
    decided before the inputs were read: the prediction it was decided on)."""
    row = {"path": plan.path}
    predicted = None if plan.predicted is None else plan.predicted.emulated
    if plan.moduli is not None:
        row["moduli"] = len(plan.moduli.moduli)
        sizes = dict(digits=plan.moduli.engine, planes=plan.moduli.planes, moduli=len(plan.moduli.moduli))
        if profile is not None:
            predicted = cost.predict(profile, plan.m, plan.k, plan.n, **sizes, batch=plan.batch,
                                     complex_blocks=plan.complex_blocks)
        if plan.batch == 1 and plan.complex is None:
            # The modeled workspace is one real product's blocks: a complex product's embedding is not in it.
            workspace = cost.workspace_bytes(plan.m, plan.k, plan.n, **sizes)
            row["model_workspace_ratio"] = workspace / (8 * (plan.m * plan.k + plan.k * plan.n + plan.m * plan.n))
    if predicted is not None:
        row.update(model_s=predicted.total, model_plan_s=predicted.plan, model_encode_s=predicted.encode,
                   model_products_s=predicted.products, model_decode_s=predicted.decode)  # fmt: skip
    return row


@dataclass
class _Method:
    """One way of computing a shape's product, its row of results and its timings."""

    row: dict
    product: Callable
    times: list = field(default_factory=list)
    block: np.ndarray | None = None


def _warmed(case: _Case, method: str, accuracy, engine, product: Callable, args, cuda: bool) -> _Method:
    row = {"batch": case.batch, "m": case.m, "k": case.k, "n": case.n, "dtype": case.dtype, "phi": args.phi,
           "method": method, "accuracy": accuracy, "engine": engine}  # fmt: skip
    try:
        began = time.perf_counter()
        product()  # warm-up: catalog load, kernel compilation, autotuning
        row["reps"] = args.reps if time.perf_counter() - began < _SLOW_CALL_S else 1
        if cuda and method == "ozaki":
            profile = cost.profile_for(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
            row.update(_model_columns(ozaki.explain(case.a, case.b, accuracy=accuracy, engine=engine), profile))
    except Exception as error:  # one failing engine or size must not lose the rest of the run
        row["status"] = f"error: {type(error).__name__}: {error}"[:300]
    return _Method(row, product)


def _time_interleaved(case: _Case, methods: list[_Method], cuda: bool) -> None:
    """Each method's timed calls, taken in turns (one call of each per round, the order rotated by
    one each round: a fixed order, even one reversed every other round, keeps a middle method next to
    the same neighbours), so that a drift of the device's clocks or temperature over the
    run weighs on every method alike, each on a GPU after an untimed call of its own (the state one
    method leaves, such as the clocks after an int8 burst, is not timed against the next); each
    keeps its last result's sample block."""
    live = [m for m in methods if "status" not in m.row]
    for turn in range(max((m.row["reps"] for m in live), default=0)):
        start = turn % len(live)
        for method in live[start:] + live[:start]:
            if "status" in method.row or turn >= method.row["reps"]:
                continue
            try:
                if cuda:
                    method.product()  # the lead-in: see the module docstring
                seconds, result = call_seconds(method.product, cuda)
                method.times.append(seconds)
                if turn == method.row["reps"] - 1:
                    method.block = _block(result, case)
                del result
            except Exception as error:
                method.row["status"] = f"error: {type(error).__name__}: {error}"[:300]


def _finished(case: _Case, method: _Method, cuda: bool) -> dict:
    """The row of a timed method: its median, errors, workspace and stage seconds."""
    row = method.row
    if "status" in row:
        return row
    try:
        if cuda:
            row["workspace_bytes"] = _workspace_bytes(method.product)
            row["operand_bytes"] = case.operand_bytes
            row["workspace_ratio"] = row["workspace_bytes"] / row["operand_bytes"]
        stages = _stage_seconds(method.product) if row["method"] == "ozaki" else None
    except Exception as error:
        return {**row, "status": f"error: {type(error).__name__}: {error}"[:300]}
    seconds = statistics.median(method.times)
    rel_max, rel_median, comp_max = _errors(method.block, case.exact, case.scale)
    row.update(
        status="ok", median_s=seconds, tflops=case.flops / seconds / 1e12,
        rel_err_max=rel_max, rel_err_median=rel_median, comp_err_max=comp_max,
    )  # fmt: skip
    if case.complex:
        # Each part's own: the real form holds Re C in its first len(cols) columns, Im C after them.
        for part, columns in (("real", slice(0, len(case.cols))), ("imag", slice(len(case.cols), None))):
            row[f"rel_err_max_{part}"] = _errors(method.block[:, columns], [r[columns] for r in case.exact],
                                                 case.scale[:, columns])[0]
    for stage in _STAGES if stages else ():
        row[f"{stage}_s"] = stages.get(stage)
    return row


def _plane_rate_rows(n: int, reps: int) -> list[dict]:
    """cuBLAS INT8 and FP8 GEMM rates at n³ (B K-contiguous, as 8-bit tensor cores want): the measured
    plane-GEMM rate that calibrates the projection."""
    generator = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randint(-8, 8, (n, n), generator=generator, device="cuda", dtype=torch.int8)
    b = torch.randint(-8, 8, (n, n), generator=generator, device="cuda", dtype=torch.int8).t()
    one = torch.ones((), device="cuda")
    a8, b8 = a.to(torch.float8_e4m3fn), b.t().to(torch.float8_e4m3fn).t()
    products = {
        "int8": lambda: torch._int_mm(a, b),
        "fp8": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
    }
    rows = []
    for digits, product in products.items():
        row = {"m": n, "k": n, "n": n, "method": f"plane-{digits}", "reps": reps}
        try:
            product()
            seconds, _ = median_seconds(product, reps, cuda=True)
        except Exception as error:  # an older torch or another GPU may lack one of these
            rows.append({**row, "status": f"error: {type(error).__name__}: {error}"[:300]})
            continue
        rows.append({**row, "status": "ok", "median_s": seconds, "tflops": 2 * n**3 / seconds / 1e12})
    return rows


def _bandwidth() -> float:
    """Device-to-device copy rate, bytes read plus written per second."""
    source = torch.empty(2**28, dtype=torch.float32, device="cuda").uniform_()
    target = torch.empty_like(source)
    seconds, _ = median_seconds(lambda: target.copy_(source), 10, cuda=True)
    return 2 * source.numel() * source.element_size() / seconds


def _shape_key(row: dict) -> tuple:
    """The shape a row measured: (batch, M, K, N, dtype)."""
    return row.get("batch"), row["m"], row["k"], row["n"], row.get("dtype")


def _speedups(rows: list[dict], native: str) -> None:
    baseline = {_shape_key(r): r["median_s"] for r in rows if r["method"] == native and r["status"] == "ok"}
    for r in rows:
        base = baseline.get(_shape_key(r))
        if r.get("status") == "ok" and base and r["method"] in (native, "ozaki"):
            r["speedup"] = base / r["median_s"]


def _shape_rows(case: _Case, native: str, args, cuda: bool) -> list[dict]:
    a, b = case.a, case.b
    methods = [_warmed(case, native, "", "", lambda: a @ b, args, cuda)]
    for accuracy in args.accuracy:
        for engine in args.engines:
            product = functools.partial(ozaki.matmul, a, b, accuracy=accuracy, engine=engine)
            methods.append(_warmed(case, "ozaki", accuracy, engine, product, args, cuda))
    _time_interleaved(case, methods, cuda)
    return [_finished(case, method, cuda) for method in methods]


def _run(args, shapes, cuda: bool, save: Callable[[list[dict]], None]) -> tuple[list[dict], dict]:
    """Every (shape, method) row, and the calibration measured on the way (empty on the CPU).  ``save`` gets
    the rows after each shape, so a run stopped from outside keeps what it measured."""
    device = "cuda" if cuda else "cpu"
    generator = torch.Generator(device=device).manual_seed(args.seed)
    native = "torch" if cuda else "numpy"
    began = time.perf_counter()
    rows, calibration = [], {}
    for batch, m, k, n in shapes:
        if args.budget is not None and time.perf_counter() - began > args.budget:
            rows.append({"batch": batch, "m": m, "k": k, "n": n, "dtype": args.dtype, "method": "all",
                         "status": "skipped: --budget spent"})
            continue
        rows.extend(_shape_rows(_case((batch, m, k, n), args, device, generator), native, args, cuda))
        if cuda:
            torch.cuda.empty_cache()  # this shape's operands are gone; the next may need the room
        _speedups(rows, native)
        save(rows)
        print(f"  done {_shape_text((batch, m, k, n))} after {time.perf_counter() - began:.0f} s", flush=True)
    if cuda:
        square = [s[1] for s in shapes if s[1] == s[2] == s[3]]
        n_cal = min(max(square, default=8192), 8192)
        rows.extend(_plane_rate_rows(n_cal, args.reps))
        calibration.update(bandwidth=_bandwidth(), device=torch.cuda.get_device_name(),
                           capability=torch.cuda.get_device_capability())
    return rows, calibration


# ---------------------------------------------------------------------------------------------------------------
# Projection


def _calibration_device(calibration: dict) -> str | None:
    """The key in DEVICES of the device this run measured on, or None (a CPU run, an unlisted device)."""
    if "capability" not in calibration:
        return None
    return cost.device_key(calibration.get("device", ""), calibration["capability"])


def _efficiencies(rows: list[dict], calibration: dict) -> tuple[dict, list[str]]:
    """Fraction of the measured device's datasheet rate this run reached, per unit; assumed values where
    nothing was measured (said so in the notes returned)."""
    key = _calibration_device(calibration)
    notes, eff = [], {}
    if calibration and key is None:
        notes.append(f"WARNING: measured on {calibration.get('device')!r}, a device without datasheet figures here, "
                     "yet compared with the H200's: the efficiencies below do not mean what they say")  # fmt: skip
    sheet = DEVICES[key or "h200"]
    measured = {r["method"]: r for r in rows if r.get("status") == "ok" and r["method"].startswith("plane-")}
    for digits in ("int8", "fp8"):
        row = measured.get(f"plane-{digits}")
        if row and sheet.rates[digits]:
            eff[digits] = row["tflops"] * 1e12 / sheet.rates[digits]
            notes.append(f"{digits} efficiency {eff[digits]:.3f}: cuBLAS {row['tflops']:.0f} TOP/s at n={row['n']} "
                         f"in this run / {sheet.rates[digits] / 1e12:.0f} T {sheet.name} datasheet")  # fmt: skip
        else:
            eff[digits] = _ASSUMED["tensor"]
            notes.append(f"{digits} efficiency {eff[digits]} ASSUMED: not measured in this run")
    eff["fp4"] = eff["int4"] = eff["fp8"]
    notes.append("fp4 efficiency taken equal to fp8's (the run times no FP4 GEMM: Hopper has no FP4 units)")
    natives = [r for r in rows if r["method"] == "torch" and r.get("status") == "ok"]
    if natives:
        best = max(natives, key=lambda r: r["m"] * r["k"] * r["n"])
        eff["fp64"] = best["tflops"] * 1e12 / sheet.fp64
        native = "ZGEMM (real flops)" if best.get("dtype") == "complex128" else "DGEMM"
        notes.append(f"fp64 efficiency {eff['fp64']:.3f}: cuBLAS {native} {best['tflops']:.1f} TFLOP/s at "
                     f"{_shape_text(_shape_key(best)[:4])} in this run / {sheet.fp64 / 1e12:g} T {sheet.name} "
                     "datasheet")  # fmt: skip
    else:
        eff["fp64"] = _ASSUMED["fp64"]
        notes.append(f"fp64 efficiency {eff['fp64']} ASSUMED: no DGEMM in this run")
    if "bandwidth" in calibration:
        eff["bandwidth"] = calibration["bandwidth"] / sheet.bandwidth
        notes.append(f"bandwidth efficiency {eff['bandwidth']:.3f}: device copy {calibration['bandwidth'] / 1e12:.2f} "
                     f"TB/s in this run / {sheet.bandwidth / 1e12:.2f} TB/s {sheet.name} datasheet")  # fmt: skip
    else:
        eff["bandwidth"] = _ASSUMED["bandwidth"]
        notes.append(f"bandwidth efficiency {eff['bandwidth']} ASSUMED: no copy measured in this run")
    return eff, notes


def _projected_profile(device: Device, eff: dict) -> cost.Profile:
    """The device at this run's efficiencies, every stage's traffic at the calibrated bandwidth (no stage
    efficiency, no fixed overhead): products × 2MKN at the calibrated plane rate, plus the memory traffic no
    GEMM hides (see ozaki.cost)."""
    return cost.Profile(
        name=device.name, fp64=eff["fp64"] * device.fp64,
        rates={d: None if r is None else eff[d] * r for d, r in device.rates.items()},
        bandwidth=eff["bandwidth"] * device.bandwidth, plan_efficiency=1.0, encode_efficiency=1.0, decode_efficiency=1.0,
        overhead={},
        source=device.source,
    )  # fmt: skip


def _project(plans, devices: Sequence[str], shapes, rows: list[dict], calibration: dict, dtype: str = "float64"):
    """Modeled time of every plan on every device at every (batch, M, K, N) within its k_max, and the
    assumptions.  complex128: each product is its real embedding M×2K×2N, multiplied as it is (the fused
    path's four blocks per plane GEMM), against ZGEMM."""
    eff, notes = _efficiencies(rows, calibration)
    ok = [r for r in rows if r.get("status") == "ok"]
    measured_on = _calibration_device(calibration)
    if not any(r["method"].startswith("plane-") for r in ok):
        calibrated = "assumed"
    else:
        calibrated = f"{DEVICES[measured_on].name} run" if measured_on else "run on a device without datasheet figures"
    fp64_runs = [r for r in ok if r["method"] == "ozaki" and r["accuracy"] == "fp64"]
    measured = {(r["engine"], *_shape_key(r)[:4]): r["median_s"] for r in fp64_runs}
    complex_ = dtype == "complex128"
    parts = 2 if complex_ else 1  # a complex product's K and N in its real embedding
    table, skipped = [], set()
    for name in devices:
        device = DEVICES[name]
        profile = _projected_profile(device, eff)
        for plan in sorted(plans, key=lambda p: (p.digits, p.products, p.name)):
            for batch, m, k, n in shapes:
                if parts * k > plan.k_max:
                    continue
                predicted = cost.predict(profile, m, parts * k, parts * n, digits=plan.digits, planes=plan.products,
                                         moduli=len(plan.moduli), batch=batch, complex_blocks=4 if complex_ else 0)
                if predicted is None:
                    skipped.add(f"{plan.digits} on {device.name}")
                    continue
                model = predicted.total
                native = (cost.zgemm_seconds if complex_ else cost.dgemm_seconds)(profile, m, k, n, batch)
                table.append({
                    "device": device.name, "plan": plan.name, "digits": plan.digits, "products": plan.products,
                    "moduli": len(plan.moduli), "batch": batch, "m": m, "k": k, "n": n, "dtype": dtype,
                    "model_s": model, "model_tflops": batch * 2 * parts**2 * m * k * n / model / 1e12,
                    "dgemm_model_s": native, "speedup": native / model,
                    "measured_s": measured.get((plan.digits, batch, m, k, n)) if name == measured_on else None,
                    "calibration": calibrated,
                })  # fmt: skip
    notes.append("model: time = products * 2MKN / (efficiency * dense rate of the plan's digits) + bytes / "
                 "(bandwidth efficiency * bandwidth), bytes = 8(MK + KN + MN) + products * (MK + KN) * bytes per "
                 "plane value + 8 * moduli * MN (int32 residue products written and read)")  # fmt: skip
    notes.append("DGEMM: 2MKN / (fp64 efficiency * FP64 rate); same efficiency on every device (an assumption)")
    if complex_:
        notes.append("complex128: the model's M, K, N are the real embedding's M, 2K, 2N (all four blocks per plane "
                     "GEMM, as the fused path runs them); dgemm_model_s is ZGEMM's, 8MKN at the fp64 rate, and "
                     "model_tflops counts ZGEMM's real flops")  # fmt: skip
    if any(batch > 1 for batch, *_ in shapes):
        notes.append("batch: every product's time times the batch (the projection has no fixed costs to share)")
    notes.append("shapes beyond a plan's k_max are left out: that plan cannot run them in one piece")
    notes.append("measured_s: on the device this run measured, its time of the engine named like the plan's digits "
                 "at that shape; the "
                 "pipeline picks its plan from the inputs' bits, so it may have run another plan of those digits")  # fmt: skip
    notes.extend(f"device {DEVICES[d].name}: {DEVICES[d].source}" for d in devices)
    notes.extend(f"not projected: {s} (no such unit in the datasheet figures)" for s in sorted(skipped))
    return table, notes


# ---------------------------------------------------------------------------------------------------------------
# Output


def _plot(rows: list[dict], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no PNG written"
    lines: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("status") == "ok" and r["m"] == r["k"] == r["n"] and not r["method"].startswith("plane-"):
            label = r["method"] if r["method"] != "ozaki" else f"ozaki {r['engine']} ({r['accuracy']})"
            batch = f", batch {r['batch']}" if r["batch"] != 1 else ""
            lines.setdefault(f"{label} {r['dtype']}{batch}", []).append((r["n"], r["tflops"]))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, points in sorted(lines.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("n (square M = K = N)")
    axes.set_ylabel("TFLOP/s (real flops of the native product / time)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return f"wrote {path}"


# ---------------------------------------------------------------------------------------------------------------
# Command line


def _shape_list(text: str) -> tuple[tuple[int, ...], ...]:
    """MxKxN shapes, or BxMxKxN for a batch of B products."""
    shapes = []
    for item in text.split(","):
        parts = item.lower().split("x")
        if len(parts) not in (3, 4) or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not MxKxN or BxMxKxN with positive integers")
        shapes.append(tuple(int(p) for p in parts))
    return tuple(shapes)


def _shape_text(shape: tuple[int, int, int, int]) -> str:
    """(B, M, K, N) as the command line writes it: MxKxN for a single product."""
    return "x".join(map(str, shape if shape[0] != 1 else shape[1:]))


_device_list = known_names(tuple(DEVICES), "device")


def _parser() -> argparse.ArgumentParser:
    def listed(values) -> str:
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values)

    parser = argparse.ArgumentParser(
        prog="python -m ozaki bench",
        description="Time and accuracy of ozaki.matmul against the native product, float64 or complex128, of single "
                    "products or batches (CSV, table, PNG).",
    )
    add = parser.add_argument
    add("--cpu", action="store_true", help="numpy arrays against numpy's DGEMM (the default without CUDA)")
    add("--sizes", type=int_list,
        help=f"square sizes n (default: CPU {listed(_CPU_SIZES)}; GPU {listed(_GPU_SIZES)} and the GPU --shapes)")
    add("--shapes", type=_shape_list,
        help=f"rectangular MxKxN shapes, or BxMxKxN for a batch of B products (GPU default without --sizes: "
             f"{listed(_GPU_SHAPES)})")
    add("--batch", type=positive_int, default=1,
        help="products per call, (B, M, K) @ (B, K, N), for every --sizes and MxKxN shape; the native side is "
             "torch's batched matmul (cuBLAS strided-batched DGEMM) (default 1: single 2-D products)")
    add("--dtype", choices=("float64", "complex128"), default="float64",
        help="complex128: complex operands, each part's entries as float64's, against the native complex128 "
             "matmul (cuBLAS ZGEMM on a GPU), with each part's error (default float64)")
    add("--accuracy", type=accuracy_list, help=f"accuracies (default: CPU {listed(_CPU_ACCURACIES)}; GPU fp64)")
    add("--engines", type=known_names(planning.ENGINES, "engine"),
        help=f"engines from {listed(planning.ENGINES)} (default: CPU auto; GPU auto,int8,fp8,fp4)")
    add("--reps", type=positive_int, help="timed repetitions per measurement, the median reported (default: CPU 3, GPU 5)")
    add("--phi", type=finite_float, default=0.5, help="exponent spread of the inputs (default 0.5)")
    add("--seed", type=int, default=0)
    add("--sample", type=positive_int, default=16, help="rows and columns of the block errors are measured on (default 16)")
    add("--budget", type=float, help="seconds after which no further shape is started")
    add("--project", type=_device_list, help=f"devices to project every catalog plan onto, from {listed(DEVICES)}")
    add("--out", type=Path, default=Path("bench-results"), help="output folder (default ./bench-results)")
    add("--distributed", action="store_true",
        help="ozaki.distributed on a mesh of every rank, under torchrun (ozaki.bench.distributed; its options: "
             "python -m ozaki bench --distributed -h)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    cuda = torch.cuda.is_available() and not args.cpu
    args.reps = args.reps or (5 if cuda else 3)
    args.accuracy = args.accuracy or (("fp64",) if cuda else _CPU_ACCURACIES)
    args.engines = args.engines or (("auto", "int8", "fp8", "fp4") if cuda else ("auto",))
    squares = args.sizes or (_GPU_SIZES if cuda else _CPU_SIZES)
    extra = args.shapes or (_GPU_SHAPES if cuda and args.sizes is None else ())
    shapes = [(args.batch, s, s, s) for s in squares] + [(args.batch, *s) if len(s) == 3 else s for s in extra]

    args.out.mkdir(parents=True, exist_ok=True)
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    device = device_name(cuda)
    command = "python -m ozaki bench " + shlex.join(argv)
    header = f"{date}  {device}  {versions()}\n{command}"
    print(header, flush=True)
    (args.out / "run.txt").write_text(header + "\n")

    name = "bench-gpu" if cuda else "bench-cpu"

    def save(rows: list[dict]) -> None:
        write_csv(args.out / f"{name}.csv", COLUMNS, [{**r, "date": date, "device": device} for r in rows])

    rows, calibration = _run(args, shapes, cuda, save)
    save(rows)
    print(_plot(rows, args.out / f"{name}.png"))
    # A run of single real products prints the table it always did; a batch or complex products add their columns.
    batch = ("batch",) if any(shape[0] != 1 for shape in shapes) else ()
    complex_ = args.dtype == "complex128"
    dtype, errors = (("dtype",), ("rel_err_max_real", "rel_err_max_imag")) if complex_ else ((), ("rel_err_max",))
    print_table(rows, (*batch, "m", "k", "n", *dtype, "method", "accuracy", "engine", "path", "median_s", "model_s",
                       "tflops", "speedup", *errors, "comp_err_max", "workspace_ratio", "model_workspace_ratio",
                       "status"))  # fmt: skip
    if cuda:
        print("workspace_ratio: peak device memory of one call beyond its result over the bytes of A, B and C "
              "(cost.WORKSPACE_BUDGET: 2); model_*: ozaki.cost's predictions for the plan each call used (stages in the CSV "
              "next to plan_s, encode_s, products_s, decode_s)")
    print(f"wrote {args.out / (name + '.csv')}")

    if args.project:
        table, notes = _project(catalog.plans().values(), args.project, shapes, rows, calibration, args.dtype)
        write_csv(args.out / "projection.csv", PROJECTION_COLUMNS, table)
        lines = [f"# Projection ({date}, calibrated on: {device})", "", command, "", "Assumptions:", ""]
        (args.out / "projection.md").write_text("\n".join(lines + [f"- {n}" for n in notes]) + "\n")
        print("\nprojection assumptions:\n" + "\n".join(f"  - {n}" for n in notes))
        print_table(table, ("device", "plan", "products", *batch, "m", "k", "n", *dtype, "model_s", "model_tflops",
                            "speedup", "measured_s"))  # fmt: skip
        print(f"wrote {args.out / 'projection.csv'} and {args.out / 'projection.md'}")
    return 0 if all(r.get("status", "").startswith(("ok", "skipped")) for r in rows) else 1
