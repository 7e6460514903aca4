"""Exact products of float64 matrices, by a route that shares nothing with the emulation.

The library scales rows to integers, takes residues and reconstructs by CRT.  This
reference instead splits every float exactly into an integer numerator and a power-of-two
denominator (``float.as_integer_ratio``), brings each row of A and each column of B to one
common exponent, sums each dot product exactly as Python integers, and rounds once.  The
rounding is CPython's own ``int / int`` true division (and ``float(int)``), which is
correctly rounded to nearest with ties to even, subnormals included, and raises
``OverflowError`` past the float64 range: that becomes ±inf by the sign of the exact value.

Zero signs: an exact zero sum has no sign, and this reference returns +0.0 for it (what
IEEE 754 round-to-nearest gives for x + (−x), and what numpy's BLAS returns since its
accumulators start at +0.0).  A non-zero exact value that rounds to zero keeps its sign
(IEEE 754 §6.3): a tiny negative product becomes −0.0.

Pure Python and slow: small shapes only (K = 20000 is fine for a few output elements).  The demo,
the benchmark and the tests measure errors against it.
"""

from __future__ import annotations

import operator
from fractions import Fraction

import numpy as np

from kernels.float64 import round_dyadic

__all__ = ["abs_product_dyadic", "exact_dyadic", "exact_matmul", "round_dyadic", "to_fraction"]


def _split(x: float) -> tuple[int, int]:
    """(n, e) with x == n · 2**e exactly."""
    numerator, denominator = x.as_integer_ratio()
    return numerator, 1 - denominator.bit_length()


def _on_common_exponent(values: list[float]) -> tuple[list[int], int]:
    """Integers n_k and one exponent e with values[k] == n_k · 2**e exactly."""
    parts = [_split(v) for v in values]
    exponent = min((e for n, e in parts if n), default=0)
    return [n << (e - exponent) for n, e in parts], exponent


def _as_finite_matrix(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype != np.float64:
        raise TypeError(f"exact reference takes 2-D float64 matrices; {name} is {x.ndim}-D {x.dtype}")
    if not np.isfinite(x).all():
        raise ValueError(f"exact reference takes finite entries only; {name} holds NaN or inf")
    return x


def exact_dyadic(a, b) -> list[list[tuple[int, int]]]:
    """The exact product A·B as ``[[(s, e), ...], ...]`` with entry (i, j) = s · 2**e."""
    a, b = _as_finite_matrix(a, "a"), _as_finite_matrix(b, "b")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: a {a.shape}, b {b.shape}")
    rows = [_on_common_exponent(r) for r in a.tolist()]
    cols = [_on_common_exponent(c) for c in b.T.tolist()]
    return [[(sum(map(operator.mul, ra, cb)), ea + eb) for cb, eb in cols] for ra, ea in rows]


def abs_product_dyadic(a, b) -> list[list[tuple[int, int]]]:
    """The exact |A|·|B|, the scale in DGEMM's componentwise error bound."""
    return exact_dyadic(np.abs(np.asarray(a)), np.abs(np.asarray(b)))


def to_fraction(s: int, e: int) -> Fraction:
    """s · 2**e as an exact rational."""
    return Fraction(s << e) if e >= 0 else Fraction(s, 1 << -e)


def exact_matmul(a, b) -> np.ndarray:
    """A·B for 2-D float64 matrices, each entry correctly rounded once (see module doc)."""
    a, b = _as_finite_matrix(a, "a"), _as_finite_matrix(b, "b")
    rounded = [[round_dyadic(s, e) for s, e in row] for row in exact_dyadic(a, b)]
    return np.array(rounded, dtype=np.float64).reshape(a.shape[0], b.shape[1])
