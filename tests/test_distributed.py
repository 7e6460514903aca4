"""ozaki.distributed: products of DTensors, float64 or complex128, have the bits of ozaki.matmul of
the gathered matrices on one device, on meshes of 1, 2 and 4 ranks (gloo processes on the CPU), for
every placement pair, output placement and accuracy, and move the bytes the module documents; bad
input is refused with the fix.

Each mesh size is one group of spawned processes that runs every job (tests/distributed_worker.py)
and hands back the gathered bits; the comparisons run here, one test per job.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import tempfile
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from distributed_worker import PLACEMENTS, run, run_and_exit
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import ozaki
from kernels.scaling import SUMMARY_LENGTH
from ozaki import bench, distributed
from ozaki.bench import distributed as distributed_bench

WORLDS = (1, 2, 4)
ACCURACIES = ("fp64", "exact", 40)
# (A's, B's, output's): rows, columns, both replicated, K split into each output placement with
# both operands sharded or one replicated, and the pairs that gather one operand first.
LAYOUTS = (
    ("S0", "R", None), ("R", "S1", None), ("R", "R", None),
    ("S1", "S0", None), ("S1", "S0", "S0"), ("S1", "S0", "S1"), ("S1", "R", "S0"), ("R", "S0", "S1"),
    ("S0", "S0", None), ("S0", "S1", None), ("S1", "S1", None),
)  # fmt: skip
# The launch, compilation-free, takes seconds; a hung collective must not hang the suite.
_MESH_DEADLINE_S = 600


def _cases() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    rng = np.random.default_rng(20261202)

    def phi(shape, spread):
        return (rng.random(shape) - 0.5) * np.exp(spread * rng.standard_normal(shape))

    cases = {
        "phi": (phi((9, 37), 0.5), phi((37, 7), 0.5)),  # no dimension divisible by 2 or 4
        "heavy": (phi((6, 23), 4.0), phi((23, 5), 4.0)),  # heavy tails: rows far apart in the fp64 plan
        "long_k": (phi((8, 300), 1.0), phi((300, 6), 1.0)),
        "tiny": (phi((3, 5), 1.0), phi((5, 6), 1.0)),  # fewer rows and K than 4 ranks: empty shards
    }
    # Rows spanning 2^±300: hundreds of bits per row in "exact", bands for the int8 engine.
    cases["wide"] = (np.ldexp(phi((5, 11), 0.0), rng.integers(-300, 300, (5, 11))),
                     np.ldexp(phi((11, 6), 0.0), rng.integers(-300, 300, (11, 6))))
    a, b = phi((6, 10), 1.0), phi((10, 5), 1.0)
    a[0], a[3], a[5, ::2], b[:, 2], b[::3, 4] = 0.0, -0.0, -0.0, 0.0, -0.0
    cases["zeros"] = (a, b)
    a, b = phi((5, 9), 1.0), phi((9, 4), 1.0)
    a[1, 2], a[3, 7], b[4, 1], b[0, 3], a[4, 0], b[0, 0] = np.nan, np.inf, -np.inf, np.inf, 0.0, np.inf  # 0·inf too
    cases["nonfinite"] = (a, b)
    # Under "fp64" a line's bits come from the whole other operand; where no int8 plan is wide
    # enough to fill (p + q past 214 bits here), they are its own.  Rows 4-7 of A meet columns 0-2
    # of B only through small terms, so those columns keep ~100 bits more than rows 0-3 alone ask
    # (a row split must take the minimum over every rank's rows); rows 0-3 cancel to the 2^-120
    # term those bits keep: a·b + tiny − a·b.  Its transpose asks the same of a column split.
    a, b = rng.standard_normal((8, 6)), rng.standard_normal((6, 7))
    b[3, :3], a[4:, 3] = 0.0, a[4:, 3] * 2.0**100
    b[1, :3], b[2, :3] = np.ldexp(b[1, :3], -120), b[0, :3]
    a[:4, 2], a[:4, 1], a[:4, 3:] = -a[:4, 0], 1.0, 0.0
    cases["far"], cases["far_t"] = (a, b), (b.T.copy(), a.T.copy())
    # Complex products, each part drawn as the real cases: each rank multiplies its shards' real embedding.
    cases["complex"] = (phi((9, 37), 0.5) + 1j * phi((9, 37), 0.5), phi((37, 7), 0.5) + 1j * phi((37, 7), 0.5))
    cases["complex_tiny"] = (phi((3, 5), 1.0) + 1j * phi((3, 5), 1.0), phi((5, 6), 1.0) + 1j * phi((5, 6), 1.0))
    a, b = cases["complex"][0][:5, :9].copy(), cases["complex"][1][:9, :4].copy()
    a[1, 2], a[3, 7] = complex(np.nan, 1.0), complex(2.0, np.inf)
    b[4, 1], b[0, 3] = complex(-np.inf, 0.0), complex(0.0, np.inf)
    cases["complex_nonfinite"] = (a, b)
    return {name: (torch.from_numpy(a), torch.from_numpy(b)) for name, (a, b) in cases.items()}


CASES = _cases()


def _jobs() -> dict[tuple, dict]:
    jobs = {}

    def add(case, accuracy, engine, layout, route="matmul"):
        a, b = CASES[case]
        jobs[case, accuracy, engine, layout, route] = dict(a=a, b=b, accuracy=accuracy, engine=engine, placements=layout,
                                                           route=route)

    for case in CASES:
        for accuracy in ACCURACIES:
            for layout in LAYOUTS:
                add(case, accuracy, "auto", layout)
    # The int8 engine's plan (digit planes; in bands for "wide") on the local and the K-split paths.
    for case in ("phi", "wide", "nonfinite", "complex"):
        for accuracy in ("fp64", "exact"):
            for layout in (("S0", "R", None), ("S1", "S0", None), ("S1", "S0", "S1")):
                add(case, accuracy, "int8", layout)
    # The fused Triton stages (the interpreter here, as on a GPU): local products, and a split K's
    # byte residues summed over the ranks before one decode.
    for case in ("phi", "nonfinite", "long_k"):
        for layout in (("S0", "R", None), ("S1", "S0", None), ("S1", "S0", "S1"), ("S1", "R", "S0")):
            add(case, "fp64", "int8", layout, route="triton")
    for layout in (("R", "S1", None), ("S1", "S0", "S1")):
        add("complex", "fp64", "int8", layout, route="triton")
    # torch's own calls on DTensors inside ozaki.emulate().
    for case in ("phi", "nonfinite", "complex"):
        for layout in (("S0", "R", None), ("R", "S1", None), ("S1", "S0", None), ("S0", "S1", None)):
            add(case, "fp64", "auto", layout, route="emulate")
    return jobs


JOBS = _jobs()


@functools.cache
def _mesh_results(world: int) -> dict:
    """Every job's result on a mesh of ``world`` gloo processes, or {"failed": why}."""
    with tempfile.TemporaryDirectory() as folder:
        init, jobs, results = (os.path.join(folder, name) for name in ("init", "jobs.pt", "results.pt"))
        torch.save(JOBS, jobs)
        context = mp.start_processes(run_and_exit, args=(world, init, jobs, results), nprocs=world, join=False,
                                     start_method="spawn")
        deadline = time.monotonic() + _MESH_DEADLINE_S
        try:
            while not context.join(timeout=1):
                if time.monotonic() > deadline:
                    return {"failed": f"the {world} ranks did not finish within {_MESH_DEADLINE_S} s"}
        except Exception as error:  # a rank raised: the processes' own traceback
            return {"failed": f"a rank failed: {error}"}
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
        return torch.load(results)


def _result(world: int, key: tuple) -> dict:
    results = _mesh_results(world)
    if "failed" in results:
        pytest.fail(results["failed"])
    result = results[key]
    assert "error" not in result, result.get("error")
    return result


@functools.cache
def _one_device(case: str, accuracy, engine: str) -> torch.Tensor:
    a, b = CASES[case]
    return ozaki.matmul(a, b, accuracy=accuracy, engine=engine).view(torch.int64)


def _split(layout) -> str | None:
    """What the product splits once one operand is gathered where the layout asks."""
    placement_a, placement_b, _ = layout
    if placement_a == "S0":
        return "rows"
    if placement_b == "S1":
        return "columns"
    return "k" if "S1" in placement_a or "S0" in placement_b else None


def _expected_placement(layout) -> str:
    split, out = _split(layout), layout[2]
    if split == "k":
        return str(PLACEMENTS[out or "R"])
    return str({"rows": Shard(0), "columns": Shard(1), None: Replicate()}[split])


def _id(key) -> str:
    case, accuracy, engine, (placement_a, placement_b, out), route = key
    return f"{case}-{accuracy}-{engine}-{placement_a}x{placement_b}->{out or 'default'}-{route}"


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("key", list(JOBS), ids=[_id(key) for key in JOBS])
def test_the_bits_of_one_device(world, key):
    case, accuracy, engine, layout, _ = key
    result = _result(world, key)
    assert result["placement"] == _expected_placement(layout)
    assert torch.equal(result["bits"], _one_device(case, accuracy, engine)), "the bits differ from one device's"


def _width(bound: int) -> int:
    """Bytes of the narrowest integer type that gloo and NCCL sum in holding values up to bound."""
    return next(size for size, top in ((1, 2**8 - 1), (4, 2**31 - 1), (8, 2**63 - 1)) if bound <= top)


def _documented_bytes(world: int, key: tuple) -> int:
    """The bytes the module docstring states for this product on this rank."""
    case, accuracy, engine, layout, _ = key
    a, b = CASES[case]
    (m, k), n = a.shape, b.shape[1]
    placement_a, placement_b, out = layout
    total = 0
    # A complex operand gathers 16 bytes an entry; then its product is the real embedding's, M×2K×2N.
    parts = 2 if a.is_complex() else 1
    if placement_a == "S0" and placement_b != "R":  # B gathered
        total += 8 * parts * (math.ceil(k / world) * n if placement_b == "S0" else math.ceil(n / world) * k)
    if placement_b == "S1" and placement_a == "S1":  # A gathered
        total += 8 * parts * math.ceil(k / world) * m
    # The reduce-scatter to Shard(1) pads whole entries: W·⌈N/W⌉ of them.
    padded_columns = parts * world * math.ceil(n / world)
    k, n = parts * k, parts * n
    split = _split(layout)
    if split is None:
        return total
    fp64 = accuracy == "fp64"
    # The plan's reading (both sides' summaries, and what "fp64" and a split K add), twice where
    # an input holds NaN or ±inf (read again once zeroed).
    nonfinite = not (a.isfinite().all() and b.isfinite().all())
    reading = 16 * SUMMARY_LENGTH
    if split == "rows":
        reading += 8 * n if fp64 else 0
    elif split == "columns":
        reading += 8 * m if fp64 else 0
    else:
        reading += 16 * (m + n)
        if fp64:
            levels = min(30, 52 - k.bit_length())
            reading += ((m + n) * (_width(k << levels) + _width(2**16 * k) + _width(2**32 * k))
                        + m * n * _width(127**2 * k))
    total += reading * (2 if nonfinite else 1)
    if split != "k":
        return total
    moduli = ozaki.explain(a, b, accuracy=accuracy, engine=engine).moduli.moduli
    rows = world * math.ceil(m / world) if out == "S0" else m
    columns = padded_columns if out == "S1" else n
    total += len(moduli) * rows * columns * _width(world * (max(moduli) - 1))
    if nonfinite:
        total += 3 * rows * columns
    return total


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("key", [key for key in JOBS if key[2] == "auto" and key[4] == "matmul"],
                         ids=[_id(key) for key in JOBS if key[2] == "auto" and key[4] == "matmul"])
def test_bytes_moved_are_the_documented_ones(world, key):
    traffic = _result(world, key)["traffic"]
    assert sum(size for *_, size in traffic) == _documented_bytes(world, key), traffic
    if _split(key[3]) == "k":
        # The residues travel in the narrowest exact integer type: int32 for reference moduli
        # (below 2^22) on any of these meshes.
        assert [dtype for _, purpose, dtype, _ in traffic if purpose == "residues"] == ["torch.int32"]


@pytest.mark.parametrize("world", (1, 2))
def test_residues_of_int8_moduli_travel_as_uint8_on_one_rank(world):
    # W·(max m − 1) = W·255: uint8 on one rank, int32 beyond.
    traffic = _result(world, ("phi", "exact", "int8", ("S1", "S0", None), "matmul"))["traffic"]
    assert [dtype for _, purpose, dtype, _ in traffic if purpose == "residues"] == [
        "torch.uint8" if world == 1 else "torch.int32"]


def test_a_sum_past_int64_is_refused():
    assert distributed._wire_type(2**63 - 1) == torch.int64
    with pytest.raises(ValueError, match="past int64"):
        distributed._wire_type(2**63)


# ---------------------------------------------------------------------------------------------
# Bad input, on a mesh of this process alone


@pytest.fixture
def mesh():
    # Per test: a process group left open would stop the NCCL test below from making its own.
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(folder, 'init')}", rank=0, world_size=1)
        try:
            yield init_device_mesh("cpu", (1,))
        finally:
            dist.destroy_process_group()


def _placed(mesh, shape, placement=Replicate(), dtype=torch.float64):
    return distribute_tensor(torch.ones(shape, dtype=dtype), mesh, [placement] * mesh.ndim)


def test_non_dtensor_operands_are_refused(mesh):
    with pytest.raises(TypeError, match="not a DTensor.*ozaki.matmul"):
        distributed.matmul(torch.ones(2, 3, dtype=torch.float64), _placed(mesh, (3, 2)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64])
def test_other_dtypes_are_refused(mesh, dtype):
    with pytest.raises(TypeError, match=r"b has dtype .*float64 \(or complex128\).*b\.to\(torch\.float64\)"):
        distributed.matmul(_placed(mesh, (2, 3)), _placed(mesh, (3, 2), dtype=dtype))


@pytest.mark.parametrize("complex_side", ["a", "b"])
def test_a_real_operand_against_a_complex_one_is_refused(mesh, complex_side):
    dtypes = {"a": torch.float64, "b": torch.float64, complex_side: torch.complex128}
    real = "b" if complex_side == "a" else "a"
    with pytest.raises(TypeError, match=rf"two float64 or two complex128.*{real}\.to\(torch\.complex128\)"):
        distributed.matmul(_placed(mesh, (2, 3), dtype=dtypes["a"]), _placed(mesh, (3, 2), dtype=dtypes["b"]))


def test_partial_operands_are_refused(mesh):
    partial = DTensor.from_local(torch.ones(3, 2, dtype=torch.float64), mesh, [Partial()])
    with pytest.raises(ValueError, match=r"b is placed .*Shard\(0\), Shard\(1\) or Replicate\(\).*redistribute"):
        distributed.matmul(_placed(mesh, (2, 3)), partial)


def test_operands_of_two_meshes_are_refused(mesh):
    other = init_device_mesh("cpu", (1,), mesh_dim_names=("other",))
    assert other != mesh
    with pytest.raises(ValueError, match="different device meshes"):
        distributed.matmul(_placed(mesh, (2, 3)), _placed(other, (3, 2)))


def test_meshes_of_two_dimensions_are_refused(mesh):
    grid = init_device_mesh("cpu", (1, 1))
    with pytest.raises(ValueError, match="2-D device mesh.*1-D"):
        distributed.matmul(_placed(grid, (2, 3)), _placed(grid, (3, 2)))


def test_shapes_that_do_not_multiply_are_refused(mesh):
    with pytest.raises(ValueError, match=r"shapes \(2, 3\) and \(4, 2\) do not match"):
        distributed.matmul(_placed(mesh, (2, 3)), _placed(mesh, (4, 2)))


def test_batched_operands_are_refused(mesh):
    with pytest.raises(ValueError, match="3 dimensions.*2-D"):
        distributed.matmul(_placed(mesh, (2, 2, 3)), _placed(mesh, (3, 2)))


def test_shards_off_the_even_split_are_refused(mesh):
    uneven = DTensor.from_local(torch.ones(2, 3, dtype=torch.float64), mesh, [Shard(0)], shape=torch.Size((5, 3)),
                                stride=(3, 1))
    with pytest.raises(ValueError, match=r"local shard has shape \(2, 3\).*\(5, 3\).*redistribute"):
        distributed.matmul(uneven, _placed(mesh, (3, 2)))


@pytest.mark.parametrize("out, match", [(Shard(1), r"output of this product is Shard\(dim=0\)"),
                                        (Partial(), "takes Replicate"), (Shard(2), "takes Replicate")])
def test_output_placements_a_product_cannot_take_are_refused(mesh, out, match):
    with pytest.raises(ValueError, match=match):
        distributed.matmul(_placed(mesh, (2, 3), Shard(0)), _placed(mesh, (3, 2)), out_placement=out)


def test_bad_options_are_refused_as_matmul_refuses_them(mesh):
    with pytest.raises(ValueError, match="accuracy='fast'"):
        distributed.matmul(_placed(mesh, (2, 3)), _placed(mesh, (3, 2)), accuracy="fast")


def test_the_distributed_benchmark_runs_on_a_mesh_of_one_rank(mesh, tmp_path):
    assert bench.main(["--distributed", "--sizes", "12", "--reps", "1", "--out", str(tmp_path)]) == 0
    with (tmp_path / "bench-distributed.csv").open() as handle:
        reader = csv.DictReader(handle)
        columns, rows = tuple(reader.fieldnames), list(reader)
    assert columns == distributed_bench.COLUMNS
    assert [row["layout"] for row in rows] == list(distributed_bench.LAYOUTS)
    assert all(row["bits_equal"] == "True" and float(row["median_s"]) > 0 and float(row["one_device_s"]) > 0
               for row in rows)
    # Only a split K sends residues (and would send 8·M·N float64 bytes as a DGEMM).
    assert [(int(row["residue_bytes"]) > 0, int(row["float64_bytes"])) for row in rows] == [
        (False, 0), (False, 0), (True, 8 * 12 * 12), (True, 8 * 12 * 12)]


# ---------------------------------------------------------------------------------------------
# NCCL on one GPU (world size 1), in the device set


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or not dist.is_nccl_available(), reason="needs a CUDA device and NCCL")
def test_nccl_on_one_gpu_has_the_bits_of_one_gpu(tmp_path):
    jobs = {}
    for case in ("phi", "wide", "zeros", "nonfinite", "long_k"):
        for accuracy, engine in (("fp64", "int8"), ("fp64", "auto"), ("exact", "auto"), (40, "int8")):
            for layout in (("S0", "R", None), ("R", "S1", None), ("S1", "S0", None), ("S1", "S0", "S0")):
                a, b = CASES[case]
                jobs[case, accuracy, engine, layout] = dict(a=a, b=b, accuracy=accuracy, engine=engine,
                                                            placements=layout, route="matmul")
    torch.save(jobs, tmp_path / "jobs.pt")
    results = run(0, 1, str(tmp_path / "init"), str(tmp_path / "jobs.pt"), backend="nccl")
    for (case, accuracy, engine, layout), result in results.items():
        assert "error" not in result, (case, accuracy, engine, layout, result)
        a, b = CASES[case]
        # With one rank, even the native DGEMM that engine="auto" may pick is one call on the whole operands.
        want = ozaki.matmul(a.cuda(), b.cuda(), accuracy=accuracy, engine=engine).cpu().view(torch.int64)
        assert torch.equal(result["bits"], want), (case, accuracy, engine, layout)
