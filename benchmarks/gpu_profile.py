"""Where one emulated product spends its device time: a ``torch.profiler`` trace of one call, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_profile.py [n] [engine]      (default n = 16384, engine int8)

A = B-shaped (rand − 0.5)·exp(0.5·randn) float64 n × n matrices; two untimed calls of
``ozaki.matmul(a, b, engine=...)`` (compilation, tuning), then the wall time of ``ozaki.explain`` (the plan
alone), of one whole call and the median of five more, then one call under the profiler: the table of CUDA time by kernel, the
count of host-synchronising calls (``cudaStreamSynchronize``, copies to the host, ``.item()``), the
device's idle time between kernels with the longest gaps and the kernels around them, and, from one more
call under ``torch.cuda.set_sync_debug_mode("warn")``, the line of the library that made each
synchronisation, and from one more under ``cProfile`` the host's time by function.
"""

from __future__ import annotations

import cProfile
import collections
import io
import pstats
import sys
import time
import traceback
import warnings

import torch
from phi_data import phi_matrix
from torch.profiler import ProfilerActivity, profile

import ozaki

_SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "Memcpy DtoH", "aten::item", "aten::is_nonzero")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    engine = sys.argv[2] if len(sys.argv) > 2 else "int8"
    generator = torch.Generator(device="cuda").manual_seed(1)

    a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
    for _ in range(2):
        ozaki.matmul(a, b, engine=engine)
    torch.cuda.synchronize()
    start = time.perf_counter()
    plan = ozaki.explain(a, b, engine=engine)
    torch.cuda.synchronize()
    planned = time.perf_counter() - start
    start = time.perf_counter()
    ozaki.matmul(a, b, engine=engine)
    torch.cuda.synchronize()
    whole = time.perf_counter() - start
    repeated = []
    for _ in range(5):
        start = time.perf_counter()
        ozaki.matmul(a, b, engine=engine)
        torch.cuda.synchronize()
        repeated.append(time.perf_counter() - start)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        ozaki.matmul(a, b, engine=engine)
        torch.cuda.synchronize()
    events = trace.key_averages()
    print(events.table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
    syncs = {e.key: e.count for e in events if any(s in e.key for s in _SYNC_EVENTS)}
    print(f"host-synchronising calls: {syncs}")
    _print_gaps(trace)
    _print_sync_sites(lambda: ozaki.matmul(a, b, engine=engine))
    _print_host_time(lambda: ozaki.matmul(a, b, engine=engine))
    moduli = len(plan.moduli.moduli) if plan.moduli is not None else 0
    print(f"n = {n}, engine {engine}, {plan.path}, {moduli} moduli: explain {planned * 1e3:.1f} ms, "
          f"whole call {whole * 1e3:.1f} ms, median of 5 more {sorted(repeated)[2] * 1e3:.1f} ms")


def _print_gaps(trace, shown: int = 12) -> None:
    """Device time between the kernels (and copies) of the profiled call: where the GPU waited for the host."""
    spans = sorted((e.time_range.start, e.time_range.end, e.name) for e in trace.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    if not spans:
        return
    gaps, busy, end, previous = [], 0.0, spans[0][0], spans[0][2]
    for start, stop, name in spans:
        if start > end:
            gaps.append((start - end, previous, name))
        busy += max(0.0, stop - max(start, end))
        if stop > end:
            end, previous = stop, name
    total = end - spans[0][0]
    print(f"device span {total / 1e3:.2f} ms: busy {busy / 1e3:.2f} ms, idle {(total - busy) / 1e3:.2f} ms "
          f"in {len(gaps)} gaps")
    for gap, before, after in sorted(gaps, reverse=True)[:shown]:
        print(f"  idle {gap / 1e3:7.3f} ms  after {before[:50]:50s}  before {after[:50]}")


def _print_sync_sites(call) -> None:
    """The innermost ozaki or kernels line under each synchronising call of ``call()``."""
    sites = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1] if "/ozaki/" in f.filename or "/kernels/" in f.filename]
        sites[f"{frames[-1].filename.split('/')[-2]}/{frames[-1].name}:{frames[-1].lineno}" if frames else filename] += 1

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    print(f"synchronisations by site ({sum(sites.values())}): {dict(sites)}")


def _print_host_time(call, shown: int = 25) -> None:
    """Where the host spends one call (cProfile, by own time): what the device waits for after each read."""
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(shown)
    print(text.getvalue())


if __name__ == "__main__":
    main()
