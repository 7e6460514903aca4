"""``python -m ozaki``, the command line: ``demo`` (the main job), ``bench`` (the benchmarks, :mod:`ozaki.bench`)
and ``warmup`` (compile and tune ahead of time, for deployments).  A bad argument ends a command with
argparse's usage line and one error line, exit status 2."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np
import torch

from . import bench
from .bench.common import accuracy, finite_float, int_at_least, int_list, known_names, positive_int
from .exact import exact_matmul
from .frontend import matmul
from .operands import complex_embedding
from .planning import PLAN_ENGINES

__all__ = ["main"]


def _device(text: str) -> torch.device:
    """The argument type of --device: a device of this machine that ozaki.matmul runs on."""
    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device such as cpu, cuda or cuda:1") from None
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r}: the demo runs on cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has no CUDA device (use --device cpu)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _progress(text: str) -> None:
    """What the demo is doing, on stderr (stdout keeps the table): its first call alone takes seconds."""
    print(text, file=sys.stderr, flush=True)


# The demo's complex product is at most this size: a glimpse, beside the real one it is about.
_COMPLEX_N = 256


def _demo(args: argparse.Namespace) -> int:
    n = args.n
    rng = np.random.default_rng(args.seed)
    _progress(f"making two {n}x{n} matrices")
    a, b = (_entries(rng, (n, n), args.phi) for _ in range(2))
    _compared(a, b, args, f"C = A @ B, n = {n}, entries (rand-0.5)*exp({args.phi}*randn), device {args.device}",
              "native float64")
    side = min(n, _COMPLEX_N)
    _progress(f"making two complex {side}x{side} matrices")
    a, b = (_entries(rng, (side, side), args.phi) + 1j * _entries(rng, (side, side), args.phi) for _ in range(2))
    print()
    _compared(a, b, args, f"complex C = A @ B, n = {side}, each part (rand-0.5)*exp({args.phi}*randn), "
              f"device {args.device}", "native complex128")
    return 0


def _entries(rng: np.random.Generator, shape: tuple[int, int], phi: float) -> np.ndarray:
    return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))


def _compared(a: np.ndarray, b: np.ndarray, args: argparse.Namespace, title: str, native: str) -> None:
    """Times ozaki.matmul and the native product of a and b on the demo's device, and prints both
    with their relative errors on a block against the exact product (a complex one's per part)."""
    n, cuda = a.shape[0], args.device.type == "cuda"
    ta, tb = torch.from_numpy(a).to(args.device), torch.from_numpy(b).to(args.device)
    # The first call loads the catalog; on a GPU it also compiles the kernels and tunes them
    # for this shape, so it runs once untimed on the full inputs.
    if cuda:
        _progress("first call, untimed (loads the catalog, compiles and tunes the kernels for this shape)")
        matmul(ta, tb)
    else:
        _progress("first call, untimed (loads the catalog)")
        matmul(ta[:64, :64], tb[:64, :64])
    timings = {}
    for name, product in (("ozaki.matmul", lambda: matmul(ta, tb)), (native, lambda: ta @ tb)):
        _progress(f"timing {name}")
        start = time.perf_counter()
        result = product()
        if cuda:
            torch.cuda.synchronize(args.device)
        timings[name] = (time.perf_counter() - start, result.cpu().numpy())

    side = min(16, n)
    block = slice(0, side)
    _progress(f"exact reference of a {side}x{side} block")
    # A complex product's parts are those of its real embedding's product, [Re C | Im C].
    real_a, real_b, _ = complex_embedding(torch.from_numpy(a[block]), torch.from_numpy(b[:, block]))
    reference = exact_matmul(real_a.numpy(), real_b.numpy())
    print(title)
    print(f"{'method':<18} {'time (s)':>10} {'max rel. error':>16} {'median rel. error':>18}   "
          f"({side}x{side} block vs exact{', each part' if np.iscomplexobj(a) else ''})")
    for name, (seconds, result) in timings.items():
        got = result[block, block]
        if np.iscomplexobj(got):
            got = np.concatenate([got.real, got.imag], axis=-1)
        error = np.abs(got - reference) / np.abs(reference)
        print(f"{name:<18} {seconds:>10.3f} {error.max():>16.2e} {np.median(error):>18.2e}")


def _warmup(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        args.parser.error("no CUDA device: the CPU path compiles and tunes nothing")
    generator = torch.Generator(device="cuda").manual_seed(0)
    for n in args.sizes:
        a, b = ((torch.rand((n, n), generator=generator, device="cuda", dtype=torch.float64) - 0.5) for _ in range(2))
        for engine in args.engines:
            start = time.perf_counter()
            matmul(a, b, accuracy=args.accuracy, engine=engine)
            torch.cuda.synchronize()
            print(f"n = {n}, engine {engine}: {time.perf_counter() - start:.2f} s", flush=True)
        del a, b
        torch.cuda.empty_cache()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ozaki", description="FP64 matrix products emulated on low-precision tensor cores.",
        epilog="python -m ozaki COMMAND -h lists a command's options.")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    demo = commands.add_parser("demo", help="an emulated FP64 product and a small complex one, timed and checked "
                                            "against the exact ones",
                               description="An emulated FP64 product and a small complex one, checked.")
    demo.add_argument("--n", type=positive_int, default=1024, help="matrix size (default 1024)")
    demo.add_argument("--phi", type=finite_float, default=0.5,
                      help="exponent spread: entries (rand-0.5)*exp(phi*randn) (default 0.5)")
    demo.add_argument("--device", type=_device, default="cuda" if torch.cuda.is_available() else "cpu",
                      help="cpu or cuda[:index] (default: cuda where there is one)")
    demo.add_argument("--seed", type=int_at_least(0), default=0)
    demo.set_defaults(run=_demo)
    # Only listed here: the benchmark commands parse their own options (main hands them over unparsed).
    commands.add_parser("bench", help="speed and accuracy against native float64 (--distributed: on a mesh, "
                                      "under torchrun)")
    warmup = commands.add_parser(
        "warmup", help="compile and tune the kernels for this GPU ahead of time",
        description="Compile the kernels and tune their configs for this GPU ahead of time: one emulated product "
                    "per size and engine, so that later processes find both in the on-disk caches (Triton's and "
                    "ozaki's, OZAKI_CACHE_DIR) and their first call runs without compiling or tuning.")
    warmup.add_argument("--sizes", type=int_list, default=(1024, 4096, 8192, 16384),
                        help="square sizes n; the tuner keys configs by power-of-two buckets of M, N, K "
                             "(default 1024,4096,8192,16384)")
    warmup.add_argument("--engines", type=known_names(PLAN_ENGINES, "engine"), default=("int8",),
                        help=f"plan engines from {','.join(PLAN_ENGINES)} (default int8)")
    warmup.add_argument("--accuracy", type=accuracy, default="fp64",
                        help="fp64, exact or a number of bits (default fp64)")
    warmup.set_defaults(run=_warmup, parser=warmup)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        return bench.main(argv[1:])
    parser = _parser()
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
