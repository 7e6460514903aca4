"""Times accuracy="fp64"'s passes over an operand (kernels.accuracy) for a list of tiles, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_rule_passes.py [n]      (default n = 16384)

A = (rand − 0.5)·exp(0.5·randn) float64 n × n and Bᵀ = Aᵀ (a strided view, as the pipeline reads B's
columns).  Prints a copy of A (read and write) as the bandwidth to compare with, the extents pass of
each operand, then the upper pass (sums) and the lower pass (int8 codes) of each operand for every
(BLOCK_K, BLOCK_R) and warp count of TILES, each the median of ``triton.testing.do_bench``; last the
quotient pass over a random int32 G (n × n, sums below 2^40, offsets in [−20, 0)) for every
(BLOCK_M, BLOCK_N) and warp count of QUOTIENT_TILES, with whether it returns the default launch's minima.
"""

from __future__ import annotations

import sys

import torch
import triton
from phi_data import phi_matrix

from kernels import accuracy, scaling

TILES = (((32, 64), 4), ((16, 64), 4), ((32, 32), 4), ((64, 32), 4), ((16, 128), 4), ((32, 64), 8),
         ((64, 64), 8), ((8, 128), 4), ((64, 16), 4), ((128, 16), 4), ((32, 16), 2))

QUOTIENT_TILES = (((64, 64), 8), ((64, 64), 4), ((32, 128), 4), ((128, 64), 8), ((64, 128), 8), ((128, 128), 8),
                  ((32, 64), 4), ((128, 32), 4))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    generator = torch.Generator(device="cuda").manual_seed(1)
    a = phi_matrix((n, n), generator)

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=5, rep=40)

    copy = bench(a.clone)
    print(f"copy of A: {copy:.3f} ms = {2 * a.numel() * 8 / copy / 1e9:.2f} TB/s")
    for name, x in (("A", a), ("Bt", a.T)):
        top = torch.frexp(scaling.row_extents_kernel(x)[0].row_max)[1].to(torch.int64)
        print(f"{name} extents {bench(lambda: scaling.row_extents_kernel(x)):.3f} ms")
        for block, warps in TILES:
            upper = bench(lambda: accuracy.upper_reading_kernel(x, top, 30, block=block, num_warps=warps))
            lower = bench(lambda: accuracy.lower_codes_kernel(x, top - 3, (n, n), block=block, num_warps=warps))
            print(f"{name} block {block} warps {warps}: upper {upper:.3f} ms  lower {lower:.3f} ms", flush=True)
    del a
    g = torch.randint(0, 2**20, (n, n), dtype=torch.int32, device="cuda", generator=generator)
    sums = torch.randint(1, 2**40, (n,), dtype=torch.int64, device="cuda", generator=generator)
    offsets = torch.randint(-20, 0, (n,), dtype=torch.int64, device="cuda", generator=generator)
    want = accuracy.least_quotients_kernel(g, sums, offsets, sums, offsets)
    for block, warps in QUOTIENT_TILES:
        def quotients():
            return accuracy.least_quotients_kernel(g, sums, offsets, sums, offsets, block=block, num_warps=warps)

        same = all(torch.equal(got, expected) for got, expected in zip(quotients(), want))
        print(f"quotients block {block} warps {warps}: {bench(quotients):.3f} ms, default's minima {same}", flush=True)


if __name__ == "__main__":
    main()
