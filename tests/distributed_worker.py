"""One rank of the distributed tests (tests/test_distributed.py): joins a process group, runs
every job of a file on a 1-D mesh of all ranks, and returns (rank 0 also saves) what each job
gave: the bits of the gathered result, its placement and the collectives of the call, or the
error it raised."""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import ozaki
from ozaki import distributed, reading

__all__ = ["PLACEMENTS", "run", "run_and_exit"]

PLACEMENTS = {"R": Replicate(), "S0": Shard(0), "S1": Shard(1)}
# A rank whose partner died waits no longer than this in a collective, then raises.
_COLLECTIVE_TIMEOUT = timedelta(seconds=60)


def run(rank: int, world: int, init_file: str, jobs_file: str, results_file: str | None = None,
        backend: str = "gloo") -> dict:
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=_COLLECTIVE_TIMEOUT)
    try:
        mesh = init_device_mesh("cuda" if backend == "nccl" else "cpu", (world,))
        results = {key: _result(job, mesh) for key, job in torch.load(jobs_file).items()}
    finally:
        dist.destroy_process_group()
    if rank == 0 and results_file is not None:
        torch.save(results, results_file)
    return results


def run_and_exit(rank: int, world: int, init_file: str, jobs_file: str, results_file: str) -> None:
    """:func:`run` in a spawned rank, which then leaves without the interpreter's teardown: gloo's
    worker threads can still hold tensors then, and freeing them while the interpreter finalizes
    aborts the process now and then (SIGABRT, "terminate called without an active exception")
    after every job is done and saved, which the tests would read as a failed rank."""
    run(rank, world, init_file, jobs_file, results_file)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _result(job: dict, mesh) -> dict:
    placement_a, placement_b, out = job["placements"]
    a = distribute_tensor(job["a"].to(mesh.device_type), mesh, [PLACEMENTS[placement_a]])
    b = distribute_tensor(job["b"].to(mesh.device_type), mesh, [PLACEMENTS[placement_b]])
    options = dict(accuracy=job["accuracy"], engine=job["engine"])
    try:
        with distributed.traffic() as records, _triton_path(job["route"] == "triton"):
            if job["route"] == "emulate":
                with ozaki.emulate(**options):
                    c = a @ b
            else:
                c = distributed.matmul(a, b, **options, out_placement=None if out is None else PLACEMENTS[out])
        bits = c.full_tensor().cpu().view(torch.int64)
    except Exception as error:  # every rank raises alike (validation), or the test reports it
        return {"error": f"{type(error).__name__}: {error}"}
    return {"bits": bits, "placement": str(c.placements[0]),
            "traffic": [(r.kind, r.purpose, str(r.dtype), r.bytes) for r in records]}


@contextlib.contextmanager
def _triton_path(forced: bool):
    """The fused Triton stages on CPU tensors too (Triton's interpreter, which the test process
    enables for its spawned ranks), as on a GPU."""
    original = reading.kernels_available
    if forced:
        reading.kernels_available = lambda device: True
    try:
        yield
    finally:
        reading.kernels_available = original
