"""Complex products (ZGEMM): the real embedding [Ar Ai]·[[Br, Bi], [−Bi, Br]] = [Re C | Im C]
through the real pipeline, Karatsuba's three block products on the torch stages.

Each part of each entry is an entry of a real product of 2K terms, so the references are the
real ones on the embedding, built here with numpy: ``"exact"`` each part correctly rounded, the
``"fp64"`` and fast-mode bounds with 2K terms, the same bits on every engine and in a batch.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from exact_reference import abs_product_dyadic, assert_same_bits, exact_dyadic, exact_matmul, to_fraction
from families import FAMILIES, family, phi_entries
from hypothesis import given, settings
from hypothesis import strategies as st
from test_matmul_exact import ENGINES
from test_matmul_fp64 import _FP64_BOUNDS, _OVERFLOW, HALF_SUBNORMAL_ULP, U, _violations
from test_pipeline import _triton_launches, fused_path  # noqa: F401  (a fixture)

import ozaki
from ozaki import operands, pipeline, planning
from ozaki.products import complex_residue_products, residue_products
from ozaki.residues import balanced, reference_moduli


def _embedding(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The real embedding of a complex a (M, K) @ b (K, N), written with numpy."""
    return (np.hstack([a.real, a.imag]),
            np.block([[b.real, b.imag], [-b.imag, b.real]]))


def _parts(c: np.ndarray) -> np.ndarray:
    """[Re C | Im C] of a complex (M, N)."""
    return np.hstack([c.real, c.imag])


def _complex(real: np.ndarray, imag: np.ndarray) -> np.ndarray:
    """real + i·imag with both parts' bits (re + 1j·im would add 0·im to the real part)."""
    out = np.empty(real.shape, dtype=np.complex128)
    out.real, out.imag = real, imag
    return out


def _exact_complex(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each part of a @ b correctly rounded (the Fraction-exact reference on the embedding)."""
    c = exact_matmul(*_embedding(a, b))
    n = b.shape[1]
    return _complex(c[:, :n], c[:, n:])


def _complex_family(name: str) -> tuple[np.ndarray, np.ndarray]:
    """A complex pair from a real family: the family's pair as the real parts, the same pair
    with its rows turned as the imaginary parts (the family's magnitudes in both parts)."""
    a, b = family(name)
    return a + 1j * np.roll(a, 1, axis=0), b - 1j * np.roll(b, 1, axis=1)


def _cancelling(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    # Ar·Br ≈ Ai·Bi: Re C is the tiny difference of two large sums.
    ar, br = phi_entries(rng, (3, k), 1.0), phi_entries(rng, (k, 2), 1.0)
    ai = ar * (1 + 2.0**-40 * phi_entries(rng, (3, k), 0.5))
    return ar + 1j * ai, br + 1j * br


def _subnormal(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    tiny = lambda shape: np.ldexp(rng.integers(-(2**30), 2**30, size=shape).astype(float), -1074)  # noqa: E731
    return tiny((2, k)) + 1j * phi_entries(rng, (2, k), 1.0) * 1e-300, phi_entries(rng, (k, 3), 1.0) + 1j * tiny((k, 3))


def _mixed(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    # Real parts near 1e150, imaginary parts near 1e-150, and the other way round.
    return (1e150 * phi_entries(rng, (2, k), 2.0) + 1e-150j * phi_entries(rng, (2, k), 2.0),
            1e-150 * phi_entries(rng, (k, 2), 2.0) + 1e150j * phi_entries(rng, (k, 2), 2.0))


def _phi(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    return (phi_entries(rng, (3, k), 1.0) + 1j * phi_entries(rng, (3, k), 1.0),
            phi_entries(rng, (k, 2), 1.0) + 1j * phi_entries(rng, (k, 2), 1.0))


_BUILT = {"cancelling": _cancelling, "subnormal": _subnormal, "mixed": _mixed, "phi": _phi}
_CASES = [pytest.param(name, k, id=f"{name}-K{k}") for name in _BUILT for k in (1, 7, 300)]
_FAMILIES = [name for name in FAMILIES if name != "long_k"]


def _case(name: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    return _BUILT[name](np.random.default_rng(k), k)


def _assert_same_complex_bits(got, want: np.ndarray) -> None:
    assert isinstance(got, np.ndarray) and got.dtype == np.complex128, (type(got), getattr(got, "dtype", None))
    assert_same_bits(np.ascontiguousarray(got.real), np.ascontiguousarray(want.real))
    assert_same_bits(np.ascontiguousarray(got.imag), np.ascontiguousarray(want.imag))


# "exact": each part correctly rounded -----------------------------------------------------


@pytest.mark.parametrize("name, k", _CASES)
def test_exact_is_correctly_rounded_part_by_part(name, k):
    a, b = _case(name, k)
    _assert_same_complex_bits(ozaki.matmul(a, b, accuracy="exact"), _exact_complex(a, b))


@pytest.mark.parametrize("name", _FAMILIES)
def test_exact_on_the_families(name):
    a, b = _complex_family(name)
    _assert_same_complex_bits(ozaki.matmul(a, b, accuracy="exact"), _exact_complex(a, b))


def test_exact_long_dot_product():
    rng = np.random.default_rng(65536)
    a, b = _phi(rng, 65536)
    a, b = a[:1], b[:, :1]
    _assert_same_complex_bits(ozaki.matmul(a, b, accuracy="exact"), _exact_complex(a, b))


_finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.data())
def test_exact_on_arbitrary_finite_floats(m, k, n, data):
    parts = [np.array(data.draw(st.lists(_finite, min_size=size, max_size=size))).reshape(shape)
             for shape, size in [((m, k), m * k)] * 2 + [((k, n), k * n)] * 2]
    a, b = parts[0] + 1j * parts[1], parts[2] + 1j * parts[3]
    _assert_same_complex_bits(ozaki.matmul(a, b, accuracy="exact"), _exact_complex(a, b))


# "fp64" and a number of bits: the real bounds with 2K terms ------------------------------


@pytest.mark.parametrize("name, k", _CASES)
def test_fp64_within_the_documented_bound_of_each_part(name, k):
    a, b = _case(name, k)
    a_e, b_e = _embedding(a, b)
    exact, scale = exact_dyadic(a_e, b_e), abs_product_dyadic(a_e, b_e)
    plan = ozaki.explain(a, b)
    assert plan.k == 2 * k and plan.complex == planning.COMPLEX_BOTH
    guard = 0 if plan.guard is None else plan.guard
    formula = _FP64_BOUNDS["documented"]

    def bound(i, j, c):
        limit = formula(2 * k, c, to_fraction(*scale[i][j]), guard) + HALF_SUBNORMAL_ULP
        return math.inf if c + limit >= _OVERFLOW else limit

    bad = _violations(_parts(ozaki.matmul(a, b)), exact, bound)
    assert not bad, f"{len(bad)} parts outside the fp64 bound: " + "; ".join(bad[:5])


@pytest.mark.parametrize("bits", [4, 24])
@pytest.mark.parametrize("name, k", [("phi", 7), ("mixed", 300), ("cancelling", 7)])
def test_fast_mode_within_its_bound_of_each_part(name, k, bits):
    a, b = _case(name, k)
    a_e, b_e = _embedding(a, b)
    exact = exact_dyadic(a_e, b_e)
    eps = Fraction(1, 2**bits - 1)
    rows = [(max(map(Fraction, np.abs(row))), sum(map(Fraction, np.abs(row)))) for row in a_e]
    cols = [(max(map(Fraction, np.abs(col))), sum(map(Fraction, np.abs(col)))) for col in b_e.T]

    def bound(i, j, c):
        (max_a, sum_a), (max_b, sum_b) = rows[i], cols[j]
        return (eps * (max_a * sum_b + sum_a * max_b) + eps**2 * 2 * k * max_a * max_b + U * c
                + HALF_SUBNORMAL_ULP)

    bad = _violations(_parts(ozaki.matmul(a, b, accuracy=bits)), exact, bound)
    assert not bad, f"{len(bad)} parts outside the {bits}-bit bound: " + "; ".join(bad[:5])


# Engines, batches, the Karatsuba form ---------------------------------------------------------


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 20])
def test_every_engine_returns_the_same_bits(accuracy):
    a, b = _case("mixed", 5)
    got = {engine: ozaki.matmul(a, b, accuracy=accuracy, engine=engine) for engine in ENGINES
           if not isinstance(engine, type(pytest.param(0)))}
    for engine, c in got.items():
        _assert_same_complex_bits(c, got["reference"])
    torch_got = ozaki.matmul(torch.from_numpy(a), torch.from_numpy(b), accuracy=accuracy)
    _assert_same_complex_bits(torch_got.numpy(), got["reference"])


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "accuracy", "engine", "blocks"), [
    ("phi", "fp64", "int8", 3), ("phi", "exact", "int8", 3), ("subnormal", 20, "int8", 3),
    ("mixed", "fp64", "int8", 4), ("phi", "exact", "fp8", 4),
])  # fmt: skip
def test_the_fused_path_gives_the_torch_stages_bits(fused_path, monkeypatch, case, accuracy, engine,  # noqa: F811
                                                     blocks):
    # The fused kernels run Karatsuba's three block products where the planes store the
    # residues (int8), the embedding's four blocks otherwise (digit planes; exponent bands,
    # which "mixed" needs): the torch stages' bits either way.
    a, b = _case(case, 40)
    want = ozaki.matmul(a, b, accuracy=accuracy, engine="reference")
    launches = _triton_launches(monkeypatch)
    got = fused_path(a, b, accuracy=accuracy, engine=engine)
    _assert_same_complex_bits(got, want)
    if not torch.cuda.is_available():  # the fused path's plan is on the CPU tensors here
        assert ozaki.explain(a, b, accuracy=accuracy, engine=engine).complex_blocks == blocks
    assert launches["_sum_planes_kernel"] == (2 if blocks == 3 else 0)


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 20])
def test_a_batch_has_the_bits_of_each_product_alone(accuracy):
    pairs = [_case(name, 6) for name in ("phi", "mixed", "subnormal")]
    pairs = [(a[:2], b[:, :2]) for a, b in pairs]
    a, b = np.stack([a for a, _ in pairs]), np.stack([b for _, b in pairs])
    got = ozaki.matmul(a, b, accuracy=accuracy)
    for index, (a1, b1) in enumerate(pairs):
        _assert_same_complex_bits(got[index], ozaki.matmul(a1, b1, accuracy=accuracy))
    # numpy's broadcast and 1-D rules, as for real products.
    _assert_same_complex_bits(ozaki.matmul(a[0, 0], b, accuracy=accuracy),
                              np.stack([ozaki.matmul(a[0, 0], b1, accuracy=accuracy) for b1 in b]))


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 20])
@pytest.mark.parametrize("engine", ["reference", "fp8"])
def test_karatsuba_gives_the_embeddings_bits(monkeypatch, accuracy, engine):
    a, b = _case("cancelling", 6)
    formed = []
    monkeypatch.setattr(pipeline, "complex_residue_products",
                        lambda *args: formed.append(args) or complex_residue_products(*args))
    prepared = operands.prepare(a, b, accuracy, engine)
    (ta, tb), plan = prepared.operands, prepared.call.plan
    assert plan.complex_blocks == 3 and plan.products == 3 * plan.moduli.planes
    lines = prepared.call.lines[0]
    karatsuba, embedding = (pipeline._scaled_product(plan.moduli, ta, tb.mT, lines[2], lines[3], 0, complex)
                            for complex in (True, False))
    assert torch.equal(karatsuba, embedding)
    formed.clear()
    assert_same_bits(karatsuba.numpy(), _parts(ozaki.matmul(a, b, accuracy=accuracy, engine=engine)))
    assert formed  # the run takes the plan's three block products


def test_columns_of_different_shifts_take_the_embeddings_four_blocks():
    # A real product flagged complex whose columns j and N + j differ in magnitude: their shifts
    # differ, and the product is the plain one.
    a, b = _embedding(*_case("phi", 4))
    b[:, 2:] *= 2.0**40
    ta, tbt = torch.from_numpy(a), torch.from_numpy(b).mT
    bits = lambda x: torch.full(x.shape[:-1], 30, dtype=torch.int64)  # noqa: E731
    moduli = reference_moduli(a.shape[1], 2**80)
    got = pipeline._scaled_product(planning.Moduli(moduli, None, "reference"), ta, tbt, bits(ta), bits(tbt), 0, True)
    want = pipeline._scaled_product(planning.Moduli(moduli, None, "reference"), ta, tbt, bits(ta), bits(tbt), 0)
    assert torch.equal(got, want)


def test_complex_residue_products_are_the_embeddings_residues():
    rng = np.random.default_rng(3)
    moduli = (251, 256, 4194301)
    m = torch.tensor(moduli)[:, None, None]
    raw = lambda *shape: torch.from_numpy(rng.integers(-2**40, 2**40, size=(len(moduli), *shape)))  # noqa: E731
    a_re, a_im, b_re, b_im = (balanced(raw(*shape), m) for shape in [(3, 5), (3, 5), (5, 4), (5, 4)])
    ra = torch.cat([a_re, a_im], dim=-1)
    rb = torch.cat([torch.cat([b_re, b_im], dim=-1), torch.cat([balanced(-b_im, m), b_re], dim=-1)], dim=-2)
    assert torch.equal(complex_residue_products(ra, rb, moduli, None), residue_products(ra, rb, moduli, None))


# Promotion ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_complex64_is_promoted(kind):
    a, b = (x.astype(np.complex64) for x in _case("phi", 5))
    convert = torch.from_numpy if kind == "torch" else np.asarray
    got = ozaki.matmul(convert(a), convert(b), accuracy="exact")
    got = got.numpy() if kind == "torch" else got
    _assert_same_complex_bits(got, _exact_complex(a.astype(np.complex128), b.astype(np.complex128)))


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 20])
@pytest.mark.parametrize("complex_side", ["a", "b"])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_real_times_complex_is_two_real_products(accuracy, complex_side, kind):
    a, b = _case("mixed", 6)
    a, b = (a.real, b) if complex_side == "b" else (a, b.real)
    convert = torch.from_numpy if kind == "torch" else np.asarray
    got = ozaki.matmul(convert(a), convert(b), accuracy=accuracy)
    got = got.numpy() if kind == "torch" else got
    z = b if complex_side == "b" else a
    parts = [ozaki.matmul(*((a, np.ascontiguousarray(part)) if complex_side == "b" else (np.ascontiguousarray(part), b)),
                          accuracy=accuracy) for part in (z.real, z.imag)]
    _assert_same_complex_bits(got, _complex(*parts))
    plan = ozaki.explain(a, b, accuracy=accuracy)
    assert plan.complex == planning.COMPLEX_ONE and plan.batch == 2 and plan.products == 2 * plan.moduli.planes


# NaN and ±inf -----------------------------------------------------------------------------------

_SPECIAL = np.array([0.0, 1.0, -2.0, np.nan, np.inf, -np.inf])
_VALUES = np.array([complex(x, y) for x in _SPECIAL for y in _SPECIAL])


def _categories(x: np.ndarray) -> np.ndarray:
    return np.select([np.isnan(x), x == np.inf, x == -np.inf], [1, 2, 3], 0)


def _schoolbook(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's elementwise complex arithmetic, (ar·br − ai·bi) + i(ar·bi + ai·br) per term, summed."""
    with np.errstate(all="ignore"):
        return (a[..., :, :, None] * b[..., None, :, :]).sum(axis=-2)


def test_nonfinite_rule_on_every_placement():
    # Every entry of a 1×2 @ 2×1 product with each part from {0, 1, −2, NaN, inf, −inf}: 36^4
    # products.  The embedding's rule is numpy's (and torch's) schoolbook complex arithmetic.
    index = np.array(list(itertools.product(range(len(_VALUES)), repeat=4)))
    a, b = _VALUES[index[:, :2]].reshape(-1, 1, 2), _VALUES[index[:, 2:]].reshape(-1, 2, 1)
    ta, tb, form = operands.complex_embedding(torch.from_numpy(a), torch.from_numpy(b))
    out = operands.overlay_nonfinite(torch.zeros(len(a), 1, 2, dtype=torch.float64), operands.nonfinite_terms(ta, tb))
    got = operands.complex_result(out, form).numpy()
    for want in (_schoolbook(a, b), (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()):
        for part in ("real", "imag"):
            assert np.array_equal(_categories(getattr(got, part)), _categories(getattr(want, part))), part
    # numpy.matmul through BLAS differs only where it scales by alpha = 1 + 0i: a part NaN there
    # has a non-finite other part here.
    with np.errstate(all="ignore"):
        blas = a @ b
    for part, other in (("real", "imag"), ("imag", "real")):
        differ = _categories(getattr(got, part)) != _categories(getattr(blas, part))
        assert np.isnan(getattr(blas, part)[differ]).all()
        assert not np.isfinite(getattr(got, other)[differ]).any()


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_nonfinite_placement_end_to_end(kind):
    rng = np.random.default_rng(11)
    a, b = _VALUES[rng.integers(0, len(_VALUES), (300, 2, 3))], _VALUES[rng.integers(0, len(_VALUES), (300, 3, 2))]
    convert = torch.from_numpy if kind == "torch" else np.asarray
    got = ozaki.matmul(convert(a), convert(b), accuracy="exact")
    got = got.numpy() if kind == "torch" else got
    want = _schoolbook(a, b)
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        assert np.array_equal(_categories(g), _categories(w)), part
        finite = np.isfinite(w)
        assert np.array_equal(g[finite], w[finite])  # small integers: exact in float64 either way


def test_real_times_complex_nonfinite_is_each_parts_real_rule():
    a = np.array([[1.0, 0.0]])
    b = np.array([[complex(0.0, np.inf)], [1 + 2j]])
    got = ozaki.matmul(a, b, accuracy="exact")
    # Re: 1·0 + 0·1 = 0; Im: 1·inf + 0·2 = inf.  numpy promotes a to complex, and 0·inf from its
    # zero imaginary part makes the real part NaN there.
    assert got.tolist() == [[complex(0.0, np.inf)]]


# explain, emulate, autograd ---------------------------------------------------------------------------


def test_explain_reports_the_complex_product():
    a, b = _case("phi", 5)
    plan = ozaki.explain(a, b, accuracy="exact", engine="int8")
    assert (plan.m, plan.k, plan.n) == (3, 10, 4) and plan.path == "emulated"
    assert plan.complex == planning.COMPLEX_BOTH and plan.complex_blocks == 3
    assert plan.products == 3 * plan.moduli.planes and plan.moduli.engine == "int8"
    text = str(plan)
    assert "3x5x2 complex product" in text and "Karatsuba" in text and plan.error_bound in text
    assert f"{plan.products} GEMMs of 3x5x2 blocks" in text


def test_emulate_routes_complex_products():
    a, b = (torch.from_numpy(x) for x in _case("phi", 5))
    bias = torch.complex(torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    want = ozaki.matmul(a, b, accuracy="exact")
    with ozaki.emulate(accuracy="exact"):
        products = [a @ b, torch.mm(a, b), torch.matmul(a, b)]
        linear = torch.nn.functional.linear(a, b.mT, bias)
        added = torch.addmm(bias, a, b)
    for got in products:
        assert torch.equal(got, want)
    assert torch.equal(linear, want + bias) and torch.equal(added, bias + want)


def test_emulate_leaves_mixed_dtypes_to_torch():
    a, b = torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2, dtype=torch.complex128)
    with ozaki.emulate(), pytest.raises(RuntimeError):
        torch.mm(a, b)  # torch refuses the mix; the routing must not accept it


@pytest.mark.parametrize("real_side", [None, "a", "b"])
def test_gradients_match_native_complex_autograd(real_side):
    a, b = (torch.from_numpy(x) for x in _case("mixed", 4))
    a = a.real.contiguous() if real_side == "a" else a
    b = b.real.contiguous() if real_side == "b" else b
    a.requires_grad_(), b.requires_grad_()
    grad = torch.complex(*(torch.from_numpy(phi_entries(np.random.default_rng(1), (2, 2), 1.0)) for _ in range(2)))
    got = torch.autograd.grad(ozaki.matmul(a, b, accuracy="exact"), (a, b), grad)
    promote = lambda x: x.to(torch.complex128)  # noqa: E731
    want = torch.autograd.grad(promote(a) @ promote(b), (a, b), grad)
    for g, w, x in zip(got, want, (a, b)):
        assert g.dtype == x.dtype
        torch.testing.assert_close(g, w, rtol=1e-13, atol=0)
    # Each part of each gradient entry is one correctly rounded product: G·Bᴴ and Aᴴ·G.
    exact_a = ozaki.matmul(grad, promote(b.detach()).mH.resolve_conj(), accuracy="exact")
    exact_b = ozaki.matmul(promote(a.detach()).mH.resolve_conj(), grad, accuracy="exact")
    for g, e in zip(got, (exact_a, exact_b)):
        assert torch.equal(g, e if g.is_complex() else e.real)
