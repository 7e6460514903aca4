"""The fused encode and decode kernels on one GPU: bytes per second against a copy, per launch shape.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_encode_decode.py [n]      (default n = 16384)

A and B are n × n (rand − 0.5)·exp(0.5·randn) float64 matrices and the plan is the int8 engine's
``accuracy="fp64"`` plan for them (its moduli, and the shifts of stage 1).  Each ``block`` and
``num_warps`` of the encode (A, and Bᵀ read in place) and of the decode (byte residues drawn at random
below each modulus) is first checked to return the default launch's bits, then timed
(``triton.testing.do_bench``); bytes moved (read and written once each) over time, and that as a share
of the device's copy rate (``clone`` of A, timed the same way).  The table prints last.
"""

import sys

import torch
from phi_data import phi_matrix
from triton.testing import do_bench

from kernels.crt import decode_residues
from kernels.residues import encode_planes
from ozaki import pipeline
from ozaki.scaling import shifts_of

ENCODE_LAUNCHES = [((16, 128), 8), ((8, 128), 8), ((8, 128), 4), ((4, 256), 8), ((8, 256), 8), ((16, 64), 4),
                   ((32, 64), 8), ((16, 128), 4), ((4, 128), 4)]
DECODE_LAUNCHES = [(256, 4), (512, 4), (1024, 4), (512, 8), (1024, 8), (2048, 8), (128, 4), (256, 2)]


def milliseconds(fn) -> float:
    return do_bench(fn, warmup=10, rep=200)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    generator = torch.Generator(device="cuda").manual_seed(1)

    a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
    call = pipeline.prepare(a, b, "fp64", "int8", early=False)
    plan = call.plan
    extents_a, extents_b, bits_a, bits_b = call.lines[0]
    shift_a, shift_b = shifts_of(extents_a.row_max, bits_a), shifts_of(extents_b.row_max, bits_b)
    encodings, moduli = plan.moduli.encodings, plan.moduli.moduli
    copy_rate = 2 * 8 * n * n / milliseconds(lambda: a.clone()) / 1e6
    rows = [f"n = {n}, {len(moduli)} moduli, copy {copy_rate:.0f} GB/s"]
    print(rows[-1], flush=True)

    encoded = (n * n * (8 + len(moduli))) / 1e6  # MB read and written per operand
    want_a, want_b = encode_planes(a, shift_a, encodings, "a"), encode_planes(b.T, shift_b, encodings, "b")
    for block, warps in ENCODE_LAUNCHES:
        def encode(x, shift, side):
            return encode_planes(x, shift, encodings, side, block=block, num_warps=warps)

        same = torch.equal(encode(a, shift_a, "a"), want_a) and torch.equal(encode(b.T, shift_b, "b"), want_b)
        ms_a, ms_b = milliseconds(lambda: encode(a, shift_a, "a")), milliseconds(lambda: encode(b.T, shift_b, "b"))
        rows.append(f"| encode | {block} | {warps} | A {ms_a:.2f} ms, {encoded / ms_a:.0f} GB/s "
                    f"({encoded / ms_a / copy_rate:.0%}) | Bᵀ {ms_b:.2f} ms, {encoded / ms_b:.0f} GB/s "
                    f"({encoded / ms_b / copy_rate:.0%}) | {same} |")
        print(rows[-1], flush=True)
    del want_a, want_b
    torch.cuda.empty_cache()

    residues = torch.stack([torch.randint(0, m, (n, n), generator=generator, device="cuda", dtype=torch.int32)
                            .to(torch.uint8) for m in moduli])
    row_exponent, col_exponent = -shift_a - 3, -shift_b
    decoded = (n * n * (len(moduli) + 8)) / 1e6
    want = decode_residues(residues, moduli, row_exponent, col_exponent).view(torch.int64)
    for block, warps in DECODE_LAUNCHES:
        def decode():
            return decode_residues(residues, moduli, row_exponent, col_exponent, block=block, num_warps=warps)

        same = torch.equal(decode().view(torch.int64), want)
        ms = milliseconds(decode)
        rows.append(f"| decode | {block} | {warps} | {ms:.2f} ms, {decoded / ms:.0f} GB/s ({decoded / ms / copy_rate:.0%})"
                    f" | | {same} |")
        print(rows[-1], flush=True)
    print("| kernel | block | warps | time, rate (share of copy) | Bᵀ | default's bits |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows[1:]))


if __name__ == "__main__":
    main()
