"""SASS instructions of the encode, decode and quotients kernels, counted without a GPU.

Run from the repository root (any machine; no GPU needed, nor TRITON_INTERPRET):

    PYTHONPATH=. python3 benchmarks/sass_counts.py [k]      (default K = 16384)

Compiles each kernel for sm_90 as a launch at n = 16384 specializes it (the stage modules'
``compile_kernel``), for the moduli of the int8 plan that rows of 53 bits take at this K
(``ozaki.planning.moduli_for``: 16 int8 moduli at K = 16384), and counts its SASS by opcode
(``kernels.ptx.sass_opcodes``: the program text, so both sides of a branch count).  The
decode is one program per block of entries with two block-uniform branches (its fast
paths): its count over the entries a thread holds counts both sides of each, so it bounds
what a block runs per entry rather than giving it.  The row "decode, common path" counts
what a block of the common kind runs (every entry certain, its float rounding sure, nothing
flagged): the program followed from its start, past every conditional branch and through
every unconditional one, to its EXIT.  Which side of each branch that takes is the
compiler's; on the H200 the count matched Nsight Compute's executed instructions per entry
(benchmarks/kernels.md, "The decode's stores and flag").  The encode's count
includes both its float and its integer tile paths.  The quotients pass of the "fp64" rule
counts per entry of G, both sides' quotients.  The plane GEMM is the int8 launch the
tuner takes on the H200 (``kernels.products.CONFIGS["int8"]``'s first Gluon config, byte
residues): per entry its count is the epilogue's (the K loop's instructions are per K block,
not per entry).  Each kernel's registers a thread (``kernels.ptx.registers``) say how many
programs of it, or of any other kernel beside it, an SM's 65,536 registers hold.  The table
prints last.
"""

from __future__ import annotations

import collections
import sys

import torch

from kernels import accuracy, crt, products, residues
from kernels.ptx import registers, sass_listing, sass_opcodes
from ozaki.capacity import crt_capacity
from ozaki.planning import moduli_for


def fall_through_opcodes(compiled) -> collections.Counter:
    """Opcodes along the path that falls through every conditional branch and takes every
    unconditional one, from the first instruction to an unpredicated EXIT."""
    program = sass_listing(compiled)
    at = {instruction.address: index for index, instruction in enumerate(program)}
    counts, index, seen = collections.Counter(), 0, set()
    while index < len(program) and index not in seen:
        seen.add(index)
        instruction = program[index]
        counts[instruction.opcode] += 1
        if instruction.opcode == "EXIT" and not instruction.predicated:
            break
        if instruction.opcode == "BRA" and not instruction.predicated:
            index = at[int(instruction.operands.split()[0], 16)]
        else:
            index += 1
    return counts


def main() -> None:
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    moduli = moduli_for("int8", k, crt_capacity(k, 53, 53), torch.device("cpu")).moduli
    entries_per_thread = crt.DECODE_BLOCK // (32 * crt.DECODE_WARPS)
    decode = crt.compile_kernel(moduli, residues="u8", aligned=True)
    rows = [("decode", decode, sass_opcodes(decode), entries_per_thread),
            ("decode, common path", decode, fall_through_opcodes(decode), entries_per_thread)]
    for operand in ("a", "b"):
        encode = residues.compile_kernel(moduli, operand=operand)
        rows.append((f"encode {operand}", encode, sass_opcodes(encode), None))
    block_m, block_n = accuracy.QUOTIENTS_BLOCK
    quotients = accuracy.compile_kernel(90, "quotients")
    rows.append(("quotients", quotients, sass_opcodes(quotients), block_m * block_n // (32 * accuracy.QUOTIENTS_WARPS)))
    gemm = next(config for config in products.CONFIGS["int8"] if config.gluon)
    plane_gemm = products.compile_kernel("int8", 90, gemm)
    rows.append((f"plane GEMM {gemm.block_m}x{gemm.block_n}x{gemm.block_k}, {gemm.num_warps} warps", plane_gemm,
                 sass_opcodes(plane_gemm), gemm.block_m * gemm.block_n // (32 * gemm.num_warps)))
    print(f"K = {k}: {len(moduli)} moduli {moduli}")
    print("| kernel | registers a thread | SASS per thread | per entry | most frequent |")
    print("| --- | --- | --- | --- | --- |")
    for name, compiled, counts, entries in rows:
        total = sum(counts.values())
        per_entry = f"{total / entries:.0f}" if entries else "–"
        common = ", ".join(f"{op} {n}" for op, n in counts.most_common(8))
        print(f"| {name} | {registers(compiled)} | {total} | {per_entry} | {common} |")


if __name__ == "__main__":
    main()
