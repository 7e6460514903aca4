"""The decision apart from the read: a plan is a pure function of the shape, the options, the
device's cost profile and stage 1's statistics, so it is tested here on hand-made reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_cost import H200, _spread

import ozaki
import ozaki.catalog
from ozaki import cost, pipeline, planning, reading
from ozaki.capacity import crt_capacity
from ozaki.reading import SideStatistics, Statistics

CPU = torch.device("cpu")


def _side(bits: int, top: int = 1, widest: int | None = None) -> SideStatistics:
    """Every line of a side keeps ``bits`` bits, lossless, its maxima at 2^(top−1)."""
    widest = bits if widest is None else widest
    widths = tuple(1 if width == widest else 0 for width in range(widest + 1))
    return SideStatistics(most_bits=bits, widest=widest, highest_top=top, lowest_top=top, nonfinite=False,
                          least_bits=bits, widths=widths)


def _shape(m: int, k: int, n: int, batch: int = 1) -> planning.Shape:
    return planning.Shape(m, k, n, batch, (m, k, n), CPU)


@pytest.fixture
def no_device_work(monkeypatch):
    """The decision reads nothing: any read of the device fails the test."""
    monkeypatch.setattr(reading, "start", lambda *args: pytest.fail("the decision read the device"))


@pytest.mark.parametrize("engine", ["reference", "int8", "fp8", "fp4"])
@pytest.mark.parametrize(("accuracy", "bits"), [("exact", 53), ("exact", 20), (24, 24), (60, 53)])
def test_a_hand_made_read_gets_the_cheapest_moduli_past_its_capacity(no_device_work, engine, accuracy, bits):
    if engine != "reference" and not ozaki.catalog.plans_for(engine):
        pytest.skip(f"the catalog has no {engine} plan")
    k = 300
    statistics = Statistics(_side(bits), _side(bits, top=-40))
    plan = planning.plan_for_statistics(_shape(5, k, 7, batch=3), statistics, accuracy, engine, None)
    assert (plan.path, plan.bits_a, plan.bits_b, plan.bands, plan.widen_to) == ("emulated", (bits, bits),
                                                                               (bits, bits), None, ())
    assert plan.slack == (0,)  # every row lossless
    assert plan.moduli == planning.moduli_for(engine, k, crt_capacity(k, bits, bits), CPU)
    assert math.prod(plan.moduli.moduli) > crt_capacity(k, bits, bits)
    assert plan.products == 3 * plan.moduli.planes and plan.predicted is None
    # The shifts bits − top (less a carry) of rows with tops 1 and −40.
    assert plan.shift_span == (min(0, bits - 1 - 1), max(0, bits - 1, bits + 40))
    # A pure function: the same read, the same plan.
    assert plan == planning.plan_for_statistics(_shape(5, k, 7, batch=3), statistics, accuracy, engine, None)


@pytest.mark.parametrize(("accuracy", "widest_a", "widest_b", "slack"), [
    ("exact", 70, 60, 0), (24, 24, 24, 0), (24, 40, 24, 300 * 2**24 // 2), (24, 24, 30, 300 * 2**24 // 2),
    (24, 40, 30, 300 * 2**24),
])  # fmt: skip
def test_the_slack_counts_the_lossy_sides(no_device_work, accuracy, widest_a, widest_b, slack):
    # ⌈K·(2^Q·[A lossy] + 2^P·[B lossy])/2⌉ (ozaki.scaling.slack_bound) from the read alone.
    kept = (lambda widest: widest) if accuracy == "exact" else (lambda widest: min(widest, accuracy))
    statistics = Statistics(_side(kept(widest_a), widest=widest_a), _side(kept(widest_b), widest=widest_b))
    plan = planning.plan_for_statistics(_shape(3, 300, 2), statistics, accuracy, "reference", None)
    assert plan.slack == (slack,)


def test_each_product_of_a_batch_is_decided_on_its_own_read(no_device_work):
    # A batch's statistics carry each product's: the moduli hold the widest, the slack is each one's.
    narrow, wide = Statistics(_side(10), _side(10)), Statistics(_side(20, widest=30), _side(20))
    batch = Statistics(_side(20, widest=30), _side(20), products=(narrow, wide))
    plan = planning.plan_for_statistics(_shape(3, 300, 2, batch=2), batch, 20, "reference", None)
    alone = [planning.plan_for_statistics(_shape(3, 300, 2), product, 20, "reference", None) for product in (narrow, wide)]
    assert plan.slack == (alone[0].slack[0], alone[1].slack[0]) == (0, 300 * 2**20 // 2)
    assert plan.moduli == alone[1].moduli and plan.bits_a == (10, 20)


def test_rows_past_every_plan_of_an_engine_are_split_into_bands(no_device_work):
    if not ozaki.catalog.plans_for("int8"):
        pytest.skip("the catalog has no int8 plan")
    plan = planning.plan_for_statistics(_shape(2, 3, 1), Statistics(_side(1201), _side(53)), "exact", "int8", None)
    assert plan.bands is not None and plan.products == plan.bands.products
    assert plan.bands.width_a * plan.bands.count_a >= 1201 and plan.bands.width_b * plan.bands.count_b >= 53


def test_nonfinite_operands_are_planned_on_their_finite_terms(no_device_work):
    statistics = Statistics(_side(10), _side(12), nonfinite=True)
    plan = planning.plan_for_statistics(_shape(2, 3, 1), statistics, "exact", "reference", None)
    assert plan.nonfinite and plan.path == "emulated"


def test_the_shape_decides_only_native_and_empty_calls(no_device_work):
    shape = _shape(4096, 4096, 4096)
    native = planning.plan_for_shape(shape, "fp64", "auto", H200)
    assert (native.path, native.moduli, native.products) == ("native", None, 0) and native.predicted.native
    # Without a profile, or with options that promise emulated bits, the data must be read.
    assert planning.plan_for_shape(shape, "fp64", "auto", None) is None
    assert planning.plan_for_shape(shape, "exact", "auto", H200) is None
    assert planning.plan_for_shape(shape, "fp64", "int8", H200) is None
    empty = planning.plan_for_shape(_shape(4, 0, 5), "exact", "auto", None)
    assert (empty.path, empty.moduli, empty.reason) == ("emulated", None, "empty product: zeros")


# A device object only: the decision reads none (kernels_available and the int8 plans follow its type).
CUDA = torch.device("cuda")


def _general_moduli(k: int, device: torch.device) -> planning.Moduli:
    return planning.moduli_for("auto", k, crt_capacity(k, 53, 53), device)


def test_the_verdict_is_on_the_whole_batch(no_device_work):
    # On the H200's profile one 6144³ product goes native, its fixed costs unpaid for; four in one
    # call pay them once, and the shape no longer decides: the data is read.
    n = 6144
    one = planning.plan_for_shape(planning.Shape(n, n, n, 1, (n, n, n), CUDA), "fp64", "auto", H200)
    assert one.path == "native" and one.predicted.batch == 1 and "strided-batched" not in str(one)
    batch = planning.Shape(n, n, n, 4, (n, n, n), CUDA)
    assert planning.plan_for_shape(batch, "fp64", "auto", H200) is None
    moduli = _general_moduli(n, CUDA)
    sizes = dict(digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli))
    assert planning.native_verdict(batch, "fp64", "auto", H200) == cost.verdict(H200, n, n, n, **sizes, batch=4)
    # An empty batch is no call to judge.
    assert planning.native_verdict(planning.Shape(n, n, n, 0, (n, n, n), CUDA), "fp64", "auto", H200) is None


@pytest.mark.parametrize(("device", "blocks"), [(CUDA, 4), (CPU, 3)])
def test_a_complex_product_is_judged_as_it_runs(no_device_work, device, blocks):
    # Both operands complex: the embedding M×2K×2N against ZGEMM of the complex M×K×N, its plane
    # GEMMs as the run forms them: the fused GPU path four blocks, the torch stages Karatsuba's three.
    m, k, n = 4096, 2048, 1024
    shape = planning.Shape(m, 2 * k, 2 * n, 2, (m, 2 * k, 2 * n), device, planning.COMPLEX_BOTH)
    moduli = _general_moduli(2 * k, device)
    sizes = dict(digits=moduli.engine, planes=moduli.planes, moduli=len(moduli.moduli))
    verdict = planning.native_verdict(shape, "fp64", "auto", H200)
    assert verdict == cost.verdict(H200, m, 2 * k, 2 * n, **sizes, batch=2, complex_blocks=blocks)
    assert verdict.zgemm and verdict.native_seconds == cost.zgemm_seconds(H200, m, k, n, 2)
    # The plan made from the read judges the blocks it runs.
    plan = planning.plan_for_statistics(shape, Statistics(_side(53), _side(53)), "fp64", "auto", H200)
    assert plan.complex_blocks == blocks and plan.predicted == planning.native_verdict(
        shape, "fp64", "auto", H200, plan.moduli, blocks)
    # Native here (about 1.4 times ZGEMM on the GPU), and explain says against what.
    native = planning.plan_for_shape(shape, "fp64", "auto", H200)
    assert native.path == "native" and "> 0.95 x strided-batched ZGEMM of 2 products" in str(native)
    # One operand complex: a batch of two real products, against their DGEMMs.
    one = planning.Shape(m, k, n, 2, (m, k, n), device, planning.COMPLEX_ONE)
    verdict = planning.native_verdict(one, "fp64", "auto", H200)
    assert not verdict.zgemm and verdict.native_seconds == cost.dgemm_seconds(H200, m, k, n, 2)


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 30])
def test_explain_is_the_decision_on_the_read_of_the_operands(accuracy):
    # The frontend's plan is plan_for_statistics of the read's statistics, nothing more.
    rng = np.random.default_rng(4)
    a, b = torch.from_numpy(_spread(rng, (9, 40))), torch.from_numpy(_spread(rng, (40, 6)))
    statistics = reading.start(a, b, accuracy).statistics()
    decided = planning.plan_for_statistics(planning.Shape.of(a, b), statistics, accuracy, "int8", None)
    assert ozaki.explain(a, b, accuracy=accuracy, engine="int8") == decided
    assert pipeline.prepare(a, b, accuracy, "int8").plan == decided


def test_a_plan_prints_as_a_short_block():
    rng = np.random.default_rng(5)
    a, b = _spread(rng, (9, 40)), _spread(rng, (40, 6))
    text = str(ozaki.explain(a, b, engine="int8"))
    lines = text.splitlines()
    assert lines[0] == "9x40x6 product, accuracy='fp64', engine='int8'"
    assert [line.split()[0] for line in lines[1:]] == ["path", "engine", "moduli", "products", "bits", "bound",
                                                       "time"]
    plan = ozaki.explain(a, b, engine="int8")
    assert f"products   {plan.products} GEMMs" in text and f"moduli     {len(plan.moduli.moduli)}," in text
    assert "time       no prediction: only engine='auto'" in text
    # A wide plan names its count and range, not every modulus.
    wide = ozaki.explain(np.array([[2.0**600, 1.0, 2.0**-600]]), np.ones((3, 1)), accuracy="exact")
    assert len(wide.moduli.moduli) > 24 and max(len(line) for line in str(wide).splitlines()) < 120


def test_the_native_plan_says_why(monkeypatch):
    monkeypatch.setattr(planning, "device_profile", lambda device: H200)
    text = str(ozaki.explain(torch.zeros((4096, 4096), dtype=torch.float64), torch.zeros((4096, 4096),
                                                                                          dtype=torch.float64)))
    assert "path       native: plan for rows of 53 bits" in text and "time       predicted emulation" in text
    assert "engine " not in text
