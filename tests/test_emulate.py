"""ozaki.emulate: which torch calls reach ozaki.matmul, with which settings, on which thread, and their grads."""

from __future__ import annotations

import copy
import re
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis.extra.numpy import mutually_broadcastable_shapes
from test_operator import compiled_without_graph_breaks
from torch.func import grad, jacrev, vmap

import ozaki
from ozaki import emulate

# Few enough bits that an emulated product visibly differs from torch's own, so a test can tell a routed call
# from one that reached torch.
LOW = 8
F64 = torch.float64


@pytest.fixture
def calls(monkeypatch):
    """Each emulated product (the implementation of the operator ozaki::matmul, which ozaki.matmul calls too) as
    (thread id, accuracy, engine); the real function still does the work."""
    seen = []
    real = ozaki.operands.emulated

    def spy(a, b, accuracy, engine):
        seen.append((threading.get_ident(), accuracy, engine))
        return real(a, b, accuracy, engine)

    monkeypatch.setattr(ozaki.operands, "emulated", spy)
    return seen


def _randn(*shapes, seed=0, dtype=F64, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype=dtype, device=device) for s in shapes]


def _low(x, y):
    return ozaki.matmul(x, y, accuracy=LOW, engine="auto")


# name, operand shapes, the call as user code writes it, what it must equal in terms of ozaki.matmul.
ROUTED = [
    ("torch.matmul", [(3, 4), (4, 5)], lambda a, b: torch.matmul(a, b), _low),
    ("torch.linalg.matmul", [(3, 4), (4, 5)], lambda a, b: torch.linalg.matmul(a, b), _low),
    ("operator @", [(3, 4), (4, 5)], lambda a, b: a @ b, _low),
    ("Tensor.matmul", [(3, 4), (4, 5)], lambda a, b: a.matmul(b), _low),
    ("Tensor.__rmatmul__", [(3, 4), (4, 5)], lambda a, b: b.__rmatmul__(a), _low),
    ("matmul vector-matrix", [(4,), (4, 5)], lambda a, b: a @ b, _low),
    ("matmul matrix-vector", [(3, 4), (4,)], lambda a, b: a @ b, _low),
    ("matmul dot", [(4,), (4,)], lambda a, b: a @ b, _low),
    ("matmul broadcast", [(2, 1, 3, 4), (5, 4, 2)], lambda a, b: a @ b, _low),
    ("torch.mm", [(3, 4), (4, 5)], lambda a, b: torch.mm(a, b), _low),
    ("Tensor.mm", [(3, 4), (4, 5)], lambda a, b: a.mm(b), _low),
    ("torch.bmm", [(2, 3, 4), (2, 4, 5)], lambda a, b: torch.bmm(a, b), _low),
    ("Tensor.bmm", [(2, 3, 4), (2, 4, 5)], lambda a, b: a.bmm(b), _low),
    (
        "torch.addmm",
        [(3, 5), (3, 4), (4, 5)],
        lambda c, a, b: torch.addmm(c, a, b, beta=0.375, alpha=-3.0),
        lambda c, a, b: c * 0.375 + _low(a, b) * -3.0,
    ),
    (
        "torch.addmm broadcast input",
        [(5,), (3, 4), (4, 5)],
        lambda c, a, b: torch.addmm(c, a, b),
        lambda c, a, b: c + _low(a, b),
    ),
    (
        "Tensor.addmm",
        [(3, 5), (3, 4), (4, 5)],
        lambda c, a, b: c.addmm(a, b, beta=2.5, alpha=0.1),
        lambda c, a, b: c * 2.5 + _low(a, b) * 0.1,
    ),
    (
        "torch.baddbmm",
        [(2, 3, 5), (2, 3, 4), (2, 4, 5)],
        lambda c, a, b: torch.baddbmm(c, a, b, beta=0.375, alpha=-3.0),
        lambda c, a, b: c * 0.375 + _low(a, b) * -3.0,
    ),
    (
        "torch.baddbmm broadcast input",
        [(5,), (2, 3, 4), (2, 4, 5)],
        lambda c, a, b: torch.baddbmm(c, a, b),
        lambda c, a, b: c + _low(a, b),
    ),
    (
        "Tensor.baddbmm",
        [(2, 3, 5), (2, 3, 4), (2, 4, 5)],
        lambda c, a, b: c.baddbmm(a, b, beta=2.5, alpha=0.1),
        lambda c, a, b: c * 2.5 + _low(a, b) * 0.1,
    ),
    ("F.linear", [(2, 3, 4), (5, 4), (5,)], lambda x, w, b: F.linear(x, w, b), lambda x, w, b: _low(x, w.t()) + b),
    ("F.linear no bias", [(3, 4), (5, 4)], lambda x, w: F.linear(x, w), lambda x, w: _low(x, w.t())),
    ("F.linear vector weight", [(3, 4), (4,)], lambda x, w: F.linear(x, w), lambda x, w: _low(x, w)),
]


@pytest.mark.parametrize("name, shapes, call, expected", ROUTED, ids=[r[0] for r in ROUTED])
def test_routed_calls_give_ozaki_bits(calls, name, shapes, call, expected):
    operands = _randn(*shapes)
    with emulate(accuracy=LOW):
        got = call(*operands)
    assert calls and all(accuracy == LOW for _, accuracy, _ in calls)
    want = expected(*operands)
    assert got.dtype == F64 and got.shape == call(*operands).shape
    assert torch.equal(got, want)
    assert not torch.equal(got, call(*operands)), "the emulated product should differ from torch's at 8 bits"


# The routed calls whose shapes alone show torch would accept them: no meta-tensor run of torch's reference.
CHECKED_ON_META = {"matmul vector-matrix", "matmul matrix-vector", "matmul dot", "matmul broadcast", "torch.bmm",
                   "Tensor.bmm", "torch.baddbmm", "torch.baddbmm broadcast input", "Tensor.baddbmm",
                   "F.linear vector weight"}


@pytest.mark.parametrize("name, shapes, call, expected", ROUTED, ids=[r[0] for r in ROUTED])
def test_plain_calls_skip_the_meta_check(monkeypatch, name, shapes, call, expected):
    # A model's layers are plain calls: the meta run costs more than a small product, so only
    # the rest pay it; the result is the same either way.
    metas = []
    real = ozaki.emulation._as_meta
    monkeypatch.setattr(ozaki.emulation, "_as_meta", lambda x: metas.append(x) or real(x))
    operands = _randn(*shapes)
    with emulate(accuracy=LOW):
        got = call(*operands)
    assert bool(metas) == (name in CHECKED_ON_META)
    assert torch.equal(got, expected(*operands))


def test_nn_linear_module_is_routed(calls):
    layer = torch.nn.Linear(4, 3, dtype=F64)
    (x,) = _randn((6, 4))
    with emulate(accuracy=LOW):
        got = layer(x)
    assert calls
    assert torch.equal(got, _low(x, layer.weight.detach().t()) + layer.bias.detach())


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.complex64], ids=str
)
def test_other_dtypes_reach_torch_untouched(calls, dtype):
    a, b, c = _randn((3, 4), (4, 5), (3, 5), dtype=dtype)
    with emulate(accuracy=LOW):
        got = [a @ b, torch.mm(a, b), torch.matmul(a, b)]
        if dtype.is_floating_point:
            got.append(torch.addmm(c, a, b))
    assert calls == []
    want = [a @ b, torch.mm(a, b), torch.matmul(a, b)] + ([torch.addmm(c, a, b)] if dtype.is_floating_point else [])
    assert all(torch.equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, v: torch.mv(a, v),
        lambda a, b, v: torch.dot(v, v),
        lambda a, b, v: torch.einsum("ik,kj->ij", a, b),
        lambda a, b, v: torch.tensordot(a, b, dims=1),
    ],
    ids=["mv", "dot", "einsum", "tensordot"],
)
def test_products_outside_the_routed_set_run_natively(calls, call):
    operands = _randn((4, 4), (4, 5), (4,))
    with emulate(accuracy=LOW):
        got = call(*operands)
    assert calls == [] and torch.equal(got, call(*operands))


def test_sparse_float64_reaches_torch_untouched(calls):
    a, b = _randn((3, 4), (4, 5))
    sparse = (a * (a > 0)).to_sparse()
    with emulate(accuracy=LOW):
        got = [torch.mm(sparse, b), sparse @ b, torch.sparse.mm(sparse, b)]
    assert calls == []
    assert all(torch.equal(g, torch.mm(sparse, b)) for g in got)


def test_mixed_dtypes_get_torchs_own_error(calls):
    a, b = _randn((3, 4), (4, 5))
    with emulate(), pytest.raises(RuntimeError):
        a @ b.float()
    assert calls == []


@pytest.mark.parametrize(
    "call",
    [
        lambda a, b, c: torch.mm(c, b),  # mm wants 2-D operands
        lambda a, b, c: torch.bmm(a, b),  # bmm wants 3-D operands
        lambda a, b, c: torch.matmul(b, b),  # contraction mismatch
        lambda a, b, c: torch.addmm(b, a, b),  # input does not broadcast to the result
    ],
)
def test_shape_errors_are_torchs(calls, call):
    operands = _randn((3, 4), (4, 5), (2, 3, 4))
    with pytest.raises(RuntimeError) as outside:
        call(*operands)
    with emulate(), pytest.raises(RuntimeError) as inside:
        call(*operands)
    assert type(inside.value) is type(outside.value)
    assert calls == []


def test_addmm_zero_scalars_drop_their_term_like_blas(calls):
    c, a, b = _randn((3, 5), (3, 4), (4, 5))
    nan_c = torch.full_like(c, float("nan"))
    nan_a = a.clone()
    nan_a[0, 0] = float("nan")
    with emulate(accuracy=LOW):
        beta0 = torch.addmm(nan_c, a, b, beta=0, alpha=2.0)
        alpha0 = torch.addmm(c[0], nan_a, b, beta=0.5, alpha=0)
        both0 = torch.addmm(nan_c, nan_a, b, beta=0, alpha=0)
    assert torch.equal(beta0, _low(a, b) * 2.0)
    assert torch.equal(alpha0, torch.addmm(c[0], nan_a, b, beta=0.5, alpha=0))
    assert torch.equal(both0, torch.zeros(3, 5, dtype=F64))


def test_addmm_on_exact_products_matches_torch_bit_for_bit():
    # Small integers: every product and sum is exact in float64, so torch's formula and the emulated one agree.
    g = torch.Generator().manual_seed(1)
    c, a, b = (torch.randint(-50, 50, s, generator=g).to(F64) for s in [(6, 7), (6, 9), (9, 7)])
    with emulate(accuracy="fp64"):
        got = torch.addmm(c, a, b, beta=-0.5, alpha=4.0)
    assert torch.equal(got, torch.addmm(c, a, b, beta=-0.5, alpha=4.0))


def test_out_argument_receives_the_emulated_product(calls):
    a, b, c = _randn((3, 4), (4, 5), (3, 5))
    out = torch.empty(3, 5, dtype=F64)
    resized = torch.empty(0, dtype=F64)
    with emulate(accuracy=LOW):
        returned = torch.mm(a, b, out=out)
        torch.addmm(c, a, b, alpha=0.5, out=resized)
        with pytest.raises(RuntimeError):
            torch.matmul(a, b, out=torch.empty(3, 5, dtype=torch.float32))
    assert returned is out and torch.equal(out, _low(a, b))
    assert torch.equal(resized, c + _low(a, b) * 0.5)


def test_arguments_it_cannot_route_raise():
    a, b = _randn((3, 4), (4, 5))
    with emulate(), pytest.raises(TypeError, match="cannot route mm"):
        torch.mm(a, b, out_dtype=F64)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"accuracy": "fast"}, "accuracy='fast'"),
        ({"accuracy": 0}, "accuracy=0"),
        ({"accuracy": True}, "accuracy=True"),
        ({"accuracy": 40.0}, "accuracy=40.0"),
        ({"engine": "tpu"}, "engine='tpu'"),
    ],
)
def test_bad_options_fail_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        emulate(**kwargs)


def test_nesting_innermost_wins_and_each_exit_restores(calls):
    a, b = _randn((3, 4), (4, 5))
    with emulate(accuracy=LOW, engine="auto"):
        a @ b
        with emulate(accuracy="exact", engine="reference"):
            a @ b
        a @ b
    outside = a @ b
    assert [(accuracy, engine) for _, accuracy, engine in calls] == [
        (LOW, "auto"),
        ("exact", "reference"),
        (LOW, "auto"),
    ]
    assert torch.equal(outside, torch.matmul(a, b))


def test_exception_inside_restores(calls):
    a, b = _randn((3, 4), (4, 5))
    with pytest.raises(KeyError):
        with emulate(accuracy=LOW):
            a @ b
            raise KeyError("boom")
    a @ b
    assert len(calls) == 1


def test_decorator_scopes_each_call_and_is_reentrant(calls):
    a, b = _randn((3, 4), (4, 5))

    @emulate(accuracy=LOW)
    def product(depth):
        inner = product(depth - 1) if depth else None
        return a @ b, inner

    (got, (inner, _)), plain = product(1), a @ b
    assert len(calls) == 2
    assert torch.equal(got, _low(a, b)) and torch.equal(inner, got)
    assert torch.equal(plain, torch.matmul(a, b))


def test_scope_does_not_reach_other_threads(calls):
    a, b = _randn((3, 4), (4, 5))
    inside, finish = threading.Event(), threading.Event()
    results = {}

    def scoped():
        with emulate(accuracy=LOW):
            inside.set()
            finish.wait(30)
            results["scoped"] = a @ b

    def plain():
        results["plain"] = a @ b

    worker = threading.Thread(target=scoped)
    worker.start()
    assert inside.wait(30)
    results["main"] = a @ b  # while the worker is inside its scope
    finish.set()
    worker.join(30)
    with emulate(accuracy=LOW):
        other = threading.Thread(target=plain)  # started from inside a scope: still unaffected
        other.start()
        other.join(30)
    assert [thread for thread, _, _ in calls] == [worker.ident]
    assert torch.equal(results["scoped"], _low(a, b))
    assert torch.equal(results["main"], torch.matmul(a, b)) and torch.equal(results["plain"], torch.matmul(a, b))


# gradcheck cases: the call and its operand shapes (1-D operands, broadcast batches and reductions included).
GRADCHECK = [
    ("mm", lambda a, b: torch.mm(a, b), [(3, 4), (4, 2)]),
    ("vector @ matrix", lambda a, b: a @ b, [(4,), (4, 2)]),
    ("matrix @ vector", lambda a, b: a @ b, [(3, 4), (4,)]),
    ("dot", lambda a, b: a @ b, [(4,), (4,)]),
    ("batched @ matrix", lambda a, b: a @ b, [(2, 3, 4), (4, 2)]),
    ("matrix @ batched", lambda a, b: a @ b, [(3, 4), (2, 4, 2)]),
    ("vector @ batched", lambda a, b: a @ b, [(4,), (2, 4, 2)]),
    ("both broadcast", lambda a, b: a @ b, [(2, 1, 3, 4), (3, 4, 2)]),
    ("bmm", lambda a, b: torch.bmm(a, b), [(2, 3, 4), (2, 4, 2)]),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [(2,), (3, 4), (4, 2)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [(2, 3, 4), (2, 4), (2,)]),
]


@pytest.mark.parametrize("name, call, shapes", GRADCHECK, ids=[g[0] for g in GRADCHECK])
def test_gradcheck_inside_scope(calls, name, call, shapes):
    operands = [x.requires_grad_() for x in _randn(*shapes, seed=3)]
    with emulate():
        out = call(*operands)
        forward_calls = len(calls)
        out.sum().backward()
        assert len(calls) > forward_calls, "the backward products should be emulated too"
        assert torch.autograd.gradcheck(call, operands)


def test_second_derivatives_are_emulated(calls):
    a, b = (x.requires_grad_() for x in _randn((3, 4), (4, 2), seed=4))
    with emulate():
        assert torch.autograd.gradgradcheck(lambda x, y: x @ y, (a, b))
    assert calls


@settings(max_examples=25, deadline=None)
@given(mutually_broadcastable_shapes(signature=np.matmul.signature, max_dims=3, min_side=1, max_side=3))
def test_matmul_values_and_grads_follow_torch(shapes):
    a, b = (x.requires_grad_() for x in _randn(*shapes.input_shapes, seed=5))
    want = a @ b
    want_grads = torch.autograd.grad(want.sum(), (a, b))
    with emulate():
        got = a @ b
        got_grads = torch.autograd.grad(got.sum(), (a, b))
    assert got.shape == want.shape == shapes.result_shape
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w)


def test_linear_model_trains_a_step_unchanged(calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(F64)
    twin, initial = copy.deepcopy(model), copy.deepcopy(model)
    x, y = _randn((16, 4), (16, 1), seed=6)

    def step(net):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        loss = F.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    native = step(twin)
    with emulate():
        emulated = step(model)
    # Two forward products; backward: both weights and the hidden activation, not the input (needs no grad).
    assert len(calls) == 5
    torch.testing.assert_close(emulated, native)
    for p, q, p0 in zip(model.parameters(), twin.parameters(), initial.parameters()):
        assert not torch.equal(p, p0), "the step should move every parameter"
        torch.testing.assert_close(p, q)


def test_func_transforms_inside_scope_give_the_eager_bits(calls):
    x, w, xs = _randn((3, 4), (4, 2), (5, 3, 4), seed=7)

    def loss(w):
        return ((x @ w) ** 2).sum()

    w_leaf = w.clone().requires_grad_()
    with emulate(accuracy=LOW):
        batched = vmap(lambda x: x @ w)(xs)
        gradient = grad(loss)(w)
        (want,) = torch.autograd.grad(loss(w_leaf), w_leaf)
        jacobian = jacrev(lambda w: F.linear(x, w))(w.T)
        want_jacobian = torch.autograd.functional.jacobian(lambda w: F.linear(x, w), w.T)
    assert calls and all(accuracy == LOW for _, accuracy, _ in calls)
    assert torch.equal(batched, _low(xs, w))
    assert torch.equal(gradient, want) and torch.equal(jacobian, want_jacobian)


def _doubled_product(x, w):
    # Doubling is exact: the compiled code around the product (fused by inductor) cannot change a bit.
    return (x @ w) * 2


def _doubled_product_in_scope(x, w):
    with emulate(accuracy=LOW):
        return _doubled_product(x, w)


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["inside the compiled function", "around the call"])
def test_compiled_code_is_routed_without_graph_breaks(calls, caplog, scope):
    x, w = _randn((6, 4), (4, 3), seed=8)
    if scope == "around the call":
        compiled = compiled_without_graph_breaks(_doubled_product, caplog)
        with emulate(accuracy=LOW):
            got = compiled(x, w)
    else:
        got = compiled_without_graph_breaks(_doubled_product_in_scope, caplog)(x, w)
    assert calls and all(accuracy == LOW for _, accuracy, _ in calls)
    assert torch.equal(got, _low(x, w) * 2)
    assert not torch.equal(got, _doubled_product(x, w)), "the emulated product should differ from torch's at 8 bits"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_routed_and_stay_on_device(calls):
    a, b, c = _randn((64, 32), (32, 48), (64, 48), device="cuda")
    with emulate(accuracy=LOW):
        got = [a @ b, torch.addmm(c, a, b, beta=0.5), F.linear(a, b.t())]
    assert all(g.is_cuda and g.dtype == F64 for g in got)
    assert torch.equal(got[0], _low(a, b))
    assert torch.equal(got[1], c * 0.5 + _low(a, b))
    assert torch.equal(got[2], _low(a, b))
