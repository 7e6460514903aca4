"""Compile-only checks, no GPU needed: each plane GEMM lowers to the tensor-core MMA the
exactness argument assumes, and the FP8 path places its fp32 promotions where the
window says.

Compilation needs real (not interpreted) kernels, and tests/conftest.py turns on the
interpreter when there is no GPU, so one subprocess without TRITON_INTERPRET compiles
every variant up front.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import triton

from kernels import accuracy, crt, residues, scaling, wgmma_products
from kernels.products import PlaneGemmConfig
from kernels.products import compile_ptx as plane_gemm_ptx

ROOT = Path(__file__).resolve().parents[1]
_TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])

VARIANTS = {
    # name: (operand, capability, config[, residue type (default uint8: moduli up to 2**8)[, exact sums]])
    "int8-tma": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=8, tma=True)),
    "int8-wide-tma": ("int8", 90, PlaneGemmConfig(128, 256, 128, num_warps=8, tma=True)),
    "int8-two-per-sm": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=3, tma=True,
                                                    programs_per_sm=2)),
    "int8-int16-residues": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=8, tma=True), "int16"),
    "int8-big-moduli": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=8, tma=True), "int32"),
    "int8-pointer": ("int8", 90, PlaneGemmConfig(128, 256, 128, num_warps=8)),
    # kernels.wgmma_products (Gluon), on every residue arithmetic.
    "int8-gluon": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=3, tma=True, programs_per_sm=2,
                                               gluon=True)),
    "int8-gluon-wide": ("int8", 90, PlaneGemmConfig(128, 256, 128, num_warps=8, num_stages=4, tma=True, gluon=True)),
    "int8-gluon-int16-residues": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, tma=True, gluon=True),
                                  "int16"),
    "int8-gluon-big-moduli": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, tma=True, gluon=True), "int32"),
    # As kernels.products.exact_int8_matmul launches them: int32 sums stored unreduced.
    "int8-exact-sums": ("int8", 90, PlaneGemmConfig(128, 256, 128, num_warps=8, tma=True), "int32", True),
    "int8-gluon-exact-sums": ("int8", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, num_stages=3, tma=True,
                                                          programs_per_sm=2, gluon=True), "int32", True),
    # The promotion counts below need an epilogue without fp32 adds: int16 residues (the K loop
    # does not depend on the residue type).
    "e4m3-w64": ("e4m3", 90, PlaneGemmConfig(128, 128, 128, num_warps=8, imprecise_window=64, tma=True), "int16"),
    "e4m3-w32": ("e4m3", 90, PlaneGemmConfig(128, 128, 128, num_warps=4, imprecise_window=32), "int16"),
    "e4m3-w0": ("e4m3", 90, PlaneGemmConfig(128, 128, 64, num_warps=4, imprecise_window=0, tma=True)),
}
SM100 = {"e2m1-sm100": ("e2m1", 100, PlaneGemmConfig(128, 128, 128, num_warps=4, tma=True))}

_SCRIPT = """
import json, sys, torch
from kernels.products import PlaneGemmConfig, compile_ptx
out = {}
for name, (operand, capability, fields, residues, exact_sums) in json.loads(sys.argv[1]).items():
    out[name] = compile_ptx(operand, capability, PlaneGemmConfig(**fields), residue_dtype=getattr(torch, residues),
                            exact_sums=exact_sums)
json.dump(out, open(sys.argv[2], "w"))
"""


def compile_variants(variants: dict, folder: Path) -> subprocess.CompletedProcess | dict[str, str]:
    """PTX of each variant from one subprocess, or the finished process when it failed."""
    request = {name: (v[0], v[1], vars(v[2]), v[3] if len(v) > 3 else "uint8", len(v) > 4 and v[4])
               for name, v in variants.items()}
    return _compiled(_SCRIPT, json.dumps(request), folder)


def _compiled(script: str, request: str, folder: Path) -> subprocess.CompletedProcess | dict[str, str]:
    """The JSON that ``script`` writes to its second argument from a process without
    TRITON_INTERPRET, or the finished process when it failed."""
    target = folder / "ptx.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", script, request, str(target)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    return json.loads(target.read_text()) if done.returncode == 0 else done


@pytest.fixture(scope="module")
def ptx(tmp_path_factory) -> dict[str, str]:
    result = compile_variants(VARIANTS, tmp_path_factory.mktemp("ptx"))
    assert isinstance(result, dict), result.stderr[-4000:]
    return result


def mma(text: str) -> set[str]:
    return set(re.findall(r"(?:wgmma\.mma_async|tcgen05\.mma|mma\.sync)\S*", text))


def fp32_adds(text: str) -> int:
    return len(re.findall(r"\badd(?:\.rn)?\.f32\b", text))


def test_int8_is_wgmma_s8_with_int32_accumulation(ptx):
    for name in ("int8-tma", "int8-wide-tma", "int8-two-per-sm", "int8-int16-residues", "int8-big-moduli",
                 "int8-pointer", "int8-gluon", "int8-gluon-wide", "int8-gluon-int16-residues", "int8-gluon-big-moduli"):
        assert {m for m in mma(ptx[name]) if m.startswith("wgmma")} == mma(ptx[name])
        assert all(m.endswith(".s32.s8.s8") for m in mma(ptx[name])), mma(ptx[name])
    # No float add anywhere: every residue of an int8 product is reduced in integers (byte
    # residues by multiply-high, kernels.mod_reduce.reduce_mod_u24).
    for name in ("int8-tma", "int8-wide-tma", "int8-two-per-sm", "int8-pointer", "int8-gluon", "int8-gluon-wide",
                 "int8-int16-residues", "int8-big-moduli", "int8-gluon-int16-residues", "int8-gluon-big-moduli"):
        assert fp32_adds(ptx[name]) == 0, name


@pytest.mark.parametrize("name", ["int8-exact-sums", "int8-gluon-exact-sums"])
def test_exact_sums_leave_unreduced(name, ptx):
    # exact_int8_matmul's sums are their own residues: the epilogue stores the int32
    # accumulator, with no float or integer reduction (no float instruction at all; the
    # integer divisions left are the tile's coordinates, not one per entry).
    config = VARIANTS[name][2]
    assert all(m.endswith(".s32.s8.s8") for m in mma(ptx[name])) and mma(ptx[name])
    assert not re.search(r"\b(?:add|sub|mul|fma|div|rcp|cvt)\.\S*f(?:32|64)\b", ptx[name])
    divisions = len(re.findall(r"\b(?:div|rem)\.[su](?:32|64)\b", ptx[name]))
    assert divisions < config.block_m * config.block_n // (32 * config.num_warps) // 2
    assert re.search(r"st\.global\S*\.b32", ptx[name]) and not re.search(r"\b(?:ld|st)\.local\b", ptx[name])


@pytest.mark.parametrize("name", ["int8-gluon", "int8-gluon-wide"])
def test_gluon_kernel_keeps_one_wgmma_group_in_flight(name, ptx):
    # Its reason to exist: in the K loop the kernel waits for all but the newest group (the
    # previous block's), so the tensor cores work while the warps wait for the next stage and
    # refill the freed one; it drains (wait 0) once per tile, before the epilogue.
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx[name])
    assert waits.count("1") == 1 and waits.count("0") == 1, waits
    assert "cp.async.bulk.tensor" in ptx[name]
    # The residues leave in 16-byte stores, with no register spills.
    assert re.search(r"st\.global\.v4\.b32", ptx[name]) and not re.search(r"\b(?:ld|st)\.local\b", ptx[name])


def test_gluon_256_column_tile_issues_one_wgmma_per_k_step(ptx):
    # kernels.wgmma_products._widen_wgmma: Triton writes two m64n128k32 per K step of a 64-row
    # slice; the pass makes them one m64n256k32.  The 128-column tile's two wgmmas a step are two
    # row slices (two A's): nothing to merge.
    config = VARIANTS["int8-gluon-wide"][2]
    shapes = re.compile(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k32)")
    assert shapes.findall(ptx["int8-gluon-wide"]) == ["m64n256k32"] * (config.block_k // 32)
    assert set(shapes.findall(ptx["int8-gluon"])) == {"m64n128k32"}


_ACC_LOW = ",".join(f"%r{i}" for i in range(100, 164))
_ACC_HIGH = ",".join(f"%r{i}" for i in range(164, 228))
_DESCRIPTOR = (1 << 62) | (64 << 32)  # 128-byte swizzle, 1024-byte stride between 8-row core matrices


def _halves_ptx(*, offset=1024, swizzle=1 << 62, second_a="%rd10", second_scale="%p1", between="", swapped=False,
                redefined=False, narrow=False) -> str:
    """A commit group of two m64n128k32 wgmmas as Triton writes them for one K step of a
    256-column tile: B's second half ``offset`` descriptor units past the first, added after
    widening the base to 64 bits (Triton 3.6) or before (``narrow``, Triton 3.9)."""
    constant = _DESCRIPTOR - (1 << 62) + swizzle
    low = f"wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {{{_ACC_LOW}}}, %rd10, %rd11, %p1;"
    high = f"wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {{{_ACC_HIGH}}}, {second_a}, %rd12, {second_scale};"
    if narrow:
        second_half = [f"add.s32 %r3, %r2, {offset};", "cvt.u64.u32 %rd24, %r3;", f"or.b64 %rd12, %rd24, {constant};"]
    else:
        second_half = [f"add.s64 %rd12, %rd23, {constant + offset};"]
    first_half = f"or.b64 %rd11, %rd23, {constant};"
    # Swapped, the first half's B descriptor is written between the halves (as Triton 3.6 writes
    # each K step's just before its wgmma).
    lines = ["cvt.u64.u32 %rd22, %r1;", "cvt.u64.u32 %rd23, %r2;", f"or.b64 %rd10, %rd22, {constant};",
             *([] if swapped else [first_half]), *second_half, *(second_half[-1:] if redefined else []),
             "wgmma.fence.sync.aligned;",
             *((high, between, first_half, low) if swapped else (low, between, high)),
             "wgmma.commit_group.sync.aligned;"]
    return "\n".join(f"\t{line}" for line in lines) + "\n"


_MERGED = f"wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {{{_ACC_LOW},{_ACC_HIGH}}}, %rd10, %rd11, %p1;"


@pytest.mark.parametrize("case, merged", [
    ({}, True),
    ({"narrow": True}, True),
    ({"swapped": True}, True),  # the second half issued first: still its registers last
    ({"narrow": True, "offset": 512}, False),
    ({"offset": 512}, False),  # B's halves not 128 rows apart
    ({"offset": 2048}, False),
    ({"second_a": "%rd22"}, False),  # another A: two row slices, not two column halves
    ({"second_scale": "%p2"}, False),  # one accumulates, the other starts afresh
    ({"swizzle": 2 << 62}, False),  # 64-byte swizzle: its core matrices lie otherwise
    ({"between": "$L__BB0_3:"}, False),  # a branch target between the halves
    ({"between": "mov.b32 %r5, %r130;"}, False),  # an instruction that reads an accumulator between them
    ({"redefined": True}, False),  # a descriptor written twice: its value is not the one definition's
    ({"redefined": True, "narrow": True}, False),
])
def test_wgmma_pass_merges_only_the_halves_of_one_product(case, merged):
    text = _halves_ptx(**case)
    widened = wgmma_products._widen_wgmma(text)
    if merged:
        # One wgmma where the later half was: every register it reads is written before it.
        assert widened.count("wgmma.mma_async") == 1 and _MERGED in widened
        assert widened.index(_MERGED) > widened.index("%rd11,") and widened.index(_MERGED) > widened.index("%rd12,")
    else:
        assert widened == text


def test_wgmma_pass_hook_chains_and_restores_the_previous_one(monkeypatch):
    # kernels.wgmma_products._widened: the pass runs after the PTX stage, a hook installed before
    # still runs and keeps its part of the cache key (Triton 3.8 asks with no arguments), and
    # leaving restores it.
    calls = []

    def previous(*args):
        if not args:
            return "theirs", "their-hash"
        calls.append(args)

    monkeypatch.setattr(triton.knobs.runtime, "add_stages_inspection_hook", previous)
    stages = {"ptx": lambda src, metadata: _halves_ptx()}
    with wgmma_products._widened():
        hook = triton.knobs.runtime.add_stages_inspection_hook
        key, digest = hook()
        hook(None, stages, None, None, 90)
    assert key.startswith("theirs") and digest.startswith("their-hash") and wgmma_products._PASS_KEY in key
    assert len(calls) == 1 and _MERGED in stages["ptx"]("", {})
    assert triton.knobs.runtime.add_stages_inspection_hook is previous


def test_tma_configs_use_the_bulk_tensor_copy(ptx):
    assert "cp.async.bulk.tensor" in ptx["int8-tma"]
    assert "cp.async.bulk.tensor" not in ptx["int8-pointer"]


@pytest.mark.parametrize("name", ["e4m3-w64", "e4m3-w32"])
def test_fp8_wgmma_promotes_once_per_window(name, ptx):
    config = VARIANTS[name][2]
    assert mma(ptx[name]) and all(".f32.e4m3.e4m3" in m and m.startswith("wgmma") for m in mma(ptx[name]))
    # Each window of W products ends in one fp32 add per accumulator register: that add is
    # the promotion the exactness argument needs.
    registers = config.block_m * config.block_n // (32 * config.num_warps)
    assert fp32_adds(ptx[name]) == config.block_k // config.imprecise_window * registers


def test_fp8_window_zero_is_the_upcast_path(ptx):
    assert mma(ptx["e4m3-w0"]) and all(m.startswith("mma.sync") and ".f16.f16" in m for m in mma(ptx["e4m3-w0"]))


def test_fp4_on_sm100_is_native_block_scaled(tmp_path):
    result = compile_variants(SM100, tmp_path)
    if not isinstance(result, dict) and _TRITON < (3, 9):
        # Triton 3.6 aborts in NVWS InsertTmemAref on any tl.dot_scaled for sm_100, so
        # select_operand keeps those releases off the e2m1 path.
        pytest.skip(f"triton {triton.__version__} cannot compile tl.dot_scaled for sm_100")
    assert isinstance(result, dict), result.stderr[-4000:]
    found = mma(result["e2m1-sm100"])
    assert found and all("kind::mxf4" in m for m in found), found


def test_residue_reduction_avoids_int64_division(ptx):
    # Emulated 64-bit division in the epilogue once cost as much as the K loop.
    for text in ptx.values():
        assert not re.search(r"\b(?:div|rem)\.[su]64\b", text)


def test_byte_residues_are_reduced_without_integer_division(ptx):
    # Moduli up to 2**8 (every catalog plan) take the multiply-high reduction: no per-entry
    # emulated integer division in the epilogue, only a few per tile (2**16 mod m, ceil(2**32 / m)),
    # and no conversion instruction per entry (a quarter of the float32 rate on Hopper).
    def divisions(name):
        return len(re.findall(r"\b(?:div|rem)\.[su]32\b", ptx[name]))

    def entries_per_thread(name):
        config = VARIANTS[name][2]
        return config.block_m * config.block_n // (32 * config.num_warps)

    for name in ("int8-tma", "int8-wide-tma", "int8-two-per-sm", "int8-pointer", "int8-gluon", "int8-gluon-wide"):
        assert divisions(name) < entries_per_thread(name) // 2, name
        assert len(re.findall(r"\bmul\.hi\.u32\b", ptx[name])) >= entries_per_thread(name), name
        assert not re.search(r"\bcvt\.[\w.]*f32\b", ptx[name]), name
    # Wider moduli's residues take the emulated division, one per entry where every coefficient
    # is 1 (as compiled here; a single flush then reduces each sum once).
    assert divisions("int8-int16-residues") >= entries_per_thread("int8-int16-residues")


_EXTENTS_SCRIPT = """
import json, sys
from kernels.scaling import compile_ptx
json.dump({f"{operand}-{aligned}": compile_ptx(90, operand, aligned)
           for operand, aligned in json.loads(sys.argv[1])}, open(sys.argv[2], "w"))
"""


def test_extents_kernel_reads_both_operands_coalesced_without_spills(tmp_path):
    # Stage 1 is a pass over memory: no local memory (spills would add traffic per entry),
    # and where the data allows vector loads (aligned), the unit-stride axis (K for A, B's
    # columns for Bᵀ) is the one read in them, i.e. the fastest axis of the tile's layout.
    variants = [(operand, aligned) for operand in "ab" for aligned in (True, False)]
    result = _compiled(_EXTENTS_SCRIPT, json.dumps(variants), tmp_path)
    assert isinstance(result, dict), result.stderr[-4000:]
    for operand, aligned in variants:
        text = result[f"{operand}-{aligned}"]
        assert ".entry _extents_kernel" in text
        assert ".local" not in text, operand
        # One atomic per row and chunk: the int64 pattern's max, the lowest bit's min (int64, as
        # Extents holds it: no conversion launch after).
        assert re.search(r"atom\.global\S*\.max\.s64", text) and re.search(r"atom\.global\S*\.min\.s64", text)
        assert ("ld.global.v2.b64" in text) == aligned, (operand, aligned)


_ACCURACY_SCRIPT = """
import json, sys
from kernels.accuracy import compile_ptx
json.dump({"-".join(map(str, variant)): compile_ptx(90, *variant) for variant in json.loads(sys.argv[1])},
          open(sys.argv[2], "w"))
"""


def test_accuracy_passes_read_in_vectors_and_round_as_torch_without_spills(tmp_path):
    # The "fp64" rule's passes over memory (kernels.accuracy): no local memory; where the data
    # allow (aligned) the unit-stride axis is read in vector loads (A's K, Bᵀ's rows; G's
    # columns) and the lower pass's int8 codes leave in vector stores, a thread's 8 bytes of
    # a row at once (the upper pass stores nothing but its sums' atomics).  The codes are
    # products by powers of two rounded by magic-number adds (kernels.accuracy._nearest_integer),
    # with no conversion instruction that rounds; the quotients' reciprocals (one division per
    # line, not per entry) are correctly rounded, and each quotient is one fused multiply-add,
    # G·F plus 0 (or inf for a line without U), rounded once as torch's product G·F is: the
    # only multiply-adds (one fused into anything else would round differently from torch).
    variants = [(kernel, operand, aligned) for kernel in ("upper", "lower") for operand in "ab"
                for aligned in (True, False)] + [(kernel, "a", aligned) for kernel in ("rows", "quotients")
                                                 for aligned in (True, False)]
    result = _compiled(_ACCURACY_SCRIPT, json.dumps(variants), tmp_path)
    assert isinstance(result, dict), result.stderr[-4000:]
    for kernel, operand, aligned in variants:
        text, name = result[f"{kernel}-{operand}-{aligned}"], (kernel, operand, aligned)
        assert ".local" not in text, name
        if kernel == "quotients":
            assert ".entry _quotients_kernel" in text and "div.rn.f64" in text, name
            block_m, block_n = accuracy.QUOTIENTS_BLOCK
            entries = block_m * block_n // (32 * accuracy.QUOTIENTS_WARPS)
            # Fewer divisions than one per entry and side (a thread's lines may repeat in the layout).
            assert len(re.findall(r"\bdiv\.rn\.f64\b", text)) < 2 * entries, name
            assert not re.search(r"\b(?:div\.(?:approx|full)|rcp\.approx)\S*\.f64", text), name
            assert len(re.findall(r"\bfma\.rn\.f64\b", text)) == 2 * entries, name
            assert not re.search(r"\b(?:mad|add|sub)\.\w+\.f64\b", text), name
            assert ("ld.global.v4.b32" in text) == aligned, name
            continue
        # The row reading makes both passes in one kernel: it stores its codes as the lower
        # pass does, and its lines' results with plain stores, no atomic (a program holds whole rows).
        assert f".entry {'_row_reading_kernel' if kernel == 'rows' else '_codes_kernel'}" in text, name
        assert ("ld.global.v2.b64" in text) == aligned, name
        assert bool(re.search(r"st\.global\.v[24]\.b32", text)) == (aligned and kernel != "upper"), name
        assert ("st.global" in text) == (kernel != "upper"), name
        # The upper pass rounds its codes up and sums U, the codes and their squares per row
        # (one int64 atomic each per chunk); the lower pass rounds down and sums nothing.
        # Both round by adds, none by a conversion instruction (a quarter of the float64 rate).
        assert "add.f64" in text and not re.search(r"\bcvt\.r\w+\.f64\.f64\b", text), name
        assert (len(re.findall(r"atom\.global\S*\.add\.u64", text)) > 0) == (kernel == "upper"), name
        assert kernel != "rows" or "atom." not in text, name


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), reason="a refusal of the interpreter only")
def test_compiling_under_the_interpreter_raises_clearly():
    for compile_ptx in (scaling.compile_ptx, accuracy.compile_ptx, lambda: residues.compile_ptx([7, 8, 9]),
                        lambda: crt.compile_ptx([7, 8, 9]),
                        lambda: plane_gemm_ptx("int8", 90, VARIANTS["int8-pointer"][2]),
                        lambda: plane_gemm_ptx("int8", 90, VARIANTS["int8-gluon"][2])):
        with pytest.raises(RuntimeError, match="without TRITON_INTERPRET=1"):
            compile_ptx()


_LINE_SCRIPT = """
import json, sys
from kernels import accuracy, ptx, scaling


def sides(side, **shared):
    # A two-sided line kernel's signature (kernels.scaling.launch_sides): a side, the other, what they share.
    return {**side, **{"other_" + name: kind for name, kind in side.items()}, **shared}


kernels = {
    "summary": (scaling._summary_kernel, sides({"bits_ptr": "*i64", "lossless_ptr": "*i64", "largest_ptr": "*i64",
                                                "level_ptr": "*i64", "sums_ptr": "*i64", "squares_ptr": "*i64",
                                                "out_ptr": "*i64", "lines": "i32"}, guard="i32"),
                {"HAS_LEVEL": True, "HAS_SUMS": True, "BLOCK": scaling.SUMMARY_BLOCK}),
    "shifts": (scaling._shifts_kernel, sides({"max_ptr": "*fp64", "bits_ptr": "*i64", "shift_ptr": "*i64",
                                              "kept_ptr": "*i64", "cap": "i32", "rows": "i32"}),
               {"CAPPED": True, "BLOCK": scaling.SHIFTS_BLOCK}),
    "exact_bits": (scaling._exact_bits_kernel, sides({"max_ptr": "*fp64", "lowest_ptr": "*i64", "bits_ptr": "*i64",
                                                      "top_ptr": "*i64", "rows": "i32"}),
                   {"BLOCK": scaling.SHIFTS_BLOCK}),
    "window_tops": (accuracy._window_tops_kernel, sides({"top_ptr": "*i64", "sums_ptr": "*i64", "window_ptr": "*i64",
                                                         "offset_ptr": "*i64", "lines": "i32"}, levels="i32",
                                                        k_bits="i32"), {"BLOCK": accuracy.LINES_BLOCK}),
    "levels": (accuracy._levels_kernel, sides({"least_ptr": "*fp64", "top_ptr": "*i64", "window_ptr": "*i64",
                                               "level_ptr": "*i64", "lines": "i32"}, base="i32"),
               {"BLOCK": accuracy.LINES_BLOCK}),
}
out = {}
for name, (fn, signature, constexprs) in kernels.items():
    compiled = ptx.compile_kernel(fn, {**signature, **{k: "constexpr" for k in constexprs}}, constexprs, num_warps=4)
    out[name] = compiled.asm["ptx"]
    out[name + " sass"] = dict(ptx.sass_opcodes(compiled))
json.dump(out, open(sys.argv[2], "w"))
"""


def test_the_plans_line_kernels_compile_for_hopper(tmp_path):
    # The per-line steps and the plan's summary: registers only (no local memory), and the
    # summary's maxima as int64 atomics (its launches add into one vector).
    result = _compiled(_LINE_SCRIPT, "{}", tmp_path)
    assert isinstance(result, dict), result.stderr[-4000:]
    names = {"summary", "shifts", "exact_bits", "window_tops", "levels"}
    assert set(result) == names | {name + " sass" for name in names}
    for name in names:
        assert ".target sm_90" in result[name] and not re.search(r"\b(ld|st)\.local\b", result[name]), name
        # kernels.ptx.sass_opcodes reads the cubin: each kernel ends in EXIT, and spills nothing.
        sass = result[name + " sass"]
        assert sass.get("EXIT", 0) >= 1 and not {"STL", "LDL"} & set(sass), (name, sass)
    assert re.search(r"\batom\.global\S*\.max\.s64\b", result["summary"])
    # Its eight maxima (seven fields and the widths' slots), each an atomic in global memory.
    assert sum(n for op, n in result["summary sass"].items() if op in ("ATOMG", "REDG", "RED", "ATOM")) >= 8
