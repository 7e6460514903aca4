"""Exact modular plane GEMMs on tensor cores: ``sum_t c_t * A_t @ B_t^T mod m``.

Every plane holds small integers (digits).  Each plane product is an exact low-precision
GEMM as long as no partial sum leaves the range its accumulator represents exactly; the
launcher computes that range from the planes' actual maxima and splits K into chunks
that stay inside it.  Inside the kernel each finished chunk is converted to an integer,
multiplied by its coefficient and reduced mod m, in a fixed order, so the result is the
same integer on every device, tile shape and operand type.

One launch computes the products of every modulus: the kernel is persistent (one program
per multiprocessor walks the output tiles of all moduli), and each tile leaves it as
residues in the narrowest type that holds them (:func:`residue_dtype`: uint8 for the
catalog's moduli, all at most 2**8), reduced by 32-bit multiply-high rather than by integer
division (:mod:`kernels.mod_reduce`).  :func:`encoded_modular_matmul`, the pipeline's entry, takes planes whose
digits the encode kernel guarantees and reads nothing back to the host, so a product
queues its work without waiting for the device.  On sm_90 the int8 launches of one plane
per modulus may run :mod:`kernels.wgmma_products` instead (``PlaneGemmConfig.gluon``), the
same integers from a hand-pipelined Gluon kernel; the tuner picks whichever is faster.

Operand types ("operands"):

* ``int8``: int8 x int8 -> int32 (``wgmma .s32.s8.s8`` on sm_90).  Exact while
  ``K_chunk * max|P| * max|Q| <= 2**31 - 1``.
* ``e4m3``: FP8 E4M3 x E4M3 -> fp32.  fp32 holds every integer up to 2**24, so
  ``K_chunk * max|P| * max|Q| <= 2**24``.  Hopper's FP8 wgmma additionally keeps only 13
  fraction bits below the largest term inside one instruction chain, so Triton's
  ``max_num_imprecise_acc`` window W (products per fresh partial, promoted into fp32
  after) must satisfy ``W * max|P| * max|Q| < 2**14``.  W = 0 asks Triton for the
  promote-every-instruction path (an fp16 upcast on sm_90), which has no window.
* ``e2m1``: FP4 E2M1 packed two per byte along K (first value in the low nibble),
  through ``tl.dot_scaled`` (native block-scaled MMA on sm_100+, bf16 upcast on sm_90).
  ``fp4`` digits are twice the E2M1 values stored; a block scale of 2 on each side gives
  the digits back, and the fp32 bound is the same as for ``e4m3``.

The chosen operand type for each call is logged on ``logging.getLogger("ozaki.kernels")``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from collections.abc import Sequence
from fractions import Fraction

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels import ptx
from kernels.digits import digit_set
from kernels.dispatch import launch
from kernels.float64 import FLOAT64_EXACT
from kernels import wgmma_products
from kernels.moduli import check_modulus
from kernels.mod_reduce import fold_chunk, reduce_chunk

__all__ = [
    "CONFIGS",
    "OPERANDS",
    "PlaneGemmConfig",
    "compile_kernel",
    "compile_ptx",
    "config_refusal",
    "EXACT_SUM_MODULUS",
    "encoded_modular_matmul",
    "exact_int8_matmul",
    "grouped_modular_matmul",
    "modular_matmul",
    "plan_chunk",
    "reference_modular_matmul",
    "residue_dtype",
    "select_operand",
]

_log = logging.getLogger("ozaki.kernels")

# Triton pointer types of the residues the kernels store.
_OUT_TYPES = {torch.uint8: "*u8", torch.int16: "*i16", torch.int32: "*i32"}
# Triton pointer types of the converted operands.
_POINTER_TYPES = {"int8": "*i8", "e4m3": "*fp8e4nv", "e2m1": "*u8"}
# The digit set whose every value the operand type stores exactly.
OPERANDS: dict[str, str] = {"int8": "int8", "e4m3": "fp8", "e2m1": "fp4"}

_TRITON_VERSION = tuple(int(part) for part in triton.__version__.split(".")[:2])
# The operands whose plane GEMM the installed Triton's interpreter runs: tl.dot_scaled (e2m1)
# runs there from 3.8 on (it compiles on every release this project supports).
INTERPRETER_OPERANDS = tuple(o for o in OPERANDS if o != "e2m1" or _TRITON_VERSION >= (3, 8))
_INT32_EXACT = 2**31 - 1
_FP32_EXACT = 2**24
_WGMMA_FP8_EXACT = 2**14
_WGMMA_FP8_K = 32  # products one FP8 wgmma instruction folds; the window moves in these steps
_SMALL_MODULUS = 2**15  # below it the residue arithmetic fits int32 (products < 2**30)


@dataclasses.dataclass(frozen=True)
class PlaneGemmConfig:
    """One tiling of the plane GEMM.  ``imprecise_window`` is Triton's
    ``max_num_imprecise_acc`` for ``e4m3`` (ignored for the other operands); ``tma`` loads
    the operand tiles through tensor descriptors (the Hopper copy engine) instead of
    pointers; ``programs_per_sm`` persistent programs run on each multiprocessor, so that
    where tiles are small enough for several to be resident, one's MMAs run while another
    waits on its own.  ``gluon`` runs :mod:`kernels.wgmma_products` instead, which keeps one
    wgmma in flight: sm_90, ``int8``, TMA, one plane per modulus and one K chunk
    (:func:`config_refusal` says which launches admit it)."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    imprecise_window: int = 32
    tma: bool = False
    programs_per_sm: int = 1
    gluon: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"PlaneGemmConfig.{name} = {value}: must be a power of two >= 16")
        if self.block_k < 32:
            raise ValueError(f"PlaneGemmConfig.block_k = {self.block_k}: 8-bit tensor-core dots need K >= 32")
        if self.programs_per_sm not in (1, 2, 3, 4):
            raise ValueError(f"PlaneGemmConfig.programs_per_sm = {self.programs_per_sm}: must be 1 to 4")
        if self.imprecise_window % _WGMMA_FP8_K or not 0 <= self.imprecise_window <= self.block_k:
            raise ValueError(
                f"PlaneGemmConfig.imprecise_window = {self.imprecise_window}: must be 0 or a multiple of "
                f"{_WGMMA_FP8_K} no larger than block_k = {self.block_k}"
            )
        if self.gluon:
            # One warpgroup covers 64 rows per wgmma and each warp 16 of them; wgmma's N is at most 256.
            if not self.tma or self.num_warps not in (4, 8) or self.block_m % max(64, 16 * self.num_warps):
                raise ValueError(f"PlaneGemmConfig(gluon=True) needs tma=True, num_warps 4 or 8 and block_m a "
                                 f"multiple of {max(64, 16 * self.num_warps)}; got {self}")
            if self.block_n > 256:
                raise ValueError(f"PlaneGemmConfig(gluon=True).block_n = {self.block_n}: wgmma's N is at most 256")


# First entry of each list is the default; the launcher takes the first entry whose
# exactness windows admit the planes.  Benchmarks time the whole list.
CONFIGS: dict[str, tuple[PlaneGemmConfig, ...]] = {
    # int8: the Triton kernel's configs in order of their times for 16-moduli launches at n = 8192 and
    # 16384 (benchmarks/kernels.md), then the Gluon kernel's (never the default: it runs on sm_90 alone,
    # where the tuner times it); e4m3 and e2m1 in order of their times at 8192³ (benchmarks/kernels.md,
    # "Throughput at 8192³ (run 2)").
    "int8": (
        # The default, which runs wherever Triton does (the interpreter included).
        PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=3, tma=True, programs_per_sm=2),
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, tma=True),
        # Pointer loads: operands past the int32 row coordinates of TMA descriptors.
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3),
        # kernels.wgmma_products, where a launch admits it (config_refusal): it keeps a wgmma group in
        # flight where the Triton kernel waits for each (benchmarks/kernels.md, "The Gluon plane GEMM:
        # one wgmma group kept in flight").
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, tma=True, gluon=True),
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=4, tma=True, gluon=True),
        # The same tile with groups of sixteen row tiles in the walk (kernels.wgmma_products._tile_origin):
        # which grouping shares the L2 better depends on the shape (benchmarks/kernels.md, "The plane GEMM
        # on an H100: coefficients of 1 timed, two staggered consumers tried and left out, sixteen tile
        # rows per group"), so the tuner times both.
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, group_m=16, tma=True, gluon=True),
    ),
    "e4m3": (
        PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=4, imprecise_window=64, tma=True),
        PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=3, imprecise_window=64),
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, imprecise_window=64, tma=True),
        PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=3, imprecise_window=64, tma=True),
        PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=3, imprecise_window=32, tma=True),
        PlaneGemmConfig(256, 128, 128, num_warps=8, num_stages=3, imprecise_window=64, tma=True),
        # Digits too large for any wgmma window (full fp8): promote every instruction.
        PlaneGemmConfig(128, 128, 64, num_warps=4, num_stages=4, imprecise_window=0, tma=True),
    ),
    "e2m1": (
        PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=3, tma=True),
        PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=4),
    ),
}


@triton.jit
def _dot_blocks(a_src, b_src, a_row, b_row, offs_am, offs_bn, stride_a, stride_b, kb_start, kb_end,
                ACC_DTYPE: tl.constexpr, OPERAND: tl.constexpr, USE_TMA: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PACKED_K: tl.constexpr,
                IMPRECISE_WINDOW: tl.constexpr):
    # Sums K blocks [kb_start, kb_end) of one plane into a fresh accumulator; the caller
    # sized the range so that every partial sum is exact.  Operands are K-major rows of
    # the flattened [planes * batch * rows, K] tensors, through TMA descriptors or pointers.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    offs_k = tl.arange(0, PACKED_K)
    if OPERAND == "e2m1":
        # Scale 2**1 (e8m0 128) on both sides turns the stored E2M1 halves back into
        # digits; constant scales still select the native block-scaled MMA.
        a_scale = tl.full((BLOCK_M, BLOCK_K // 32), 128, tl.uint8)
        b_scale = tl.full((BLOCK_N, BLOCK_K // 32), 128, tl.uint8)
    if not USE_TMA:
        a_ptrs = a_src + (a_row + offs_am)[:, None] * stride_a + (kb_start * PACKED_K + offs_k)[None, :]
        b_ptrs = b_src + (b_row + offs_bn)[:, None] * stride_b + (kb_start * PACKED_K + offs_k)[None, :]
    for kb in range(kb_start, kb_end):
        if USE_TMA:
            a = a_src.load([tl.cast(a_row, tl.int32), kb * PACKED_K])
            b = b_src.load([tl.cast(b_row, tl.int32), kb * PACKED_K])
        else:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            a_ptrs += PACKED_K
            b_ptrs += PACKED_K
        if OPERAND == "e2m1":
            acc = tl.dot_scaled(a, a_scale, "e2m1", b.T, b_scale, "e2m1", acc)
        elif OPERAND == "e4m3":
            acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=IMPRECISE_WINDOW)
        else:
            acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    return acc


@triton.jit
def _plane_gemm_kernel(
    a_src, b_src, coef_ptr, plane_start_ptr, moduli_ptr, out_ptr,
    M, N, n_products, n_batch, n_k_blocks, chunk_blocks, stride_a, stride_b,
    stride_og, stride_ob, stride_om, stride_on,
    OPERAND: tl.constexpr, SINGLE_FLUSH: tl.constexpr, UNIT_COEFFICIENTS: tl.constexpr, RESIDUE_BITS: tl.constexpr,
    USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    IMPRECISE_WINDOW: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
):
    # Persistent: NUM_PROGRAMS programs walk the output tiles of every (group, batch) product,
    # one product after the other, so one launch serves all moduli with no tail wave per
    # modulus, and the programs at work at any time share one product's A and B panels in L2.
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    tiles = grid_m * grid_n
    width = GROUP_M * grid_n

    if OPERAND == "e2m1":
        PACKED_K: tl.constexpr = BLOCK_K // 2
        ACC_DTYPE: tl.constexpr = tl.float32
    elif OPERAND == "e4m3":
        PACKED_K: tl.constexpr = BLOCK_K
        ACC_DTYPE: tl.constexpr = tl.float32
    else:
        PACKED_K: tl.constexpr = BLOCK_K
        ACC_DTYPE: tl.constexpr = tl.int32

    for tile in tl.range(tl.program_id(0), tiles * n_products, NUM_PROGRAMS):
        group_batch = tile // tiles
        group = group_batch // n_batch
        batch = group_batch % n_batch
        # Grouped order of one product's tiles, so neighbouring programs share A and B in L2.
        pid = tile % tiles
        first_m = (pid // width) * GROUP_M
        size_m = tl.minimum(grid_m - first_m, GROUP_M)
        pid_m = first_m + (pid % width) % size_m
        pid_n = (pid % width) // size_m

        # Tile rows past M (N) read the next plane's rows, or wrap (pointer path) / zero-fill
        # (TMA) at the end of the tensor; they are never stored.  K was padded to whole blocks.
        offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        if USE_TMA:
            tile_m = pid_m * BLOCK_M
            tile_n = pid_n * BLOCK_N
        else:
            tile_m = 0
            tile_n = 0

        t_start = tl.load(plane_start_ptr + group)
        t_end = tl.load(plane_start_ptr + group + 1)
        modulus = tl.load(moduli_ptr + group)
        inverse = 1.0 / modulus.to(tl.float64)
        # Chunk sums are below 2**31 and m < 2**31, so every reduce_mod argument stays below m * 2**50.
        if SINGLE_FLUSH:
            # One plane, one chunk: no residue carried across the K loop (keeps registers free).
            plane = tl.cast(t_start, tl.int64) * n_batch + batch
            part = _dot_blocks(a_src, b_src, plane * M + tile_m, plane * N + tile_n, offs_am, offs_bn, stride_a,
                               stride_b, 0, n_k_blocks, ACC_DTYPE, OPERAND, USE_TMA, BLOCK_M, BLOCK_N, BLOCK_K,
                               PACKED_K, IMPRECISE_WINDOW)
            if UNIT_COEFFICIENTS:
                # The chunk's residue is the plane's: no multiply by 1 and second reduction.
                residue = reduce_chunk(part, modulus, inverse, RESIDUE_BITS)
            else:
                residue = fold_chunk(0, part, tl.load(coef_ptr + t_start), modulus, inverse, RESIDUE_BITS)
        else:
            residue = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
            for t in range(t_start, t_end):
                coef = tl.load(coef_ptr + t)
                plane = tl.cast(t, tl.int64) * n_batch + batch
                for kb in range(0, n_k_blocks, chunk_blocks):
                    part = _dot_blocks(a_src, b_src, plane * M + tile_m, plane * N + tile_n, offs_am, offs_bn,
                                       stride_a, stride_b, kb, tl.minimum(kb + chunk_blocks, n_k_blocks), ACC_DTYPE,
                                       OPERAND, USE_TMA, BLOCK_M, BLOCK_N, BLOCK_K, PACKED_K, IMPRECISE_WINDOW)
                    residue = fold_chunk(residue, part, coef, modulus, inverse, RESIDUE_BITS)

        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        # 64-bit offsets: G * M * N may pass 2**31 even where each stride does not.
        out_ptrs = (out_ptr + tl.cast(group, tl.int64) * stride_og + tl.cast(batch, tl.int64) * stride_ob
                    + tl.cast(rows, tl.int64)[:, None] * stride_om + cols[None, :] * stride_on)
        tl.store(out_ptrs, residue.to(out_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)
    return None


def select_operand(digits: str, device: torch.device | str) -> str:
    """The operand type ``modular_matmul`` uses for ``digits`` on ``device``: fp4 digits go
    to native FP4 (``e2m1``) from sm_100 on and to E4M3 elsewhere (Hopper, CPU); fp8 digits
    to E4M3; int8 and int4 digits to int8."""
    digit_set(digits)
    capability = _capability(torch.device(device))
    if digits == "fp4":
        # Triton 3.6 aborts compiling tl.dot_scaled for sm_100; 3.9 emits the block-scaled
        # FP4 MMA.  Elsewhere fp4 digits are E4M3 values inside the wgmma promotion window.
        native = capability is not None and capability >= (10, 0) and _TRITON_VERSION >= (3, 9)
        operand = "e2m1" if native else "e4m3"
    elif digits == "fp8":
        operand = "e4m3"
    else:
        operand = "int8"
    _log.debug("digits %s on %s (capability %s): operand %s", digits, device, capability, operand)
    return operand


def plan_chunk(operand: str, config: PlaneGemmConfig, max_product: int, k_chunk: int | None = None) -> int:
    """K per exact accumulator chunk for planes whose largest |P_t| * |Q_t| is
    ``max_product``: the exactness bound of ``operand`` rounded down to whole
    ``config.block_k`` blocks, or ``k_chunk`` after checking it against that bound."""
    if operand not in OPERANDS:
        raise ValueError(f"unknown operand {operand!r}; known: {', '.join(OPERANDS)}")
    max_product = max(int(max_product), 1)
    exact = _INT32_EXACT if operand == "int8" else _FP32_EXACT
    bound = exact // max_product
    if operand == "e4m3" and config.imprecise_window:
        if config.imprecise_window * max_product >= _WGMMA_FP8_EXACT:
            raise ValueError(
                f"imprecise_window {config.imprecise_window} x max|P*Q| {max_product} >= 2**14: the FP8 wgmma "
                f"partial would round; use a config with imprecise_window <= {(_WGMMA_FP8_EXACT - 1) // max_product} "
                f"(0 promotes every instruction) or planes with smaller digits"
            )
    if k_chunk is None:
        k_chunk = bound - bound % config.block_k
        if k_chunk == 0:
            raise ValueError(
                f"max|P*Q| {max_product} allows only {bound} exact products per {operand} accumulator, fewer than "
                f"block_k {config.block_k}: use a config with block_k <= {bound} or planes with smaller digits"
            )
    elif not isinstance(k_chunk, int) or k_chunk <= 0 or k_chunk % config.block_k or k_chunk > bound:
        raise ValueError(
            f"k_chunk {k_chunk!r} must be a positive multiple of block_k {config.block_k} and at most {bound}, "
            f"the exact {operand} accumulation bound for max|P*Q| {max_product}"
        )
    return k_chunk


def config_refusal(operand: str, config: PlaneGemmConfig, max_product: int, *, planes: Sequence[int] | None = None,
                   k: int | None = None, device: torch.device | str | None = None) -> str | None:
    """Why ``config`` cannot run a launch of ``operand`` planes with largest ``|P_t| * |Q_t|`` =
    ``max_product``, or None when it can: its exactness windows (:func:`plan_chunk`), and for a
    ``gluon`` config the cases that kernel covers, judged where they are given: ``planes`` (the
    plane count of each modulus), ``k`` and ``device``."""
    try:
        chunk = plan_chunk(operand, config, max_product)
    except ValueError as error:
        return str(error)
    return _gluon_refusal(operand, planes, k, chunk, device) if config.gluon else None


def _gluon_refusal(operand: str, planes: Sequence[int] | None, k: int | None, chunk: int,
                   device: torch.device | str | None) -> str | None:
    # What the Gluon kernel covers (kernels.wgmma_products), judged on what is given.
    if operand != "int8":
        return f"the gluon kernel multiplies int8 planes, not {operand}"
    if planes is not None and any(count != 1 for count in planes):
        return f"the gluon kernel takes one plane per modulus; plane counts {list(planes)}"
    if k is not None and k > chunk:
        return f"the gluon kernel sums K in one exact chunk; K = {k} needs chunks of {chunk}"
    if device is not None and not wgmma_products.supports(torch.device(device)):
        return f"the gluon kernel needs wgmma (sm_90); {device} has none"
    return None


def _check_planes(name: str, planes, device, digits: str) -> list[int]:
    """Checks dtype and digit membership; returns max |value| per plane."""
    if not isinstance(planes, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(planes).__name__}")
    if planes.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64):
        raise TypeError(f"{name} has dtype {planes.dtype}: pass signed integer digit planes (int8/16/32/64)")
    if planes.device != device:
        raise ValueError(f"{name} is on {planes.device}, the other planes on {device}: move both to one device")
    allowed = digit_set(digits)
    if planes.numel() == 0:
        return [0] * planes.shape[0]
    lo, hi = min(allowed), max(allowed)
    flat = planes.reshape(planes.shape[0], -1)
    mins, maxs = flat.aminmax(dim=1)
    mins, maxs = mins.tolist(), maxs.tolist()
    for t, (low, high) in enumerate(zip(mins, maxs)):
        if low < lo or high > hi:
            raise ValueError(f"{name}[{t}] holds values in [{low}, {high}], outside the {digits} digits [{lo}, {hi}]")
    if len(allowed) != hi - lo + 1:
        # A gap in the set: look each value up in a table over [lo, hi].
        table = torch.zeros(hi - lo + 1, dtype=torch.bool, device=device)
        table[torch.tensor(sorted(allowed), device=device) - lo] = True
        member = table[planes.to(torch.int32) - lo]
        if not bool(member.all()):
            index = tuple(int(i) for i in (~member).nonzero()[0])
            raise ValueError(f"{name}{list(index)} = {int(planes[index])} is not in the {digits} digit set")
    return [max(-low, high) for low, high in zip(mins, maxs)]


def _max_abs(x: torch.Tensor) -> int:
    # aminmax rather than abs(): abs(-128) overflows int8.
    if x.numel() == 0:
        return 0
    low, high = x.aminmax()
    return max(-int(low), int(high))


def _e2m1_codes(device) -> tuple[torch.Tensor, int]:
    """Table from an fp4 digit v (at index v - lo) to the E2M1 code of v / 2."""
    codes = {}
    for exponent in range(4):
        for mantissa in range(2):
            # E2M1: bias 1, exponent 0 is subnormal.
            if exponent:
                value = (1 + Fraction(mantissa, 2)) * Fraction(2) ** (exponent - 1)
            else:
                value = Fraction(mantissa, 2)
            codes[int(2 * value)] = exponent << 1 | mantissa
    allowed = digit_set("fp4")
    lo = min(allowed)
    table = torch.zeros(max(allowed) - lo + 1, dtype=torch.uint8)
    for v in allowed:
        table[v - lo] = codes[abs(v)] | (8 if v < 0 else 0)
    return table.to(device), lo


def _to_operand(planes: torch.Tensor, operand: str, block_k: int) -> torch.Tensor:
    pad = -planes.shape[-1] % block_k
    if pad:
        planes = torch.nn.functional.pad(planes, (0, pad))
    if operand == "int8":
        converted = planes.to(torch.int8)
    elif operand == "e4m3":
        # fp16 holds every E4M3 integer exactly, so the two-step conversion rounds nothing.
        converted = planes.to(torch.float16).to(torch.float8_e4m3fn)
    else:
        table, lo = _e2m1_codes(planes.device)
        codes = table[planes.to(torch.int32) - lo]
        converted = codes[..., 0::2] | (codes[..., 1::2] << 4)
    converted = converted.contiguous()
    # Tensor descriptors need 16-byte aligned bases; a caller's offset view may not be.
    return converted if converted.data_ptr() % 16 == 0 else converted.clone()


def _check_coefficients(coefficients, planes: int, modulus) -> list[int]:
    check_modulus(modulus)
    coefficients = list(coefficients)
    if len(coefficients) != planes:
        raise ValueError(f"{len(coefficients)} coefficients for {planes} planes: pass one coefficient per plane")
    for c in coefficients:
        if isinstance(c, bool) or not isinstance(c, int):
            raise TypeError(f"coefficient {c!r} is not an int")
    return [c % modulus for c in coefficients]


def _check_shapes(a_planes: torch.Tensor, b_planes: torch.Tensor) -> None:
    if a_planes.dim() < 3 or a_planes.shape[:-2] != b_planes.shape[:-2] or a_planes.shape[-1] != b_planes.shape[-1]:
        raise ValueError(
            f"plane shapes {tuple(a_planes.shape)} and {tuple(b_planes.shape)} do not match: expected "
            f"[T, ..., M, K] and [T, ..., N, K] (B K-major) with equal T, batch dims and K"
        )


def residue_dtype(moduli: Sequence[int]) -> torch.dtype:
    """The narrowest type the plane GEMM stores residues in [0, m) of ``moduli`` as:
    uint8 up to m = 2**8, int16 below 2**15, else int32."""
    top = max(moduli)
    return torch.uint8 if top <= 2**8 else torch.int16 if top < _SMALL_MODULUS else torch.int32


def _residue_bits(dtype: torch.dtype) -> int:
    # The kernel's residue arithmetic for the moduli that residue_dtype gives `dtype`.
    return {torch.uint8: 8, torch.int16: 16}.get(dtype, 32)


# RESIDUE_BITS of exact sums (kernels.mod_reduce.fold_chunk): no reduction at all.
_EXACT_SUMS = 0


def grouped_modular_matmul(
    groups: Sequence[tuple[torch.Tensor, torch.Tensor, Sequence[int], int]],
    *,
    digits: str,
    operand: str | None = None,
    config: PlaneGemmConfig | None = None,
    k_chunk: int | None = None,
    out_dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """``modular_matmul`` for several (a_planes, b_planes, coefficients, modulus) groups of
    one shape in a single launch; returns ``[G, ..., M, N]``.  Plane counts may differ
    between groups.  ``operand`` (default: ``select_operand``), ``config`` (default: the
    first of ``CONFIGS[operand]`` that the planes' windows admit) and ``k_chunk``
    (default: the exact bound) override the automatic choices after validation.
    ``out_dtype``: ``residue_dtype`` of the moduli, which the kernel writes, or a wider
    integer type (a cast of it).

    The planes' maxima, which set the exactness windows, are read back to the host here:
    planes whose digits are known by construction go through :func:`encoded_modular_matmul`,
    which reads nothing back."""
    if not groups:
        raise ValueError("grouped_modular_matmul needs at least one group")
    first_a, first_b = groups[0][0], groups[0][1]
    device = first_a.device if isinstance(first_a, torch.Tensor) else None
    max_product, coefficients, moduli, plane_start = 1, [], [], [0]
    for index, (a_planes, b_planes, coeffs, modulus) in enumerate(groups):
        a_max = _check_planes(f"group {index} a_planes", a_planes, device, digits)
        b_max = _check_planes(f"group {index} b_planes", b_planes, device, digits)
        _check_shapes(a_planes, b_planes)
        if a_planes.shape[1:] != first_a.shape[1:] or b_planes.shape[1:] != first_b.shape[1:]:
            raise ValueError(f"group {index} planes differ in shape from group 0: group calls need one shape")
        coefficients += _check_coefficients(coeffs, a_planes.shape[0], modulus)
        moduli.append(modulus)
        plane_start.append(len(coefficients))
        max_product = max([max_product] + [p * q for p, q in zip(a_max, b_max)])
    narrowest = residue_dtype(moduli)
    if out_dtype not in (torch.uint8, torch.int16, torch.int32, torch.int64):
        raise TypeError(f"out_dtype {out_dtype}: residues are returned as torch.uint8, int16, int32 or int64")
    if out_dtype.itemsize < narrowest.itemsize:
        raise TypeError(f"out_dtype {out_dtype} cannot hold residues mod {max(moduli)}: use {narrowest} or wider")
    operand = _checked_operand(digits, operand, device)
    config = config or _default_config(operand, max_product)
    chunk = plan_chunk(operand, config, max_product, k_chunk)

    *batch, m_rows, k = first_a.shape[1:]
    n_cols = first_b.shape[-2]
    out = torch.empty((len(groups), *batch, m_rows, n_cols), dtype=narrowest, device=device)
    if out.numel() and k == 0:
        out.zero_()
    elif out.numel():
        n_batch = out[0, ..., 0, 0].numel()

        def stack(index: int) -> torch.Tensor:
            planes = _joined([g[index] for g in groups])
            return _to_operand(planes.reshape(planes.shape[0], n_batch, *planes.shape[-2:]), operand,
                               config.block_k)

        _launch(stack(0), stack(1), tuple(coefficients), tuple(plane_start), tuple(moduli),
                out.view(len(groups), n_batch, m_rows, n_cols), operand, config, chunk)
    return out if out_dtype == narrowest else out.to(out_dtype)


def encoded_modular_matmul(planes_a: torch.Tensor, planes_b: torch.Tensor, encodings: Sequence, *,
                           config: PlaneGemmConfig | None = None) -> torch.Tensor:
    """``C'_i = sum_t coefficient_t * P_t(A'_i) @ Q_t(B'_i)^T mod m_i`` for every encoding i, in one
    launch and without a round trip to the host: ``[len(encodings), M, N]`` residues in
    ``residue_dtype`` of the moduli.

    ``planes_a`` ``[T, M, K]`` and ``planes_b`` ``[T, N, K]`` are the planes
    ``kernels.residues.encode_planes`` writes for ``encodings`` (each encoding's planes in turn,
    T in all).  A batch, ``[T, B, M, K]`` and ``[T, B, N, K]``, gives ``[len(encodings), B, M, N]``
    in the same one launch.  That kernel stores only values of the encodings' plane tables, so the largest
    plane product is each encoding's ``max_plane_product``, known before any data: the
    exactness windows come from it and no plane is read back (``grouped_modular_matmul``
    reads the maxima of planes of unknown origin)."""
    if not encodings:
        raise ValueError("encoded_modular_matmul needs at least one encoding")
    for name, planes in (("planes_a", planes_a), ("planes_b", planes_b)):
        if not isinstance(planes, torch.Tensor) or planes.dtype not in (torch.int8, torch.int16):
            raise TypeError(f"{name} must be the int8 or int16 planes encode_planes returns, got "
                            f"{getattr(planes, 'dtype', type(planes).__name__)}")
        if planes.dim() not in (3, 4):
            raise ValueError(f"{name} has shape {tuple(planes.shape)}: expected [planes, rows, K] or a batch's "
                             f"[planes, B, rows, K]")
    _check_shapes(planes_a, planes_b)
    if planes_a.device != planes_b.device:
        raise ValueError(f"planes_a is on {planes_a.device}, planes_b on {planes_b.device}: move both to one device")
    counts = [len(e.planes) for e in encodings]
    if planes_a.shape[0] != sum(counts):
        raise ValueError(f"{planes_a.shape[0]} planes for encodings of {sum(counts)} planes in all: pass the planes "
                         f"encode_planes wrote for these encodings")
    digits = {e.digits for e in encodings}
    if len(digits) != 1:
        raise ValueError(f"encodings of several digit sets {sorted(digits)}: one launch takes one digit set")
    device = planes_a.device
    operand = _checked_operand(digits.pop(), None, device)
    max_product = max(e.max_plane_product for e in encodings)
    config = config or _default_config(operand, max_product)
    chunk = plan_chunk(operand, config, max_product)
    coefficients = tuple(p.coefficient % e.modulus for e in encodings for p in e.planes)
    moduli = tuple(e.modulus for e in encodings)
    plane_start = tuple(itertools.accumulate(counts, initial=0))
    (*batch, m_rows, k), n_cols = planes_a.shape[1:], planes_b.shape[-2]
    out = torch.empty((len(encodings), *batch, m_rows, n_cols), dtype=residue_dtype(moduli), device=device)
    if out.numel() and k == 0:
        out.zero_()
    elif out.numel():
        batched = planes_a.dim() == 4
        a_op, b_op = (_to_operand(p if batched else p[:, None], operand, config.block_k) for p in (planes_a, planes_b))
        _launch(a_op, b_op, coefficients, plane_start, moduli, out if batched else out[:, None], operand, config, chunk)
    return out


def _checked_operand(digits: str, operand: str | None, device: torch.device) -> str:
    """``operand`` (default: ``select_operand``) after checking it holds every digit and runs here."""
    if operand is None:
        operand = select_operand(digits, device)
    elif operand not in OPERANDS:
        raise ValueError(f"unknown operand {operand!r}; known: {', '.join(OPERANDS)}")
    if not digit_set(digits) <= digit_set(OPERANDS[operand]):
        raise ValueError(f"operand {operand} cannot hold every {digits} digit; choose one of "
                         f"{[o for o, d in OPERANDS.items() if digit_set(digits) <= digit_set(d)]}")
    if device.type == "cpu" and not isinstance(_plane_gemm_kernel, InterpretedFunction):
        raise ValueError("planes are on the CPU but Triton kernels run on CPU tensors only under "
                         "TRITON_INTERPRET=1 (set before importing kernels): move the planes to a GPU")
    if isinstance(_plane_gemm_kernel, InterpretedFunction) and operand not in INTERPRETER_OPERANDS:
        raise ValueError(f"operand {operand} needs tl.dot_scaled, which Triton's interpreter runs from 3.8 on "
                         f"(installed: {triton.__version__}): choose one of {INTERPRETER_OPERANDS} or run on a GPU")
    return operand


def _joined(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The planes of all groups along dim 0: a view when the parts are back-to-back slices of
    one contiguous tensor, so the largest operands of the product are not copied; else a
    concatenated copy."""
    first = parts[0]
    adjacent = all(p.is_contiguous() and p.dtype == first.dtype for p in parts) and all(
        p.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        and p.data_ptr() == q.data_ptr() + q.numel() * q.element_size()
        for q, p in zip(parts, parts[1:])
    )
    if not adjacent:
        return torch.cat(list(parts))
    count = sum(p.shape[0] for p in parts)
    return first.as_strided((count, *first.shape[1:]), first.stride(), first.storage_offset())


@functools.lru_cache(maxsize=64)
def _scalar_table(coefficients: tuple[int, ...], plane_start: tuple[int, ...], moduli: tuple[int, ...],
                  device: torch.device) -> torch.Tensor:
    # One host-to-device copy for all per-plane and per-group scalars, once per plan: a
    # repeated product queues no copy.
    return torch.tensor(coefficients + plane_start + moduli, dtype=torch.int64, device=device)


@functools.lru_cache(maxsize=None)
def _programs(device: torch.device) -> int:
    """Persistent programs per ``programs_per_sm``: the multiprocessors of a GPU; under the
    interpreter, which runs programs one after another, two, so that tests walk the
    persistent loop."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


def _launch(a_op: torch.Tensor, b_op: torch.Tensor, coefficients: tuple[int, ...], plane_start: tuple[int, ...],
            moduli: tuple[int, ...], out: torch.Tensor, operand: str, config: PlaneGemmConfig, chunk: int, *,
            exact_sums: bool = False) -> None:
    """Launches the kernel on operands already converted by ``_to_operand`` ([T, batch, rows,
    K]) into ``out`` ([G, batch, M, N] of ``residue_dtype(moduli)`` or a wider integer type);
    callers have validated every other bound.  ``exact_sums``: the caller guarantees one
    plane of coefficient 1, one K chunk and every sum in [0, m) (:func:`exact_int8_matmul`),
    which the epilogue then stores unreduced."""
    # The residue arithmetic follows the moduli (the byte path is exact for m <= 2**8 only),
    # never the output's type.
    arithmetic = residue_dtype(moduli)
    if out.dtype.itemsize < arithmetic.itemsize:
        raise ValueError(f"residues mod {max(moduli)} need {arithmetic} or wider; the output is {out.dtype}")
    if exact_sums and (coefficients != (1,) or len(moduli) != 1):
        raise ValueError(f"exact sums are one plane of coefficient 1 (exact_int8_matmul); got coefficients "
                         f"{coefficients} for moduli {moduli}")
    residue_bits = _EXACT_SUMS if exact_sums else _residue_bits(arithmetic)
    device = a_op.device
    n_groups, n_batch, m_rows, n_cols = out.shape
    packed_k = a_op.shape[-1]
    n_k_blocks = packed_k * (2 if operand == "e2m1" else 1) // config.block_k
    chunk_blocks = chunk // config.block_k
    single_flush = all(e - s == 1 for s, e in zip(plane_start, plane_start[1:])) and chunk_blocks >= n_k_blocks
    unit_coefficients = all(c == 1 for c in coefficients)
    a_src, b_src = a_op.view(-1, packed_k), b_op.view(-1, packed_k)
    if config.tma and max(a_src.shape[0], b_src.shape[0]) >= 2**31:
        raise ValueError(f"{max(a_src.shape[0], b_src.shape[0])} plane rows exceed the int32 coordinates of TMA "
                         f"descriptors: use a config with tma=False or fewer planes per launch")
    if config.tma:
        tile_k = config.block_k // 2 if operand == "e2m1" else config.block_k
        a_src = TensorDescriptor.from_tensor(a_src, [config.block_m, tile_k])
        b_src = TensorDescriptor.from_tensor(b_src, [config.block_n, tile_k])
    tiles = triton.cdiv(m_rows, config.block_m) * triton.cdiv(n_cols, config.block_n) * n_groups * n_batch
    programs = _programs(device) * config.programs_per_sm
    _log.debug("plane GEMM %s: groups %d, planes %d, M %d N %d K-blocks %d, chunk %d, %s", operand, n_groups,
               len(coefficients), m_rows, n_cols, n_k_blocks, chunk, config)
    table = _scalar_table(coefficients, plane_start, moduli, device)
    n_planes = len(coefficients)
    if config.gluon:
        refusal = _gluon_refusal(operand, [e - s for s, e in zip(plane_start, plane_start[1:])],
                                 n_k_blocks * config.block_k, chunk, device)
        if refusal is not None:
            raise ValueError(f"{config}: {refusal}: use a config with gluon=False")
        wgmma_products.launch(a_op.view(-1, packed_k), b_op.view(-1, packed_k), table,
                              table[n_planes + len(plane_start):], out, n_k_blocks=n_k_blocks,
                              residue_bits=residue_bits, unit_coefficients=unit_coefficients, config=config,
                              programs=programs)
        return
    launch(_plane_gemm_kernel, (min(tiles, programs),),
        a_src, b_src, table, table[n_planes:], table[n_planes + len(plane_start):], out,
        m_rows, n_cols, n_groups * n_batch, n_batch, n_k_blocks, chunk_blocks, packed_k, packed_k,
        *out.stride(),
        OPERAND=operand, SINGLE_FLUSH=single_flush, UNIT_COEFFICIENTS=unit_coefficients, RESIDUE_BITS=residue_bits,
        USE_TMA=config.tma, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        GROUP_M=config.group_m, IMPRECISE_WINDOW=config.imprecise_window, NUM_PROGRAMS=programs, num_warps=config.num_warps,
        num_stages=config.num_stages, **ptx.LAUNCH_OPTIONS,
    )


def _default_config(operand: str, max_product: int) -> PlaneGemmConfig:
    # The first listed config whose windows admit the planes (plan_chunk names the problem if none does).
    return next((c for c in CONFIGS[operand] if config_refusal(operand, c, max_product) is None), CONFIGS[operand][0])


def modular_matmul(
    a_planes: torch.Tensor,
    b_planes: torch.Tensor,
    coefficients: Sequence[int],
    modulus: int,
    *,
    digits: str,
    operand: str | None = None,
    config: PlaneGemmConfig | None = None,
    k_chunk: int | None = None,
    out_dtype: torch.dtype = torch.int64,
) -> torch.Tensor:
    """``(sum_t coefficients[t] * a_planes[t] @ b_planes[t]^T) mod modulus`` in [0, modulus), exactly.

    ``a_planes`` is ``[T, ..., M, K]`` and ``b_planes`` ``[T, ..., N, K]`` (K-major), both
    signed-integer tensors whose every value lies in ``digit_set(digits)``; the result is
    ``[..., M, N]`` of ``out_dtype``.  Keywords as in ``grouped_modular_matmul``."""
    return grouped_modular_matmul([(a_planes, b_planes, coefficients, modulus)], digits=digits, operand=operand,
                                  config=config, k_chunk=k_chunk, out_dtype=out_dtype)[0]


# A prime above every sum exact_int8_matmul admits: the sums' residues are the sums.
EXACT_SUM_MODULUS = 2**31 - 1


def exact_int8_matmul(a: torch.Tensor, bt: torch.Tensor, max_entry: int, *,
                      config: PlaneGemmConfig | None = None) -> torch.Tensor:
    """``a @ bt^T`` exactly, int32 ``[M, N]``, for int8 ``a`` ``[M, K]`` and ``bt`` ``[N, K]``
    whose entries the caller guarantees lie in [0, ``max_entry``] (codes it built with that
    clamp; nothing is read back to check).  Every sum is at most ``K * max_entry**2``, which
    must stay below 2**31 - 1 (ValueError otherwise); the plane GEMM of one plane modulo that
    prime then returns the sums themselves.  ``config`` as for :func:`modular_matmul` (the
    tuner's, ``kernels.autotune.tuned_plane_config`` with ``moduli=[2**31 - 1]``)."""
    for name, x in (("a", a), ("bt", bt)):
        if not isinstance(x, torch.Tensor) or x.dtype != torch.int8 or x.dim() != 2:
            raise TypeError(f"{name} must be a 2-D int8 tensor, got {getattr(x, 'dtype', type(x).__name__)} "
                            f"of shape {tuple(getattr(x, 'shape', ()))}")
    if a.shape[1] != bt.shape[1] or a.device != bt.device:
        raise ValueError(f"a {tuple(a.shape)} on {a.device} and bt {tuple(bt.shape)} on {bt.device}: expected "
                         "[M, K] and [N, K] on one device")
    if not 0 <= max_entry <= 127:
        raise ValueError(f"max_entry {max_entry} must lie in [0, 127] (int8 entries)")
    (m_rows, k), n_cols = a.shape, bt.shape[0]
    if k * max_entry**2 >= EXACT_SUM_MODULUS:
        raise ValueError(f"K = {k} sums of products up to {max_entry}**2 reach 2**31 - 1: split K (int32 sums)")
    max_product = max(max_entry**2, 1)
    config = config or _default_config("int8", max_product)
    # One K chunk: K * max_entry**2 < 2**31 is exactly the int32 accumulator's window.
    chunk = plan_chunk("int8", config, max_product)
    out = torch.empty((1, 1, m_rows, n_cols), dtype=torch.int32, device=a.device)
    if out.numel() and k == 0:
        out.zero_()
    elif out.numel():
        a_op, b_op = (_to_operand(x[None, None], "int8", config.block_k) for x in (a, bt))
        # Every sum lies in [0, 2**31 - 1): it is its own residue, stored unreduced.
        _launch(a_op, b_op, (1,), (0, 1), (EXACT_SUM_MODULUS,), out, "int8", config, chunk, exact_sums=True)
    return out[0, 0]


def reference_modular_matmul(a_planes: torch.Tensor, b_planes: torch.Tensor, coefficients: Sequence[int],
                             modulus: int) -> torch.Tensor:
    """Plain torch reference for ``modular_matmul``: int64 ``[..., M, N]`` in [0, modulus).

    Each plane product runs in float64 when every partial sum is an integer of at most
    2**53 (exact in any order, GPU included), else in int64 on the CPU (ValueError past
    2**63)."""
    _check_shapes(a_planes, b_planes)
    coefficients = _check_coefficients(coefficients, a_planes.shape[0], modulus)
    total = None
    for a, b, c in zip(a_planes, b_planes, coefficients):
        bound = _max_abs(a) * _max_abs(b) * a.shape[-1]
        if bound <= FLOAT64_EXACT:
            product = (a.double() @ b.double().transpose(-1, -2)).long()
        elif bound >= 2**63:
            raise ValueError(f"K x max|a| x max|b| = {bound} overflows int64: the reference takes planes of "
                             f"digits, not arbitrary integers")
        else:
            product = (a.cpu().long() @ b.cpu().long().transpose(-1, -2)).to(a.device)
        term = product % modulus * c % modulus
        total = term if total is None else (total + term) % modulus
    return total


def compile_ptx(operand: str, capability: int, config: PlaneGemmConfig, *, single_flush: bool = True,
                residue_dtype: torch.dtype = torch.uint8, multiprocessors: int = 132,
                exact_sums: bool = False, unit_coefficients: bool = True) -> str:
    """PTX of :func:`compile_kernel`."""
    return compile_kernel(operand, capability, config, single_flush=single_flush, residue_dtype=residue_dtype,
                          multiprocessors=multiprocessors, exact_sums=exact_sums,
                          unit_coefficients=unit_coefficients).asm["ptx"]


def compile_kernel(operand: str, capability: int, config: PlaneGemmConfig, *, single_flush: bool = True,
                   residue_dtype: torch.dtype = torch.uint8, multiprocessors: int = 132,
                   exact_sums: bool = False, unit_coefficients: bool = True):
    """The plane GEMM for ``operand`` on ``sm_<capability>``, compiled without a GPU
    (``residue_dtype``: the residues' type, which selects the residue arithmetic;
    ``multiprocessors``: the device's, an H100/H200's by default, which with
    ``config.programs_per_sm`` sizes the persistent launch; ``exact_sums``: as
    :func:`exact_int8_matmul` launches it, int32 sums stored unreduced; ``unit_coefficients``:
    every plane's coefficient is 1, as the int8 engine's and exact sums' are, where a single
    flush reduces each sum once); the Gluon kernel
    (:mod:`kernels.wgmma_products`) for a ``gluon`` config.  Triton's compiled kernel: its
    ``asm`` holds the PTX and the cubin.  Needs a process without ``TRITON_INTERPRET=1`` (see
    :func:`kernels.ptx.compile_kernel`)."""
    if operand not in OPERANDS:
        raise ValueError(f"unknown operand {operand!r}; known: {', '.join(OPERANDS)}")
    if exact_sums and (operand != "int8" or residue_dtype != torch.int32 or not single_flush):
        raise ValueError("exact sums are int8 products in one K chunk with int32 results (exact_int8_matmul)")
    residue_bits = _EXACT_SUMS if exact_sums else _residue_bits(residue_dtype)
    if config.gluon:
        if operand != "int8" or capability != 90 or not single_flush:
            raise ValueError(f"the gluon kernel is sm_90 int8 with one plane and one K chunk (single_flush); "
                             f"got {operand} on sm_{capability}, single_flush={single_flush}")
        return wgmma_products.compile_kernel(config, residue_bits=residue_bits, out_type=_OUT_TYPES[residue_dtype],
                                             programs=multiprocessors * config.programs_per_sm,
                                             unit_coefficients=unit_coefficients)
    constexprs = dict(OPERAND=operand, SINGLE_FLUSH=single_flush, UNIT_COEFFICIENTS=unit_coefficients,
                      RESIDUE_BITS=residue_bits,
                      USE_TMA=config.tma, BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                      GROUP_M=config.group_m, IMPRECISE_WINDOW=config.imprecise_window,
                      NUM_PROGRAMS=multiprocessors * config.programs_per_sm)
    element = _POINTER_TYPES[operand]
    if config.tma:
        tile_k = config.block_k // 2 if operand == "e2m1" else config.block_k
        a_type = f"tensordesc<{element[1:]}[{config.block_m}, {tile_k}]>"
        b_type = f"tensordesc<{element[1:]}[{config.block_n}, {tile_k}]>"
    else:
        a_type = b_type = element
    out_type = _OUT_TYPES[residue_dtype]
    arguments = {"a_src": a_type, "b_src": b_type, "coef_ptr": "*i64", "plane_start_ptr": "*i64",
                 "moduli_ptr": "*i64", "out_ptr": out_type}
    signature = {name: arguments.get(name, "i32") for name in _plane_gemm_kernel.arg_names if name not in constexprs}
    signature.update({name: "constexpr" for name in constexprs})
    # What a launch specializes: 16-byte aligned pointers, row strides (K padded to whole
    # blocks) divisible by 16.
    aligned = [name for name, kind in signature.items() if kind.startswith("*")] + ["stride_a", "stride_b"]
    return ptx.compile_kernel(_plane_gemm_kernel, signature, constexprs, divisible=aligned, capability=capability,
                              num_warps=config.num_warps, num_stages=config.num_stages)
