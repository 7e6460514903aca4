"""The products stage on one GPU: the persistent plane GEMM over all moduli of a real call.

Run from the repository root on the GPU machine:

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/gpu_products.py [--sizes 8192,16384]

For each n it plans ``ozaki.matmul(a, b)`` (accuracy "fp64", phi = 0.5 data, int8 engine) to get the
moduli and encodings a real call uses, encodes A and B once, and then, in the same run:

* checks every candidate config bit for bit against ``reference_modular_matmul`` on a slice (exact
  float64 GEMMs of the planes);
* times ``encoded_modular_matmul`` (the launch the pipeline makes) for every candidate config, and
  cuBLAS ``torch._int_mm`` on the same operands, once per modulus (int32 products, no reduction) and for
  one product alone.

Effective TOP/s = moduli * 2 * n^3 / time.  A log and results.json land in $OUT (else
./gpu_products_out); the table prints last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import torch
from triton.testing import do_bench

import ozaki
from kernels.products import CONFIGS, PlaneGemmConfig, encoded_modular_matmul, reference_modular_matmul
from kernels.residues import encode_planes
from ozaki.scaling import shifts_of

OUT = os.environ.get("OUT", "gpu_products_out")
# Beyond CONFIGS["int8"]: neighbours of its entries, so the record shows why the list is ordered as it is.
EXTRA = (
    PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=3, tma=True, programs_per_sm=2, gluon=True),
    PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=4, tma=True, gluon=True),
    PlaneGemmConfig(256, 128, 128, num_warps=8, num_stages=4, tma=True, gluon=True),
    PlaneGemmConfig(128, 256, 64, num_warps=8, num_stages=6, tma=True, gluon=True),
    PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, group_m=4, tma=True, gluon=True),
)


def log(line: str, out) -> None:
    print(line, flush=True)
    out.write(line + "\n")
    out.flush()


def describe(config: PlaneGemmConfig) -> str:
    loads = "gluon" if config.gluon else "tma" if config.tma else "ptr"
    return (f"{config.block_m}x{config.block_n}x{config.block_k} w{config.num_warps} s{config.num_stages} "
            f"g{config.group_m} {loads} x{config.programs_per_sm}/SM")


def operands(n: int, phi: float):
    """The planes of a real fp64 call on phi data: ([T, n, n] of A, [T, n, n] of Bᵀ, encodings)."""
    generator = torch.Generator(device="cuda").manual_seed(n)

    def draw():
        u = torch.rand((n, n), generator=generator, device="cuda", dtype=torch.float64) - 0.5
        return u * torch.exp(phi * torch.randn((n, n), generator=generator, device="cuda", dtype=torch.float64))

    a, b = draw(), draw()
    plan = ozaki.explain(a, b, engine="int8")
    (extents_a, extents_b, bits_a, bits_b), = plan.rows
    encodings = plan.moduli.encodings
    bt = b.T
    planes_a = encode_planes(a, shifts_of(extents_a.row_max, bits_a), encodings, "a")
    planes_b = encode_planes(bt, shifts_of(extents_b.row_max, bits_b), encodings, "b")
    del a, b, bt
    return planes_a, planes_b, encodings


def check_bits(planes_a, planes_b, encodings, config, rows: int = 512, cols: int = 1024) -> bool:
    got = encoded_modular_matmul(planes_a[:, :rows], planes_b[:, :cols], encodings, config=config)
    start = 0
    for index, encoding in enumerate(encodings):
        stop = start + len(encoding.planes)
        want = reference_modular_matmul(planes_a[start:stop, :rows], planes_b[start:stop, :cols],
                                        [p.coefficient for p in encoding.planes], encoding.modulus)
        if not torch.equal(got[index].long(), want):
            return False
        start = stop
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="8192,16384")
    parser.add_argument("--phi", type=float, default=0.5)
    parser.add_argument("--only", choices=("all", "extra", "gluon"), default="all",
                        help="extra: time only the configs beyond CONFIGS, gluon: only the Gluon kernel's (each with "
                             "the default, for reference)")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    out = open(os.path.join(OUT, "products.log"), "w")
    props = torch.cuda.get_device_properties(0)
    log(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} {props.name} ({props.multi_processor_count} SMs), "
        f"torch {torch.__version__}, triton {__import__('triton').__version__}", out)
    listed = list(CONFIGS["int8"]) if args.only == "all" else [CONFIGS["int8"][0]]
    if args.only == "gluon":
        listed += [c for c in CONFIGS["int8"] if c.gluon]
    candidates = listed + [c for c in EXTRA if c not in CONFIGS["int8"] and (args.only != "gluon" or c.gluon)]
    rows, results = [], []
    for n in (int(s) for s in args.sizes.split(",")):
        planes_a, planes_b, encodings = operands(n, args.phi)
        moduli = len(encodings)
        ops = moduli * 2.0 * n**3
        log(f"n = {n}: {moduli} moduli, {planes_a.shape[0]} planes, operands {tuple(planes_a.shape)} "
            f"{planes_a.dtype}", out)

        a32 = planes_a[0]
        b32 = planes_b[0].T  # column-major B: cuBLAS int8 wants K-major
        one = do_bench(lambda: torch._int_mm(a32, b32), warmup=25, rep=200, return_mode="median")

        def per_modulus():
            for t in range(moduli):
                torch._int_mm(planes_a[t], planes_b[t].T)

        cublas = do_bench(per_modulus, warmup=25, rep=300, return_mode="median")
        rows.append((n, "cuBLAS torch._int_mm, one product", one, 2.0 * n**3 / one / 1e9, "-"))
        rows.append((n, f"cuBLAS torch._int_mm x {moduli} (int32 out, no mod)", cublas, ops / cublas / 1e9, "-"))
        for config in candidates:
            try:
                exact = check_bits(planes_a, planes_b, encodings, config)
                ms = do_bench(lambda: encoded_modular_matmul(planes_a, planes_b, encodings, config=config),
                              warmup=25, rep=300, return_mode="median")
            except Exception as error:  # a config the device cannot hold: record and go on
                log(f"  {describe(config)}: {type(error).__name__}: {str(error)[:200]}", out)
                continue
            tops = ops / ms / 1e9
            rows.append((n, describe(config), ms, tops, "equal" if exact else "DIFFER"))
            results.append(dict(n=n, moduli=moduli, config=dataclasses.asdict(config), ms=ms, tops=tops,
                                bits="equal" if exact else "differ", int_mm_one_ms=one, int_mm_all_ms=cublas))
            log(f"  {describe(config)}: {ms:.2f} ms, {tops:.0f} TOP/s, x{one * moduli / ms:.2f} int_mm, "
                f"bits {rows[-1][-1]}", out)
        planes_a = planes_b = None  # free the planes before the next size allocates its own
        torch.cuda.empty_cache()
    json.dump(results, open(os.path.join(OUT, "products.json"), "w"), indent=1)
    log("\n| n | kernel | ms | TOP/s | bits |\n| --- | --- | --- | --- | --- |", out)
    for n, name, ms, tops, bits in rows:
        log(f"| {n} | {name} | {ms:.2f} | {tops:.0f} | {bits} |", out)


if __name__ == "__main__":
    main()
