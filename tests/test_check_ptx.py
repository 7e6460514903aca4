"""`ozaki-check ptx`: sm_90 PTX compiled without a GPU confirms each descriptor, and mismatches show."""

import dataclasses

import pytest

from kernels.check import families
from kernels.check.cli import main
from kernels.check.ptx import SM90_SHARED_LIMIT, compare, compile_summaries, summarize

CHECKED = ["tc_sum.float8_e4m3fn", "tc_sum.int8", "modular_matmul.e4m3"]


@pytest.fixture(scope="module")
def summaries():
    return compile_summaries(CHECKED)


def _family(name):
    return next(f for f in families("sm_90") if f.name == name)


@pytest.mark.parametrize("name", CHECKED)
def test_compiled_ptx_matches_every_descriptor(summaries, name):
    family = _family(name)
    for descriptor, summary in zip(family.descriptors, summaries[name]["configs"], strict=True):
        assert compare(descriptor, summary, family.operand) == []
        assert summary.get("shared", 1) <= SM90_SHARED_LIMIT


@pytest.mark.parametrize("name", ["tc_sum.float8_e4m3fn", "tc_sum.int8"])
def test_tc_sum_kernels_do_not_spill(summaries, name):
    # Spills once cost int8 most of its bandwidth: its int64 tree spilled 5.9 KB a thread to local memory.
    entries = summaries[name]["configs"] + summaries[name]["trees"]
    assert all(entry["local"] == 0 for entry in entries)
    assert len(summaries[name]["trees"]) == 2


def test_fp8_wgmma_promotes_every_instruction(summaries):
    family = _family("tc_sum.float8_e4m3fn")
    index = next(i for i, d in enumerate(family.descriptors) if d.mma.startswith("wgmma"))
    summary = summaries["tc_sum.float8_e4m3fn"]["configs"][index]
    (mnemonic, count), = summary["mma"].items()
    # m64n16 leaves 8 fp32 accumulators per thread; each is added into the accumulator once per instruction.
    assert summary["f32_adds"] == count * 8


@pytest.mark.parametrize("mutate, problem", [
    (lambda d, s: (dataclasses.replace(d, promotion_window=None), s), "promotion adds"),
    (lambda d, s: (dataclasses.replace(d, promotion_window=64), s), "promotion adds"),
    (lambda d, s: (dataclasses.replace(d, mma="wgmma.m64n16k16.f32.f16.f16", mma_k=16), s), "MMA"),
    (lambda d, s: (dataclasses.replace(d, mma_k=16), s), "k=32"),
    (lambda d, s: (dataclasses.replace(d, operand_conversion="e4m3->f16"), s), "operand conversions"),
    (lambda d, s: (d, {**s, "f32_fmas": 2}), "FMA contraction"),
    (lambda d, s: (d, {**s, "shared": SM90_SHARED_LIMIT + 1}), "shared memory"),
    (lambda d, s: (d, {**s, "local": 16}), "local memory"),
], ids=["no-window", "wider-window", "instruction", "k", "conversion", "fma", "shared", "spills"])
def test_a_wrong_descriptor_is_reported(summaries, mutate, problem):
    family = _family("tc_sum.float8_e4m3fn")
    index = next(i for i, d in enumerate(family.descriptors) if d.mma.startswith("wgmma"))
    descriptor, summary = mutate(family.descriptors[index], summaries["tc_sum.float8_e4m3fn"]["configs"][index])
    assert any(problem in p for p in compare(descriptor, summary, "float8_e4m3fn"))


def test_summarize_reads_instructions_conversions_and_adds():
    ptx = """
        wgmma.fence.sync.aligned;
        wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%f1}, %rd1, %rd2, p, 1, 1;
        mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f2};
        cvt.rn.f16x2.e4m3x2 %r3, %rs1;
        cvt.rn.satfinite.e4m3x2.f32 %rs2, %f3, %f4;
        add.f32 %f5, %f6, %f7;
        add.rn.f32 %f5, %f6, %f7;
        add.s32 %r1, %r2, %r3;
        fma.rn.f32 %f1, %f2, %f3, %f4;
    """
    summary = summarize(ptx)
    assert summary["mma"] == {"wgmma.m64n16k32.f32.e4m3.e4m3": 1, "mma.m16n8k16.f32.f16.f16.f32": 1}
    assert summary["conversions"] == [["f16", "e4m3"], ["e4m3", "f32"]]
    assert (summary["f32_adds"], summary["f32_fmas"]) == (2, 1)


def test_cli_ptx_checks_a_named_kernel(capsys):
    assert main(["ptx", "--kernel", "tc_sum.float16"]) == 0
    out = capsys.readouterr().out
    assert "tc_sum.float16: ok" in out and "wgmma.m64n16k16.f32.f16.f16" in out


def test_plane_gemm_fp8_windows_show_as_promotion_adds(summaries):
    family = _family("modular_matmul.e4m3")
    windows = {d.promotion_window for d in family.descriptors}
    assert {32, 64, None} <= windows  # promote every instruction, every other one, and the f16 mma.sync path
    for descriptor, summary in zip(family.descriptors, summaries["modular_matmul.e4m3"]["configs"]):
        assert (summary["f32_adds"] > 0) == (descriptor.promotion_window is not None)
        wrong = dataclasses.replace(descriptor, promotion_window=96 if descriptor.promotion_window else 32)
        assert any("promotion adds" in p for p in compare(wrong, summary, "e4m3"))


def test_cli_ptx_rejects_an_unknown_kernel(capsys):
    # One line of error and exit status 2, before any compilation.
    with pytest.raises(SystemExit) as exit_:
        main(["ptx", "--kernel", "tc_sum.float64"])
    assert exit_.value.code == 2
    assert "--kernel tc_sum.float64: no such kernel family; known: " in capsys.readouterr().err
