"""``python -m ozaki demo`` (the main job), ``python -m ozaki bench`` (the benchmarks) and
``python -m ozaki warmup`` (compile and tune ahead of time, for deployments)."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from .exact import exact_matmul
from .frontend import matmul


def demo(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ozaki demo", description="An emulated FP64 product, checked.")
    parser.add_argument("--n", type=int, default=1024, help="matrix size (default 1024)")
    parser.add_argument("--phi", type=float, default=0.5, help="exponent spread: entries (rand-0.5)*exp(phi*randn)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    a, b = ((rng.random((args.n, args.n)) - 0.5) * np.exp(args.phi * rng.standard_normal((args.n, args.n))) for _ in range(2))
    ta, tb = torch.from_numpy(a).to(args.device), torch.from_numpy(b).to(args.device)

    # The first call loads the catalog; on a GPU it also compiles the kernels and tunes them
    # for this shape, so it runs once untimed on the full inputs.
    matmul(ta, tb) if ta.is_cuda else matmul(ta[:64, :64], tb[:64, :64])
    timings = {}
    for name, product in (("ozaki.matmul", lambda: matmul(ta, tb)), ("native float64", lambda: ta @ tb)):
        start = time.perf_counter()
        result = product()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        timings[name] = (time.perf_counter() - start, result.cpu().numpy())

    block = slice(0, 16)
    reference = exact_matmul(a[block], b[:, block])
    print(f"C = A @ B, n = {args.n}, entries (rand-0.5)*exp({args.phi}*randn), device {args.device}")
    print(f"{'method':<16} {'time (s)':>10} {'max rel. error':>16} {'median rel. error':>18}   (16x16 block vs exact)")
    for name, (seconds, result) in timings.items():
        error = np.abs(result[block, block] - reference) / np.abs(reference)
        print(f"{name:<16} {seconds:>10.3f} {error.max():>16.2e} {np.median(error):>18.2e}")
    return 0


def warmup(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ozaki warmup",
        description="Compile the kernels and tune their configs for this GPU ahead of time: one emulated product "
                    "per size and engine, so that later processes find both in the on-disk caches (Triton's and "
                    "ozaki's, OZAKI_CACHE_DIR) and their first call runs without compiling or tuning.")
    parser.add_argument("--sizes", default="1024,4096,8192,16384",
                        help="square sizes n; the tuner keys configs by power-of-two buckets of M, N, K "
                             "(default 1024,4096,8192,16384)")
    parser.add_argument("--engines", default="int8", help="plan engines from int8,fp8,fp4 (default int8)")
    parser.add_argument("--accuracy", default="fp64", help="fp64, exact or a number of bits (default fp64)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("no CUDA device: the CPU path compiles and tunes nothing")
    accuracy = int(args.accuracy) if args.accuracy.isdigit() else args.accuracy
    generator = torch.Generator(device="cuda").manual_seed(0)
    for n in (int(size) for size in args.sizes.split(",")):
        a, b = ((torch.rand((n, n), generator=generator, device="cuda", dtype=torch.float64) - 0.5) for _ in range(2))
        for engine in args.engines.split(","):
            start = time.perf_counter()
            matmul(a, b, accuracy=accuracy, engine=engine)
            torch.cuda.synchronize()
            print(f"n = {n}, engine {engine}: {time.perf_counter() - start:.2f} s", flush=True)
        del a, b
        torch.cuda.empty_cache()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    commands = ("demo", "bench", "warmup")
    if not argv or argv[0] not in commands:
        print(f"usage: python -m ozaki {{{','.join(commands)}}} [options]   (-h after a command for its options)")
        return 2
    if argv[0] == "demo":
        return demo(argv[1:])
    if argv[0] == "warmup":
        return warmup(argv[1:])
    from .bench import main as bench_main

    return bench_main(argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
