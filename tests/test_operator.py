"""ozaki::matmul, the torch operator behind ozaki.matmul on tensors: its gradients are the emulated products of
matmul's gradient formula (broadcast batches folded into one contraction), torch.func's transforms and
torch.compile give the eager bits."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from torch._dynamo.utils import counters
from torch.func import grad, jacrev, vmap

import ozaki
from ozaki import operator

# Few enough bits that an emulated product visibly differs from torch's own and from a sum of separately rounded
# products, so a test can tell the emulated gradient formula from any other.
LOW = 8
F64 = torch.float64


def _randn(*shapes, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=F64).to(dtype) for s in shapes]


def _low(x, y, accuracy=LOW):
    return ozaki.matmul(x, y, accuracy=accuracy)


def test_a_direct_call_keeps_the_gradient():
    x, w = _randn((3, 4), (4, 2))
    w.requires_grad_()
    out = ozaki.matmul(x, w)
    assert out.grad_fn is not None
    (out**2).sum().backward()
    assert w.grad is not None and w.grad.shape == w.shape


# name, operand shapes, the gradients (of a and b, for the upstream gradient g) as products written out: a
# broadcast batch is one longer contraction, never a sum of products.
GRADIENTS = [
    ("matrix", [(3, 4), (4, 5)], lambda a, b, g, acc: (_low(g, b.T, acc), _low(a.T, g, acc))),
    ("vector @ matrix", [(4,), (4, 5)], lambda a, b, g, acc: (_low(g, b.T, acc), _low(a[:, None], g[None], acc))),
    ("matrix @ vector", [(3, 4), (4,)], lambda a, b, g, acc: (_low(g[:, None], b[None], acc), _low(a.T, g, acc))),
    (
        "batched @ matrix",
        [(2, 3, 4), (4, 5)],
        lambda a, b, g, acc: (_low(g, b.T, acc), _low(a.reshape(6, 4).T, g.reshape(6, 5), acc)),
    ),
    (
        "both broadcast",
        [(2, 1, 3, 4), (3, 4, 5)],
        lambda a, b, g, acc: (
            _low(g.permute(0, 2, 1, 3).reshape(2, 1, 3, 15), b.mT.reshape(15, 4), acc),
            _low(a[:, 0].permute(2, 0, 1).reshape(4, 6), g.permute(1, 0, 2, 3).reshape(3, 6, 5), acc),
        ),
    ),
]


@pytest.mark.parametrize("accuracy", [LOW, "exact"])
@pytest.mark.parametrize("name, shapes, formula", GRADIENTS, ids=[c[0] for c in GRADIENTS])
def test_gradients_are_the_emulated_products_of_the_formula(name, shapes, formula, accuracy):
    a, b = (x.requires_grad_() for x in _randn(*shapes, seed=1))
    out = ozaki.matmul(a, b, accuracy=accuracy)
    (upstream,) = _randn(out.shape, seed=2)
    got = torch.autograd.grad(out, (a, b), upstream)
    want = formula(a.detach(), b.detach(), upstream, accuracy)
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("name, shapes, formula", GRADIENTS, ids=[c[0] for c in GRADIENTS])
def test_gradients_are_close_to_native_autograd(name, shapes, formula):
    a, b = (x.requires_grad_() for x in _randn(*shapes, seed=1))
    got = torch.autograd.grad((ozaki.matmul(a, b) ** 2).sum(), (a, b))
    want = torch.autograd.grad(((a @ b) ** 2).sum(), (a, b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_lower_precision_operands_get_gradients_of_their_dtype():
    a, b = _randn((3, 4), (4, 2), dtype=torch.float32)
    a.requires_grad_()
    (ga,) = torch.autograd.grad(ozaki.matmul(a, b).sum(), a)
    assert ga.dtype == torch.float32
    torch.testing.assert_close(ga, torch.ones(3, 2) @ b.T)


# Operand shapes for gradcheck, the cases above made smaller: every element costs a few products.
GRADCHECK = [[(2, 3), (3, 2)], [(3,), (3, 2)], [(2, 3), (3,)], [(2, 2, 3), (3, 2)], [(2, 1, 2, 3), (2, 3, 2)]]


@pytest.mark.parametrize("shapes", GRADCHECK, ids=[c[0] for c in GRADIENTS])
def test_gradcheck_and_gradgradcheck(shapes):
    # "exact" is correctly rounded: finite differences see the exact product's derivative.
    operands = [x.requires_grad_() for x in _randn(*shapes, seed=3)]

    def exact(a, b):
        return ozaki.matmul(a, b, accuracy="exact")

    assert torch.autograd.gradcheck(exact, operands)
    assert torch.autograd.gradgradcheck(exact, operands)


def test_the_registered_operator_passes_torchs_checks():
    a, b = _randn((2, 3, 4), (4, 5))
    # Schema, the autograd registration, the fake implementation, and an AOT trace with dynamic shapes.
    results = torch.library.opcheck(torch.ops.ozaki.matmul.default, (a, b, "exact", "auto"))
    assert set(results.values()) == {"SUCCESS"}, results
    assert torch.equal(torch.ops.ozaki.matmul(a, b, str(LOW), "auto"), _low(a, b))


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 1, 53, 2098])
def test_accuracy_survives_the_string_schema(accuracy):
    assert operator._decoded(operator._encoded(accuracy)) == accuracy


# name, in_dims, operand shapes (the vmapped dimension of size 5 included).
VMAPS = [
    ("left", (0, None), [(5, 3, 4), (4, 2)]),
    ("right", (None, 0), [(3, 4), (5, 4, 2)]),
    ("both, inner dimensions", (1, 2), [(3, 5, 4), (4, 2, 5)]),
    ("left against a batched right", (0, None), [(5, 3, 4), (2, 4, 2)]),
    ("batched left against a matrix", (0, None), [(5, 2, 3, 4), (4, 2)]),
    ("vector left", (0, None), [(5, 4), (4, 2)]),
    ("vector right", (None, 0), [(3, 4), (5, 4)]),
]


@pytest.mark.parametrize("name, in_dims, shapes", VMAPS, ids=[v[0] for v in VMAPS])
def test_vmap_gives_the_bits_of_each_product(name, in_dims, shapes):
    a, b = _randn(*shapes, seed=4)
    got = vmap(_low, in_dims)(a, b)

    def pick(x, dim, i):
        return x if dim is None else x.select(dim, i)

    want = torch.stack([_low(pick(a, in_dims[0], i), pick(b, in_dims[1], i)) for i in range(5)])
    assert torch.equal(got, want)


def test_func_grad_and_jacrev_give_the_autograd_bits():
    x, w = _randn((3, 4), (4, 2), seed=5)

    def loss(w):
        return (_low(x, w) ** 2).sum()

    w_leaf = w.clone().requires_grad_()
    (want,) = torch.autograd.grad(loss(w_leaf), w_leaf)
    assert torch.equal(grad(loss)(w), want)
    jacobian = torch.autograd.functional.jacobian(lambda w: _low(x, w), w)
    assert torch.equal(jacrev(lambda w: _low(x, w))(w), jacobian)
    # Per-sample gradients: a vmapped backward, products of the operator's vmap rule.
    xs = _randn((6, 3, 4), seed=6)[0]
    per_sample = vmap(grad(lambda w, x: (_low(x, w) ** 2).sum()), (None, 0))(w, xs)
    assert torch.equal(per_sample, torch.stack([grad(lambda w: (_low(x, w) ** 2).sum())(w) for x in xs]))


def compiled_without_graph_breaks(fn, caplog):
    """torch.compile(fn, fullgraph=True) with the default backend, and a check that dynamo counted no graph break
    and that none of the logs or warnings of the compilation speaks of one."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, fullgraph=True)

    def run(*args):
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            out = compiled(*args)
        said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
        assert not counters["graph_break"] and not [s for s in said if "graph break" in s.lower()], said
        return out

    return run


@pytest.mark.slow
def test_compiled_function_and_its_gradient_give_the_eager_bits(caplog):
    x, w = _randn((6, 4), (4, 3), seed=7)
    w.requires_grad_()

    def scaled(x, w):
        # Doubling is exact: the compiled code around the product (fused by inductor) cannot change a bit.
        return _low(x, w) * 2

    got = compiled_without_graph_breaks(scaled, caplog)(x, w)
    assert torch.equal(got, scaled(x, w))
    assert torch.equal(torch.autograd.grad(got.sum(), w)[0], torch.autograd.grad(scaled(x, w).sum(), w)[0])


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("engine", ["int8", "fp4"])
def test_on_the_device_gradients_vmap_and_compile_give_the_eager_bits(engine, caplog):
    x, w = (t.cuda() for t in _randn((6, 5, 64), (64, 48), seed=11))
    w.requires_grad_()

    def product(x, w):
        return ozaki.matmul(x, w, engine=engine)

    eager = product(x, w)
    assert eager.is_cuda and torch.equal(eager, torch.stack([product(row, w) for row in x]))
    # The batch folded into the contraction: one product (grad)ᵀ·x over the 30 rows, transposed.
    (grad_w,) = torch.autograd.grad((eager * 2).sum(), w)
    twos = torch.full((48, 30), 2.0, dtype=F64, device="cuda")
    assert grad_w.is_cuda and torch.equal(grad_w, ozaki.matmul(twos, x.flatten(0, 1), engine=engine).T)
    assert torch.equal(vmap(product, in_dims=(0, None))(x, w), eager)
    assert torch.equal(compiled_without_graph_breaks(product, caplog)(x, w), eager)
