"""Static check: compile configurations for sm_90 (no GPU needed) and match the PTX to each descriptor.

Checked per configuration: the MMA instruction and its k, conversions out of the operand type, the number
of fp32 promotion adds the window implies, no fp32 FMA, and (tc_sum) shared memory within the sm_90 limit,
no local memory (register spills) and a tree kernel of plain adds without spills.

Compilation needs real @triton.jit kernels, which do not exist in a process running the interpreter, so it
runs in a child process without TRITON_INTERPRET (``python -m kernels.check.ptx NAME...`` prints the PTX
summaries as JSON).  The comparison with descriptors is plain Python on those summaries.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

import torch
from triton import knobs

from kernels.check.classes import TC_SUM_TYPES, families
from kernels.check.descriptor import mma_k
from kernels.products import CONFIGS, compile_ptx
from kernels.ptx import compile_kernel
from kernels.tc_sum import (
    _TREE_LEVELS,
    TC_SUM_CONFIGS,
    _kernel_constants,
    _tc_sum_kernel,
    _tree_constants,
    _tree_kernel,
)

__all__ = ["SM90_SHARED_LIMIT", "summarize", "compare", "compile_summaries", "check_ptx"]

_MMA = re.compile(r"\b(wgmma\.mma_async[\w.]*|mma\.sync[\w.]*)")
_CVT = re.compile(r"\bcvt\.([\w.]+)")
_F32_ADD = re.compile(r"\badd(?:\.rn)?\.f32\b")
_F32_FMA = re.compile(r"\bfma\.\w+\.f32\b")
_NOISE = {"mma_async", "sync", "aligned", "row", "col", "satfinite"}
_ROUNDING = {"rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "sat", "satfinite", "ftz", "relu"}
# PTX source type of each family's operand.  e2m1 has none: sm_90 unpacks it to bf16 with integer
# instructions, which the bf16 MMA the descriptor names confirms.
_OPERAND_PTX = {"int8": "s8", "float8_e4m3fn": "e4m3", "float16": "f16", "bfloat16": "bf16", "e4m3": "e4m3"}
_TRITON_TYPE = {"int8": ("*i8", "*i64"), "float8_e4m3fn": ("*fp8e4nv", "*fp32"), "float16": ("*fp16", "*fp32"),
                "bfloat16": ("*bf16", "*fp32")}
SM90_SHARED_LIMIT = 232448  # bytes of shared memory one block may opt into on Hopper (227 KiB)


def _normalise_mma(instruction):
    return ".".join(t for t in instruction.split(".") if t not in _NOISE)


def _base_type(token):
    return re.sub(r"x\d+$", "", token)


def summarize(ptx):
    """What in a kernel's PTX decides its bits: MMA instructions (normalised, with static counts),
    conversions as (destination, source) types, fp32 adds and fp32 FMAs."""
    conversions = []
    for modifiers in _CVT.findall(ptx):
        types = [t for t in modifiers.split(".") if t not in _ROUNDING]
        conversions.append([_base_type(types[0]), _base_type(types[-1])])
    return {
        "mma": dict(Counter(_normalise_mma(m) for m in _MMA.findall(ptx))),
        "conversions": conversions,
        "f32_adds": len(_F32_ADD.findall(ptx)),
        "f32_fmas": len(_F32_FMA.findall(ptx)),
    }


def _accumulators_per_thread(mnemonic):
    """Accumulator registers one thread holds for one instruction (wgmma: a warpgroup, mma: a warp)."""
    shape = next(t for t in mnemonic.split(".") if re.fullmatch(r"m\d+n\d+k\d+", t))
    m, n = (int(v) for v in re.findall(r"\d+", shape)[:2])
    return m * n // (128 if mnemonic.startswith("wgmma") else 32)


def _matches(mnemonic, pattern):
    # Plane-GEMM descriptors leave the wgmma N open ("nN"): Triton sizes it from block_n and the warps.
    return re.fullmatch(re.escape(pattern).replace("nN", r"n\d+"), mnemonic) is not None


def compare(descriptor, summary, operand):
    """Problems (empty when none) between a descriptor and its kernel's PTX summary (with the compiled
    shared-memory size when known); `operand` is the input type name of the family (e.g. "float16",
    "e4m3")."""
    problems = []
    seen = set(summary["mma"])
    if len(seen) != 1 or not _matches(next(iter(seen)), descriptor.mma):
        problems.append(f"MMA: descriptor says {descriptor.mma}, PTX has {sorted(seen) or 'no MMA'}")
    problems += [f"MMA {m}: k={mma_k(m)}, descriptor says k={descriptor.mma_k}"
                 for m in seen if mma_k(m) != descriptor.mma_k]
    source = _OPERAND_PTX.get(operand)
    if source is not None:
        from_operand = sorted({f"{s}->{d}" for d, s in summary["conversions"] if s == source})
        expected = [descriptor.operand_conversion] if descriptor.operand_conversion else []
        if from_operand != expected:
            problems.append(f"operand conversions: descriptor says {expected}, PTX has {from_operand}")
    if descriptor.accumulator == "fp32" and not problems:
        # Every promotion adds each accumulator register once; nothing else in the kernel adds floats.
        (mnemonic, count), = summary["mma"].items()
        windows = descriptor.mma_k / descriptor.promotion_window if descriptor.promotion_window else 0
        want = round(count * _accumulators_per_thread(mnemonic) * windows)
        if summary["f32_adds"] != want:
            problems.append(f"promotion adds: descriptor implies {want} add.f32, PTX has {summary['f32_adds']}")
    if not descriptor.fma_contraction and summary["f32_fmas"]:
        problems.append(f"FMA contraction: descriptor says none, PTX has {summary['f32_fmas']} fma.f32")
    if summary.get("local", 0):
        problems.append(f"local memory {summary['local']} B per thread (register spills, which go through the "
                        f"cache hierarchy instead of registers); use smaller tiles or more warps")
    if summary.get("shared", 0) > SM90_SHARED_LIMIT:
        problems.append(f"shared memory {summary['shared']} B > {SM90_SHARED_LIMIT} B per block on sm_90: "
                        f"the launch would fail; use fewer stages or smaller tiles")
    return problems


def _local_bytes(cubin):
    """Bytes of local memory (register spills and stack) per thread in a cubin, by cuobjdump -res-usage."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        usage = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", handle.name], capture_output=True,
                               text=True, check=True).stdout
    return sum(int(v) for v in re.findall(r"\b(?:STACK|LOCAL):(\d+)", usage))


def _compile(fn, signature, constexprs, num_warps, num_stages):
    """PTX summary plus shared and local memory of `fn` compiled for sm_90 as a launch on 16-aligned
    pointers and sizes specialises it (the fast path, with software pipelining)."""
    aligned = [name for name, kind in signature.items() if kind != "constexpr"]
    compiled = compile_kernel(fn, signature, constexprs, divisible=aligned, capability=90, num_warps=num_warps,
                              num_stages=num_stages)
    return dict(summarize(compiled.asm["ptx"]), shared=compiled.metadata.shared,
                local=_local_bytes(compiled.asm["cubin"]))


def _tc_sum_summaries(operand, configs):
    dtype = TC_SUM_TYPES[operand]
    x_type, out_type = _TRITON_TYPE[operand]
    scalars = {name: "i32" for name in ("n", "n_segments", "total_segments", "stride_xr")}
    summaries = []
    for config in configs:
        constexprs = _kernel_constants(config, dtype)
        signature = {"x_ptr": x_type, "out_ptr": out_type, **scalars, **{k: "constexpr" for k in constexprs}}
        summaries.append(_compile(_tc_sum_kernel, signature, constexprs, config["num_warps"], config["num_stages"]))
    partials = torch.int64 if dtype == torch.int8 else torch.float32
    trees = []
    # The two extremes of the tree kernel: one level over 2**9 rows a program, all levels over one row.
    for levels in (1, _TREE_LEVELS):
        constexprs = _tree_constants(levels, partials)
        signature = {"in_ptr": out_type, "out_ptr": out_type, "rows": "i32", "n_in": "i32", "groups": "i32",
                     **{k: "constexpr" for k in constexprs}}
        trees.append(_compile(_tree_kernel, signature, constexprs, 4, 1))
    return {"configs": summaries, "trees": trees}


def compile_summaries(names):
    """PTX summaries of the named families, compiled in a child process without the interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-m", "kernels.check.ptx", *names], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"compiling for sm_90 failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


def _tree_problems(tree, merged):
    problems = []
    if tree["local"]:
        # An int64 pairwise tree over 1024 values once spilled 5.9 KB a thread, costing int8 half its speed.
        problems.append(f"tree: {tree['local']} B of local memory per thread (register spills)")
    if tree["f32_fmas"]:
        problems.append(f"tree: {tree['f32_fmas']} fma.f32, descriptor says plain adds")
    if merged == "fp32" and not tree["f32_adds"]:
        problems.append("tree: no add.f32, descriptor says fp32 adds")
    if any("f32" in pair and pair != ["f32", "f32"] for pair in tree["conversions"]):
        problems.append(f"tree: fp32 values converted ({tree['conversions']}), descriptor says fp32 throughout")
    return problems


def check_ptx(names=None):
    """{family: {"ok": bool, "configs": [{"index", "problems", "mma"}], "tree_problems": [...]}} for the
    named kernel families (all when `names` is None).  Plane GEMMs compile through
    kernels.products.compile_ptx as a single-plane, single-chunk launch."""
    known = {f.name: f for f in families("sm_90")}
    names = list(known) if names is None else list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no PTX check for {unknown}; checkable kernels: {sorted(known)}")
    summaries = compile_summaries(names)
    report = {}
    for name in names:
        family = known[name]
        rows = [{"index": i, "mma": summary["mma"], "problems": compare(d, summary, family.operand)}
                for i, (d, summary) in enumerate(zip(family.descriptors, summaries[name]["configs"], strict=True))]
        merged = "int64" if family.operand == "int8" else "fp32"
        tree = [p for t in summaries[name].get("trees", []) for p in _tree_problems(t, merged)]
        report[name] = {"ok": not tree and not any(r["problems"] for r in rows), "configs": rows,
                        "tree_problems": tree}
    return report


def _plane_gemm_summaries(operand):
    # int16 residues: an epilogue of integer arithmetic, so every float add in the PTX belongs to the
    # K loop the descriptor models (byte residues are reduced in integers too,
    # kernels.mod_reduce.reduce_mod_u24).
    return {"configs": [summarize(compile_ptx(operand, 90, config, residue_dtype=torch.int16))
                        for config in CONFIGS[operand]]}


def _main(names):
    out = {}
    for name in names:
        launcher, operand = name.split(".", 1)
        out[name] = (_tc_sum_summaries(operand, TC_SUM_CONFIGS) if launcher == "tc_sum"
                     else _plane_gemm_summaries(operand))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("kernels.check.ptx compiles real kernels: run it without TRITON_INTERPRET")
    _main(sys.argv[1:])
