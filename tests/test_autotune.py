"""kernels.autotune: only configurations of the default's bitwise class are ever timed or chosen.

Timing needs a GPU; on the CPU the tuner's timing path is exercised by declaring the device an sm_90
target (``_tuning_target``) and replacing ``triton.testing.do_bench`` with a scripted clock.
"""

import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import triton.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from test_kernels_products import needs_dot_scaled
from triton.runtime.errors import OutOfResources

from kernels import autotune, products, wgmma_products
from kernels.autotune import CLASSES_FILE, best_config, candidates, clear_cache, target_for, tuned_plane_config
from kernels.check import classes_report, proven_classes
from kernels.check.run import tc_sum_probe
from kernels.products import CONFIGS, config_refusal, plan_chunk
from kernels.tc_sum import TC_SUM_CONFIGS, segment_length, tc_sum

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
ROOT = Path(__file__).resolve().parents[1]
REPORTS = {target: classes_report(target)["kernels"] for target in ("sm_90", "interpreter")}
ORDER_CHANGING = 6  # TC_SUM_CONFIGS[6] doubles the segment: float sums regroup


def _frozen(config):
    return tuple(sorted(config.items()))


def _class(target, name, index):
    entry = REPORTS[target][name]
    members = next(c for c in entry["classes"] if index in c)
    return {_frozen(entry["configs"][i]) for i in members}


CASES = [(target, name, index) for target, report in REPORTS.items() for name, entry in report.items()
         for index in range(len(entry["configs"]))]
TC_SUM_CASES = [(name, index) for name in REPORTS["sm_90"] if name.startswith("tc_sum.")
                for index in range(len(TC_SUM_CONFIGS))]


class Clock:
    """Stands in for do_bench: runs fn once (so run's configs are seen) and reports a scripted time."""

    def __init__(self):
        self.times, self.delay, self.timed = {}, 0.0, []  # scripted ms by frozen config; sleep per call
        self.lock = threading.Lock()

    def __call__(self, fn, *, return_mode):
        assert return_mode == "median"
        fn()
        time.sleep(self.delay)
        with self.lock:
            config = self.timed[-1]
        return self.times.get(config, 1.0)


@pytest.fixture
def fake_gpu(monkeypatch):
    """Every device counts as sm_90; returns the clock and a run() recording the configs it launches."""
    monkeypatch.setattr(autotune, "_tuning_target", lambda device: "sm_90")
    monkeypatch.setattr(autotune, "_winners", {})
    clock = Clock()
    monkeypatch.setattr(triton.testing, "do_bench", clock)

    def run(config):
        with clock.lock:
            clock.timed.append(_frozen(config))

    return clock, run


@pytest.mark.parametrize(("target", "name", "index"), CASES)
def test_candidates_are_the_checkers_class_of_the_default(target, name, index):
    default = REPORTS[target][name]["configs"][index]
    assert {_frozen(c) for c in candidates(name, default, target=target)} == _class(target, name, index)


@pytest.mark.parametrize(("name", "index"), TC_SUM_CASES)
def test_the_tuner_times_exactly_the_class(fake_gpu, name, index):
    clock, run = fake_gpu
    default = TC_SUM_CONFIGS[index]
    chosen = best_config(name, run, key=("shape", 1), device="cpu", default=default)
    assert set(clock.timed) == _class("sm_90", name, index)
    assert len(clock.timed) == len(set(clock.timed))
    assert clock.timed[0] == _frozen(default)
    assert _frozen(chosen) in _class("sm_90", name, index)


@pytest.mark.parametrize("name", ["tc_sum.float16", "tc_sum.bfloat16"])
def test_the_order_changing_config_is_never_a_candidate(fake_gpu, name):
    clock, run = fake_gpu
    changed = TC_SUM_CONFIGS[ORDER_CHANGING]
    assert segment_length(changed) != segment_length(TC_SUM_CONFIGS[0])
    for target in REPORTS:
        assert [ORDER_CHANGING] in REPORTS[target][name]["classes"]
    for index, default in enumerate(TC_SUM_CONFIGS):
        if index != ORDER_CHANGING:
            for target in REPORTS:
                assert changed not in candidates(name, default, target=target)
            clock.timed.clear()
            clock.times = {_frozen(changed): 0.0}  # fastest by far, were it ever timed
            best_config(name, run, key=index, device="cpu", default=default)
            assert clock.timed and _frozen(changed) not in clock.timed


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_the_dynamic_check_separates_the_order_changing_config(dtype):
    name = f"tc_sum.{str(dtype).split('.')[1]}"
    x = tc_sum_probe("exponent-spread", dtype, (2, 4500), seed=0).to(DEVICE)
    reference = tc_sum(x, **TC_SUM_CONFIGS[0]).cpu()
    members = candidates(name, target=target_for(DEVICE))
    assert len(members) > 1
    for config in members:
        assert torch.equal(tc_sum(x, **config).cpu().view(torch.int32), reference.view(torch.int32)), config
    changed = tc_sum(x, **TC_SUM_CONFIGS[ORDER_CHANGING]).cpu()
    assert not torch.equal(changed.view(torch.int32), reference.view(torch.int32))


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(1, 2**20), kind=st.sampled_from(["exponent-spread", "cancellation"]))
def test_every_candidate_gives_the_defaults_bits(seed, kind):
    for dtype in (torch.float8_e4m3fn, torch.float16, torch.bfloat16):
        name = f"tc_sum.{str(dtype).split('.')[1]}"
        x = tc_sum_probe(kind, dtype, (2, 2100), seed).to(DEVICE)
        outputs = [tc_sum(x, **c).cpu().view(torch.int32) for c in candidates(name, target=target_for(DEVICE))]
        assert all(torch.equal(outputs[0], out) for out in outputs), (name, kind, seed)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ({}, 0),  # a tie keeps the default
        ({2: 0.5}, 2),
        ({0: 0.4, 1: 0.5, 3: 0.3}, 3),
        ({0: 0.1, 4: 0.2}, 0),
        ({1: 0.2, 4: 0.2}, 1),  # among equals, the earlier
    ],
)
def test_the_winner_is_the_fastest_candidate(fake_gpu, times, expected):
    clock, run = fake_gpu
    clock.times = {_frozen(TC_SUM_CONFIGS[i]): ms for i, ms in times.items()}
    assert best_config("tc_sum.float16", run, key="k", device="cpu") == TC_SUM_CONFIGS[expected]


def test_winners_are_cached_per_key(fake_gpu):
    clock, run = fake_gpu
    clock.times = {_frozen(TC_SUM_CONFIGS[2]): 0.5}
    size = len(_class("sm_90", "tc_sum.float16", 0))
    first = best_config("tc_sum.float16", run, key=(8, 4096), device="cpu")
    first["BLOCK_M"] = 1  # the caller's copy, not the cache
    assert best_config("tc_sum.float16", run, key=(8, 4096), device="cpu") == TC_SUM_CONFIGS[2]
    assert len(clock.timed) == size
    best_config("tc_sum.float16", run, key=(8, 8192), device="cpu")
    best_config("tc_sum.bfloat16", run, key=(8, 4096), device="cpu")
    assert len(clock.timed) == 3 * size
    clear_cache()
    best_config("tc_sum.float16", run, key=(8, 4096), device="cpu")
    assert len(clock.timed) == 4 * size


def test_concurrent_requests_tune_once(fake_gpu):
    clock, run = fake_gpu
    clock.delay = 0.01
    clock.times = {_frozen(TC_SUM_CONFIGS[3]): 0.1}
    start = threading.Barrier(8)
    results = []

    def ask():
        start.wait()
        results.append(best_config("tc_sum.bfloat16", run, key="shared", device="cpu"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [TC_SUM_CONFIGS[3]] * 8
    assert sorted(clock.timed) == sorted(_class("sm_90", "tc_sum.bfloat16", 0))


def test_the_classes_file_is_what_the_checker_proves():
    # The tuner reads kernels/classes.json rather than loading the checker; after a change to any
    # kernel's configurations or descriptors, regenerate it with `ozaki-check classes --write`.
    assert json.loads(CLASSES_FILE.read_text()) == json.loads(json.dumps(proven_classes()))


_RUNTIME_SCRIPT = """
import sys
from kernels.autotune import tuned_plane_config
tuned_plane_config("int8", 16, 16, 128, 1, 1, "cpu")
print(sorted(m for m in sys.modules if m.startswith("kernels.check")))
"""


def test_tuning_a_product_does_not_load_the_checker():
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)
    done = subprocess.run([sys.executable, "-c", _RUNTIME_SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["[]"]


def test_the_cpu_returns_the_default_untimed(monkeypatch, caplog):
    def forbidden(*args, **kwargs):
        raise AssertionError("the interpreter must not be timed")

    monkeypatch.setattr(triton.testing, "do_bench", forbidden)
    assert autotune._tuning_target(torch.device("cpu")) is None
    with caplog.at_level(logging.DEBUG, logger="ozaki.kernels"):
        for index, default in enumerate(TC_SUM_CONFIGS):
            assert best_config("tc_sum.float16", forbidden, key=index, device="cpu", default=default) == default
        assert best_config("tc_sum.int8", forbidden, key=0, device="cpu") == TC_SUM_CONFIGS[0]
        for operand, configs in CONFIGS.items():
            assert tuned_plane_config(operand, 64, 64, 4096, 3, 1, "cpu") == configs[0]
    assert any("untimed" in r.getMessage() and r.name == "ozaki.kernels" for r in caplog.records)


def _admitted(operand, max_product, planes=(1,), k=128, device="cpu"):
    return [c for c in CONFIGS[operand]
            if config_refusal(operand, c, max_product, planes=planes, k=k, device=device) is None]


@pytest.mark.parametrize(("operand", "max_product"), [("int8", 128 * 128), ("e4m3", 144), ("e4m3", 448 * 448),
                                                      ("e4m3", 300), ("e2m1", 144)])
def test_cpu_plane_config_is_the_launchers_default(operand, max_product):
    admitted = _admitted(operand, max_product)
    assert tuned_plane_config(operand, 16, 16, 128, [2, 3], max_product, "cpu") == admitted[0]


@settings(max_examples=25, deadline=None)
@given(operand=st.sampled_from(sorted(CONFIGS)), max_product=st.integers(1, 2**20))
def test_plane_candidates_are_the_admitted_members_of_the_class(operand, max_product):
    admitted = _admitted(operand, max_product)
    timed = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(autotune, "_tuning_target", lambda device: "sm_90")
        patch.setattr(autotune, "_winners", {})
        patch.setattr(triton.testing, "do_bench", lambda fn, return_mode: timed.append(fn) or 1.0)
        if not admitted:
            with pytest.raises(ValueError, match="max.P.Q"):
                tuned_plane_config(operand, 16, 16, 128, 1, max_product, "cpu")
            return
        chosen = tuned_plane_config(operand, 16, 16, 128, 1, max_product, "cpu")
    cls = _class("sm_90", f"modular_matmul.{operand}", CONFIGS[operand].index(admitted[0]))
    assert len(timed) == len([c for c in admitted if _frozen(dataclasses.asdict(c)) in cls])
    assert chosen == admitted[0]  # every time equal: the default stands
    plan_chunk(operand, chosen, max_product)


def test_the_gluon_kernel_is_timed_where_it_runs(fake_gpu, monkeypatch):
    """On sm_90 (faked) the Gluon configs join the timing for one plane per modulus in one K chunk,
    and only then."""
    clock, _ = fake_gpu
    monkeypatch.setattr(wgmma_products, "supports", lambda device: True)
    gluon = [c for c in CONFIGS["int8"] if c.gluon]
    timed = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: timed.append(fn) or 1.0)
    tuned_plane_config("int8", 4096, 4096, 4096, [1] * 16, 128 * 128, "cpu")
    assert gluon and len(timed) == len(CONFIGS["int8"])
    for planes, k in (([1, 2], 4096), ([1], 2**20)):
        timed.clear()
        tuned_plane_config("int8", 4096, 4096, k, planes, 128 * 128, "cpu")
        assert len(timed) == len(CONFIGS["int8"]) - len(gluon)


def test_exact_sums_are_timed_as_exact_int8_matmul_launches_them(fake_gpu, monkeypatch):
    """The code GEMM's configs are timed through exact_int8_matmul (its unreduced int32 sums),
    under a key of their own; only one int8 plane of a square bound is such a workload."""
    monkeypatch.setattr(wgmma_products, "supports", lambda device: True)
    launched = []
    monkeypatch.setattr(products, "exact_int8_matmul", lambda a, bt, top, config: launched.append((a.shape, top)))
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: fn() or 1.0)
    tuned_plane_config("int8", 4096, 2048, 4096, 1, 127 * 127, "cpu", moduli=[2**31 - 1], exact_sums=True)
    assert launched and set(launched) == {((4096, 4096), 127)}
    for operand, planes, max_product in (("int8", 2, 127 * 127), ("int8", 1, 127 * 126), ("e4m3", 1, 144)):
        with pytest.raises(ValueError, match="exact sums are one int8 plane"):
            tuned_plane_config(operand, 64, 64, 128, planes, max_product, "cpu", exact_sums=True)


# 2**31 // 200 leaves int8 one block_k of 128 per exact chunk: K = 256 runs as two chunks.
@pytest.mark.parametrize(("operand", "max_product"), [
    ("int8", 128 * 128), ("int8", 2**31 // 200), ("e4m3", 144),
    pytest.param("e2m1", 144, marks=needs_dot_scaled),
])
def test_plane_timing_launches_every_admitted_config(fake_gpu, monkeypatch, caplog, operand, max_product):
    seen = []

    def bench(fn, *, return_mode):
        fn()  # a real interpreter launch with the candidate's config and exact chunk
        seen.append(fn)
        return 0.5 if len(seen) == 2 else 1.0  # the second candidate timed wins

    monkeypatch.setattr(triton.testing, "do_bench", bench)
    with caplog.at_level(logging.INFO, logger="ozaki.kernels"):
        chosen = tuned_plane_config(operand, 16, 16, 256, [1, 2], max_product, DEVICE)
    admitted = _admitted(operand, max_product, planes=(1, 2), k=256, device=DEVICE)
    assert len(seen) == len(admitted) > 1
    assert chosen == admitted[1]
    assert any(r.name == "ozaki.kernels" and "autotune modular_matmul" in r.getMessage() for r in caplog.records)


def test_a_candidate_the_device_cannot_hold_is_skipped(fake_gpu, monkeypatch):
    clock, run = fake_gpu
    too_big = _frozen(TC_SUM_CONFIGS[1])

    def bench(fn, *, return_mode):
        fn()
        if clock.timed[-1] == too_big:
            raise OutOfResources(300000, 232448, "shared memory")
        return 1.0 if clock.timed[-1] == _frozen(TC_SUM_CONFIGS[0]) else 0.5

    monkeypatch.setattr(triton.testing, "do_bench", bench)
    assert best_config("tc_sum.float16", run, key=0, device="cpu") == TC_SUM_CONFIGS[2]
    with pytest.raises(OutOfResources):
        best_config("tc_sum.float16", run, key=0, device="cpu", default=TC_SUM_CONFIGS[1])


def test_admits_filters_candidates_and_must_admit_the_default(fake_gpu):
    clock, run = fake_gpu

    def admits(config):
        return config["BLOCK_K"] == 128

    best_config("tc_sum.int8", run, key=0, device="cpu", admits=admits)
    assert {dict(c)["BLOCK_K"] for c in clock.timed} == {128}
    with pytest.raises(ValueError, match="not admitted"):
        best_config("tc_sum.int8", run, key=1, device="cpu", default=TC_SUM_CONFIGS[2], admits=admits)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: best_config("tc_sum.int16", print, key=0, device="cpu"), ValueError, "unknown kernel"),
        (lambda: best_config("tc_sum.float16", print, key=0, device="cpu", default={"BLOCK_M": 64}), ValueError,
         "not a configuration"),
        (lambda: best_config("tc_sum.float16", print, key=[1, 2], device="cpu"), TypeError, "not hashable"),
        (lambda: candidates("tc_sum.float16", target="sm_80"), ValueError, "unknown target"),
        (lambda: tuned_plane_config("fp4", 16, 16, 128, 1, 1, "cpu"), ValueError, "unknown operand"),
        (lambda: tuned_plane_config("int8", 0, 16, 128, 1, 1, "cpu"), ValueError, "m = 0"),
        (lambda: tuned_plane_config("int8", 16, 16.0, 128, 1, 1, "cpu"), TypeError, "n = 16.0"),
        (lambda: tuned_plane_config("int8", 16, 16, 128, [], 1, "cpu"), ValueError, "planes is empty"),
        (lambda: tuned_plane_config("int8", 16, 16, 128, [1, 0], 1, "cpu"), ValueError, "planes = 0"),
        (lambda: tuned_plane_config("int8", 16, 16, 128, [1, 2], 1, "cpu", moduli=[7]), ValueError,
         "1 moduli for 2 groups"),
        (lambda: tuned_plane_config("e4m3", 16, 16, 128, 1, 2**20, "cpu"), ValueError, "imprecise_window"),
        (lambda: tuned_plane_config("int8", 16, 16, 128, 1, 2**25, "cpu"), ValueError, "block_k"),
    ],
)
def test_errors_name_the_problem(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_winners_persist_across_processes_on_disk(fake_gpu, monkeypatch, tmp_path):
    clock, run = fake_gpu
    monkeypatch.setenv(autotune.CACHE_DIR_VARIABLE, str(tmp_path))
    clock.times = {_frozen(TC_SUM_CONFIGS[2]): 0.5}
    size = len(_class("sm_90", "tc_sum.float16", 0))
    assert best_config("tc_sum.float16", run, key=(8, 4096), device="cpu") == TC_SUM_CONFIGS[2]
    assert len(clock.timed) == size
    path = autotune.cache_file("cpu")
    assert path.parent == tmp_path and path.exists()
    # A new process: nothing in memory, the winner read from disk, nothing timed.
    clear_cache()
    assert best_config("tc_sum.float16", run, key=(8, 4096), device="cpu") == TC_SUM_CONFIGS[2]
    assert len(clock.timed) == size
    # A stored winner outside the class the tuner would time (a stale or edited file) is timed again.
    stored = json.loads(path.read_text())
    [entry] = stored
    stored[entry] = [list(pair) for pair in _frozen(TC_SUM_CONFIGS[ORDER_CHANGING])]
    path.write_text(json.dumps(stored))
    clear_cache()
    assert best_config("tc_sum.float16", run, key=(8, 4096), device="cpu") == TC_SUM_CONFIGS[2]
    assert len(clock.timed) == 2 * size
    assert json.loads(path.read_text())[entry] == [list(pair) for pair in _frozen(TC_SUM_CONFIGS[2])]


def test_an_unreadable_or_unwritable_cache_only_costs_timing(fake_gpu, monkeypatch, tmp_path, caplog):
    clock, run = fake_gpu
    monkeypatch.setenv(autotune.CACHE_DIR_VARIABLE, str(tmp_path))
    autotune.cache_file("cpu").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="ozaki.kernels"):
        assert best_config("tc_sum.int8", run, key=1, device="cpu") == TC_SUM_CONFIGS[0]
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(autotune.CACHE_DIR_VARIABLE, str(blocked / "below"))
    with caplog.at_level(logging.WARNING, logger="ozaki.kernels"):
        assert best_config("tc_sum.int8", run, key=2, device="cpu") == TC_SUM_CONFIGS[0]
    assert any("cannot write" in r.getMessage() for r in caplog.records)


def test_plane_shapes_within_a_power_of_two_share_a_winner(fake_gpu, monkeypatch):
    timed = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: timed.append(fn) or 1.0)
    tuned_plane_config("int8", 16, 16, 128, 1, 128 * 128, "cpu")
    count = len(timed)
    tuned_plane_config("int8", 9, 13, 100, 1, 128 * 128, "cpu")
    assert len(timed) == count
    tuned_plane_config("int8", 17, 16, 128, 1, 128 * 128, "cpu")
    assert len(timed) == 2 * count
