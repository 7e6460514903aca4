"""Where one emulated call makes the GPU wait for the host: a timeline of host and device, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_timeline.py [n]      (default n = 8192)

Wraps the stage functions of one ``ozaki.matmul(a, b, engine="int8")`` (A, B phi = 0.5 float64 n × n)
so that each records, on entry and exit, the host's clock and a CUDA event on the stream; prints, for
the third of three calls, each mark's host time, the device's time at that point of the stream and
their difference.  A difference near 0 means the device had caught up with the host there: it waited
for the host's next launch (after a read of the device, the host's Python until the next launch is
device idle time).  The profiler's own overhead is absent; each mark costs the host a few µs.
"""

from __future__ import annotations

import functools
import sys
import time

import torch
from phi_data import phi_matrix

import ozaki
from kernels import accuracy as accuracy_kernels
from kernels import crt, residues
from ozaki import accuracy, pipeline, planning, reading

STAGES = ((reading, "start"), (accuracy, "row_reading"), (reading, "_extents"), (accuracy, "fp64_reading"),
          (accuracy, "_upper_reading"),
          (accuracy_kernels, "window_tops_kernel"), (accuracy, "_lower_codes"), (accuracy, "_code_product"),
          (accuracy_kernels, "least_quotients_kernel"), (accuracy_kernels, "levels_kernel"), (reading, "_summary"),
          (reading, "widen"), (planning, "moduli_for"), (planning, "native_verdict"),
          (pipeline, "_early_encodes"), (pipeline, "_fused_by_row_blocks"),
          (pipeline, "sides_shifts"), (pipeline, "_plane_config"),
          (residues, "shift_range"), (residues, "encode_planes"), (pipeline, "encoded_modular_matmul"),
          (crt, "decode_residues"), (crt, "raise_for_flag"))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    generator = torch.Generator(device="cuda").manual_seed(1)

    a, b = phi_matrix((n, n), generator), phi_matrix((n, n), generator)
    marks = []

    def mark(label: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        marks.append((label, time.perf_counter(), event))

    def wrapped(fn, name):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            mark(f"{name} >")
            out = fn(*args, **kwargs)
            mark(f"{name} <")
            return out
        return inner

    for module, name in STAGES:
        if hasattr(module, name):
            setattr(module, name, wrapped(getattr(module, name), name))
    for _ in range(3):
        marks.clear()
        torch.cuda.synchronize()
        mark("start")
        ozaki.matmul(a, b, engine="int8")
        mark("end")
        torch.cuda.synchronize()
    host0, event0 = marks[0][1], marks[0][2]
    print(f"n = {n}: host ms, device ms at the mark, device behind host (about 0: the device waited)")
    for label, host, event in marks:
        device = event0.elapsed_time(event)
        host_ms = 1e3 * (host - host0)
        print(f"{label:34s} host {host_ms:8.3f}  device {device:8.3f}  behind {device - host_ms:8.3f}")


if __name__ == "__main__":
    main()
