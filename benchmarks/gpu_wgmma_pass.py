"""The Gluon plane GEMM with and without its PTX pass (one m64n256k32 wgmma per K step), on one GPU.

Run from the repository root on an sm_90 GPU machine:

    PYTHONUNBUFFERED=1 PYTHONPATH=. TRITON_CACHE_DIR=$(mktemp -d) python3 benchmarks/gpu_wgmma_pass.py [--sizes 16384,8192]

The kernel as Triton writes it (two m64n128k32 per K step) is a second JIT object of the same kernel
compiled under an identity pass, so both run in one process and their rounds alternate; every
compilation bypasses the on-disk cache (whose key, on Triton 3.6, does not hold the pass), which
the fresh cache directory keeps from the user's.  For each n, on the planes of a real call
(``benchmarks/gpu_products.py``'s ``operands``: phi = 0.5, int8 engine, its moduli) and the first
Gluon config of ``CONFIGS["int8"]``:

* both outputs compared whole (``torch.equal``) and each checked against ``reference_modular_matmul``
  on a slice;
* ``triton.testing.do_bench`` medians, ``--rounds`` alternating rounds.

Then whole ``ozaki.matmul(a, b, engine="int8")`` calls at the largest n, one call of each kernel and
one DGEMM per round (wall time with a synchronisation), results compared.  The table prints last.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from gpu_products import check_bits, operands
from phi_data import phi_matrix
from triton import knobs
from triton.experimental import gluon
from triton.testing import do_bench

import ozaki
from kernels import products, wgmma_products
from kernels.products import encoded_modular_matmul

WIDENED = wgmma_products.wgmma_plane_gemm_kernel
WIDEN = wgmma_products._widen_wgmma
# The same kernel function as a second JIT object: its own in-memory cache.
AS_WRITTEN = gluon.jit(WIDENED.fn)


def use(kernel) -> None:
    """Launch ``kernel`` from now on, compiled with the pass (WIDENED) or without (AS_WRITTEN)."""
    wgmma_products.wgmma_plane_gemm_kernel = kernel
    wgmma_products._widen_wgmma = WIDEN if kernel is WIDENED else (lambda ptx: ptx)
    knobs.compilation.always_compile = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="16384,8192")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="whole calls of each kernel at the largest n")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    config = next(c for c in products.CONFIGS["int8"] if c.gluon)
    kernels = {"as written": AS_WRITTEN, "widened": WIDENED}
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {__import__('triton').__version__}; "
          f"{config}", flush=True)
    rows = []
    for n in sizes:
        planes_a, planes_b, encodings = operands(n, 0.5)
        outputs = {}
        for name, kernel in kernels.items():
            use(kernel)
            outputs[name] = encoded_modular_matmul(planes_a, planes_b, encodings, config=config)
            print(f"{n} {name}: residues the reference's on a slice: "
                  f"{check_bits(planes_a, planes_b, encodings, config)}", flush=True)
        equal = torch.equal(*outputs.values())
        del outputs
        times = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, kernel in kernels.items():
                use(kernel)
                times[name].append(do_bench(lambda: encoded_modular_matmul(planes_a, planes_b, encodings, config=config),
                                            warmup=50, rep=1500, return_mode="median"))
        print(f"{n}: " + "; ".join(f"{name} " + ", ".join(f"{t:.2f}" for t in ts) for name, ts in times.items()),
              flush=True)
        rows.append((n, len(encodings), *(statistics.median(times[name]) for name in kernels), equal))
        del planes_a, planes_b
        torch.cuda.empty_cache()

    n = max(sizes)
    generator = torch.Generator(device="cuda").manual_seed(n)
    a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
    callers = {name: (lambda: ozaki.matmul(a, b, engine="int8")) for name in kernels}
    callers["DGEMM"] = lambda: a @ b
    calls = {name: [] for name in callers}
    results = {}
    for _ in range(args.calls):
        for name, product in callers.items():
            if name in kernels:
                use(kernels[name])
            results[name] = product()  # a warm call of its own before each timed one
            torch.cuda.synchronize()
            began = time.perf_counter()
            product()
            torch.cuda.synchronize()
            calls[name].append(time.perf_counter() - began)
    whole_equal = torch.equal(results["as written"], results["widened"])

    print("\n| n | moduli | GEMMs as written, ms | widened, ms | widened / as written | outputs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n_, moduli, written, widened, equal in rows:
        print(f"| {n_} | {moduli} | {written:.2f} | {widened:.2f} | {widened / written:.3f} | "
              f"{'equal' if equal else 'DIFFER'} |")
    print(f"\nwhole calls at {n}³ ({args.calls} each, median (min) ms; results {'equal' if whole_equal else 'DIFFER'}): "
          + "; ".join(f"{name} {1e3 * statistics.median(t):.2f} ({1e3 * min(t):.2f})" for name, t in calls.items()))


if __name__ == "__main__":
    main()
