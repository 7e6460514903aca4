"""Host time ``ozaki.matmul`` adds where ``engine="auto"`` runs native DGEMM, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_host_overhead.py [n ...]      (default n = 256 1024)

For each n, float64 A and B on the device: after a warm-up, ``reps`` back-to-back calls of
``torch.matmul`` and of ``ozaki.matmul`` (which the cost model sends to native DGEMM at these
sizes), each loop timed on the host from the first call to the end of the last product.  The
device's work is the same DGEMM in both, so the difference per call is what ozaki adds on the
host.  Each ozaki loop runs once more under ``torch.cuda.set_sync_debug_mode("error")``: a host
synchronisation on the native path raises there.  The table prints last.
"""

from __future__ import annotations

import sys
import time

import torch

import ozaki


def per_call(fn, reps: int) -> float:
    """Seconds per call of ``reps`` calls queued back to back, the best of three loops."""
    best = float("inf")
    for _ in range(3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / reps)
    return best


def main() -> None:
    sizes = [int(arg) for arg in sys.argv[1:]] or [256, 1024]
    rows = []
    for n in sizes:
        generator = torch.Generator(device="cuda").manual_seed(n)
        a, b = (torch.rand((n, n), generator=generator, device="cuda", dtype=torch.float64) for _ in range(2))
        plan = ozaki.explain(a, b)
        reps = 2000 if n <= 512 else 500
        native, emulated = per_call(lambda: torch.matmul(a, b), reps), per_call(lambda: ozaki.matmul(a, b), reps)
        torch.cuda.set_sync_debug_mode("error")
        try:
            ozaki.matmul(a, b)
            syncs = "none"
        except RuntimeError as error:
            syncs = f"raised: {str(error).splitlines()[0]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
        rows.append((n, plan.path, native, emulated, syncs))
        print(rows[-1], flush=True)
    print("| n | path | torch.matmul (µs/call) | ozaki.matmul (µs/call) | added (µs) | host syncs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, path, native, emulated, syncs in rows:
        print(f"| {n} | {path} | {native * 1e6:.1f} | {emulated * 1e6:.1f} | {(emulated - native) * 1e6:.1f} | {syncs} |")


if __name__ == "__main__":
    main()
