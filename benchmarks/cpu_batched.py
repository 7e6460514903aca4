"""A batch of products against the same rows as one product, on the CPU.

    python benchmarks/cpu_batched.py [--shapes 256x32 64x128] [--accuracy fp64 exact] [--reps 5] [--phi 0.5]

For each batch × n (a batch of n×n×n products against one broadcast n×n B, and against a B
per product), the median of ``reps`` timings (after one warm-up) of ``ozaki.matmul`` on the
batch and on the stacked single product of the same rows, (batch·n)×n @ n×n, with their
ratio, in the same process.  Every product of the batch is checked to have the bits it has
computed alone.  Entries are (rand − 0.5)·exp(phi·randn).  The machine may be shared:
compare repeated runs.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import ozaki
from ozaki.bench.common import median_seconds


def _median_seconds(call, reps: int) -> float:
    call()  # the warm-up
    return median_seconds(call, reps, cuda=False)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["256x32", "64x128"], help="BATCHxN")
    parser.add_argument("--accuracy", nargs="+", default=["fp64", "exact"])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--phi", type=float, default=0.5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of {args.reps}")
    print(f"{'batch x n^3':>12} {'B':>10} {'accuracy':>8} {'batch (s)':>10} {'stacked (s)':>12} {'ratio':>6}")
    for shape in args.shapes:
        batch, n = map(int, shape.split("x"))
        a = (rng.random((batch, n, n)) - 0.5) * np.exp(args.phi * rng.standard_normal((batch, n, n)))
        shared = (rng.random((n, n)) - 0.5) * np.exp(args.phi * rng.standard_normal((n, n)))
        own = (rng.random((batch, n, n)) - 0.5) * np.exp(args.phi * rng.standard_normal((batch, n, n)))
        for b, kind in ((shared, "broadcast"), (own, "per item")):
            for accuracy in args.accuracy:
                accuracy = int(accuracy) if accuracy.isdigit() else accuracy
                got = ozaki.matmul(a, b, accuracy=accuracy)
                for index in (0, batch // 2, batch - 1):
                    alone = ozaki.matmul(a[index], b if b.ndim == 2 else b[index], accuracy=accuracy)
                    assert np.array_equal(got[index].view(np.uint64), alone.view(np.uint64)), (shape, index)
                seconds = _median_seconds(lambda: ozaki.matmul(a, b, accuracy=accuracy), args.reps)
                stacked = _median_seconds(lambda: ozaki.matmul(a.reshape(-1, n), shared, accuracy=accuracy),
                                          args.reps)
                print(f"{shape:>12} {kind:>10} {accuracy!s:>8} {seconds:>10.3f} {stacked:>12.3f} "
                      f"{seconds / stacked:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
