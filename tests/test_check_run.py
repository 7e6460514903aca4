"""`ozaki-check run`: dynamic bit comparison on probes the classes were not built from."""

import dataclasses
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.autotune import target_for
from kernels.check import classes, families
from kernels.check.cli import main
from kernels.check.run import (
    PLANE_PROBES,
    PROBES,
    check_family,
    launchable,
    plane_gemm_probe,
    run_checks,
    tc_sum_probe,
)
from kernels.tc_sum import segment_length

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SHAPE = (2, 4500)  # more than two segments of the longest configuration, with a ragged tail


def _family(name):
    return next(f for f in families(target_for(DEVICE)) if f.name == name)


TC_SUM_NAMES = [f.name for f in families(target_for(DEVICE)) if f.name.startswith("tc_sum.")]
PLANE_NAMES = [f.name for f in families(target_for(DEVICE)) if f.name.startswith("modular_matmul.")
               and launchable(f, DEVICE)]


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(1, 2**20))
def test_tc_sum_classes_are_sound_on_fresh_probes(seed):
    for name, entry in run_checks(TC_SUM_NAMES, seed=seed, device=DEVICE, shape=SHAPE).items():
        assert entry["sound"], (name, entry["violations"])
        assert set(entry["observed"]) == set(PROBES)


def test_plane_gemm_configs_all_return_the_exact_residues():
    assert PLANE_NAMES, "kernels.products.CONFIGS should give the checker plane-GEMM families"
    for name, entry in run_checks(PLANE_NAMES, seed=5, device=DEVICE).items():
        assert entry["sound"], (name, entry["violations"])
        assert all(groups == entry["classes"] for groups in entry["observed"].values())


@pytest.mark.parametrize("name", ["tc_sum.float16", "tc_sum.bfloat16"])
def test_dynamic_check_sees_the_order_changing_config(name):
    family = _family(name)
    changed = next(i for i, c in enumerate(family.configs) if segment_length(c) != segment_length(family.configs[0]))
    claimed = classes(family)
    pair = sorted(next(k for k, c in enumerate(claimed) if i in c) for i in (0, changed))
    entry = check_family(family, DEVICE, seed=0, shape=SHAPE)
    assert entry["sound"]
    assert pair in entry["classes_seen_to_differ"]


def test_an_unsound_class_claim_is_caught():
    family = _family("tc_sum.float16")
    one = dataclasses.replace(family, descriptors=(family.descriptors[0],) * len(family.configs))
    entry = check_family(one, DEVICE, seed=0, shape=SHAPE)
    assert entry["classes"] == [list(range(len(family.configs)))]
    assert not entry["sound"] and any("split into" in v for v in entry["violations"])


def test_a_wrong_exact_result_is_caught():
    family = _family("tc_sum.int8")
    off_by_one = dataclasses.replace(family, launch=lambda x, config: family.launch(x, config) + 1)
    entry = check_family(off_by_one, DEVICE, seed=0, shape=SHAPE)
    assert not entry["sound"]
    assert len([v for v in entry["violations"] if "not the exact result" in v]) == len(PROBES) * len(family.configs)


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", PROBES)
def test_probes_are_finite_deterministic_and_of_the_operand_type(kind, dtype):
    x = tc_sum_probe(kind, dtype, (2, 300), seed=3)
    assert x.dtype == dtype and x.shape == (2, 300)
    assert torch.isfinite(x.to(torch.float64)).all()
    assert torch.equal(x.view(torch.uint8), tc_sum_probe(kind, dtype, (2, 300), seed=3).view(torch.uint8))


@pytest.mark.parametrize("operand", ["int8", "e4m3", "e2m1"])
@pytest.mark.parametrize("kind", PLANE_PROBES)
def test_plane_probes_hold_digits_of_the_operand(kind, operand):
    from kernels.products import OPERANDS
    from kernels.digits import digit_set

    a, b, coefficients, modulus, digits = plane_gemm_probe(kind, operand, (2, 3, 4, 40), seed=1)
    assert (a.shape, b.shape, len(coefficients), modulus) == ((2, 3, 40), (2, 4, 40), 2, 2**31 - 1)
    allowed = digit_set(digits)
    assert allowed <= digit_set(OPERANDS[operand])
    assert set(a.unique().tolist()) <= allowed and set(b.unique().tolist()) <= allowed


def test_cancellation_probe_cancels_its_large_values():
    x = tc_sum_probe("cancellation", torch.float16, (1, 4000), seed=1).to(torch.float64)
    big = x.abs() == 2.0 ** 14
    assert big.sum() > 1000 and x[big].sum() == 0


@pytest.mark.parametrize("call, match", [
    (lambda: tc_sum_probe("gaussian", torch.float16, (1, 8), 0), "unknown probe"),
    (lambda: plane_gemm_probe("gaussian", "int8", (1, 2, 2, 8), 0), "unknown probe"),
    (lambda: run_checks(["tc_sum.float64"], device=DEVICE), "no dynamic check"),
], ids=["probe", "plane-probe", "kernel"])
def test_rejects_unknown_probes_and_kernels(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_worker_processes_give_the_same_report_as_one_process():
    names = ["tc_sum.int8", "tc_sum.bfloat16"]
    seen = []
    parallel = run_checks(names, seed=4, device=DEVICE, shape=(2, 2100), jobs=2,
                          report=lambda name, entry: seen.append(name))
    assert parallel == run_checks(names, seed=4, device=DEVICE, shape=(2, 2100))
    assert seen == names and all(entry["sound"] for entry in parallel.values())


def test_cli_run_prints_each_family_and_a_summary(capsys):
    assert main(["run", "--kernel", "tc_sum.int8", "--kernel", "tc_sum.float16", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert out.index("tc_sum.int8 (") < out.index("tc_sum.float16 (") < out.index("summary: 2 of 2 kernel families sound")


def test_cli_run_reports_json(capsys):
    assert main(["run", "--json", "--kernel", "tc_sum.int8", "--seed", "11"]) == 0
    entry = json.loads(capsys.readouterr().out)["tc_sum.int8"]
    assert entry["sound"] and entry["target"] == target_for(DEVICE)
    assert set(entry["observed"]) == set(PROBES)
