"""``python -m ozaki bench``: speed and accuracy of ``ozaki.matmul`` against the native float64 product.

Two measurement modes, one CSV schema (:data:`COLUMNS`), one row per (shape, method):

* ``--cpu`` (the default without CUDA): numpy arrays; numpy's DGEMM against ozaki.matmul at each accuracy
  (default ``fp64``, ``exact`` and 40 bits), n = 256 … 2048.
* GPU (the default with CUDA): CUDA tensors; torch's float64 matmul (cuBLAS DGEMM) against each engine at
  ``accuracy="fp64"``, square n = 1024 … 16384 and two rectangular shapes, with the peak workspace
  (``torch.cuda.max_memory_allocated``), the stage breakdown (:func:`ozaki.timing.stage_times`), and the
  plane-GEMM rates of cuBLAS INT8/FP8 that calibrate the projection.  Next to each measured stage and
  workspace: what :mod:`ozaki.cost` predicts for the plan the call used, and whether ``engine="auto"`` ran
  the emulation or native DGEMM (``path``), both from the call's plan (:func:`ozaki.explain`).

Inputs are the usual test matrices of Ozaki-scheme papers, entries (rand − 0.5)·exp(phi·randn).  Accuracy is measured on a
sample block against the exact product (Python integers), so it does not trust any float64 product.  Each
time is the median of ``--reps`` calls after a warm-up; a shape's methods are timed in turns (one call of
each per round, the order rotated by one each round), so that the device's drift over the run (clocks,
temperature) weighs on each alike.  On a GPU each timed call follows an untimed call of the same method, so
that no method is timed in the state another one left (the clocks after an int8 burst, the allocator's cache):
each time is that of a call among calls of its own kind, as in a user's loop.

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
    "date", "device", "m", "k", "n", "phi", "method", "accuracy", "engine", "status", "reps", "median_s",
    "tflops", "speedup", "rel_err_max", "rel_err_median", "comp_err_max", "workspace_bytes", "operand_bytes",
    "workspace_ratio", "plan_s", "encode_s", "products_s", "decode_s", "path", "moduli", "model_s", "model_plan_s",
    "model_encode_s", "model_products_s", "model_decode_s", "model_workspace_ratio",
)  # fmt: skip
_STAGES = ("plan", "encode", "products", "decode")
PROJECTION_COLUMNS = (
    "device", "plan", "digits", "products", "moduli", "m", "k", "n", "model_s", "model_tflops", "dgemm_model_s",
    "speedup", "measured_s", "calibration",
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
    """One shape's operands, as the methods take them, with its exact sample block."""

    m: int
    k: int
    n: int
    a: object
    b: object
    rows: np.ndarray
    cols: np.ndarray
    exact: list
    scale: np.ndarray


def _case(shape, args, device: str, generator: torch.Generator) -> _Case:
    m, k, n = shape
    a = input_matrix((m, k), args.phi, generator, device)
    b = input_matrix((k, n), args.phi, generator, device)
    rows, cols = _sample(m, args.sample), _sample(n, args.sample)
    a_rows = a[torch.as_tensor(rows, device=device)].cpu().numpy()
    b_cols = b[:, torch.as_tensor(cols, device=device)].cpu().numpy()
    exact = _exact_product(a_rows, b_cols)
    scale = np.abs(a_rows) @ np.abs(b_cols)
    if device == "cpu":
        a, b = a.numpy(), b.numpy()
    return _Case(m, k, n, a, b, rows, cols, exact, scale)


def _block(result, case: _Case) -> np.ndarray:
    """The sample block of a result, cut where the result lives (a GPU result stays on the GPU)."""
    if isinstance(result, torch.Tensor):
        rows, cols = (torch.as_tensor(i, device=result.device) for i in (case.rows, case.cols))
        return result[rows][:, cols].cpu().numpy()
    return result[np.ix_(case.rows, case.cols)]


def _model_columns(case: _Case, plan, profile: cost.Profile | None) -> dict:
    """The path the call takes (``ozaki.explain``'s plan), and the cost model's prediction for its moduli (for a
    native call decided before the inputs were read: the prediction it was decided on)."""
    row = {"path": plan.path}
    predicted = None if plan.predicted is None else plan.predicted.emulated
    if plan.moduli is not None:
        row["moduli"] = len(plan.moduli.moduli)
        sizes = dict(digits=plan.moduli.engine, planes=plan.moduli.planes, moduli=len(plan.moduli.moduli))
        if profile is not None:
            predicted = cost.predict(profile, case.m, case.k, case.n, **sizes)
        workspace = cost.workspace_bytes(case.m, case.k, case.n, **sizes)
        row["model_workspace_ratio"] = workspace / (8 * (case.m * case.k + case.k * case.n + case.m * case.n))
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
    row = {"m": case.m, "k": case.k, "n": case.n, "phi": args.phi, "method": method, "accuracy": accuracy,
           "engine": engine}  # fmt: skip
    try:
        began = time.perf_counter()
        product()  # warm-up: catalog load, kernel compilation, autotuning
        row["reps"] = args.reps if time.perf_counter() - began < _SLOW_CALL_S else 1
        if cuda and method == "ozaki":
            profile = cost.profile_for(torch.cuda.get_device_name(), torch.cuda.get_device_capability())
            row.update(_model_columns(case, ozaki.explain(case.a, case.b, accuracy=accuracy, engine=engine), profile))
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
            row["operand_bytes"] = 8 * (case.m * case.k + case.k * case.n + case.m * case.n)
            row["workspace_ratio"] = row["workspace_bytes"] / row["operand_bytes"]
        stages = _stage_seconds(method.product) if row["method"] == "ozaki" else None
    except Exception as error:
        return {**row, "status": f"error: {type(error).__name__}: {error}"[:300]}
    seconds = statistics.median(method.times)
    rel_max, rel_median, comp_max = _errors(method.block, case.exact, case.scale)
    row.update(
        status="ok", median_s=seconds, tflops=2 * case.m * case.k * case.n / seconds / 1e12,
        rel_err_max=rel_max, rel_err_median=rel_median, comp_err_max=comp_max,
    )  # fmt: skip
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


def _speedups(rows: list[dict], native: str) -> None:
    baseline = {(r["m"], r["k"], r["n"]): r["median_s"] for r in rows if r["method"] == native and r["status"] == "ok"}
    for r in rows:
        base = baseline.get((r["m"], r["k"], r["n"]))
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
    for m, k, n in shapes:
        if args.budget is not None and time.perf_counter() - began > args.budget:
            rows.append({"m": m, "k": k, "n": n, "method": "all", "status": "skipped: --budget spent"})
            continue
        rows.extend(_shape_rows(_case((m, k, n), args, device, generator), native, args, cuda))
        if cuda:
            torch.cuda.empty_cache()  # this shape's operands are gone; the next may need the room
        _speedups(rows, native)
        save(rows)
        print(f"  done {m}x{k}x{n} after {time.perf_counter() - began:.0f} s", flush=True)
    if cuda:
        square = [s[0] for s in shapes if s[0] == s[1] == s[2]]
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
        notes.append(f"fp64 efficiency {eff['fp64']:.3f}: cuBLAS DGEMM {best['tflops']:.1f} TFLOP/s at "
                     f"{best['m']}x{best['k']}x{best['n']} in this run / {sheet.fp64 / 1e12:g} T {sheet.name} "
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


def _project(plans, devices: Sequence[str], shapes, rows: list[dict], calibration: dict):
    """Modeled time of every plan on every device at every shape within its k_max, and the assumptions."""
    eff, notes = _efficiencies(rows, calibration)
    ok = [r for r in rows if r.get("status") == "ok"]
    measured_on = _calibration_device(calibration)
    if not any(r["method"].startswith("plane-") for r in ok):
        calibrated = "assumed"
    else:
        calibrated = f"{DEVICES[measured_on].name} run" if measured_on else "run on a device without datasheet figures"
    fp64_runs = [r for r in ok if r["method"] == "ozaki" and r["accuracy"] == "fp64"]
    measured = {(r["engine"], r["m"], r["k"], r["n"]): r["median_s"] for r in fp64_runs}
    table, skipped = [], set()
    for name in devices:
        device = DEVICES[name]
        profile = _projected_profile(device, eff)
        for plan in sorted(plans, key=lambda p: (p.digits, p.products, p.name)):
            for m, k, n in shapes:
                if k > plan.k_max:
                    continue
                predicted = cost.predict(profile, m, k, n, digits=plan.digits, planes=plan.products,
                                         moduli=len(plan.moduli))
                if predicted is None:
                    skipped.add(f"{plan.digits} on {device.name}")
                    continue
                model = predicted.total
                dgemm = cost.dgemm_seconds(profile, m, k, n)
                table.append({
                    "device": device.name, "plan": plan.name, "digits": plan.digits, "products": plan.products,
                    "moduli": len(plan.moduli), "m": m, "k": k, "n": n, "model_s": model,
                    "model_tflops": 2 * m * k * n / model / 1e12, "dgemm_model_s": dgemm, "speedup": dgemm / model,
                    "measured_s": measured.get((plan.digits, m, k, n)) if name == measured_on else None,
                    "calibration": calibrated,
                })  # fmt: skip
    notes.append("model: time = products * 2MKN / (efficiency * dense rate of the plan's digits) + bytes / "
                 "(bandwidth efficiency * bandwidth), bytes = 8(MK + KN + MN) + products * (MK + KN) * bytes per "
                 "plane value + 8 * moduli * MN (int32 residue products written and read)")  # fmt: skip
    notes.append("DGEMM: 2MKN / (fp64 efficiency * FP64 rate); same efficiency on every device (an assumption)")
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
            lines.setdefault(label, []).append((r["n"], r["tflops"]))
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for label, points in sorted(lines.items()):
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("n (square M = K = N)")
    axes.set_ylabel("TFLOP/s (2n³ / time)")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return f"wrote {path}"


# ---------------------------------------------------------------------------------------------------------------
# Command line


def _shape_list(text: str) -> tuple[tuple[int, int, int], ...]:
    shapes = []
    for item in text.split(","):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not MxKxN with positive integers")
        shapes.append(tuple(int(p) for p in parts))
    return tuple(shapes)


_device_list = known_names(tuple(DEVICES), "device")


def _parser() -> argparse.ArgumentParser:
    def listed(values) -> str:
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in values)

    parser = argparse.ArgumentParser(
        prog="python -m ozaki bench",
        description="Time and accuracy of ozaki.matmul against the native float64 product (CSV, table, PNG).",
    )
    add = parser.add_argument
    add("--cpu", action="store_true", help="numpy arrays against numpy's DGEMM (the default without CUDA)")
    add("--sizes", type=int_list,
        help=f"square sizes n (default: CPU {listed(_CPU_SIZES)}; GPU {listed(_GPU_SIZES)} and the GPU --shapes)")
    add("--shapes", type=_shape_list,
        help=f"rectangular MxKxN shapes (GPU default without --sizes: {listed(_GPU_SHAPES)})")
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
    shapes = [(s, s, s) for s in squares] + list(extra)

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
    print_table(rows, ("m", "k", "n", "method", "accuracy", "engine", "path", "median_s", "model_s", "tflops",
                       "speedup", "rel_err_max", "comp_err_max", "workspace_ratio", "model_workspace_ratio",
                       "status"))  # fmt: skip
    if cuda:
        print("workspace_ratio: peak device memory of one call beyond its result over the bytes of A, B and C "
              "(cost.WORKSPACE_BUDGET: 2); model_*: ozaki.cost's predictions for the plan each call used (stages in the CSV "
              "next to plan_s, encode_s, products_s, decode_s)")
    print(f"wrote {args.out / (name + '.csv')}")

    if args.project:
        table, notes = _project(catalog.plans().values(), args.project, shapes, rows, calibration)
        write_csv(args.out / "projection.csv", PROJECTION_COLUMNS, table)
        lines = [f"# Projection ({date}, calibrated on: {device})", "", command, "", "Assumptions:", ""]
        (args.out / "projection.md").write_text("\n".join(lines + [f"- {n}" for n in notes]) + "\n")
        print("\nprojection assumptions:\n" + "\n".join(f"  - {n}" for n in notes))
        print_table(table, ("device", "plan", "products", "m", "k", "n", "model_s", "model_tflops", "speedup",
                            "measured_s"))  # fmt: skip
        print(f"wrote {args.out / 'projection.csv'} and {args.out / 'projection.md'}")
    return 0 if all(r.get("status", "").startswith(("ok", "skipped")) for r in rows) else 1
