"""The fused encode kernel on one GPU: bits against the staged torch path, and time.

    PYTHONPATH=. python3 benchmarks/gpu_encode.py [n ...]      (default n = 4096 16384)

For each n: A = (rand − 0.5)·exp(0.5·randn), n × n, encoded for the catalog's 23-modulus int8
plan as A (rows) and as Bᵀ (a transposed view, read in place); the first 256 rows are checked
entry for entry against scale_rows -> residues -> products.digit_planes, then the kernel on
the whole operand is timed (mean of 5 after a warm-up).  Runs on the CPU too (set
TRITON_INTERPRET=1, small n).
"""

import sys
import time

import torch

from kernels.residues import encode_planes
from ozaki import catalog, products
from ozaki.residues import residues
from ozaki.scaling import exact_bits, row_shifts, scale_rows

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def milliseconds(call) -> float:
    def sync():
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    call()
    sync()
    began = time.perf_counter()
    for _ in range(5):
        call()
    sync()
    return (time.perf_counter() - began) / 5 * 1e3


def main(sizes) -> None:
    plan = next(p for p in catalog.plans_for("int8") if len(p.moduli) == 23)
    encodings = [catalog.encoding(name) for _, name in plan.moduli]
    moduli = [m for m, _ in plan.moduli]
    generator = torch.Generator(DEVICE).manual_seed(0)
    for n in sizes:
        uniform = torch.rand(n, n, generator=generator, device=DEVICE, dtype=torch.float64)
        x = (uniform - 0.5) * torch.exp(0.5 * torch.randn(n, n, generator=generator, device=DEVICE, dtype=torch.float64))
        for side, rows in (("a", x), ("b", x.t())):
            bits = exact_bits(rows)
            shift = row_shifts(rows, bits)
            head = slice(0, min(n, 256))
            r = residues(scale_rows(rows[head].contiguous(), bits[head]), moduli)
            want = torch.cat([products.digit_planes(r[i], e, side) for i, e in enumerate(encodings)])
            same = torch.equal(encode_planes(rows[head], shift[head], encodings, side).long(), want)
            ms = milliseconds(lambda: encode_planes(rows, shift, encodings, side))
            print(f"n={n} side={side} bits_equal={same} encode_ms={ms:.2f} ({plan.name}, {len(moduli)} moduli)",
                  flush=True)


if __name__ == "__main__":
    main([int(v) for v in sys.argv[1:]] or [4096, 16384])
