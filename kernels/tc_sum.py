"""Deterministic sums along the last dimension as chains of tensor-core MMAs.

A row of length n is cut into segments of SEGMENT = BLOCK_K * R consecutive elements.  Each segment is
one row of an MMA operand tile; multiplying the tile by an all-ones [BLOCK_K, 16] tile R times, chained
into one accumulator, folds the segment in its natural order, one MMA instruction (k elements) at a
time.  Float per-segment sums are then combined by a perfect binary tree over the segment index, padded
with zeros to a power of two, so the tree's shape depends only on the length; int64 ones are summed in
any order, exactly.  A program folds BLOCK_M consecutive segments of the row-major (row, segment)
numbering, so many short rows fill its tiles as one long row does.  BLOCK_M, num_warps and num_stages
only decide which program folds which segment, so the bits depend on the input, the segment length and
the MMA instruction Triton picks (num_warps can change that one) alone; kernels.check proves which
configurations share them.

Accumulation: int32 inside a segment for int8 (exact while SEGMENT * 128 < 2**31), then int64 across
segments, so int8 sums are always exact and returned as int64 like ``torch.sum``.  Float inputs
accumulate in fp32; FP8 partials are promoted into fp32 after every MMA instruction (32 products of at
most 448 stay below 2**14, inside Hopper's 13-fraction-bit internal window), so integer-valued inputs are
summed exactly while every partial sum stays below 2**24: ``exact=True`` checks that bound.
"""

import math

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from kernels.dispatch import launch
from kernels.ptx import LAUNCH_OPTIONS

__all__ = [
    "TC_SUM_CONFIGS",
    "TC_SUM_DTYPES",
    "FP32_EXACT_LIMIT",
    "tc_sum",
    "tc_sum_reference",
    "segment_length",
]

TC_SUM_DTYPES = (torch.int8, torch.float8_e4m3fn, torch.float16, torch.bfloat16)

# Integers are exact in fp32 up to 2**24; every partial sum of a row is bounded by sum(|x|).
FP32_EXACT_LIMIT = 2**24

_ONES_N = 16  # the narrowest N tl.dot accepts; only column 0 of the product is kept
_INT32_LIMIT = 2**31 - 1
_INT8_MAX_ABS = 128
_FP8_PROMOTION = 32  # products per fp32 promotion for FP8 (one wgmma k=32 instruction)
_TREE_LEVELS = 10  # levels of the pairwise tree one tree-kernel program reduces

# Every entry is a set of keyword arguments for tc_sum.  All but the last two fold segments of 1024
# elements with wgmma and give the same bits; num_warps=2 selects mma.sync instead of wgmma, and the
# last entry doubles the segment, which regroups float sums (kept to show the checker separates it).
TC_SUM_CONFIGS = (
    {"BLOCK_M": 64, "BLOCK_K": 128, "R": 8, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_K": 128, "R": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_K": 256, "R": 4, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_K": 256, "R": 4, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_K": 512, "R": 2, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_K": 128, "R": 8, "num_warps": 2, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_K": 256, "R": 8, "num_warps": 4, "num_stages": 3},
)

# The bits of 1 in each operand type, as the signed integer of its width (the kernel's ones tile).
_ONE_BITS = {d: int(torch.ones((), dtype=d).view(torch.int8 if d.itemsize == 1 else torch.int16))
             for d in TC_SUM_DTYPES}

_CONFIG_KEYS = frozenset({"BLOCK_M", "BLOCK_K", "R", "num_warps", "num_stages"})


@triton.jit
def _tc_sum_kernel(
    x_ptr,
    out_ptr,
    n,
    n_segments,
    total_segments,
    stride_xr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    R: tl.constexpr,
    ONES_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    IMPRECISE_ACC: tl.constexpr,
    FOLD_IN_ORDER: tl.constexpr,
    ONE_BITS: tl.constexpr,
    BITS_TYPE: tl.constexpr,
):
    # Segments are numbered row-major over (row, segment within the row), and a tile takes BLOCK_M
    # consecutive ones: a tile may span rows, so short rows still fill every MMA row.
    seg = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row = seg // n_segments
    start = (seg - row * n_segments) * (BLOCK_K * R)
    live = seg < total_segments
    offs_k = tl.arange(0, BLOCK_K)
    offs_n = tl.arange(0, ONES_N)
    seg_ptr = x_ptr + row * stride_xr + start
    # Bit pattern of 1 reinterpreted: a constant the compiler hoists out of the loop for every operand
    # type (a converted fp32 constant is not folded for FP8), and the interpreter encodes it exactly.
    ones = tl.full((BLOCK_K, ONES_N), ONE_BITS, dtype=BITS_TYPE)
    ones = ones.to(x_ptr.dtype.element_ty, bitcast=True)
    acc = tl.zeros((BLOCK_M, ONES_N), dtype=ACC_DTYPE)
    for r in range(R):
        pos = start[:, None] + r * BLOCK_K + offs_k[None, :]
        tile = tl.load(seg_ptr[:, None] + r * BLOCK_K + offs_k[None, :], mask=live[:, None] & (pos < n), other=0.0)
        if FOLD_IN_ORDER:
            # The interpreter's float dot is a BLAS call whose rounding can depend on a row's place
            # in the tile (and it reads bf16 operands as raw uint16 bits).  Instead fold each row
            # one element at a time in fp32, the accumulator first: numpy's cumsum runs row by row
            # in order, so a segment's bits are its own (as every MMA row's are on the GPU) and
            # are those of tc_sum_reference.  Every column of acc holds the same running sum.
            values = tile.to(tl.float32)
            values = tl.where(offs_k[None, :] == 0, values + tl.max(acc, axis=1)[:, None], values)
            running = tl.cumsum(values, axis=1)
            last = tl.max(tl.where(offs_k[None, :] == BLOCK_K - 1, running, -float("inf")), axis=1)
            acc = tl.broadcast_to(last[:, None], (BLOCK_M, ONES_N))
        else:
            acc = tl.dot(tile, ones, acc, max_num_imprecise_acc=IMPRECISE_ACC, out_dtype=ACC_DTYPE)
    # Every column of acc holds the segment sum; storing column 0 alone avoids any further add.  The
    # partials are [rows, n_segments] contiguous, so segment seg's lies at offset seg.
    out_offs = seg[:, None] + offs_n[None, :] * 0
    keep = (offs_n[None, :] == 0) & live[:, None]
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _tree_kernel(in_ptr, out_ptr, rows, n_in, groups, LEVELS: tl.constexpr, BLOCK_R: tl.constexpr,
                 PAIRWISE: tl.constexpr):
    # Program pid sums group pid % groups (2**LEVELS consecutive values) of BLOCK_R consecutive rows.
    pid = tl.program_id(0)
    group = pid % groups
    rr = (pid // groups).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = group.to(tl.int64) * (2**LEVELS) + tl.arange(0, 2**LEVELS)
    mask = (rr[:, None] < rows) & (cols[None, :] < n_in)
    v = tl.load(in_ptr + rr[:, None] * n_in + cols[None, :], mask=mask, other=0)
    if PAIRWISE:
        # fp32 rounds at every add, so the order is fixed: a perfect binary tree over the index.
        for level in tl.static_range(LEVELS):
            left, right = tl.split(tl.reshape(v, (BLOCK_R, 1 << (LEVELS - 1 - level), 2)))
            v = left + right
        total = tl.reshape(v, (BLOCK_R,))
    else:
        # int64 adds of values whose every partial sum is in range are exact in any order.
        total = tl.sum(v, axis=1)
    tl.store(out_ptr + rr * groups + group, total, mask=rr < rows)


def _kernel_constants(config, dtype):
    """The constexpr arguments of _tc_sum_kernel for `config` and operand `dtype` (kernels.check.ptx
    compiles with the same ones)."""
    is_int = dtype == torch.int8
    return {
        "BLOCK_M": config["BLOCK_M"],
        "BLOCK_K": config["BLOCK_K"],
        "R": config["R"],
        "ONES_N": _ONES_N,
        "ACC_DTYPE": tl.int32 if is_int else tl.float32,
        "IMPRECISE_ACC": _FP8_PROMOTION if dtype == torch.float8_e4m3fn else None,
        "FOLD_IN_ORDER": not is_int and isinstance(_tc_sum_kernel, InterpretedFunction),
        "ONE_BITS": _ONE_BITS[dtype],
        "BITS_TYPE": tl.int8 if dtype.itemsize == 1 else tl.int16,
    }


def _tree_constants(levels, dtype):
    """The constexpr arguments of _tree_kernel reducing `levels` levels of `dtype` partials."""
    # Each program sums 2**_TREE_LEVELS values: many short rows share one.
    return {"LEVELS": levels, "BLOCK_R": 2 ** (_TREE_LEVELS - levels), "PAIRWISE": dtype.is_floating_point}


def segment_length(config):
    """Elements one chain of MMAs folds into one accumulator: the only tile size the bits depend on."""
    return config["BLOCK_K"] * config["R"]


def _check_config(config, dtype):
    unknown = set(config) - _CONFIG_KEYS
    missing = _CONFIG_KEYS - set(config)
    if unknown or missing:
        raise TypeError(
            f"tc_sum config takes exactly {sorted(_CONFIG_KEYS)}; unknown {sorted(unknown)}, missing "
            f"{sorted(missing)}: pass one entry of TC_SUM_CONFIGS"
        )
    for key in ("BLOCK_M", "BLOCK_K"):
        value = config[key]
        if not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"tc_sum {key}={value!r} must be a power of two >= 16 (tl.dot tile shape)")
    if dtype.itemsize == 1 and config["BLOCK_K"] < 32:
        raise ValueError(f"tc_sum BLOCK_K={config['BLOCK_K']} < 32: 8-bit MMAs on sm_90 need K >= 32")
    if not isinstance(config["R"], int) or config["R"] < 1:
        raise ValueError(f"tc_sum R={config['R']!r} must be a positive int (MMAs chained per segment)")
    if config["num_warps"] not in (1, 2, 4, 8, 16):
        raise ValueError(f"tc_sum num_warps={config['num_warps']!r} must be a power of two up to 16")
    if not isinstance(config["num_stages"], int) or config["num_stages"] < 1:
        raise ValueError(f"tc_sum num_stages={config['num_stages']!r} must be a positive int")
    segment = segment_length(config)
    if dtype == torch.int8 and segment * _INT8_MAX_ABS > _INT32_LIMIT:
        raise ValueError(
            f"tc_sum segment BLOCK_K*R={segment} could overflow the int32 accumulator "
            f"({segment}*128 > 2**31-1): keep BLOCK_K*R <= {_INT32_LIMIT // _INT8_MAX_ABS}"
        )


def _check_exact(x):
    if x.dtype == torch.int8:
        return
    wide = x.to(torch.float32)
    if not bool(torch.equal(wide, torch.round(wide))):
        raise ValueError("tc_sum(exact=True) needs integer-valued input: found a non-integer element")
    worst = float(wide.abs().sum(dim=-1, dtype=torch.float64).max()) if wide.numel() else 0.0
    if worst >= FP32_EXACT_LIMIT:
        raise ValueError(
            f"tc_sum(exact=True): a row has sum(|x|) = {worst:.0f} >= 2**24, so fp32 partial sums could "
            f"round; split the row or sum it as int8 limbs"
        )


def _tree_sum(partials):
    """Sum the last dimension: for floats by the zero-padded perfect binary tree, _TREE_LEVELS levels a
    launch; for integers (exact in any order) by plain sums of as many values."""
    rows, count = partials.shape
    levels_left = max(count - 1, 0).bit_length()
    while levels_left:
        levels = min(levels_left, _TREE_LEVELS)
        groups = triton.cdiv(count, 2**levels)
        constants = _tree_constants(levels, partials.dtype)
        out = torch.empty((rows, groups), dtype=partials.dtype, device=partials.device)
        grid = (groups * triton.cdiv(rows, constants["BLOCK_R"]),)
        launch(_tree_kernel, grid, partials, out, rows, count, groups, **constants, **LAUNCH_OPTIONS)
        partials, count, levels_left = out, groups, levels_left - levels
    return partials[:, 0]


def tc_sum(x, *, exact=False, **config):
    """Sum x along its last dimension with a fixed order of operations (see the module docstring).

    x: int8, float8_e4m3fn, float16 or bfloat16 tensor; config: one entry of TC_SUM_CONFIGS (default:
    the first).  Returns int64 for int8, else float32, of shape x.shape[:-1].  exact=True raises
    ValueError unless the input is integer-valued with every row's sum(|x|) < 2**24, the bound under
    which every partial sum, and so the result, is exact.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"tc_sum takes a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in TC_SUM_DTYPES:
        raise TypeError(f"tc_sum sums tensor-core operand types {TC_SUM_DTYPES}, got {x.dtype}: cast first")
    if x.dim() == 0:
        raise ValueError("tc_sum needs at least one dimension to sum over")
    config = dict(TC_SUM_CONFIGS[0]) if not config else config
    _check_config(config, x.dtype)
    if exact:
        _check_exact(x)
    out_dtype = torch.int64 if x.dtype == torch.int8 else torch.float32
    n = x.shape[-1]
    if n == 0 or x.numel() == 0:
        return torch.zeros(x.shape[:-1], dtype=out_dtype, device=x.device)
    rows_x = x.reshape(-1, n)
    rows = rows_x.shape[0]
    rows_x = rows_x if rows_x.stride(-1) == 1 else rows_x.contiguous()
    segment = segment_length(config)
    n_segments = triton.cdiv(n, segment)
    partials = torch.empty((rows, n_segments), dtype=out_dtype, device=x.device)
    total_segments = rows * n_segments
    grid = (triton.cdiv(total_segments, config["BLOCK_M"]),)
    launch(_tc_sum_kernel, grid,
        rows_x,
        partials,
        n,
        n_segments,
        total_segments,
        rows_x.stride(0),
        **_kernel_constants(config, x.dtype),
        num_warps=config["num_warps"],
        num_stages=config["num_stages"],
        **LAUNCH_OPTIONS,
    )
    return _tree_sum(partials).reshape(x.shape[:-1])


def tc_sum_reference(x, segment):
    """Plain torch model of tc_sum's order: sequential fp32 fold of each segment, then the tree.

    Inside a segment it folds one element at a time, which matches every MMA instruction exactly for
    integer-valued data within FP32_EXACT_LIMIT (and int8 always); for other float data it is the
    reference the hardware orders are judged against, not a bitwise model of them.  Under Triton's
    interpreter, tc_sum folds floats in this very order and returns these bits.
    """
    if x.dtype not in TC_SUM_DTYPES:
        raise TypeError(f"tc_sum_reference takes {TC_SUM_DTYPES}, got {x.dtype}")
    n = x.shape[-1]
    rows_x = x.reshape(-1, n)
    acc_dtype = torch.int64 if x.dtype == torch.int8 else torch.float32
    n_segments = max(math.ceil(n / segment), 1)
    padded = torch.zeros((rows_x.shape[0], n_segments * segment), dtype=acc_dtype, device=x.device)
    padded[:, :n] = rows_x.to(acc_dtype)
    chunks = padded.reshape(rows_x.shape[0], n_segments, segment)
    partials = torch.zeros((rows_x.shape[0], n_segments), dtype=acc_dtype, device=x.device)
    for k in range(segment):
        partials = partials + chunks[:, :, k]
    width = 1 << max(n_segments - 1, 0).bit_length()
    level = torch.zeros((rows_x.shape[0], width), dtype=acc_dtype, device=x.device)
    level[:, :n_segments] = partials
    while level.shape[1] > 1:
        level = level[:, 0::2] + level[:, 1::2]
    return level[:, 0].reshape(x.shape[:-1])
