"""The fused encode kernel writes exactly the planes of the staged torch path:
``scale_rows`` -> ``residues`` -> ``products.encode_planes`` (the plain reference)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.encode import encode_planes
from ozaki import products
from ozaki.digits import digit_set
from ozaki.formats import encoding_from_dict
from ozaki.residues import residues
from ozaki.scaling import exact_bits, fixed_bits, scale_rows

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _one_limb(m: int, digits: str, coefficients=(1,), largest=False):
    """Each input's limb is the smallest (or largest) digit congruent to it; extra
    coefficients split the one product into several planes (they sum to 1 mod m)."""
    lo = -(m // 2)
    allowed = sorted(digit_set(digits), key=lambda d: (-abs(d) if largest else abs(d), d))
    side = {"min": lo, "max": lo + m - 1, "weights": [1],
            "limbs": [[next(d for d in allowed if (d - x) % m == 0)] for x in range(lo, lo + m)]}
    return _encoding(f"res{m}-{digits}-{len(coefficients)}", m, digits, side, side,
                     [{"a": [1], "b": [1], "coefficient": c} for c in coefficients])


def _two_limb(m: int, n: int = 13):
    """x = d0 + n·d1 with fp4 digits d0 ≡ x (mod n) and small d1; four planes, λ = (1, n, n, n²)."""
    allowed = sorted(digit_set("fp4"), key=lambda d: (abs(d), d))
    lo = -(m // 2)
    limbs = []
    for x in range(lo, lo + m):
        d0 = next(d for d in allowed if (d - x) % n == 0)
        limbs.append([d0, (x - d0) // n])
    side = {"min": lo, "max": lo + m - 1, "weights": [1, n], "limbs": limbs}
    planes = [{"a": [int(i == 0), int(i == 1)], "b": [int(j == 0), int(j == 1)], "coefficient": n ** (i + j)}
              for i in range(2) for j in range(2)]
    return _encoding(f"res{m}-fp4-4", m, "fp4", side, side, planes)


def _encoding(name, m, digits, a, b, planes):
    return encoding_from_dict({"format": "ozaki-encoding/1", "name": name, "digits": digits, "modulus": m,
                               "a": a, "b": b, "planes": planes, "products": len(planes)})


FP4 = [_one_limb(7, "fp4"), _one_limb(8, "fp4", (3, -2)), _one_limb(13, "fp4", (3, -1, 12)), _two_limb(89)]
INT8 = [_one_limb(256, "int8"), _one_limb(251, "int8"), _one_limb(255, "int8")]
FP8 = [_one_limb(17, "fp8", (9, -8), largest=True), _one_limb(13, "fp8")]  # values to 448: int16 planes


def staged(x: torch.Tensor, bits: torch.Tensor, encodings, side: str) -> torch.Tensor:
    r = residues(scale_rows(x, bits), [e.modulus for e in encodings])
    return torch.cat([products.encode_planes(r[i], e, side) for i, e in enumerate(encodings)])


def rows(rng: np.random.Generator, shape, kind: str) -> torch.Tensor:
    if kind == "phi":
        x = (rng.random(shape) - 0.5) * np.exp(2.0 * rng.standard_normal(shape))
    elif kind == "subnormal":
        x = rng.integers(-(2**40), 2**40, shape) * 2.0**-1074
    elif kind == "wide":  # huge and tiny entries in one row, zeros, signed zeros
        x = rng.standard_normal(shape) * 2.0 ** rng.integers(-1000, 1000, shape)
        x[..., ::5] = 0.0
        x[..., 1::7] = -0.0
    else:  # ties: |x| in [64, 128) has top 7, so 7 bits keep the integer part of k + 0.5
        x = rng.choice([-1.0, 1.0], shape) * (rng.integers(64, 127, shape) + 0.5)
    return torch.tensor(x, dtype=torch.float64, device=DEVICE)


BITS = {"exact": exact_bits, "fixed7": lambda x: fixed_bits(x, 7),
        "fixed60": lambda x: fixed_bits(x, 60)}


@pytest.mark.parametrize("kind", ["phi", "subnormal", "wide", "ties"])
@pytest.mark.parametrize("bits", sorted(BITS))
@pytest.mark.parametrize("encodings", [FP4, INT8, FP8], ids=["fp4", "int8", "fp8"])
@pytest.mark.parametrize("side", ["a", "b"])
def test_fused_encode_equals_staged_path(kind, bits, encodings, side):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{bits}-{side}-{len(encodings)}".encode()))
    x = rows(rng, (2, 9, 150), kind)  # batch 2, 9 rows, K 150: ragged against the tiles
    b = BITS[bits](x)
    got = encode_planes(x, b, encodings, side)
    want = staged(x, b, encodings, side)
    assert got.dtype == (torch.int16 if encodings is FP8 else torch.int8)
    assert torch.equal(got.long(), want)


@settings(max_examples=20, deadline=None)
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=40),
       bits=st.integers(0, 200))
def test_fused_encode_any_finite_row(values, bits):
    x = torch.tensor([values], dtype=torch.float64, device=DEVICE)
    b = torch.tensor([bits], dtype=torch.int64, device=DEVICE)
    assert torch.equal(encode_planes(x, b, FP4, "a").long(), staged(x, b, FP4, "a"))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda x, b: encode_planes(x.float(), b, FP4, "a"), TypeError, "float64"),
        (lambda x, b: encode_planes(x, b[..., :1], FP4, "a"), ValueError, "one entry per row"),
        (lambda x, b: encode_planes(x, b - 5, FP4, "a"), ValueError, "non-negative"),
        (lambda x, b: encode_planes(x * float("inf"), b, FP4, "a"), ValueError, "inf or nan"),
        (lambda x, b: encode_planes(x, b, FP4, "c"), ValueError, "side"),
        (lambda x, b: encode_planes(x, b, [], "a"), ValueError, "at least one encoding"),
        (lambda x, b: encode_planes(x[0, 0], b, FP4, "a"), ValueError, r"\[..., rows, K\]"),
    ],
)
def test_bad_encode_calls_raise(call, error, message):
    x = torch.ones((1, 2, 3), dtype=torch.float64, device=DEVICE)
    b = torch.full((1, 2), 4, dtype=torch.int64, device=DEVICE)
    with pytest.raises(error, match=message):
        call(x, b)


def test_product_encodings_are_refused():
    side = {"min": -2, "max": 1, "weights": [1], "limbs": [[x] for x in range(-2, 2)]}
    product = encoding_from_dict({"format": "ozaki-encoding/1", "name": "int2xint2-int4-1", "digits": "int4",
                                  "modulus": None, "a": side, "b": side,
                                  "planes": [{"a": [1], "b": [1], "coefficient": 1}], "products": 1})
    x = torch.ones((2, 3), dtype=torch.float64, device=DEVICE)
    with pytest.raises(ValueError, match="no residue encoding"):
        encode_planes(x, torch.full((2,), 3, dtype=torch.int64, device=DEVICE), [product], "a")
