"""ozaki.bench: the CPU run end to end, its exact error measure, the projection model, and the refusal of bad
arguments (the one-device command's and the distributed one's)."""

from __future__ import annotations

import contextlib
import csv
import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import ozaki
from ozaki import accuracy, bench, cost, planning, timing
from ozaki.bench import one_device

U = 2.0**-53


def _read(path):
    with path.open() as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


def test_tiny_cpu_run_writes_the_csv(tmp_path):
    assert bench.main(["--cpu", "--sizes", "32", "--reps", "1", "--out", str(tmp_path)]) == 0
    columns, rows = _read(tmp_path / "bench-cpu.csv")
    assert tuple(columns) == bench.COLUMNS
    assert [(r["method"], r["accuracy"]) for r in rows] == [("numpy", ""), ("ozaki", "fp64"), ("ozaki", "exact"),
                                                            ("ozaki", "40")]  # fmt: skip
    assert all(r["status"] == "ok" and (r["m"], r["k"], r["n"]) == ("32", "32", "32") for r in rows)
    assert all(float(r["median_s"]) > 0 and float(r["tflops"]) > 0 and r["date"] and r["device"] for r in rows)
    by_accuracy = {r["accuracy"]: r for r in rows}
    assert float(by_accuracy[""]["speedup"]) == 1.0
    # ozaki.matmul's contracts, checked against the exact product of the sample block:
    # "exact" is correctly rounded; "fp64" keeps |C^ - C| <= u|C| + 2^-g (1 + 2^-19) sqrt(K) u |A||B|
    # with g >= FP64_GUARD (ozaki.accuracy), and |C| <= |A||B|.
    assert float(by_accuracy["exact"]["rel_err_max"]) <= U
    fp64_level = 2.0**-accuracy.FP64_GUARD * (1 + 2.0**-19) * math.sqrt(32) * U
    assert float(by_accuracy["fp64"]["comp_err_max"]) <= U + fp64_level
    assert (tmp_path / "run.txt").read_text().splitlines()[1].startswith("python -m ozaki bench --cpu")


def test_a_batch_is_timed_against_the_native_batched_product(tmp_path, capsys):
    argv = ["--cpu", "--sizes", "12", "--shapes", "2x5x30x7", "--batch", "3", "--reps", "1", "--engines",
            "auto,reference", "--accuracy", "exact,fp64"]
    assert bench.main(argv + ["--out", str(tmp_path)]) == 0
    _, rows = _read(tmp_path / "bench-cpu.csv")
    # --batch applies to the sizes and the MxKxN shapes; a BxMxKxN shape keeps its own.
    got = [(r["batch"], r["m"], r["k"], r["n"], r["dtype"], r["method"], r["accuracy"], r["engine"]) for r in rows]
    assert got == [
        (batch, m, k, n, "float64", *method) for batch, m, k, n in (("3", "12", "12", "12"), ("2", "5", "30", "7"))
        for method in (("numpy", "", ""), ("ozaki", "exact", "auto"), ("ozaki", "exact", "reference"),
                       ("ozaki", "fp64", "auto"), ("ozaki", "fp64", "reference"))]  # fmt: skip
    assert all(r["status"] == "ok" and float(r["speedup"]) > 0 for r in rows)
    # The sample block spans the batch's first and last product: "exact" stays correctly rounded there.
    assert all(float(r["rel_err_max"]) <= U for r in rows if r["accuracy"] == "exact")
    # tflops count every product of the batch.
    first = rows[0]
    assert float(first["tflops"]) == pytest.approx(3 * 2 * 12**3 / float(first["median_s"]) / 1e12, rel=1e-5)
    printed = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(printed) if line.split()[:2] == ["batch", "m"])
    assert [line.split()[0] for line in printed[header + 1:header + 11]] == ["3"] * 5 + ["2"] * 5


def test_complex_products_are_timed_against_the_native_complex_product(tmp_path, capsys):
    argv = ["--cpu", "--sizes", "10", "--shapes", "2x6x20x5", "--dtype", "complex128", "--reps", "1",
            "--accuracy", "exact,fp64"]
    assert bench.main(argv + ["--out", str(tmp_path)]) == 0
    _, rows = _read(tmp_path / "bench-cpu.csv")
    assert [(r["batch"], r["m"], r["dtype"], r["method"], r["accuracy"]) for r in rows] == [
        (batch, m, "complex128", *method) for batch, m in (("1", "10"), ("2", "6"))
        for method in (("numpy", ""), ("ozaki", "exact"), ("ozaki", "fp64"))]  # fmt: skip
    assert all(r["status"] == "ok" for r in rows)
    # Each part's error against the exact product, and the whole block's the larger of the two.
    for r in rows:
        real, imag = float(r["rel_err_max_real"]), float(r["rel_err_max_imag"])
        assert float(r["rel_err_max"]) == max(real, imag)
        if r["accuracy"] == "exact":
            assert real <= U and imag <= U
    # A complex product's flops are ZGEMM's: 8MNK.
    assert float(rows[0]["tflops"]) == pytest.approx(8 * 10**3 / float(rows[0]["median_s"]) / 1e12, rel=1e-5)
    table = capsys.readouterr().out
    assert "rel_err_max_real" in table and "complex128" in table


def test_a_failing_engine_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    real = ozaki.matmul

    def flaky(a, b, *, accuracy, engine):
        if engine == "int8":
            raise RuntimeError("no int8 here")
        return real(a, b, accuracy=accuracy, engine=engine)

    monkeypatch.setattr(ozaki, "matmul", flaky)
    argv = ["--cpu", "--sizes", "8", "--reps", "1", "--accuracy", "fp64", "--engines", "int8,reference"]
    assert bench.main(argv + ["--out", str(tmp_path)]) == 1
    _, rows = _read(tmp_path / "bench-cpu.csv")
    assert [r["status"] for r in rows] == ["ok", "error: RuntimeError: no int8 here", "ok"]
    assert rows[1]["median_s"] == "" and rows[2]["engine"] == "reference"


def test_stage_breakdown_is_taken_from_the_pipeline_recorder(tmp_path, monkeypatch):
    @contextlib.contextmanager
    def stage_times():
        seconds = {}
        yield seconds
        seconds.update(plan=0.0625, encode=0.25, products=0.5, decode=0.125)

    monkeypatch.setattr(timing, "stage_times", stage_times)
    argv = ["--cpu", "--sizes", "8", "--reps", "1", "--accuracy", "fp64", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    _, rows = _read(tmp_path / "bench-cpu.csv")
    assert [(r["plan_s"], r["encode_s"], r["products_s"], r["decode_s"]) for r in rows] == [
        ("", "", "", ""), ("0.0625", "0.25", "0.5", "0.125")]


def test_budget_stops_starting_shapes(tmp_path):
    assert bench.main(["--cpu", "--sizes", "8,16", "--budget", "0", "--out", str(tmp_path)]) == 0
    _, rows = _read(tmp_path / "bench-cpu.csv")
    assert [(r["n"], r["status"]) for r in rows] == [(n, "skipped: --budget spent") for n in ("8", "16")]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--project", "mars"], "unknown device"),
        (["--shapes", "4x4"], "is not MxKxN"),
        (["--shapes", "1x2x3x4x5"], "is not MxKxN or BxMxKxN"),
        (["--batch", "0"], "at least 1"),
        (["--dtype", "complex64"], "invalid choice: 'complex64'"),
        (["--sizes", "0"], "must be positive"),
        (["--sizes", "a,b"], "not a comma-separated list"),
        (["--reps", "0"], "at least 1"),
        (["--sample", "x"], "not an integer"),
        (["--engines", "auto,int7"], "unknown engine(s) ['int7']"),
        (["--accuracy", "fp64,fast"], "accuracy='fast' is not one of"),
        (["--accuracy", "0"], "accuracy=0: a number of input bits must lie in"),
        (["--phi", "nan"], "a finite number is needed"),
        (["--phi", "wide"], "is not a number"),
        (["--distributed", "--layouts", "rows,diagonal"], "unknown layout(s) ['diagonal']"),
        (["--distributed", "--accuracy", "fast"], "accuracy='fast' is not one of"),
        (["--distributed", "--cpu"], "unrecognized arguments: --cpu"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        bench.main(argv)
    assert refused.value.code == 2
    assert message in capsys.readouterr().err


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.data())
def test_exact_product_matches_rational_arithmetic(s, k, t, data):
    a = data.draw(arrays(np.float64, (s, k), elements=finite))
    b = data.draw(arrays(np.float64, (k, t), elements=finite))
    want = [[sum((Fraction(a[i, x]) * Fraction(b[x, j]) for x in range(k)), Fraction(0)) for j in range(t)]
            for i in range(s)]  # fmt: skip
    assert one_device._exact_product(a, b) == want


@pytest.mark.parametrize(
    "got, exact, scale, want",
    [
        (1.0, Fraction(1), 1.0, (0.0, 0.0, 0.0)),
        (1.0 + 2.0**-52, Fraction(1), 4.0, (2.0**-52, 2.0**-52, 2.0**-54)),
        (0.5, Fraction(1, 3), 1.0, (0.5, 0.5, 1 / 6)),
        (0.0, Fraction(0), 0.0, (0.0, 0.0, 0.0)),  # an exact zero has no relative error to report
        (1e-300, Fraction(0), 0.0, (0.0, 0.0, math.inf)),
        (math.nan, Fraction(1), 1.0, (math.inf, math.inf, math.inf)),
    ],
)
def test_errors_of_single_entries(got, exact, scale, want):
    assert one_device._errors(np.array([[got]]), [[exact]], np.array([[scale]])) == want


def test_errors_median_over_entries():
    got = np.array([[1.0, 2.0, 4.5]])
    exact = [[Fraction(1), Fraction(1), Fraction(4)]]
    rel_max, rel_median, _ = one_device._errors(got, exact, np.ones((1, 3)))
    assert (rel_max, rel_median) == (1.0, 0.125)


def _plan(name, digits, products, moduli, k_max):
    return SimpleNamespace(name=name, digits=digits, products=products, moduli=tuple(range(moduli)), k_max=k_max)


def _measured_rows():
    # cuBLAS at half the int8 and a quarter of the fp8 datasheet rate of a Hopper, DGEMM at half its
    # FP64 rate, and one int8 call at 1000³.
    return [
        {"method": "plane-int8", "status": "ok", "tflops": 1979 / 2, "n": 8192},
        {"method": "plane-fp8", "status": "ok", "tflops": 1979 / 4, "n": 8192},
        {"method": "torch", "status": "ok", "tflops": 33.5, "batch": 1, "m": 4096, "k": 4096, "n": 4096},
        {"method": "ozaki", "status": "ok", "engine": "int8", "accuracy": "fp64", "batch": 1, "m": 1000, "k": 1000,
         "n": 1000, "median_s": 0.01},
    ]  # fmt: skip


def test_projection_model_and_calibration():
    plans = [_plan("i", "int8", 10, 4, 2048), _plan("f", "fp4", 59, 21, 16384)]
    shapes = [(1000, 1000, 1000), (1000, 4096, 1000)]
    measured = _measured_rows()
    calibration = {"bandwidth": 2.4e12, "device": "NVIDIA H200", "capability": (9, 0)}
    table, notes = one_device._project(plans, ["h200", "b200", "b300"], [(1, *s) for s in shapes], measured,
                                       calibration)
    got = {(r["device"], r["plan"], r["k"]): r for r in table}
    # int8 stops at its k_max; B300 has no usable INT8 and the H200 no FP4: those are left out, and said so.
    assert sorted(got) == [("B200", "f", 1000), ("B200", "f", 4096), ("B200", "i", 1000), ("B300", "f", 1000),
                           ("B300", "f", 4096), ("H200", "i", 1000)]  # fmt: skip
    assert any("int8 on B300" in n for n in notes) and any("fp4 on H200" in n for n in notes)
    flop = 2e9
    # B200 int8 at half the datasheet rate, the code GEMM of the plan too; traffic at half of 8 TB/s:
    # the plan's three reads of A and B, one code per entry and the code GEMM's int32 product written and
    # read, the encode's read of A and B and 10 planes of (MK + KN) bytes, 4 moduli of byte residues
    # written and read, C written.
    plan = 25 * 2e6 + 8 * 1e6
    traffic = plan + (8 + 10) * 2e6 + 2 * 4 * 1e6 + 8 * 1e6
    want = (10 + 1) * flop / (0.5 * 4.5e15) + traffic / (0.5 * 8e12)
    assert got[("B200", "i", 1000)]["model_s"] == pytest.approx(want, rel=1e-12)
    # fp4 takes fp8's measured efficiency (a quarter), and so does the code GEMM on the B300, which has no
    # int8 worth using (its fastest unit, fp4); DGEMM runs at half of the datasheet FP64 rate.
    fp4 = got[("B300", "f", 1000)]
    want = (59 + 1) * flop / (0.25 * 13e15) + (plan + (8 + 59 * 0.5) * 2e6 + 2 * 21 * 1e6 + 8 * 1e6) / (0.5 * 8e12)
    assert fp4["model_s"] == pytest.approx(want, rel=1e-12)
    assert fp4["dgemm_model_s"] == pytest.approx(flop / (0.5 * 1.25e12), rel=1e-12)
    assert fp4["speedup"] == pytest.approx(fp4["dgemm_model_s"] / fp4["model_s"], rel=1e-12)
    assert got[("H200", "i", 1000)]["measured_s"] == 0.01 and fp4["measured_s"] is None
    assert {r["calibration"] for r in table} == {"H200 run"}
    assert not any("WARNING" in n for n in notes)
    table, notes = one_device._project(plans, ["b200"], [(1, *s) for s in shapes], measured,
                                       {**calibration, "device": "NVIDIA L40S"})
    assert any(n.startswith("WARNING: measured on 'NVIDIA L40S'") for n in notes)
    assert {r["calibration"] for r in table} == {"run on a device without datasheet figures"}


def test_projection_is_calibrated_against_the_measured_devices_datasheet():
    # The same cuBLAS rates on an H100: its datasheet's tensor and FP64 rates are the H200's, its
    # bandwidth 3.35 TB/s where the H200's is 4.8, so only the bandwidth efficiency differs.
    plans, shapes = [_plan("i", "int8", 10, 4, 2048)], [(1, 1000, 1000, 1000)]
    measured = _measured_rows()
    on = {"bandwidth": 1.675e12, "device": "NVIDIA H100 80GB HBM3", "capability": (9, 0)}
    eff, notes = one_device._efficiencies(measured, on)
    assert eff["int8"] == pytest.approx(0.5) and eff["fp8"] == pytest.approx(0.25)
    assert eff["fp64"] == pytest.approx(0.5) and eff["bandwidth"] == pytest.approx(0.5)
    assert not any("WARNING" in n for n in notes) and any("3.35 TB/s H100 datasheet" in n for n in notes)
    table, _ = one_device._project(plans, ["h100", "h200"], shapes, measured, on)
    got = {r["device"]: r for r in table}
    assert {r["calibration"] for r in table} == {"H100 run"}
    assert got["H100"]["measured_s"] == 0.01 and got["H200"]["measured_s"] is None
    # A name without its compute capability's major is not the datasheet's device (ozaki.cost.device_key).
    assert one_device._calibration_device({**on, "capability": (8, 0)}) is None
    assert one_device._calibration_device({"device": "NVIDIA H200", "capability": (9, 0)}) == "h200"
    # A device the datasheet lists without a unit (the A100 has no FP8) measures nothing of it.
    eff, notes = one_device._efficiencies(measured, {"bandwidth": 1e12, "device": "NVIDIA A100-SXM4-80GB",
                                                "capability": (8, 0)})
    assert eff["int8"] == pytest.approx(1979 / 2 / 624) and any("fp8 efficiency 0.7 ASSUMED" in n for n in notes)


def test_projection_of_batches_and_complex_products():
    # A complex product is projected as its real embedding M×2K×2N, all four blocks per plane GEMM
    # (the fused path's), against ZGEMM; a batch as its products' time (the projection has no fixed costs).
    plans = [_plan("i", "int8", 10, 4, 2048)]
    measured, calibration = _measured_rows(), {"bandwidth": 2.4e12, "device": "NVIDIA H200", "capability": (9, 0)}
    real, _ = one_device._project(plans, ["h200"], [(1, 1000, 1000, 1000)], measured, calibration)
    table, notes = one_device._project(plans, ["h200"], [(3, 1000, 1000, 1000), (1, 1000, 1500, 1000)], measured,
                                       calibration, "complex128")
    # 2K = 3000 is past the plan's k_max.
    assert [(r["batch"], r["k"], r["dtype"]) for r in table] == [(3, 1000, "complex128")]
    (row,) = table
    eff, _ = one_device._efficiencies(measured, calibration)
    profile = one_device._projected_profile(cost.DEVICES["h200"], eff)
    want = cost.predict(profile, 1000, 2000, 2000, digits="int8", planes=10, moduli=4, complex_blocks=4)
    assert row["model_s"] == pytest.approx(3 * want.total, rel=1e-12)
    assert row["dgemm_model_s"] == pytest.approx(3 * cost.zgemm_seconds(profile, 1000, 1000, 1000), rel=1e-12)
    assert row["dgemm_model_s"] == pytest.approx(12 * real[0]["dgemm_model_s"], rel=1e-12)
    assert row["model_tflops"] == pytest.approx(3 * 8e9 / row["model_s"] / 1e12, rel=1e-12)
    assert any(n.startswith("complex128: ") for n in notes) and any(n.startswith("batch: ") for n in notes)


def test_projection_without_measurements_says_it_assumed():
    table, notes = one_device._project([_plan("f", "fp4", 59, 21, 16384)], ["b200"], [(1, 512, 512, 512)], [], {})
    assert [r["calibration"] for r in table] == ["assumed"]
    assert sum("ASSUMED" in n for n in notes) == 4  # int8, fp8, fp64 and bandwidth efficiencies


def test_projection_and_runtime_model_share_one_device_table():
    assert bench.DEVICES is cost.DEVICES and bench.Device is cost.Device
    assert one_device._device_list("h100,a100") == ("h100", "a100")


def test_plan_and_path_are_read_from_the_calls_plan(monkeypatch):
    h200 = cost.profile_for("NVIDIA H200", (9, 0))
    a, b = np.ones((4, 8)), np.ones((8, 3))
    plan = ozaki.explain(a, b, engine="reference")
    assert plan.moduli.engine == "reference" and plan.predicted is None
    row = one_device._model_columns(plan, h200)
    count = len(plan.moduli.moduli)
    sizes = dict(digits="reference", planes=count, moduli=count)
    want = cost.predict(h200, 4, 8, 3, **sizes)
    assert row["path"] == "emulated" and row["model_s"] == want.total and row["model_encode_s"] == want.encode
    assert row["model_workspace_ratio"] == cost.workspace_bytes(4, 8, 3, **sizes) / (8 * (32 + 24 + 12))

    # A batch and a complex product: the prediction for the products the plan holds, one call of the
    # batch, a complex product's embedding with the plan's blocks; no modeled workspace (one real product's).
    batch = ozaki.explain(np.ones((5, 4, 8)), b, engine="reference")
    row = one_device._model_columns(batch, h200)
    assert row["model_s"] == cost.predict(h200, 4, 8, 3, **sizes, batch=5).total
    assert "model_workspace_ratio" not in row
    both = ozaki.explain(a + 1j, b - 2j, engine="reference")
    row = one_device._model_columns(both, h200)
    count = len(both.moduli.moduli)
    assert (both.k, both.n, both.complex_blocks) == (16, 6, 3) and row["model_s"] == cost.predict(
        h200, 4, 16, 6, digits="reference", planes=count, moduli=count, complex_blocks=3).total
    assert "model_workspace_ratio" not in row

    # engine="auto" on a device whose profile predicts DGEMM faster: native, decided before any plan.
    monkeypatch.setattr(planning, "device_profile", lambda device: h200)
    plan = ozaki.explain(a, b)
    row = one_device._model_columns(plan, h200)
    assert plan.moduli is None and row["path"] == "native"
    assert row["model_s"] == plan.predicted.emulated.total and "model_workspace_ratio" not in row


def test_warmup_compiles_each_size_and_engine_or_says_why_not(capsys):
    from ozaki.__main__ import main

    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            main(["warmup", "--sizes", "64"])
        assert "no CUDA device" in capsys.readouterr().err
        return
    assert main(["warmup", "--sizes", "64,96", "--engines", "int8,fp8"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == [f"n = {n}, engine {e}" for n in (64, 96) for e in ("int8", "fp8")]
