"""Whether an emulated product waits for the host: its wall time against the device's own time, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_host_gap.py [n ...]      (default n = 16384 8192)

A, B: n × n phi = 0.5 float64 matrices (``phi_data.phi_matrix``, seed 1); two untimed calls of
``ozaki.matmul(a, b, engine="int8")``, then six rounds of two calls each:

* on an idle device, synchronised before and after: the wall time, the host's time from the call to its
  first kernel launch and from its last launch to the return (every launch of the package goes through a
  module's ``launch``; this script wraps them to stamp the time);
* queued behind a 60 ms ``torch.cuda._sleep``, with CUDA events around the call: the host has queued its
  launches up to the plan's read before the device reaches them, so the events time the device from the
  call's first kernel, plus any wait for the host after the read.

Where the wall time exceeds the time behind the sleep by more than the host's stamps account for, the
same kernels ran slower on the device (the first call of each round follows the other's at once, the
second follows 60 ms in which the device runs one spinning thread).
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
from phi_data import phi_matrix

import kernels.accuracy
import kernels.crt
import kernels.products
import kernels.residues
import kernels.scaling
import kernels.wgmma_products
import ozaki

_LAUNCHING = (kernels.accuracy, kernels.scaling, kernels.residues, kernels.crt, kernels.products,
              kernels.wgmma_products)
# 60 ms of torch.cuda._sleep at the 1980 MHz of the H100's and the H200's SM clock.
_SLEEP_CYCLES = 120_000_000


def _stamped(stamps: list[float]) -> None:
    for module in _LAUNCHING:
        launch = module.launch

        def stamped(*args, _launch=launch, **kwargs):
            stamps.append(time.perf_counter())
            return _launch(*args, **kwargs)

        module.launch = stamped


def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [16384, 8192]
    stamps: list[float] = []
    _stamped(stamps)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| n | wall, ms (min) | host to first launch, ms | last launch to return, ms | launches "
          "| behind a sleep, ms (min) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        generator = torch.Generator(device="cuda").manual_seed(1)
        a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
        for _ in range(2):
            ozaki.matmul(a, b, engine="int8")
        walls, firsts, lasts, behind, launches = [], [], [], [], 0
        for _ in range(6):
            stamps.clear()
            torch.cuda.synchronize()
            start = time.perf_counter()
            ozaki.matmul(a, b, engine="int8")
            torch.cuda.synchronize()
            end = time.perf_counter()
            walls.append(end - start)
            firsts.append(stamps[0] - start)
            lasts.append(end - stamps[-1])
            launches = len(stamps)
            before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(_SLEEP_CYCLES)
            before.record()
            ozaki.matmul(a, b, engine="int8")
            after.record()
            torch.cuda.synchronize()
            behind.append(before.elapsed_time(after) / 1e3)
        ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
        print(f"| {n} | {ms(walls):.2f} ({min(walls) * 1e3:.2f}) | {ms(firsts):.2f} | {ms(lasts):.2f} | {launches} "
              f"| {ms(behind):.2f} ({min(behind) * 1e3:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
