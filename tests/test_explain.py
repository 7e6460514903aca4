"""``ozaki.explain``: the plan of a call, without its product, and the very plan matmul runs."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from test_cost import H200, _spread

import ozaki
import ozaki.catalog
from ozaki import pipeline, planning, reading
from ozaki.residues import crt_capacity
from ozaki.scaling import shifts_of


@pytest.fixture
def no_product(monkeypatch):
    """explain must not compute the product: any run of the pipeline fails the test."""

    def refuse(plan):
        raise AssertionError("explain ran the product")

    monkeypatch.setattr(pipeline, "run", refuse)


@pytest.mark.parametrize("accuracy", ["exact", 24])
def test_cpu_plan_is_the_reference_engines(no_product, accuracy):
    rng = np.random.default_rng(1)
    a, b = _spread(rng, (6, 40)), _spread(rng, (40, 5))
    plan = ozaki.explain(a, b, accuracy=accuracy)
    bits_a = reading.row_bits(torch.from_numpy(a), accuracy)
    bits_b = reading.row_bits(torch.from_numpy(b).T, accuracy)
    assert (plan.path, plan.moduli.engine, plan.batch, plan.bands) == ("emulated", "reference", 1, None)
    assert plan.bits_a == (int(bits_a.min()), int(bits_a.max())) and plan.bits_b == (int(bits_b.min()), int(bits_b.max()))
    # The fewest reference moduli whose product passes the CRT capacity of these bits (one fewer would not).
    capacity = crt_capacity(40, plan.bits_a[1], plan.bits_b[1])
    assert math.prod(plan.moduli.moduli) > capacity
    assert math.prod(plan.moduli.moduli[:-1]) <= capacity
    assert plan.products == len(plan.moduli.moduli) and plan.predicted is None
    if isinstance(accuracy, int):
        assert f"e = 1/(2^{accuracy} - 1)" in plan.error_bound
    else:
        assert plan.error_bound.startswith("correctly rounded")


def test_matmul_runs_the_plan_explain_returns(monkeypatch):
    rng = np.random.default_rng(2)
    a, b = _spread(rng, (2, 5, 30)), _spread(rng, (30, 4))
    explained = ozaki.explain(a, b, engine="int8")
    ran = []
    run = pipeline.run
    monkeypatch.setattr(pipeline, "run", lambda call: ran.append(call.plan) or run(call))
    got = ozaki.matmul(a, b, engine="int8")
    assert ran == [explained] and got.shape == (2, 5, 4)
    # One plan for the batch: each of its products uses the plan's moduli.
    assert explained.batch == 2 and explained.products == 2 * explained.moduli.planes


def test_plan_engine_past_every_plan_explains_its_bands(no_product):
    if not ozaki.catalog.plans_for("int8"):
        pytest.skip("the catalog has no int8 plan")
    a = np.array([[2.0**600, 1.0, 2.0**-600]])
    b = np.array([[1.0], [3.0], [5.0]])
    plan = ozaki.explain(a, b, engine="int8", accuracy="exact")
    assert plan.bands is not None and plan.bands.pairs > 1
    assert plan.products == plan.bands.products


def test_native_path_on_a_profiled_device_reads_no_data(monkeypatch, no_product):
    monkeypatch.setattr(planning, "device_profile", lambda device: H200)
    monkeypatch.setattr(reading, "start", lambda *args: pytest.fail("the shape alone decides: no data is read"))
    a = torch.zeros((4096, 4096), dtype=torch.float64)
    plan = ozaki.explain(a, a)
    assert (plan.path, plan.moduli, plan.bits_a) == ("native", None, None)
    assert plan.predicted.native and plan.predicted.native_seconds < plan.predicted.emulated.total
    assert plan.error_bound.startswith("DGEMM's") and plan.products == 0


def test_explain_says_what_a_batch_and_a_complex_product_are_judged_against(monkeypatch, no_product):
    # The verdict is on the call: a batch against strided-batched DGEMM, a complex product against ZGEMM.
    monkeypatch.setattr(planning, "device_profile", lambda device: H200)
    monkeypatch.setattr(reading, "start", lambda *args: pytest.fail("the shape alone decides: no data is read"))
    batch = ozaki.explain(np.zeros((3, 256, 128)), np.zeros((128, 64)))
    assert batch.path == "native" and batch.predicted.batch == 3
    assert "x strided-batched DGEMM of 3 products" in str(batch)
    both = ozaki.explain(np.zeros((64, 32), complex), np.zeros((32, 16), complex))
    assert both.path == "native" and both.predicted.zgemm and "x ZGEMM" in str(both)
    one = ozaki.explain(np.zeros((64, 32)), np.zeros((32, 16), complex))
    assert one.path == "native" and not one.predicted.zgemm and "x strided-batched DGEMM of 2 products" in str(one)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_shape_sent_to_dgemm_skips_building_the_plan(monkeypatch, caplog):
    a, b = (torch.rand((256, 256), dtype=torch.float64, device="cuda") for _ in range(2))
    if ozaki.explain(a, b).path != "native":
        pytest.skip("this device's cost model emulates at n = 256")
    planned = []
    prepare = pipeline.prepare
    monkeypatch.setattr(pipeline, "prepare", lambda *args, **kwargs: planned.append(args) or prepare(*args, **kwargs))
    assert torch.equal(ozaki.matmul(a, b), torch.matmul(a, b)) and not planned
    # Anything else is planned: an explicit engine or accuracy, a batch, the debug log.  (A vector
    # reaches the operator as a matrix of one column, which the shape may send to DGEMM too.)
    ozaki.matmul(a, b, engine="reference")
    ozaki.matmul(a, b, accuracy="exact")
    ozaki.matmul(a[None], b)
    with caplog.at_level(logging.DEBUG, logger="ozaki"):
        ozaki.matmul(a, b)
    assert len(planned) == 4 and "native float64 matmul" in caplog.text


def test_nonfinite_inputs_are_planned_on_their_finite_terms(no_product):
    a = np.array([[1.0, np.inf], [np.nan, 2.0]])
    plan = ozaki.explain(a, np.eye(2))
    call = pipeline.prepare(torch.from_numpy(a), torch.eye(2, dtype=torch.float64), early=False)
    assert plan.nonfinite and call.plan == plan and np.isfinite(call.operands[0].numpy()).all()


@pytest.mark.parametrize("call, error", [
    (lambda: ozaki.explain(np.ones((2, 3)), np.ones((2, 3))), ValueError),
    (lambda: ozaki.explain(np.ones((2, 2)), np.ones((2, 2)), accuracy="fp32"), ValueError),
    (lambda: ozaki.explain(np.ones((2, 2)), np.ones((2, 2)), engine="fp16"), ValueError),
    (lambda: ozaki.explain(np.array([["x", "y"]]), np.ones((2, 2))), TypeError),
])
def test_bad_calls_raise_as_matmul_does(call, error):
    with pytest.raises(error):
        call()


def _span_rows(rng) -> list[np.ndarray]:
    # Rows from the subnormals to the top of the float64 range, zero rows, rows one ulp under
    # a power of two (which carry below 53 bits) and plain phi rows.
    tiny = np.array([5e-324, 3e-320, 2.0**-1060, 2.0**-1022])
    return [rng.random((6, 9)) - 0.5, np.zeros((2, 9)), np.full((2, 9), 1 - 2.0**-53),
            np.outer(np.ldexp(1.0, rng.integers(-1074, 1023, size=4)), rng.random(9)), np.outer(tiny, rng.random(9)),
            np.full((1, 9), np.finfo(np.float64).max)]


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 12, 60])
def test_shift_span_holds_every_rows_shift(accuracy):
    # The span the plan reads with its maxima (no read of the shifts themselves) holds every
    # row's shift s = bits − top (less a carry), which the encode checks and sizes its tables by.
    rng = np.random.default_rng(7)
    a = torch.from_numpy(np.vstack(_span_rows(rng)))
    b = torch.from_numpy(np.vstack(_span_rows(rng)).T.copy())
    call = pipeline.prepare(a, b, accuracy, "int8", early=False)
    assert call.plan == ozaki.explain(a, b, accuracy=accuracy, engine="int8")
    extents_a, extents_b, bits_a, bits_b = call.lines[0]
    lowest, highest = call.plan.shift_span
    for extents, bits in ((extents_a, bits_a), (extents_b, bits_b)):
        shifts = shifts_of(extents.row_max, bits)
        assert lowest <= int(shifts.min()) and int(shifts.max()) <= highest
