"""SASS instructions of the encode and decode kernels, counted without a GPU.

Run from the repository root (any machine; no GPU needed, nor TRITON_INTERPRET):

    PYTHONPATH=. python3 benchmarks/sass_counts.py [k]      (default K = 16384)

Compiles each kernel for sm_90 as a launch at n = 16384 specializes it (the stage modules'
``compile_kernel``), for the moduli of the int8 plan that rows of 53 bits take at this K
(``ozaki.planning.moduli_for``: 16 int8 moduli at K = 16384), and counts its SASS by opcode
(``kernels.ptx.sass_opcodes``: the program text, so both sides of a branch count).  The
decode is one program per block of entries with two block-uniform branches (its fast
paths): its count over the entries a thread holds counts both sides of each, so it bounds
what a block runs per entry rather than giving it (benchmarks/kernels.md, "The decode's
fast blocks": the decode's time follows its integer instructions, not all of them).  The encode's count
includes both its float and its integer tile paths.  The plane GEMM is the int8 launch the
tuner takes on the H200 (``kernels.products.CONFIGS["int8"]``'s first Gluon config, byte
residues): per entry its count is the epilogue's (the K loop's instructions are per K block,
not per entry).  The table prints last.
"""

from __future__ import annotations

import sys

import torch

from kernels import crt, products, residues
from kernels.ptx import sass_opcodes
from ozaki.capacity import crt_capacity
from ozaki.planning import moduli_for


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    moduli = moduli_for("int8", k, crt_capacity(k, 53, 53), torch.device("cpu")).moduli
    entries_per_thread = crt.DECODE_BLOCK // (32 * crt.DECODE_WARPS)
    rows = [("decode", crt.compile_kernel(moduli, residues="u8", aligned=True), entries_per_thread)]
    for operand in ("a", "b"):
        rows.append((f"encode {operand}", residues.compile_kernel(moduli, operand=operand), None))
    gemm = next(config for config in products.CONFIGS["int8"] if config.gluon)
    rows.append((f"plane GEMM {gemm.block_m}x{gemm.block_n}x{gemm.block_k}, {gemm.num_warps} warps",
                 products.compile_kernel("int8", 90, gemm), gemm.block_m * gemm.block_n // (32 * gemm.num_warps)))
    print(f"K = {k}: {len(moduli)} moduli {moduli}")
    print("| kernel | SASS per thread | per entry | most frequent |")
    print("| --- | --- | --- | --- |")
    for name, compiled, entries in rows:
        counts = sass_opcodes(compiled)
        total = sum(counts.values())
        per_entry = f"{total / entries:.0f}" if entries else "–"
        common = ", ".join(f"{op} {n}" for op, n in counts.most_common(8))
        print(f"| {name} | {total} | {per_entry} | {common} |")


if __name__ == "__main__":
    main()
