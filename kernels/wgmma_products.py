"""The int8 plane GEMM on Hopper with one wgmma group kept in flight, in Gluon.

Triton's pipeliner makes a ``tl.dot`` asynchronous only when its accumulator is fp32, so the
int8 kernel of :mod:`kernels.products` waits for every wgmma to finish before it issues the
next (``wgmma.wait_group 0`` each K block: the tensor cores idle while the warps issue).  This
kernel writes the pipeline out by hand: TMA copies fill a ring of ``NUM_STAGES`` shared-memory
stages, each K block's wgmma is issued asynchronously and only the previous one is waited for
(``warpgroup_mma_wait(1)``), after which its stage is refilled.  The ring runs on across tiles,
so the next tile's first blocks are in flight while a tile's residues are reduced and stored.
Triton lowers no int8 wgmma of 256 columns; a pass over the PTX (_widen_wgmma) makes each K step of
a 256-column tile one m64n256k32 where Triton writes two m64n128k32.

It computes what :func:`kernels.products._plane_gemm_kernel` computes for one plane per
modulus and one exact K chunk (the int8 engine of every catalog plan): the int32 sum of a
tile's whole K range is exact (the launcher's ``plan_chunk``), and the reduction mod m is the
same code (:func:`kernels.mod_reduce.fold_chunk`), so the residues are the same integers.  Gluon
kernels do not run in Triton's interpreter: CI compiles this one for sm_90 and checks its PTX
(tests/test_kernels_ptx.py); the GPU set compares its residues with the reference.  Its timings
against the Triton kernel and cuBLAS are in benchmarks/kernels.md ("The Gluon plane GEMM").
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import re
import threading

import torch
from triton import knobs
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma, \
    warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.runtime.interpreter import InterpretedFunction

from kernels import ptx
from kernels import dispatch
from kernels.mod_reduce import fold_chunk, reduce_chunk

__all__ = ["compile_kernel", "compile_ptx", "launch", "operand_layout", "supports"]

# The TMA copy into shared memory: async_load from Triton 3.7 on, which removed the older name.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

# One int8 wgmma instruction: K = 32 and, as Triton lowers int8 (its table), N up to 128; wider
# tiles repeat it along N, and the PTX pass below (_widen_wgmma) makes each pair one instruction.
_INSTR_K = gl.constexpr(32)
_INSTR_N_MAX = gl.constexpr(128)


def supports(device: torch.device) -> bool:
    """Whether this kernel runs on ``device``: wgmma is sm_90's alone (not sm_100's)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) == (9, 0)


def operand_layout(block_rows: int, block_k: int) -> gl.NVMMASharedLayout:
    """The swizzled shared-memory layout of one [block_rows, block_k] int8 operand tile, which the
    TMA descriptor and the wgmma read alike."""
    return gl.NVMMASharedLayout.get_default_for([block_rows, block_k], gl.int8)


@gluon.jit
def _tile_origin(tile, tiles, grid_m, grid_n, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr,
                 BLOCK_N: gl.constexpr):
    # The same walk as kernels.products: products one after the other, grouped order within one.
    # Returns the product (group * n_batch + batch) and the tile's first row and column.
    group_batch = tile // tiles
    pid = tile % tiles
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = gl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return group_batch, pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def _operand_rows(tile, tiles, grid_m, grid_n, M, N, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr):
    # One plane per group, so the tile's operand rows start at (group * n_batch + batch) * M + row0 of
    # the flattened A planes and likewise in N for B's.
    group_batch, row0, col0 = _tile_origin(tile, tiles, grid_m, grid_n, GROUP_M, BLOCK_M, BLOCK_N)
    return group_batch * M + row0, group_batch * N + col0


@gluon.jit
def _issue_load(a_desc, b_desc, a_smem, b_smem, ready, load, a_row, b_row, k, NUM_STAGES: gl.constexpr,
                BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr):
    # The program's load-th K block lands in stage load % NUM_STAGES and signals its barrier.
    stage = load % NUM_STAGES
    bar = ready.index(stage)
    mbarrier.expect(bar, (BLOCK_M + BLOCK_N) * BLOCK_K)  # int8: one byte per element
    _tma_load(a_desc, [a_row, k], bar, a_smem.index(stage))
    _tma_load(b_desc, [b_row, k], bar, b_smem.index(stage))


@gluon.jit
def _next_load(load, load_tile, load_kb, a_row, b_row, first_tile, tiles, grid_m, grid_n, M, N, n_k_blocks,
               NUM_PROGRAMS: gl.constexpr, GROUP_M: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    # The load counters one K block on; past a tile's last block, the next tile's first.
    load_kb += 1
    if load_kb == n_k_blocks:
        load_kb = 0
        load_tile += 1
        a_row, b_row = _operand_rows(first_tile + load_tile * NUM_PROGRAMS, tiles, grid_m, grid_n, M, N, GROUP_M,
                                     BLOCK_M, BLOCK_N)
    return load + 1, load_tile, load_kb, a_row, b_row


@gluon.jit
def wgmma_plane_gemm_kernel(
    a_desc, b_desc, coef_ptr, moduli_ptr, out_ptr,
    M, N, n_products, n_batch, n_k_blocks, stride_og, stride_ob, stride_om,
    UNIT_COEFFICIENTS: gl.constexpr, RESIDUE_BITS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
    BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr, NUM_PROGRAMS: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    # A 256-column tile takes two wgmmas of 128 columns per K step, which the PTX pass
    # (_widen_wgmma, under which every compilation of this kernel runs) makes one.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                         instr_shape=[16, min(BLOCK_N, _INSTR_N_MAX), _INSTR_K])
    # Stores of whole 16-byte row pieces: BLOCK_N // 16 threads along a row.
    THREADS_N: gl.constexpr = BLOCK_N // 16
    store_layout: gl.constexpr = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[32 // THREADS_N, THREADS_N],
                                                  warps_per_cta=[NUM_WARPS, 1], order=[1, 0])

    a_smem = gl.allocate_shared_memory(gl.int8, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(gl.int8, [NUM_STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
    fence_async_shared()

    grid_m = gl.cdiv(M, BLOCK_M)
    grid_n = gl.cdiv(N, BLOCK_N)
    tiles = grid_m * grid_n
    first_tile = gl.program_id(0)
    my_tiles = gl.cdiv(tiles * n_products - first_tile, NUM_PROGRAMS)

    # The loads run NUM_STAGES - 1 blocks ahead of the wgmmas, across tiles, with their own
    # counters: the program's load-th block, its tile (ordinal among the program's) and K block,
    # that tile's operand rows.  Tile coordinates are divided out once per tile, not per block.
    load = 0
    load_tile = 0
    load_kb = 0
    load_a_row, load_b_row = _operand_rows(first_tile, tiles, grid_m, grid_n, M, N, GROUP_M, BLOCK_M, BLOCK_N)
    for i in gl.static_range(NUM_STAGES - 1):
        if load_tile < my_tiles:
            _issue_load(a_desc, b_desc, a_smem, b_smem, ready, load, load_a_row, load_b_row, load_kb * BLOCK_K,
                        NUM_STAGES, BLOCK_M, BLOCK_N, BLOCK_K)
            load, load_tile, load_kb, load_a_row, load_b_row = _next_load(
                load, load_tile, load_kb, load_a_row, load_b_row, first_tile, tiles, grid_m, grid_n, M, N, n_k_blocks,
                NUM_PROGRAMS, GROUP_M, BLOCK_M, BLOCK_N)

    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.int32, acc_layout)
    step = 0
    for j in range(my_tiles):
        for kb in range(n_k_blocks):
            stage = step % NUM_STAGES
            mbarrier.wait(ready.index(stage), (step // NUM_STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(stage), b_smem.index(stage).permute((1, 0)), acc, use_acc=kb > 0,
                                is_async=True)
            # The previous block's wgmma has retired: its stage takes the next load.
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
            if load_tile < my_tiles:
                _issue_load(a_desc, b_desc, a_smem, b_smem, ready, load, load_a_row, load_b_row, load_kb * BLOCK_K,
                            NUM_STAGES, BLOCK_M, BLOCK_N, BLOCK_K)
                load, load_tile, load_kb, load_a_row, load_b_row = _next_load(
                    load, load_tile, load_kb, load_a_row, load_b_row, first_tile, tiles, grid_m, grid_n, M, N,
                    n_k_blocks, NUM_PROGRAMS, GROUP_M, BLOCK_M, BLOCK_N)
            step += 1
        # The tile's exact int32 sum, reduced mod m while the next tile's first blocks arrive.
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        group_batch, row0, col0 = _tile_origin(first_tile + j * NUM_PROGRAMS, tiles, grid_m, grid_n, GROUP_M, BLOCK_M,
                                               BLOCK_N)
        group = group_batch // n_batch
        batch = group_batch % n_batch
        modulus = gl.load(moduli_ptr + group)
        inverse = 1.0 / modulus.to(gl.float64)
        if UNIT_COEFFICIENTS:
            # The tile's residue is its sum's: no multiply by 1 and second reduction, in an
            # epilogue no wgmma overlaps.
            residue = reduce_chunk(acc, modulus, inverse, RESIDUE_BITS)
        else:
            residue = fold_chunk(0, acc, gl.load(coef_ptr + group), modulus, inverse, RESIDUE_BITS)
        residue = gl.convert_layout(residue.to(out_ptr.dtype.element_ty), store_layout)
        rows = row0 + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, store_layout))
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, store_layout))
        out_ptrs = (out_ptr + group.to(gl.int64) * stride_og + batch.to(gl.int64) * stride_ob
                    + rows.to(gl.int64)[:, None] * stride_om + cols[None, :])
        gl.store(out_ptrs, residue, mask=(rows[:, None] < M) & (cols[None, :] < N))

    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(i))


# The PTX pass: one m64n256k32 wgmma for each pair of m64n128k32.
#
# Triton lowers no int8 wgmma of 256 columns, so a tile of 256 columns issues two m64n128k32
# per K step and 64-row slice: the same A, read from shared memory twice, against B's two halves.
# sm_90's wgmma has m64n256k32 for s8 (PTX ISA, "Matrix shape"), which reads A once.  Its
# accumulator fragment is the two halves' fragments one after the other (thread register d[i]
# holds column 8 * (i // 4) + ..., so d[0..63] are columns 0..127 and d[64..127] 128..255), and
# B's descriptor for the first half reaches rows 128..255 at 16 of its strides between 8-row core
# matrices (SBO): where the second half's descriptor points, when B is K-major in 128-byte
# swizzle.  The pass rewrites a pair only where the PTX shows all of that, each descriptor
# resolved to one definition base + constant; elsewhere it leaves the PTX as Triton wrote it.
# The sums are exact integers either way, so the residues are the same (the GPU tests compare
# them with the reference); the timings are in benchmarks/kernels.md ("One wgmma of 256 columns").
_WGMMA_HALF = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n128k32\.s32\.s8\.s8 "
                         r"\{(?P<acc>[^}]*)\}, (?P<a>%rd\d+), (?P<b>%rd\d+), (?P<scale>%p\d+);")
_WGMMA_WIDE = "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8"
_COMMIT = "wgmma.commit_group.sync.aligned;"
_HALF_ROWS = 128
_SWIZZLE_128B = 1  # a descriptor's bits 62-63


def _single_definition(ptx: str, register: str) -> re.Match | None:
    """The one instruction that writes ``register`` (``op register, operands;``), or None."""
    found = list(re.finditer(rf"^\s*(?P<op>[\w.]+)\s+{re.escape(register)},\s*(?P<operands>[^;]*);", ptx, re.MULTILINE))
    return found[0] if len(found) == 1 else None


def _descriptor_sum(ptx: str, register: str) -> tuple[str, int] | None:
    """A shared-memory descriptor register as (base register, constant): its one definition
    adds (or ORs) a constant to a zero-extended 32-bit register, itself the base plus a constant
    or the base (Triton 3.9 adds the K step's offset before widening, 3.6 after); else None."""
    definition = _single_definition(ptx, register)
    if definition is None or definition["op"] not in ("or.b64", "add.s64"):
        return None
    wide, _, constant = (part.strip() for part in definition["operands"].partition(","))
    widening = _single_definition(ptx, wide)
    if not re.fullmatch(r"-?\d+", constant) or widening is None or widening["op"] != "cvt.u64.u32":
        return None
    value = int(constant) % 2**64
    # An OR adds where the two share no bit: the widened register is under 2**32, so a constant
    # with none of the low 32 bits.  (Descriptor start addresses are 14-bit fields, so a 32-bit
    # sum under the widening never wraps where the descriptor is valid at all.)
    if definition["op"] == "or.b64" and value & 0xFFFFFFFF:
        return None
    base = widening["operands"].strip()
    narrow = _single_definition(ptx, base)
    if narrow is not None and narrow["op"] == "add.s32":
        inner, _, offset = (part.strip() for part in narrow["operands"].partition(","))
        if re.fullmatch(r"\d+", offset):
            base, value = inner, value + int(offset)
    return base, value


def _widen_wgmma(ptx: str) -> str:
    """``ptx`` with every pair of m64n128k32 s8 wgmmas that make one 256-column product, issued
    in one commit group, as one m64n256k32 (the section's comment says when they do)."""
    edits = []
    start = 0
    for commit in re.finditer(re.escape(_COMMIT), ptx):
        halves = list(_WGMMA_HALF.finditer(ptx, start, commit.start()))
        start = commit.end()
        by_acc: dict[str, list[re.Match]] = {}
        for half in halves:
            by_acc.setdefault(half["acc"], []).append(half)
        if len(by_acc) != 2 or not _straight_wgmmas(ptx, halves):
            continue
        first, second = by_acc.values()
        pairs = [_wide_pair(ptx, x, y) for x, y in zip(first, second)]
        if len(first) != len(second) or None in pairs:
            continue
        for (low, high), x, y in zip(pairs, first, second):
            # In the later one's place, where the operands of both are defined.
            earlier, later = sorted((x, y), key=lambda half: half.start())
            edits.append((later.start(), later.end(), f"{_WGMMA_WIDE} {{{low['acc']},{high['acc']}}}, {low['a']}, "
                                                      f"{low['b']}, {low['scale']};"))
            edits.append((earlier.start(), earlier.end(), ""))
    for begin, end, text in sorted(edits, reverse=True):
        ptx = ptx[:begin] + text + ptx[end:]
    return ptx


def _straight_wgmmas(ptx: str, halves: list[re.Match]) -> bool:
    """Whether the wgmmas run as one straight sequence: no branch target among them, and no other
    instruction between them that names their accumulators."""
    between = "".join(ptx[x.end():y.start()] for x, y in zip(halves, halves[1:]))
    registers = {register for half in halves for register in half["acc"].split(",")}
    return "$L__" not in between and not registers & set(re.findall(r"%r\d+\b", between))


def _wide_pair(ptx: str, x: re.Match, y: re.Match) -> tuple[re.Match, re.Match] | None:
    """(first half, second half) where wgmmas ``x`` and ``y`` are one K step of a 256-column
    product: the same A and accumulate flag, B's descriptors on one base with the second half's
    128 rows on; else None."""
    if x["a"] != y["a"] or x["scale"] != y["scale"]:
        return None
    bx, by = _descriptor_sum(ptx, x["b"]), _descriptor_sum(ptx, y["b"])
    if bx is None or by is None or bx[0] != by[0]:
        return None
    for low, high, (_, constant), (_, other) in ((x, y, bx, by), (y, x, by, bx)):
        stride = (constant >> 32) & 0x3FFF  # SBO, in 16-byte units like the start address
        if constant >> 62 == _SWIZZLE_128B and other - constant == (_HALF_ROWS // 8) * stride and stride:
            return low, high
    return None


# What Triton 3.8 and later add to a compiled kernel's cache key for the pass: its source, so that
# a changed pass compiles afresh.
_PASS_KEY = "ozaki-widen-wgmma-" + hashlib.sha256(
    "".join(inspect.getsource(f) for f in (_single_definition, _descriptor_sum, _widen_wgmma, _straight_wgmmas,
                                           _wide_pair)).encode()
).hexdigest()[:16]


# Held while the hook is installed: Triton's knob is one per process.
_HOOK_LOCK = threading.Lock()


@contextlib.contextmanager
def _widened():
    """Triton's compilations inside run :func:`_widen_wgmma` after their PTX stage.  Every
    compilation and launch of this module's kernel runs inside, so Triton's caches only ever hold it
    widened (Triton 3.8 and later also key them by the hook, where 3.6 does not)."""
    with _HOOK_LOCK:
        previous = knobs.runtime.add_stages_inspection_hook

        def hook(*args):
            if not args:  # Triton 3.8 and later: the pipeline's part of the cache key, and its hash
                key, digest = previous() if previous is not None else ("", "")
                return key + _PASS_KEY, digest + _PASS_KEY
            if previous is not None:
                previous(*args)
            stages = args[1]
            make_ptx = stages.get("ptx")
            if make_ptx is not None:
                stages["ptx"] = lambda src, metadata: _widen_wgmma(make_ptx(src, metadata))

        knobs.runtime.add_stages_inspection_hook = hook
        try:
            yield
        finally:
            knobs.runtime.add_stages_inspection_hook = previous


def _descriptors(a_src: torch.Tensor, b_src: torch.Tensor, block_m: int, block_n: int, block_k: int):
    """TMA descriptors of the flattened [rows, K] int8 operands, in the kernel's shared layouts."""
    return (TensorDescriptor.from_tensor(a_src, [block_m, block_k], operand_layout(block_m, block_k)),
            TensorDescriptor.from_tensor(b_src, [block_n, block_k], operand_layout(block_n, block_k)))


def launch(a_src: torch.Tensor, b_src: torch.Tensor, coefficients: torch.Tensor, moduli: torch.Tensor,
           out: torch.Tensor, *, n_k_blocks: int, residue_bits: int, unit_coefficients: bool, config,
           programs: int) -> None:
    """Launches the kernel on the flattened int8 operands ([planes * batch * rows, K], K padded
    to whole blocks) into ``out`` ([G, batch, M, N]); one plane per group, one exact K chunk:
    ``kernels.products._launch`` has checked both and every other bound."""
    n_groups, n_batch, m_rows, n_cols = out.shape
    if out.stride(-1) != 1:
        raise ValueError(f"out has strides {out.stride()}: the kernel stores rows of contiguous residues")
    a_desc, b_desc = _descriptors(a_src, b_src, config.block_m, config.block_n, config.block_k)
    tiles = -(-m_rows // config.block_m) * -(-n_cols // config.block_n) * n_groups * n_batch
    with _widened():
        dispatch.launch(wgmma_plane_gemm_kernel, (min(tiles, programs),),
            a_desc, b_desc, coefficients, moduli, out, m_rows, n_cols, n_groups * n_batch, n_batch, n_k_blocks,
            *out.stride()[:3], UNIT_COEFFICIENTS=unit_coefficients, RESIDUE_BITS=residue_bits, BLOCK_M=config.block_m,
            BLOCK_N=config.block_n,
            BLOCK_K=config.block_k, GROUP_M=config.group_m, NUM_STAGES=config.num_stages, NUM_PROGRAMS=programs,
            num_warps=config.num_warps, **ptx.LAUNCH_OPTIONS,
        )


def compile_ptx(config, *, residue_bits: int, out_type: str, programs: int, unit_coefficients: bool = True) -> str:
    """PTX of :func:`compile_kernel`."""
    return compile_kernel(config, residue_bits=residue_bits, out_type=out_type, programs=programs,
                          unit_coefficients=unit_coefficients).asm["ptx"]


def compile_kernel(config, *, residue_bits: int, out_type: str, programs: int, unit_coefficients: bool = True):
    """The kernel for sm_90 with ``config`` (a ``kernels.products.PlaneGemmConfig``), compiled
    without a GPU: ``residue_bits`` selects the residue arithmetic, ``out_type`` is the
    residues' pointer type (``"*u8"``), ``programs`` the persistent launch's size,
    ``unit_coefficients`` whether every coefficient is 1 (the int8 engine's).  Triton's
    compiled kernel: its ``asm`` holds the PTX and the cubin.  Needs a process without
    ``TRITON_INTERPRET=1`` (see :func:`kernels.ptx.compile_kernel`)."""
    if isinstance(fold_chunk, InterpretedFunction):
        raise RuntimeError("compiling a kernel for a GPU target needs compiled kernels: "
                           "run it in a process without TRITON_INTERPRET=1")
    constexprs = dict(UNIT_COEFFICIENTS=unit_coefficients, RESIDUE_BITS=residue_bits, BLOCK_M=config.block_m,
                      BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                      NUM_STAGES=config.num_stages, NUM_PROGRAMS=programs)
    arguments = {"a_desc": _descriptor_type(config.block_m, config.block_k),
                 "b_desc": _descriptor_type(config.block_n, config.block_k),
                 "coef_ptr": "*i64", "moduli_ptr": "*i64", "out_ptr": out_type}
    signature = {name: arguments.get(name, "i32") for name in wgmma_plane_gemm_kernel.arg_names
                 if name not in constexprs}
    signature.update({name: "constexpr" for name in constexprs})
    # What a launch specializes: 16-byte aligned pointers, sizes and strides of whole 16-byte rows.
    aligned = [name for name, kind in signature.items() if kind.startswith("*")] + ["N", "stride_og", "stride_ob",
                                                                                   "stride_om"]
    with _widened():
        return ptx.compile_kernel(wgmma_plane_gemm_kernel, signature, constexprs, divisible=aligned, capability=90,
                                  num_warps=config.num_warps)


def _descriptor_type(block_rows: int, block_k: int) -> str:
    # How Triton names a host tensor descriptor of this block and layout in a kernel's signature.
    return f"tensordesc<i8[{block_rows}, {block_k}],{operand_layout(block_rows, block_k)!r}>"
