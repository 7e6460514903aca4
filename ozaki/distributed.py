"""Products of DTensors on a device mesh, with the bits of one device on any number of devices.

    C = ozaki.distributed.matmul(A, B)        # A (M, K), B (K, N): float64 DTensors of one 1-D mesh

(or two complex128 DTensors: each rank multiplies the real embedding of its shards, below).

A distributed DGEMM changes its bits with the number of ranks: a split K adds float partial
sums in another order.  Ozaki scheme II partial products are integers, so a split K is summed
exactly, and every rank makes the plan one device would make of the gathered matrices
(:mod:`ozaki.agreement`: each statistic the plan reads is reduced exactly over the ranks
first).  The result has, bit for bit, the value of ``ozaki.matmul`` of the gathered matrices
on one device, for every mesh size, placement, accuracy and engine.  The exception is
``engine="auto"`` with ``accuracy="fp64"`` where the cost model picks native float64 matmul (on
a GPU with a cost profile, decided from the whole product's shape, so on every rank alike):
then each rank runs DGEMM on its shards, a split K is summed as float64, and the bits depend on
the device and the number of ranks, as ``ozaki.matmul`` documents for that path.

Placements (A's, B's) and what each computes, on W ranks:

* rows: (Shard(0), Replicate()) — each rank multiplies its rows of A by B; C is Shard(0).
* columns: (Replicate(), Shard(1)) — each rank its columns of B; C is Shard(1).
* K: (Shard(1), Shard(0)), (Shard(1), Replicate()) or (Replicate(), Shard(0)) — each rank
  multiplies its share of K (a replicated operand is sliced locally) into residues
  C'_i^(r) = A'^(r)_i·B'^(r)_i mod m_i on the grid of the whole rows' scaling; the residues are
  summed exactly over the ranks (an integer all-reduce, or a reduce-scatter where
  ``out_placement`` is Shard(0) or Shard(1)), reduced mod m_i and decoded once, each entry on
  the ranks that keep it.  C is Replicate() unless ``out_placement`` says otherwise.
* (Replicate(), Replicate()): every rank computes the whole product, no communication.
* The other pairs gather one operand first, explicitly (its float64 shards, exact): A row-
  sharded with B sharded gathers B (then rows); A K-sharded with B column-sharded gathers A
  (then columns).  Partial and other placements are refused: reduce them first.

Communication per product, in the bytes each rank passes to the collectives (the tensor it
contributes: a ring all-reduce sends about 2(W − 1)/W times that, a reduce-scatter or an
all-gather (W − 1)/W of W shards), as :func:`traffic` counts them.  Integers travel in the
narrowest type gloo and NCCL sum in (uint8, int32, int64: 1, 4, 8 bytes; neither sums int16)
that holds the largest value the whole sum can reach, written w(bound):

* rows: 16·L bytes, L = ``kernels.scaling.SUMMARY_LENGTH`` (2107: 33712 bytes): one all-reduce
  of the plan's integers, each side's summary of its lines (int64 maxima: the most bits, the
  widest line, the largest row maximum and inf less the least non-zero one as IEEE patterns,
  the cap less the fewest bits, the code sums of the magnitude bound, and per lossless width
  the most level of a lossy line, which gives the guard).  ``"fp64"`` adds 8N (each column's
  minimum over every row of A of its level quotient, float64).  The product itself moves nothing.
* columns: the same with M for N.
* K: 16(M + N) (one all-reduce of every row's and column's extents: maximum magnitude and
  lowest set bit, int64) and the plan's 16·L.  ``"fp64"`` adds its sums over K:
  (M + N)·(w(K·2^S) + w(2^16·K) + w(2^32·K)) (upper sums, S = min(30, 52 − bit length of K),
  and the upper codes' sums and sums of squares) and M·N·w(127²K) (the int8 code product of
  its lower bound of |A||B|: 4·M·N while 127²K < 2^31).  Then the residues: P·M·N·w(W·(max m − 1)) for an
  all-reduce, P the plan's moduli (reference moduli lie below 2^22: int32 on up to 512 ranks;
  int8-plan moduli are at most 256: uint8 on one rank, int32 beyond); P·W·⌈M/W⌉·N·w(…) for a
  reduce-scatter to Shard(0), P·M·W·⌈N/W⌉·w(…) to Shard(1).  A float64 all-reduce of the
  partial products (distributed DGEMM) passes 8·M·N.  With NaN or ±inf in the input, 3·M·N
  (padded like the residues) more: uint8 flags of a NaN, +inf or −inf term; and the plan
  reads the zeroed operands again, so everything above moves twice.
* a gather: 8·⌈S/W⌉·T bytes for an S × T operand sharded along S.

Complex128 operands: each rank multiplies the real embedding of its (gathered, sliced) shards,
A_e (M, 2K) with each entry's real and imaginary part side by side (``torch.view_as_real``) and
B_e (2K, 2N) with the block [[Re b, Im b], [−Im b, Re b]] of each b_kj, whose product holds each
c_ij's two parts side by side, a view of the complex result.  A rank's rows, columns or share of
K are then a contiguous block of the embedding's, so each placement runs as on a real product of
M×2K×2N (every figure above with 2K and 2N, but a gather moves 16 bytes an entry and a
reduce-scatter to Shard(1) pads to W·⌈N/W⌉ whole entries, 2W·⌈N/W⌉ columns); the embedding is
``ozaki.operands.complex_embedding``'s with K and N permuted, which moves no statistic the plan
reads (maxima, minima and exact sums over lines) and no entry's integers, so the result has the
bits of ``ozaki.matmul`` of the gathered complex matrices.

Every integer that crosses the network has a bound computed beforehand, and a sum past the
widest type raises ValueError: nothing is rounded or wraps.

``torch.matmul``, ``@``, ``mm`` and the other products :func:`ozaki.emulate` routes take this path
when their operands are DTensors (K split: Replicate() output), their backward products too.
Speed: a rows or columns split runs :func:`ozaki.pipeline.run` on each rank (on a GPU the fused
Triton path); a split K runs the same fused encode and plane GEMMs up to the residues
(:func:`ozaki.pipeline.fused_residues`), sums them and decodes once (the library's torch stages
where Triton does not run: on the CPU, and for the reference engine).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Replicate, Shard

from kernels import crt as crt_kernels
from kernels.scaling import Extents

from . import pipeline, reading
from .agreement import ONE_DEVICE, Agreement
from .capacity import crt_capacity
from .crt import garner, round_to_float64
from .operands import check_options, nonfinite_terms, overlay_nonfinite
from .planning import Moduli, ProductPlan
from .products import residue_products
from .residues import reference_moduli, residues
from .scaling import scale_rows, sides_shifts

__all__ = ["Collective", "matmul", "traffic"]

# The integer types an all-reduce or reduce-scatter sums in, narrowest first, with their largest
# value: gloo and NCCL reduce uint8, int32 and int64 (not int16).
_WIRE_TYPES = ((torch.uint8, 2**8 - 1), (torch.int32, 2**31 - 1), (torch.int64, 2**63 - 1))
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


@dataclass(frozen=True)
class Collective:
    """One collective of a distributed product on this rank: ``kind`` (all_reduce,
    reduce_scatter, all_gather), what it carries (``purpose``), its type and the bytes of the
    tensor this rank passed to it."""

    kind: str
    purpose: str
    dtype: torch.dtype
    bytes: int


_recording = threading.local()


@contextlib.contextmanager
def traffic():
    """Records the collectives of the distributed products this thread runs inside the block:
    yields the list of :class:`Collective` they are appended to."""
    records: list[Collective] = []
    stack = _recording.__dict__.setdefault("stack", [])
    stack.append(records)
    try:
        yield records
    finally:
        stack.pop()


@dataclass(frozen=True)
class _Layout:
    """How one product is spread over a 1-D mesh: which axis of the product the ranks split
    (``split``: "rows", "columns", "k" or None), the operand gathered first (``gather``), the
    whole shape, the output's placement and the real numbers per entry (``parts``: 2 for a
    complex product, which runs as its real embedding)."""

    mesh: object
    rank: int
    world: int
    shape: tuple[int, int, int]
    kinds: tuple[str | None, str | None]  # what A's and B's placements split, as given
    split: str | None
    gather: str | None
    out: Replicate | Shard
    parts: int = 1

    @property
    def group(self):
        return self.mesh.get_group()

    def chunk(self, size: int) -> slice:
        """This rank's part of a dimension of ``size``: DTensor's even split (torch.chunk)."""
        step = -(-size // self.world)
        start = min(self.rank * step, size)
        return slice(start, min(start + step, size))

    @property
    def real_shape(self) -> tuple[int, int, int]:
        """(M, K, N) of the real product each rank's share belongs to: a complex product's embedding's."""
        m, k, n = self.shape
        return m, self.parts * k, self.parts * n

    def real_chunk(self, size: int) -> slice:
        """This rank's part of a dimension of ``size`` entries, in the real product's numbers
        (a complex entry's two parts side by side)."""
        part = self.chunk(size)
        return slice(self.parts * part.start, self.parts * part.stop)


def matmul(a: DTensor, b: DTensor, *, accuracy="fp64", engine: str = "auto", out_placement=None) -> DTensor:
    """``a @ b`` for float64 (or complex128) DTensors of one 1-D device mesh, with the bits of one device.

    The result is a DTensor on that mesh with the bits of ``ozaki.matmul`` of the gathered
    matrices on one device (see the module docstring for the placements, the bytes each moves
    and the one exception, native DGEMM under ``engine="auto"``).  Call it on every rank of the
    mesh, as every collective.

    Parameters
    ----------
    a, b : torch.distributed.tensor.DTensor
        float64 (or both complex128) matrices (M, K) and (K, N) of one 1-D device mesh, each
        placed Shard(0), Shard(1) or Replicate().
    accuracy : {"fp64", "exact"} or int, default "fp64"
        As :func:`ozaki.matmul`'s.
    engine : {"auto", "reference", "int8", "fp8", "fp4"}, default "auto"
        As :func:`ozaki.matmul`'s.
    out_placement : Replicate, Shard or None, default None
        The output placement of a product whose K is split: Replicate() (None means it: an
        all-reduce of the residues), Shard(0) or Shard(1) (a reduce-scatter: each rank decodes
        only its block).  The output of any other product is placed as its rows or columns
        are, and ``out_placement`` may only name that placement.

    Returns
    -------
    torch.distributed.tensor.DTensor
        The (M, N) float64 (complex128) product on the operands' mesh.

    Raises
    ------
    TypeError
        An operand is not a DTensor or neither float64 nor complex128, or one is complex and
        the other not.
    ValueError
        Operands of different meshes or of a mesh of more than one dimension, Partial or
        other placements, an ``out_placement`` the product cannot take, shapes that do not
        match, or an unknown ``accuracy`` or ``engine``.

    Examples
    --------
    On a mesh of this process alone (gloo, on the CPU); on W ranks each runs the same lines.

    >>> import torch, torch.distributed as dist
    >>> from torch.distributed.device_mesh import init_device_mesh
    >>> from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    >>> import ozaki.distributed
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> mesh = init_device_mesh("cpu", (1,))
    >>> a = distribute_tensor(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64), mesh, [Shard(0)])
    >>> b = distribute_tensor(torch.eye(2, dtype=torch.float64), mesh, [Replicate()])
    >>> c = ozaki.distributed.matmul(a, b, accuracy="exact")
    >>> c.placements, c.full_tensor().tolist()
    ((Shard(dim=0),), [[1.0, 2.0], [3.0, 4.0]])
    >>> dist.destroy_process_group()
    """
    check_options(accuracy, engine)
    layout = _layout(a, b, out_placement)
    a_local, b_local = _local_operands(a, b, layout)
    if layout.parts == 2:
        a_local, b_local = _embedded(a_local, b_local)
    agreement = ONE_DEVICE if layout.split is None else _MeshAgreement(layout, a_local.device)
    call = pipeline.prepare(a_local, b_local, accuracy, engine, agreement, early=False)
    if layout.split == "k":
        local = _k_split_product(call, a_local, b_local, layout)
    else:
        local = _local_product(call, a_local, b_local)
    local = local.contiguous()
    if layout.parts == 2:
        local = torch.view_as_complex(local.unflatten(-1, (-1, 2)))
    m, _, n = layout.shape
    return DTensor.from_local(local, layout.mesh, [layout.out], run_check=False, shape=torch.Size((m, n)),
                              stride=(n, 1))


# -------------------------------------------------------------------------------------------
# Placements


def _layout(a, b, out_placement) -> _Layout:
    """The layout of a @ b, or TypeError/ValueError naming what does not fit and the fix;
    reads only placements and shapes, so every rank decides alike without communicating."""
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, DTensor):
            raise TypeError(f"{name} is a {type(x).__name__}, not a DTensor: ozaki.distributed.matmul multiplies two "
                            "DTensors of one mesh (torch.distributed.tensor.distribute_tensor places a tensor on it); "
                            "for tensors on one device use ozaki.matmul")
        if x.dtype not in (torch.float64, torch.complex128):
            raise TypeError(f"{name} has dtype {x.dtype}: distributed products take float64 (or complex128) DTensors; "
                            f"convert it with {name}.to(torch.float64)")
        if x.dim() != 2:
            raise ValueError(f"{name} has {x.dim()} dimensions: distributed products take matrices (2-D DTensors)")
    if a.dtype != b.dtype:
        real = "a" if b.is_complex() else "b"
        raise TypeError(f"a is {a.dtype} and b {b.dtype}: distributed products take two float64 or two complex128 "
                        f"DTensors; convert {real} with {real}.to(torch.complex128)")
    mesh = a.device_mesh
    if b.device_mesh != mesh:
        raise ValueError(f"a and b lie on different device meshes ({mesh} and {b.device_mesh}): place both on one "
                         "mesh (DTensor.redistribute, or distribute_tensor onto a's mesh)")
    if mesh.ndim != 1:
        raise ValueError(f"a {mesh.ndim}-D device mesh: distributed products run on 1-D meshes; take a 1-D sub-mesh "
                         "(mesh['name']) or flatten it")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not match: the second axis of a "
                         f"({a.shape[1]}) must equal the first axis of b ({b.shape[0]})")
    kind_a, kind_b = _kind(a.placements[0], "a", ("rows", "k")), _kind(b.placements[0], "b", ("k", "columns"))
    # A row-sharded A keeps its rows, so B must be whole; a column-sharded B its columns, so A.
    gather = "b" if kind_a == "rows" and kind_b else "a" if kind_b == "columns" and kind_a else None
    split = "rows" if kind_a == "rows" else "columns" if kind_b == "columns" else "k" if "k" in (kind_a, kind_b) else None
    natural = {None: Replicate(), "rows": Shard(0), "columns": Shard(1), "k": Replicate()}[split]
    out = natural if out_placement is None else out_placement
    if type(out) not in (Replicate, Shard) or (type(out) is Shard and out.dim not in (0, 1, -1, -2)):
        raise ValueError(f"out_placement={out_placement!r}: the output takes Replicate(), Shard(0) or Shard(1)")
    out = Shard(out.dim % 2) if type(out) is Shard else out
    if split != "k" and out != natural:
        raise ValueError(f"out_placement={out_placement!r}: the output of this product is {natural!r}, as its "
                         f"{split or 'operands'} are placed; redistribute the result (only a split K decides it)")
    rank, world = mesh.get_local_rank(), mesh.size()
    layout = _Layout(mesh, rank, world, (a.shape[0], a.shape[1], b.shape[1]), (kind_a, kind_b), split, gather, out,
                     2 if a.is_complex() else 1)
    for name, x, dim in (("a", a, 0 if kind_a == "rows" else 1), ("b", b, 0 if kind_b == "k" else 1)):
        expected = list(x.shape)
        if type(x.placements[0]) is Shard:
            part = layout.chunk(x.shape[dim])
            expected[dim] = part.stop - part.start
        if list(x.to_local().shape) != expected:
            raise ValueError(f"{name}'s local shard has shape {tuple(x.to_local().shape)} where DTensor's even split "
                             f"of {tuple(x.shape)} gives {tuple(expected)}: redistribute it, e.g. "
                             f"{name}.redistribute(mesh, {list(x.placements)})")
    return layout


def _kind(placement, name: str, shard_kinds: tuple[str, str]) -> str | None:
    """What a placement of operand ``name`` splits: its Shard(0) and Shard(1) split ``shard_kinds``."""
    if type(placement) is Replicate:
        return None
    if type(placement) is Shard:
        return shard_kinds[placement.dim % 2]
    raise ValueError(f"{name} is placed {placement!r}: distributed products take Shard(0), Shard(1) or Replicate(); "
                     f"reduce or redistribute it first, e.g. {name}.redistribute(mesh, [Replicate()]) (the float64 "
                     "sum of a Partial depends on the order of the ranks)")


def _embedded(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The real operands whose product holds the complex a (M, K) @ b (K, N) with each entry's
    two parts side by side (see the module docstring): A_e (M, 2K), B_e (2K, 2N)."""
    (m, k), n = a.shape, b.shape[1]
    blocks = torch.stack([torch.stack([b.real, b.imag], dim=-1), torch.stack([-b.imag, b.real], dim=-1)], dim=1)
    return torch.view_as_real(a).reshape(m, 2 * k), blocks.reshape(2 * k, 2 * n)


def _local_operands(a: DTensor, b: DTensor, layout: _Layout) -> tuple[torch.Tensor, torch.Tensor]:
    """The operands of this rank's product: gathered where the layout says, and on a split K
    the shard of a replicated operand cut locally.  A rank whose share of K is empty multiplies
    one zero column by one zero row, which adds nothing to any sum or extent."""
    a_local, b_local = a.to_local().detach(), b.to_local().detach()
    if layout.gather == "a":
        a_local = _gathered(a_local, 1 if layout.kinds[0] == "k" else 0, a.shape, layout)
    elif layout.gather == "b":
        b_local = _gathered(b_local, 0 if layout.kinds[1] == "k" else 1, b.shape, layout)
    if layout.split != "k":
        return a_local, b_local
    part = layout.chunk(layout.shape[1])
    a_local = a_local if layout.kinds[0] == "k" else a_local[:, part]
    b_local = b_local if layout.kinds[1] == "k" else b_local[part]
    if part.stop == part.start:
        a_local, b_local = a_local.new_zeros((a_local.shape[0], 1)), b_local.new_zeros((1, b_local.shape[1]))
    return a_local, b_local


# -------------------------------------------------------------------------------------------
# Collectives: each one recorded (traffic) before it runs


def _record(kind: str, purpose: str, tensor: torch.Tensor) -> None:
    for records in getattr(_recording, "stack", ()):
        records.append(Collective(kind, purpose, tensor.dtype, tensor.numel() * tensor.element_size()))


def _all_reduce(x: torch.Tensor, op: str, purpose: str, layout: _Layout) -> torch.Tensor:
    x = x.contiguous()
    _record("all_reduce", purpose, x)
    dist.all_reduce(x, op=_OPS[op], group=layout.group)
    return x


def _gathered(local: torch.Tensor, dim: int, shape, layout: _Layout) -> torch.Tensor:
    """The whole matrix from every rank's even-split shard along ``dim`` (padded to equal
    shards for the all-gather, the padding cut after)."""
    step = -(-shape[dim] // layout.world)
    padded = local.new_zeros((step, shape[1 - dim]))
    padded[: local.shape[dim]] = local.movedim(dim, 0)
    whole = local.new_empty((layout.world * step, shape[1 - dim]))
    _record("all_gather", "operand", padded)
    # Complex shards travel as their float64 parts: the collective takes real types.
    if local.is_complex():
        dist.all_gather_into_tensor(torch.view_as_real(whole), torch.view_as_real(padded), group=layout.group)
    else:
        dist.all_gather_into_tensor(whole, padded, group=layout.group)
    return whole[: shape[dim]].movedim(0, dim)


def _reduced(x: torch.Tensor, op: str, purpose: str, layout: _Layout) -> torch.Tensor:
    """This rank's block of the output of ``op`` over the ranks of x (…, M, N·parts): the whole
    of it by an all-reduce for a replicated output, its rows (columns) by a reduce-scatter of
    equal blocks of ⌈M/W⌉ rows (⌈N/W⌉ columns, of a complex entry's two parts each) for a
    sharded one."""
    if type(layout.out) is Replicate:
        return _all_reduce(x, op, purpose, layout)
    x = x.unflatten(-1, (-1, layout.parts))
    dim = x.dim() - 3 + layout.out.dim
    size, step = x.shape[dim], -(-x.shape[dim] // layout.world)
    moved = x.movedim(dim, 0)
    padded = moved.new_zeros((layout.world * step, *moved.shape[1:]))
    padded[:size] = moved
    block = moved.new_empty((step, *moved.shape[1:]))
    _record("reduce_scatter", purpose, padded)
    dist.reduce_scatter_tensor(block, padded, op=_OPS[op], group=layout.group)
    part = layout.chunk(size)
    return block[: part.stop - part.start].movedim(0, dim).flatten(-2)


def _wire_type(bound: int) -> torch.dtype:
    """The narrowest integer type the collectives sum in that holds every value up to ``bound``."""
    for dtype, top in _WIRE_TYPES:
        if bound <= top:
            return dtype
    raise ValueError(f"a sum over the ranks may reach {bound}, past int64: no exact integer type carries it; "
                     "use fewer ranks for this product")


class _MeshAgreement(Agreement):
    """The plan's reductions over the ranks of a layout's mesh, each exact: integer sums in an
    integer type that holds the whole sum, maxima and minima.  Only the split axis communicates:
    over K, the extents and sums of every line; over rows or columns, the minima over lines and
    the integers of the plan."""

    def __init__(self, layout: _Layout, device: torch.device):
        self._layout, self._device = layout, device

    def whole_shape(self, m: int, k: int, n: int) -> tuple[int, int, int]:
        return self._layout.real_shape

    def extents(self, extents_a: Extents, extents_b: Extents) -> tuple[Extents, Extents]:
        if self._layout.split != "k":
            return extents_a, extents_b
        # One maximum for both sides: the patterns of non-negative float64 values order as the
        # values, and the maximum of −lowest is minus the minimum of lowest.
        parts = [extents_a.row_max.view(torch.int64), extents_b.row_max.view(torch.int64), -extents_a.lowest_bit,
                 -extents_b.lowest_bit]
        maxima = _all_reduce(torch.cat(parts), "max", "extents", self._layout).split([x.numel() for x in parts])
        return (Extents(maxima[0].view(torch.float64), -maxima[2]),
                Extents(maxima[1].view(torch.float64), -maxima[3]))

    def sum_over_k(self, partial: torch.Tensor, bound: int) -> torch.Tensor:
        if self._layout.split != "k":
            return partial
        return _all_reduce(partial.to(_wire_type(bound)), "sum", "plan sums over K", self._layout).to(partial.dtype)

    def min_over_rows(self, values: torch.Tensor) -> torch.Tensor:
        return _all_reduce(values, "min", "plan minima", self._layout) if self._layout.split == "rows" else values

    def min_over_columns(self, values: torch.Tensor) -> torch.Tensor:
        return _all_reduce(values, "min", "plan minima", self._layout) if self._layout.split == "columns" else values

    def agree(self, op: str, values: torch.Tensor) -> torch.Tensor:
        return _all_reduce(values.to(self._device), op, "plan integers", self._layout).cpu()


# -------------------------------------------------------------------------------------------
# The products


def _local_product(call: pipeline.Call, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rows or columns split (or nothing): this rank's block is a product of its own, planned
    with the whole product's statistics; entry (i, j) depends only on row i's and column j's
    bits and integers (ozaki.pipeline), so it has the one-device bits."""
    if min(a.shape[0], b.shape[1]) == 0:
        return a.new_zeros((a.shape[0], b.shape[1]))
    out = pipeline.run(call)
    return overlay_nonfinite(out, nonfinite_terms(a, b)) if call.plan.nonfinite else out


def _k_split_product(call: pipeline.Call, a: torch.Tensor, b: torch.Tensor, layout: _Layout) -> torch.Tensor:
    """K split: this rank's block of C = diag(2^-s)·Σ_r A'^(r)B'^(r)·diag(2^-t), rounded once."""
    plan = call.plan
    m, k, n = layout.real_shape
    rows, columns = ((layout.chunk(m), slice(0, n)) if layout.out == Shard(0) else
                     (slice(0, m), layout.real_chunk(layout.shape[2])) if layout.out == Shard(1) else
                     (slice(0, m), slice(0, n)))
    if plan.path == "native":
        # DGEMM of this rank's share of K, summed in float64: bits that depend on the ranks.
        return _reduced(torch.matmul(a, b), "sum", "float64 partial products", layout)
    if plan.moduli is None:  # an empty product
        return a.new_zeros((rows.stop - rows.start, columns.stop - columns.start))
    fa, fb = call.operands
    extents_a, extents_b, bits_a, bits_b = call.lines[0]
    moduli = _k_split_moduli(plan, k)
    # 1. Scale on the whole rows' grid: s_i and t_j from the whole rows' maxima (agreed), so
    #    this rank's A'^(r), B'^(r) are its columns of A' and rows of B'.
    shift_a, shift_b = sides_shifts((extents_a.row_max, bits_a, plan.bits_a[0]),
                                    (extents_b.row_max, bits_b, plan.bits_b[0]))
    fused = moduli.encodings is not None and reading.kernels_available(fa.device)
    # 2–3. Residues and products of this rank's share: C'^(r)_i = A'^(r)_i·B'^(r)_i mod m_i in [0, m_i)
    #      (on a GPU fused from float64 to byte residues, as one device's product).
    if fused:
        partial = pipeline.fused_residues(fa, fb.T, shift_a, shift_b, moduli)
    else:
        scaled_a, scaled_b = scale_rows(fa, bits_a, shift_a), scale_rows(fb.T, bits_b, shift_b)
        ra, rb = residues(scaled_a, moduli.moduli), residues(scaled_b, moduli.moduli).transpose(-1, -2)
        partial = residue_products(ra, rb, moduli.moduli, moduli.encodings)
    # 4. Σ_r C'^(r)_i ≡ A'_i·B'_i (mod m_i): an exact integer sum over the ranks, at most
    #    W·(max m − 1), in the narrowest type that holds it, then reduced mod m_i.
    wire = _wire_type(layout.world * (max(moduli.moduli) - 1))
    total = _reduced(partial.to(wire), "sum", "residues", layout)
    # 5. CRT and unscale: C = diag(2^-s) C' diag(2^-t), rounded once, on the ranks keeping C_ij.
    if fused:
        if layout.world > 1:
            total = torch.remainder(total, torch.tensor(moduli.moduli, dtype=wire, device=total.device)[:, None, None])
        out = crt_kernels.decode_residues(total, moduli.moduli, -shift_a[rows], -shift_b[columns], slack=plan.slack[0])
    else:
        exponent = -(shift_a[rows, None] + shift_b[None, columns])
        out = round_to_float64(garner(total.to(torch.int64), moduli.moduli), moduli.moduli, exponent, plan.slack[0])
    if not plan.nonfinite:
        return out
    terms = _reduced(nonfinite_terms(a, b).to(torch.uint8), "max", "non-finite terms", layout)
    return overlay_nonfinite(out, terms.bool())


def _k_split_moduli(plan: ProductPlan, k: int) -> Moduli:
    """The plan's moduli; for a plan in exponent bands (ozaki.bands), which the K split does
    not run, the reference engine's moduli for the whole product of K terms (the bits are the
    same: they depend only on the exact integers)."""
    if plan.bands is None:
        return plan.moduli
    p, q = plan.bits_a[1], plan.bits_b[1]
    return Moduli(reference_moduli(k, crt_capacity(k, p, q)), None, "reference")
