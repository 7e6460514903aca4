"""``python -m ozaki bench --distributed``: :mod:`ozaki.distributed` on a mesh of every rank.

    torchrun --nproc-per-node N -m ozaki bench --distributed [--sizes 256,512] [--accuracy fp64,exact]

One CSV row (:data:`COLUMNS`) per square size n and layout: rows (A Shard(0), B Replicate()),
columns (A Replicate(), B Shard(1)), k (A Shard(1), B Shard(0), the output all-reduced) and
k-scatter (the same, the output reduce-scattered to Shard(0)).  Each row holds the median time
per product (the slowest rank's, from a barrier), the bytes this rank passed to collectives
(:func:`ozaki.distributed.traffic`: planning, residues, gathered operands) beside those a float64
reduction of a split K passes, and the one-device comparison: whether the gathered result has
the bits of ``ozaki.matmul`` of the same matrices on one device (rank 0) and that call's time.
Beside them, distributed DGEMM (torch.matmul on the same DTensors, a split K's partial sums
reduced in float64), its time, and how many entries differ from one device's DGEMM.

NCCL with one GPU per rank (LOCAL_RANK) where CUDA is there, else gloo on CPU processes;
outside torchrun, a mesh of this process alone.  Every rank builds the same inputs from the seed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import ozaki
from ozaki import distributed
from ozaki.planning import ENGINES

from .common import (
    accuracy_list,
    device_name,
    finite_float,
    input_matrix,
    int_list,
    known_names,
    median_seconds,
    positive_int,
    print_table,
    versions,
    write_csv,
)

__all__ = ["COLUMNS", "LAYOUTS", "main"]

COLUMNS = (
    "date", "device", "backend", "world", "m", "k", "n", "layout", "accuracy", "engine", "reps", "median_s",
    "one_device_s", "speedup", "bits_equal", "plan_bytes", "residue_bytes", "gather_bytes", "float64_bytes",
    "dgemm_s", "dgemm_one_device_s", "dgemm_bits_differ",
)  # fmt: skip
# (A's placement, B's placement, the output's).
LAYOUTS = {
    "rows": (Shard(0), Replicate(), Shard(0)),
    "columns": (Replicate(), Shard(1), Shard(1)),
    "k": (Shard(1), Shard(0), Replicate()),
    "k-scatter": (Shard(1), Shard(0), Shard(0)),
}
_CPU_SIZES = (256, 512, 1024)
_GPU_SIZES = (4096, 8192)


@contextlib.contextmanager
def _mesh_of_every_rank():
    """A 1-D mesh of the process group torchrun describes (env://), or, outside torchrun, of
    this process alone; a group that exists already is used and left as it is."""
    cuda = torch.cuda.is_available()
    owned, folder = not dist.is_initialized(), None
    if owned and "RANK" in os.environ:
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cuda else "gloo")
    elif owned:
        folder = tempfile.TemporaryDirectory()
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"file://{folder.name}/init", rank=0,
                                world_size=1)
    try:
        yield init_device_mesh("cuda" if cuda else "cpu", (dist.get_world_size(),))
    finally:
        if owned:
            dist.destroy_process_group()
        if folder is not None:
            folder.cleanup()


def _launcher(world: int) -> str:
    return f"torchrun --nproc-per-node {world} -m ozaki" if "RANK" in os.environ else "python -m ozaki"


def _slowest_median(product: Callable, reps: int, device: torch.device):
    """Median over ``reps`` calls of the slowest rank's seconds from a common start, and the last result."""
    times = []
    for _ in range(reps):
        dist.barrier()
        began = time.perf_counter()
        result = product()
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = torch.tensor([time.perf_counter() - began], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        times.append(float(elapsed))
    return statistics.median(times), result


def _bytes_by_role(records: Sequence[distributed.Collective]) -> dict:
    roles = {"residues": "residue_bytes", "operand": "gather_bytes"}
    totals = dict.fromkeys(["plan_bytes", *roles.values()], 0)
    for record in records:
        totals[roles.get(record.purpose, "plan_bytes")] += record.bytes
    return totals


def _float64_bytes(layout: str, m: int, n: int, world: int) -> int:
    """What a split K's float64 partial products pass: an all-reduce of 8·M·N, a reduce-scatter of 8·W·⌈M/W⌉·N."""
    return {"k": 8 * m * n, "k-scatter": 8 * world * -(-m // world) * n}.get(layout, 0)


def _rows_for(n: int, accuracy, args, mesh, device: torch.device) -> list[dict]:
    generator = torch.Generator(device=device).manual_seed(args.seed)
    a, b = (input_matrix((n, n), args.phi, generator, device) for _ in range(2))
    world, rank = mesh.size(), mesh.get_local_rank()
    cuda = device.type == "cuda"
    one = dgemm_one = None
    if rank == 0:
        ozaki.matmul(a, b, accuracy=accuracy, engine=args.engine)  # warm-up: catalog, kernels, tuning
        one = median_seconds(lambda: ozaki.matmul(a, b, accuracy=accuracy, engine=args.engine), args.reps, cuda)
        dgemm_one = median_seconds(lambda: torch.matmul(a, b), args.reps, cuda)
    rows = []
    for name in args.layouts:
        placement_a, placement_b, out = LAYOUTS[name]
        # Every rank holds the same inputs: each takes its shard without communicating.
        da = distribute_tensor(a, mesh, [placement_a], src_data_rank=None)
        db = distribute_tensor(b, mesh, [placement_b], src_data_rank=None)
        product = lambda: distributed.matmul(da, db, accuracy=accuracy, engine=args.engine,  # noqa: E731
                                             out_placement=out)
        with distributed.traffic() as records:
            product()  # warm-up, and the collectives of one call
        seconds, c = _slowest_median(product, args.reps, device)
        dgemm_seconds, dgemm = _slowest_median(lambda: torch.matmul(da, db).redistribute(mesh, [out]), args.reps, device)
        c, dgemm = c.full_tensor(), dgemm.full_tensor()
        row = {"world": world, "m": n, "k": n, "n": n, "layout": name, "accuracy": accuracy, "engine": args.engine,
               "reps": args.reps, "median_s": seconds, "dgemm_s": dgemm_seconds, **_bytes_by_role(records),
               "float64_bytes": _float64_bytes(name, n, n, world)}  # fmt: skip
        if rank == 0:
            same = torch.equal(c.view(torch.int64), one[1].view(torch.int64))
            row.update(one_device_s=one[0], speedup=one[0] / seconds, bits_equal=same, dgemm_one_device_s=dgemm_one[0],
                       dgemm_bits_differ=int((dgemm.view(torch.int64) != dgemm_one[1].view(torch.int64)).sum()))
        rows.append(row)
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node N -m ozaki bench --distributed",
        description="Time, bytes moved and bits of ozaki.distributed against one device, per layout (CSV, table).",
    )
    add = parser.add_argument
    add("--sizes", type=int_list, help=f"square sizes n (default: CPU {_CPU_SIZES}, GPU {_GPU_SIZES})")
    add("--accuracy", type=accuracy_list, default=("fp64",), help="accuracies (default fp64)")
    add("--engine", choices=ENGINES, help="engine (default: CPU auto, GPU int8: emulated bits, never native DGEMM)")
    add("--layouts", type=known_names(tuple(LAYOUTS), "layout"), default=tuple(LAYOUTS),
        help=f"layouts from {','.join(LAYOUTS)} (default all)")
    add("--reps", type=positive_int, default=3, help="timed repetitions, the median reported (default 3)")
    add("--phi", type=finite_float, default=0.5, help="exponent spread of the inputs (default 0.5)")
    add("--seed", type=int, default=0)
    add("--out", type=Path, default=Path("bench-results"), help="output folder (default ./bench-results)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    cuda = torch.cuda.is_available()
    args.engine = args.engine or ("int8" if cuda else "auto")
    with _mesh_of_every_rank() as mesh:
        device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        rank, world = mesh.get_local_rank(), mesh.size()
        date = datetime.now(timezone.utc).isoformat(timespec="seconds")
        name = device_name(cuda)
        backend = dist.get_backend()
        header = (f"{date}  {world} x {name} ({backend}, {torch.get_num_threads()} threads per rank)  "
                  f"{versions()}\n{_launcher(world)} bench --distributed {shlex.join(argv)}")
        rows = []
        for n in args.sizes or (_GPU_SIZES if cuda else _CPU_SIZES):
            for accuracy in args.accuracy:
                rows.extend(_rows_for(n, accuracy, args, mesh, device))
                if rank == 0:
                    print(f"  done n={n} accuracy={accuracy}", flush=True)
    if rank != 0:
        return 0
    rows = [{**row, "date": date, "device": name, "backend": backend} for row in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "run-distributed.txt").write_text(header + "\n")
    write_csv(args.out / "bench-distributed.csv", COLUMNS, rows)
    print(header)
    print_table(rows, ("world", "n", "layout", "accuracy", "engine", "median_s", "one_device_s", "speedup",
                       "plan_bytes", "residue_bytes", "gather_bytes", "float64_bytes", "dgemm_s",
                       "dgemm_one_device_s", "dgemm_bits_differ", "bits_equal"))  # fmt: skip
    print(f"wrote {args.out / 'bench-distributed.csv'}")
    return 0 if all(row["bits_equal"] for row in rows) else 1
