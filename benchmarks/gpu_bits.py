"""Every engine gives the same bits on the GPU: ``ozaki.matmul`` with each engine on one input.

Run from the repository root on the GPU machine:  PYTHONPATH=. python3 benchmarks/gpu_bits.py [n]
Prints, per engine, whether its result equals the reference engine's bit for bit, its time, and the
moduli/plan it used (from the debug log).
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np
import torch

import ozaki


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("ozaki").setLevel(logging.DEBUG)
    rng = np.random.default_rng(1)
    a, b = ((rng.random((n, n)) - 0.5) * np.exp(0.5 * rng.standard_normal((n, n))) for _ in range(2))
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    results = {}
    for engine in ("reference", "int8", "fp8", "fp4"):
        ozaki.matmul(ta[:256], tb[:, :256], engine=engine)  # compile and tune outside the timing
        torch.cuda.synchronize()
        start = time.perf_counter()
        results[engine] = ozaki.matmul(ta, tb, engine=engine)
        torch.cuda.synchronize()
        print(f"{engine:10s} {time.perf_counter() - start:8.3f} s", flush=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    native = ta @ tb
    torch.cuda.synchronize()
    print(f"{'native':10s} {time.perf_counter() - start:8.3f} s")
    reference = results["reference"].view(torch.int64)
    print(f"\nn = {n}: bits equal to the reference engine's")
    for engine, result in results.items():
        print(f"  {engine:10s} {bool(torch.equal(result.view(torch.int64), reference))}")
    print(f"  {'native':10s} {bool(torch.equal(native.view(torch.int64), reference))} (DGEMM: not expected)")


if __name__ == "__main__":
    main()
