"""The orchestrator's promises: bits depend only on the quantized inputs.

Not on the moduli, not on the other rows in the batch, not on the thread that computes them.
"""

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import ozaki
from ozaki import pipeline
from ozaki.crt import garner, round_to_float64
from ozaki.products import direct_products
from ozaki.residues import reference_moduli, residues
from ozaki.scaling import exact_bits, fixed_bits, fp64_bits, scale_rows


def _spread(rng, shape, phi):
    return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))


def _with_moduli(a: torch.Tensor, b: torch.Tensor, moduli) -> torch.Tensor:
    bt = b.T
    sa, sb = scale_rows(a, fp64_bits(a)), scale_rows(bt, fp64_bits(bt))
    c = direct_products(residues(sa, moduli), residues(sb, moduli).transpose(-1, -2), moduli)
    return round_to_float64(garner(c, moduli), moduli, -(sa.shift[:, None] + sb.shift[None, :]))


@pytest.mark.parametrize("phi", [0.0, 1.0, 4.0])
def test_bits_do_not_depend_on_the_moduli(phi):
    rng = np.random.default_rng(7)
    a, b = torch.from_numpy(_spread(rng, (9, 40), phi)), torch.from_numpy(_spread(rng, (40, 6), phi))
    p, q = int(fp64_bits(a).max()), int(fp64_bits(b.T).max())
    need = 2 * 40 << (p + q)
    large = reference_moduli(40, need)
    small = reference_moduli(2**16, need)  # long K forces smaller primes, so more of them
    assert not set(small) & set(large)
    assert torch.equal(_with_moduli(a, b, large), _with_moduli(a, b, small))


@pytest.mark.parametrize("k", [1, 100, 20000, 2**40])
def test_reference_moduli_reach_the_capacity_and_stay_exact(k):
    plan = pipeline.choose_moduli("reference", k, 2**300, torch.device("cpu"))
    assert plan.engine == "reference" and plan.encodings is None
    assert math.prod(plan.moduli) > 2**300
    assert all(min(k, 2**16) * (m // 2) ** 2 < 2**53 for m in plan.moduli)


def test_direct_products_refuse_an_inexact_float64_gemm():
    m = 2**28 + 1  # ⌊m/2⌋² = 2^54: not even one term fits below 2^53
    r = torch.ones((1, 2, 3), dtype=torch.int64)
    with pytest.raises(ValueError, match="2\\^53"):
        direct_products(r, r.transpose(-1, -2), [m])


def test_long_k_is_chunked_exactly():
    """K beyond one exact float64 chunk: the chunks are reduced mod m and still exact."""
    m = 2**24 + 3  # chunk = (2^53 − 1) // (2^23 + 1)² = 127 terms
    rng = np.random.default_rng(2)
    k = 1000
    ra = torch.from_numpy(rng.integers(-(m // 2), m - m // 2, (1, 3, k)))
    rb = torch.from_numpy(rng.integers(-(m // 2), m - m // 2, (1, k, 2)))
    got = direct_products(ra, rb, [m])[0]
    want = [[sum(int(x) * int(y) for x, y in zip(ra[0, i], rb[0, :, j])) % m for j in range(2)] for i in range(3)]
    assert got.tolist() == want


@pytest.mark.parametrize("accuracy", ["fp64", "exact", 24])
def test_batch_invariance(accuracy):
    """mm(A[:k], B) equals mm(A, B)[:k] bit for bit: a row's bits depend on that row alone."""
    rng = np.random.default_rng(3)
    a, b = _spread(rng, (33, 64), 2.0), _spread(rng, (64, 17), 2.0)
    a[5] *= 1e-200  # a tiny row among ordinary ones must not change the others' bits
    full = ozaki.matmul(a, b, accuracy=accuracy)
    for rows in (slice(0, 1), slice(0, 7), slice(5, 6), slice(20, 33)):
        part = ozaki.matmul(a[rows], b, accuracy=accuracy)
        assert np.array_equal(part.view(np.uint64), full[rows].view(np.uint64))


def test_threads_agree():
    rng = np.random.default_rng(11)
    pairs = [(_spread(rng, (16, 48), 1.0), _spread(rng, (48, 12), 1.0)) for _ in range(4)]
    serial = [ozaki.matmul(a, b) for a, b in pairs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda ab: ozaki.matmul(*ab), pairs * 2))
    for i, result in enumerate(threaded):
        assert np.array_equal(result.view(np.uint64), serial[i % 4].view(np.uint64))


@pytest.mark.parametrize("bits_for", [exact_bits, fp64_bits, lambda x: fixed_bits(x, 20)])
def test_scaled_integers_respect_their_bits(bits_for):
    rng = np.random.default_rng(5)
    x = torch.from_numpy(_spread(rng, (12, 30), 3.0))
    x[2] = 0.0
    bits = bits_for(x)
    s = scale_rows(x, bits)
    assert int(s.exponent.min()) >= 0
    for i in range(x.shape[0]):
        bound = 1 << int(s.bits[i])
        for mantissa, exponent in zip(s.mantissa[i].tolist(), s.exponent[i].tolist()):
            assert abs(mantissa << exponent) <= bound


def test_exact_bits_are_lossless():
    rng = np.random.default_rng(9)
    x = torch.from_numpy(_spread(rng, (6, 25), 4.0))
    s = scale_rows(x, exact_bits(x))
    assert torch.equal(s.mantissa.to(torch.float64) * 2.0 ** s.exponent.to(torch.float64),
                       torch.ldexp(x, s.shift[:, None].expand_as(x)))
