"""Where the CPU reference engine spends its time, stage by stage, against numpy's DGEMM.

    python benchmarks/cpu_profile.py [--sizes 512 1024 2048] [--threads 1 2] [--reps 3] [--phi 0.5]

For each n and torch thread count: the median of ``reps`` timings (after one warm-up) of
numpy's ``a @ b``, of ``ozaki.matmul(a, b)`` (accuracy "fp64", engine "reference"), and of
the stages called one by one as :func:`ozaki.pipeline.run` calls them (scaling
with its bits, residues of both operands, the residue GEMMs, Garner's digits, the rounding).
numpy's BLAS keeps its own thread count (its default); the ratio is ozaki over numpy.
Entries are (rand − 0.5)·exp(phi·randn), the usual test matrices of Ozaki-scheme papers.  The
machine may be shared: compare repeated runs, and read the stage columns, not one ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import ozaki
from ozaki import planning, reading
from ozaki.crt import garner, round_to_float64
from ozaki.products import direct_products
from ozaki.residues import crt_capacity, residues
from ozaki.scaling import scale_rows

_STAGES = ("scale", "residues", "products", "garner", "round")


def _stages(a: torch.Tensor, b: torch.Tensor) -> tuple[list[float], int]:
    """Seconds per stage of one product, and the number of moduli."""
    marks = [time.perf_counter()]
    bt = b.transpose(-1, -2)
    sa = scale_rows(a, reading.row_bits(a, "exact"))
    sb = scale_rows(bt, reading.row_bits(bt, "exact"))
    k = a.shape[-1]
    plan = planning.moduli_for("reference", k, crt_capacity(k, int(sa.bits.max()), int(sb.bits.max())), a.device)
    marks.append(time.perf_counter())
    ra = residues(sa, plan.moduli)
    rb = residues(sb, plan.moduli).transpose(-1, -2)
    marks.append(time.perf_counter())
    c = direct_products(ra, rb, plan.moduli)
    marks.append(time.perf_counter())
    digits = garner(c, plan.moduli)
    marks.append(time.perf_counter())
    round_to_float64(digits, plan.moduli, -(sa.shift[:, None] + sb.shift[None, :]))
    marks.append(time.perf_counter())
    return [later - earlier for earlier, later in zip(marks, marks[1:])], len(plan.moduli)


def _median_seconds(run, reps: int) -> float:
    run()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--phi", type=float, default=0.5)
    args = parser.parse_args(argv)

    print(f"{'n':>5} {'thr':>3} {'moduli':>6} {'numpy ms':>9} {'ozaki ms':>9} {'ratio':>6}  " + " ".join(f"{s:>9}" for s in _STAGES))
    for n in args.sizes:
        rng = np.random.default_rng(n)
        a_np, b_np = ((rng.random((n, n)) - 0.5) * np.exp(args.phi * rng.standard_normal((n, n))) for _ in range(2))
        a, b = torch.from_numpy(a_np), torch.from_numpy(b_np)
        for threads in args.threads:
            torch.set_num_threads(threads)
            native = _median_seconds(lambda: a_np @ b_np, args.reps)
            total = _median_seconds(lambda: ozaki.matmul(a_np, b_np, engine="reference"), args.reps)
            _stages(a, b)
            samples = [_stages(a, b) for _ in range(args.reps)]
            count = samples[0][1]
            stages = [statistics.median(s[0][i] for s in samples) for i in range(len(_STAGES))]
            print(
                f"{n:>5} {threads:>3} {count:>6} {native * 1e3:>9.0f} {total * 1e3:>9.0f} {total / native:>6.1f}  "
                + " ".join(f"{t * 1e3:>9.0f}" for t in stages),
                flush=True,
            )


if __name__ == "__main__":
    main()
