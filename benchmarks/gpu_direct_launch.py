"""Whole calls with Triton's dispatch and with ``kernels.dispatch``'s direct launches, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_direct_launch.py [sizes] [rounds]      (default 4096,6144,8192 and 2)

Each round runs one process with ``OZAKI_DIRECT_LAUNCH=0``, then one with it set to 1 (the
switch is read at import).  A process times, per size n, ``ozaki.matmul(a, b, engine="int8")`` on
phi = 0.5 float64 matrices (seed 1) and torch's float64 matmul: three warm calls, then the median
and minimum of nine, each after the device has drained and 20 ms idle.  The last table row per size
says whether both ways gave the same bits (a checksum of the result's words).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def _child(sizes: list[int]) -> None:
    import torch
    from phi_data import phi_matrix

    import ozaki

    def timed(call):
        times = []
        for _ in range(9):
            torch.cuda.synchronize()
            time.sleep(0.02)
            start = time.perf_counter()
            out = call()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3, min(times) * 1e3, out

    for n in sizes:
        generator = torch.Generator(device="cuda").manual_seed(1)
        a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
        for _ in range(3):
            ozaki.matmul(a, b, engine="int8")
        median, least, c = timed(lambda: ozaki.matmul(a, b, engine="int8"))
        dgemm, _, _ = timed(lambda: torch.matmul(a, b))
        print(n, median, least, dgemm, int(c.view(torch.int64).sum()), flush=True)


def main() -> None:
    sizes = sys.argv[1] if len(sys.argv) > 1 else "4096,6144,8192"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    rows: dict[tuple[int, str], list[tuple[float, float, float, int]]] = {}
    for _ in range(rounds):
        for mode in ("triton", "direct"):
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.getcwd(), os.environ.get("PYTHONPATH", "")])}
            env["OZAKI_DIRECT_LAUNCH"] = "1" if mode == "direct" else "0"
            done = subprocess.run([sys.executable, __file__, "--child", sizes], env=env, check=True,
                                  capture_output=True, text=True)
            for line in done.stdout.split("\n"):
                if line.strip():
                    print(mode, line, file=sys.stderr, flush=True)  # progress, should a time limit cut the table
                    n, median, least, dgemm, check = line.split()
                    rows.setdefault((int(n), mode), []).append((float(median), float(least), float(dgemm), int(check)))
    print("| n | launches | int8 call, ms: median (min) per round | DGEMM ms | × DGEMM |")
    print("| --- | --- | --- | --- | --- |")
    for (n, mode), runs in sorted(rows.items()):
        calls = ", ".join(f"{median:.3f} ({least:.3f})" for median, least, _, _ in runs)
        ratios = ", ".join(f"{dgemm / median:.3f}" for median, _, dgemm, _ in runs)
        print(f"| {n} | {mode} | {calls} | {', '.join(f'{d:.2f}' for _, _, d, _ in runs)} | {ratios} |")
    for n in sorted({n for n, _ in rows}):
        checks = {run[3] for mode in ("triton", "direct") for run in rows.get((n, mode), [])}
        print(f"n = {n}: {'the same bits' if len(checks) == 1 else 'DIFFERENT BITS'} in every process")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child([int(size) for size in sys.argv[2].split(",")])
    else:
        main()
