"""The GPU benchmark of record: ``python -m ozaki bench`` on one GPU in about five minutes.

Run from the repository root on the GPU machine (nothing needs installing there):

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/gpu_matmul.py

It measures torch's float64 matmul (cuBLAS DGEMM) and every engine of ``ozaki.matmul(accuracy="fp64")`` in the
same run on the issue's shapes, then projects every catalog plan onto the B200 and B300, calibrated by this
run.  bench-gpu.csv, bench-gpu.png, projection.csv, projection.md and run.txt land in $OUT (else
./gpu_matmul_out); the tables print last.  Extra arguments are passed on and override these (argparse keeps
the last occurrence), e.g. ``--sizes 8192 --engines int8``.
"""

from __future__ import annotations

import os
import sys

from ozaki import bench

OUT = os.environ.get("OUT", "gpu_matmul_out")
ARGS = [
    # The targets first (n = 16384 and 8192), so a run the budget cuts short still has them.
    "--sizes", "16384,8192,4096,2048,1024",
    "--shapes", "65536x4096x256,4096x65536x4096",
    "--engines", "auto,int8,fp8,fp4",
    "--accuracy", "fp64",
    "--phi", "0.5",
    "--reps", "5",
    # No shape starts after 4 minutes: with the last one finishing and the projection, the run ends near 5.
    "--budget", "240",
    "--project", "h200,b200,b300",
    "--out", OUT,
]  # fmt: skip

if __name__ == "__main__":
    sys.exit(bench.main(ARGS + sys.argv[1:]))
