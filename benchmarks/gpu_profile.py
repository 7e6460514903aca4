"""Where one emulated product spends its device time: a ``torch.profiler`` trace of one call, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_profile.py [n] [engine]      (default n = 16384, engine int8)

A = B-shaped (rand − 0.5)·exp(0.5·randn) float64 n × n matrices; two untimed calls of
``ozaki.matmul(a, b, engine=...)`` (compilation, tuning), then the wall time of ``ozaki.explain`` (the plan
alone) and of one whole call, then one call under the profiler: the table of CUDA time by kernel and the
count of host-synchronising calls (``cudaStreamSynchronize``, copies to the host, ``.item()``).
"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import ozaki

_SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "Memcpy DtoH", "aten::item", "aten::is_nonzero")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    engine = sys.argv[2] if len(sys.argv) > 2 else "int8"
    generator = torch.Generator(device="cuda").manual_seed(1)

    def phi(shape):
        return (torch.rand(shape, generator=generator, device="cuda", dtype=torch.float64) - 0.5) * torch.exp(
            0.5 * torch.randn(shape, generator=generator, device="cuda", dtype=torch.float64))

    a, b = phi((n, n)), phi((n, n))
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
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        ozaki.matmul(a, b, engine=engine)
        torch.cuda.synchronize()
    events = trace.key_averages()
    print(events.table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
    syncs = {e.key: e.count for e in events if any(s in e.key for s in _SYNC_EVENTS)}
    print(f"host-synchronising calls: {syncs}")
    moduli = len(plan.moduli.moduli) if plan.moduli is not None else 0
    print(f"n = {n}, engine {engine}, {plan.path}, {moduli} moduli: explain {planned * 1e3:.1f} ms, "
          f"whole call {whole * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
