"""How close the `accuracy="fp64"` plans of the bench's products sit to another modulus.

Run from the repository root (CPU or GPU; the rule's integers are the same on both):

    PYTHONPATH=. python3 benchmarks/fp64_headroom.py [n ...]      (default 4096 8192 16384)

For n × n phi = 0.5 operands (``phi_data.phi_matrix``, seed 1, as the GPU benchmarks draw them) and the
int8 engine it prints what the rule of ``ozaki/accuracy.py`` needs (the widest row P and column Q before the
planning fills spare capacity, and the CRT capacity those bits ask for), the moduli the planning takes for
that need (the first plan of the fewest GEMMs that holds it; the rows then keep what those moduli pay for), the
most any catalog plan of as many GEMMs holds (the need can grow by that much before the planning takes one more
GEMM: the headroom), and how far the next cheaper int8 plan falls short.  It reads the need where
``ozaki.planning`` hands it to its fill (``_filled``), the one place where both the need and the chosen
moduli are at hand.
"""

from __future__ import annotations

import math
import sys

import torch
from phi_data import phi_matrix

import ozaki
from ozaki import catalog, planning


def headroom(n: int, device: torch.device) -> dict:
    seen = {}
    fill = planning._filled

    def spy(capacity, product, p, q, widest_a, widest_b):
        seen.update(need=(p, q), need_bits=math.log2(capacity(p, q)), product_bits=math.log2(product))
        return fill(capacity, product, p, q, widest_a, widest_b)

    generator = torch.Generator(device=device).manual_seed(1)
    a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
    planning._filled = spy
    try:
        plan = ozaki.explain(a, b, engine="int8")
    finally:
        planning._filled = fill
    plans = catalog.plans_for("int8")
    as_many = max(p.capacity for p in plans if p.products == plan.products)
    cheaper = [p.capacity for p in plans if p.products < plan.products]
    seen.update(moduli=len(plan.moduli.moduli), filled=(plan.bits_a[1], plan.bits_b[1]), guard=plan.guard,
                as_many_bits=math.log2(as_many), cheaper_bits=math.log2(max(cheaper)) if cheaper else float("nan"))
    return seen


def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [4096, 8192, 16384]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device {device}, torch {torch.__version__}")
    print("| n | need P, Q | capacity needed, log2 | moduli taken, log2 of their product | P, Q kept | guard "
          "| most of a plan of as many GEMMs, log2 (headroom) | next cheaper plan, log2 (short by) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        h = headroom(n, device)
        print(f"| {n} | {h['need'][0]}, {h['need'][1]} | {h['need_bits']:.2f} | {h['moduli']}, "
              f"{h['product_bits']:.2f} | {h['filled'][0]}, {h['filled'][1]} | {h['guard']} "
              f"| {h['as_many_bits']:.2f} ({h['as_many_bits'] - h['need_bits']:.2f}) "
              f"| {h['cheaper_bits']:.2f} ({h['need_bits'] - h['cheaper_bits']:.2f}) |", flush=True)


if __name__ == "__main__":
    main()
