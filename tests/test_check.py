"""kernels.check: descriptors, classes and the `ozaki-check classes` output."""

import dataclasses
import json

import pytest
import torch

from kernels.check import (
    TARGETS,
    classes,
    classes_report,
    describe_plane_gemm,
    describe_tc_sum,
    equivalent_configs,
    families,
)
from kernels.check.cli import main
from kernels.check.descriptor import mma_k
from kernels.tc_sum import TC_SUM_CONFIGS, segment_length, tc_sum

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FLOAT_FAMILIES = ["tc_sum.float8_e4m3fn", "tc_sum.float16", "tc_sum.bfloat16"]


def _family(name, target="sm_90"):
    return next(f for f in families(target) if f.name == name)


def _class_of(family, index):
    return next(c for c in classes(family) if index in c)


@pytest.mark.parametrize("target", TARGETS)
def test_report_has_the_issue_format_and_classes_partition_the_configs(target):
    report = json.loads(json.dumps(classes_report(target)))
    assert set(report) == {"kernels"}
    assert {f"tc_sum.{t}" for t in ("int8", "float8_e4m3fn", "float16", "bfloat16")} <= set(report["kernels"])
    for name, entry in report["kernels"].items():
        assert set(entry) == {"exact", "configs", "classes", "reason"}, name
        flat = sorted(i for cls in entry["classes"] for i in cls)
        assert flat == list(range(len(entry["configs"]))), name
        assert entry["reason"]


def test_every_reported_tc_sum_config_is_accepted_by_the_launcher():
    report = classes_report()["kernels"]
    x = torch.arange(-50, 50, dtype=torch.int8).repeat(30).to(DEVICE)
    for name in ("tc_sum.int8", "tc_sum.float16"):
        for config in report[name]["configs"]:
            assert int(tc_sum(x.to(torch.int8 if name.endswith("int8") else torch.float16), **config)) == -1500


@pytest.mark.parametrize("target", TARGETS)
def test_int8_is_one_class_proven_by_the_int32_bound(target):
    entry = classes_report(target)["kernels"]["tc_sum.int8"]
    longest = max(segment_length(c) for c in TC_SUM_CONFIGS)
    assert entry["exact"] is True
    assert entry["classes"] == [list(range(len(TC_SUM_CONFIGS)))]
    assert f"+-{longest * 128} < 2**31" in entry["reason"]


@pytest.mark.parametrize("name", FLOAT_FAMILIES)
def test_sm90_float_classes_follow_segment_and_instruction(name):
    family = _family(name)
    configs = family.configs
    wgmma = [c["num_warps"] % 4 == 0 and c["BLOCK_M"] % 64 == 0 for c in configs]
    for i in range(len(configs)):
        for j in range(len(configs)):
            together = j in _class_of(family, i)
            same_order = segment_length(configs[i]) == segment_length(configs[j]) and wgmma[i] == wgmma[j]
            assert together == same_order, (i, j)


@pytest.mark.parametrize("name", FLOAT_FAMILIES)
def test_order_changing_config_lands_in_another_class(name):
    family = _family(name)
    changed = next(i for i, c in enumerate(family.configs) if segment_length(c) != segment_length(family.configs[0]))
    assert changed not in _class_of(family, 0)
    assert family.descriptors[changed].k_chunk != family.descriptors[0].k_chunk


@pytest.mark.parametrize("dtype, config, want", [
    (torch.float8_e4m3fn, TC_SUM_CONFIGS[0], ("wgmma.m64n16k32.f32.e4m3.e4m3", 32, None, 32, "fp32")),
    (torch.float8_e4m3fn, {**TC_SUM_CONFIGS[0], "num_warps": 2}, ("mma.m16n8k16.f32.f16.f16.f32", 16, "e4m3->f16",
                                                                  None, "fp32")),
    (torch.float16, TC_SUM_CONFIGS[0], ("wgmma.m64n16k16.f32.f16.f16", 16, None, None, "fp32")),
    (torch.bfloat16, {**TC_SUM_CONFIGS[0], "BLOCK_M": 32}, ("mma.m16n8k16.f32.bf16.bf16.f32", 16, None, None,
                                                            "fp32")),
    (torch.int8, TC_SUM_CONFIGS[0], ("wgmma.m64n16k32.s32.s8.s8", 32, None, None, "int32")),
], ids=["fp8-wgmma", "fp8-mma-sync", "fp16", "bf16-small-m", "int8"])
def test_sm90_descriptor_fields(dtype, config, want):
    d = describe_tc_sum(config, dtype)
    assert (d.mma, d.mma_k, d.operand_conversion, d.promotion_window, d.accumulator) == want
    assert d.k_chunk == segment_length(config)
    assert mma_k(d.mma) == d.mma_k
    assert d.fma_contraction is False
    assert (d.rounding == ()) == (dtype == torch.int8)


def test_interpreter_descriptors():
    # int8 tiles are one numpy matmul each, so the tile shape is kept; floats fold one element at
    # a time, so only the segment length separates them.
    a = describe_tc_sum({**TC_SUM_CONFIGS[0], "BLOCK_M": 64}, torch.int8, "interpreter")
    b = describe_tc_sum({**TC_SUM_CONFIGS[0], "BLOCK_M": 128}, torch.int8, "interpreter")
    c = describe_tc_sum({**TC_SUM_CONFIGS[0], "num_warps": 8, "num_stages": 1}, torch.int8, "interpreter")
    assert a != b and a == c and a.mma_k == TC_SUM_CONFIGS[0]["BLOCK_K"]
    floats = [describe_tc_sum(config, torch.float16, "interpreter") for config in TC_SUM_CONFIGS]
    for config, descriptor in zip(TC_SUM_CONFIGS, floats):
        same_segment = segment_length(config) == segment_length(TC_SUM_CONFIGS[0])
        assert (descriptor == floats[0]) == same_segment
    assert floats[0].mma_k == 1 and floats[0].promotion_window is None


@pytest.mark.parametrize("call, error, match", [
    (lambda: describe_tc_sum(TC_SUM_CONFIGS[0], torch.float16, "sm_100"), ValueError, "unknown target"),
    (lambda: describe_tc_sum(TC_SUM_CONFIGS[0], torch.float32), TypeError, "no descriptor"),
    (lambda: families("gfx942"), ValueError, "unknown target"),
    (lambda: equivalent_configs("tc_sum.float64", TC_SUM_CONFIGS[0]), ValueError, "unknown kernel"),
    (lambda: equivalent_configs("tc_sum.float16", {"BLOCK_M": 1}), ValueError, "not a configuration"),
], ids=["target", "dtype", "families-target", "kernel", "config"])
def test_rejects_unknown_targets_kernels_and_configs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_equivalent_configs_is_the_class_of_the_config():
    family = _family("tc_sum.float16")
    for cls in classes(family):
        for index in cls:
            assert equivalent_configs("tc_sum.float16", family.configs[index]) == [family.configs[i] for i in cls]


def test_plane_gemm_families_are_exact_single_classes():
    from kernels.products import CONFIGS, PlaneGemmConfig

    report = classes_report()["kernels"]
    for operand, entries in CONFIGS.items():
        entry = report[f"modular_matmul.{operand}"]
        assert entry["exact"] is True and entry["classes"] == [list(range(len(entries)))]
        assert "2**31-1" in entry["reason"] and "2**24" in entry["reason"]
        assert [PlaneGemmConfig(**c) for c in entry["configs"]] == list(entries)


def test_plane_gemm_fp8_descriptor_carries_the_promotion_window():
    from kernels.products import PlaneGemmConfig

    windowed = describe_plane_gemm("e4m3", PlaneGemmConfig(128, 128, 128, num_warps=4, imprecise_window=64))
    promoted = describe_plane_gemm("e4m3", PlaneGemmConfig(128, 128, 128, num_warps=4, imprecise_window=0))
    assert (windowed.mma_k, windowed.promotion_window, windowed.operand_conversion) == (32, 64, None)
    assert (promoted.mma_k, promoted.promotion_window, promoted.operand_conversion) == (16, None, "e4m3->f16")
    with pytest.raises(ValueError, match="unknown plane-GEMM operand"):
        describe_plane_gemm("fp64", PlaneGemmConfig(128, 128, 128))


def test_cli_classes_json_matches_the_report(capsys):
    assert main(["classes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(classes_report("sm_90")))


def test_cli_classes_text_lists_descriptors(capsys):
    assert main(["classes", "--target", "interpreter"]) == 0
    out = capsys.readouterr().out
    family = _family("tc_sum.float16", "interpreter")
    assert out.count("tc_sum.float16: float") == 1
    assert f"mma: {dataclasses.asdict(family.descriptors[0])['mma']}" in out
