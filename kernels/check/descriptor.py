"""Reduction-order descriptors: everything that decides the bits of a kernel configuration.

Two float configurations with equal descriptors perform the same operations on the same operands in the
same order with the same rounding, so they give the same bits on every input; tile sizes that only move
work between programs, warps or pipeline stages do not appear.  The descriptors here are predictions from
a configuration (no compilation); kernels.check.ptx confirms them against the compiled PTX.
"""

import dataclasses

import torch

from kernels.tc_sum import segment_length

__all__ = [
    "Descriptor",
    "TARGETS",
    "describe_tc_sum",
    "describe_plane_gemm",
    "mma_k",
]

# "sm_90": Triton compiling for Hopper.  "interpreter": TRITON_INTERPRET=1, where tl.dot is a numpy matmul.
TARGETS = ("sm_90", "interpreter")

_PTX_TYPE = {torch.int8: "s8", torch.float8_e4m3fn: "e4m3", torch.float16: "f16", torch.bfloat16: "bf16"}


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """How one configuration reduces.  Field order is the order the bits are decided in."""

    engine: str  # compiler and target, e.g. "triton/sm_90"
    mma: str  # normalised PTX mnemonic (no .sync/.aligned/.row/.col), or the interpreter's numpy op
    mma_k: int  # products one instruction folds before the accumulator sees them
    operand_conversion: str | None  # e.g. "e4m3->f16" when operands are upcast before the MMA
    accumulator: str  # "int32" or "fp32"
    promotion_window: int | None  # products per fresh partial added into the fp32 accumulator; None: never
    k_chunk: int  # reduction elements folded by one accumulator chain (tc_sum: the segment)
    split: str  # how the reduction dimension is partitioned across accumulators
    merge: str  # order and precision in which the chunks' partials are combined
    combine: str  # order in which planes and moduli are combined
    fma_contraction: bool  # whether any multiply-add outside the MMA may be fused
    rounding: tuple[str, ...]  # every point where a value is rounded

    def to_dict(self):
        return dataclasses.asdict(self)


def mma_k(mnemonic):
    """The k of an MMA shape token m<M>n<N>k<K> in a normalised mnemonic."""
    shape = next(t for t in mnemonic.split(".") if t.startswith("m") and "n" in t and "k" in t)
    return int(shape.split("k")[1])


def _uses_wgmma(block_m, num_warps):
    # Triton picks wgmma (MMAv3) on sm_90 only for whole warpgroups owning 64-row slabs; else mma.sync.
    return num_warps % 4 == 0 and block_m % 64 == 0


def _hopper_mma(dtype, block_m, num_warps, n):
    """(mnemonic, operand conversion, promotion window) Triton emits for `dtype` x `dtype` on sm_90."""
    acc = "s32" if dtype == torch.int8 else "f32"
    k = 32 if dtype.itemsize == 1 else 16
    src = _PTX_TYPE[dtype]
    if _uses_wgmma(block_m, num_warps):
        window = 32 if dtype == torch.float8_e4m3fn else None
        return f"wgmma.m64n{n}k{k}.{acc}.{src}.{src}", None, window
    if dtype == torch.float8_e4m3fn:
        # mma.sync has no FP8 form on sm_90: Triton upcasts to f16 (exactly) and folds 16 at a time.
        return f"mma.m16n8k16.{acc}.f16.f16.{acc}", "e4m3->f16", None
    return f"mma.m16n8k{k}.{acc}.{src}.{src}.{acc}", None, None


def describe_tc_sum(config, dtype, target="sm_90"):
    """Descriptor of kernels.tc_sum(x, **config) for x of `dtype` on `target`."""

    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {TARGETS}")
    if dtype not in _PTX_TYPE:
        raise TypeError(f"tc_sum has no descriptor for {dtype}; operand types: {tuple(_PTX_TYPE)}")
    is_int = dtype == torch.int8
    segment = segment_length(config)
    block_k = config["BLOCK_K"]
    if target == "sm_90":
        mnemonic, conversion, window = _hopper_mma(dtype, config["BLOCK_M"], config["num_warps"], 16)
        k = mma_k(mnemonic)
    elif is_int:
        # numpy folds a whole BLOCK_K tile into a fresh partial, then adds it to the accumulator.  Its
        # order may depend on the shape, so the whole tile shape belongs to the operation (exact anyway).
        mnemonic, conversion, window, k = f"numpy.matmul[{config['BLOCK_M']}x{block_k}x16]", None, None, block_k
    else:
        # Floats fold one element at a time into the running fp32 sum (numpy.cumsum along each row):
        # tc_sum_reference's order, whatever the tile shape.
        mnemonic, window, k = "numpy.cumsum[sequential]", None, 1
        conversion = {torch.float8_e4m3fn: "e4m3->f32", torch.float16: "f16->f32", torch.bfloat16: "bf16->f32"}[dtype]
    acc = "int32" if is_int else "fp32"
    merged = "int64" if is_int else "fp32"
    if is_int:
        rounding = ()
    else:
        inner = "fp32 at each MMA step (hardware-defined)" if target == "sm_90" else "fp32 at each element"
        rounding = (inner,) + (("fp32 at each promotion add",) if window else ()) + ("fp32 at each tree add",)
    return Descriptor(
        engine=f"triton/{target}",
        mma=mnemonic,
        mma_k=k,
        operand_conversion=conversion,
        accumulator=acc,
        promotion_window=window,
        k_chunk=segment,
        split=f"segments of {segment} consecutive elements, one accumulator row each, partials stored as {merged}",
        merge=("int64 sums of each row's segment partials, up to 2**10 a program (exact, so in any order)" if is_int
               else "perfect binary tree over the segment index, zero-padded to a power of two, fp32 adds"),
        combine="none: one plane, no moduli",
        fma_contraction=False,
        rounding=rounding,
    )


def describe_plane_gemm(operand, config, target="sm_90"):
    """Descriptor of kernels.products's plane GEMM with `config` (a PlaneGemmConfig) for `operand`.

    Every K chunk is accumulated inside its exact range (the launcher's plan_chunk enforces it), turned
    into an integer and folded mod m in int64: the result is an exact residue, whatever the chunking.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {TARGETS}")
    dtype = {"int8": torch.int8, "e4m3": torch.float8_e4m3fn, "e2m1": torch.bfloat16}.get(operand)
    if dtype is None:
        raise ValueError(f"unknown plane-GEMM operand {operand!r}; known: int8, e4m3, e2m1")
    if target == "sm_90":
        # Triton sizes the wgmma N from block_n and the warp layout; k alone matters for an exact fold.
        mnemonic, conversion, window = _hopper_mma(dtype, config.block_m, config.num_warps, "N")
        if operand == "e4m3" and _uses_wgmma(config.block_m, config.num_warps):
            # A zero window asks Triton to promote after every instruction, which it lowers via f16 mma.sync.
            if config.imprecise_window == 0:
                mnemonic, conversion, window = "mma.m16n8k16.f32.f16.f16.f32", "e4m3->f16", None
            else:
                window = config.imprecise_window
        if operand == "e2m1":
            conversion = "e2m1->bf16"
        k = mma_k(mnemonic)
    else:
        mnemonic = f"numpy.matmul[{config.block_m}x{config.block_k}x{config.block_n}]"
        conversion = {"e4m3": "e4m3->f16", "e2m1": "e2m1->bf16"}.get(operand)
        window = config.block_k if operand != "int8" else None
        k = config.block_k
    return Descriptor(
        engine=f"triton/{target}",
        mma=mnemonic,
        mma_k=k,
        operand_conversion=conversion,
        accumulator="int32" if operand == "int8" else "fp32",
        promotion_window=window,
        k_chunk=config.block_k,
        split="K in exact chunks (plan_chunk: whole block_k blocks inside the accumulator's exact range)",
        merge="each chunk converted to int64, times its coefficient, reduced mod m, in K order",
        combine="planes in order within a modulus, moduli independent (one residue each)",
        fma_contraction=False,
        rounding=(),
    )
