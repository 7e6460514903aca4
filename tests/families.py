"""Matrix pairs (A, B) the contract is tested on, one generator per family.

Every family is deterministic (its seed is derived from its name) and small enough for the
pure-Python exact reference.  ``STATISTICAL`` lists the families drawn at random, where
"in practice never worse than DGEMM" is a fair claim; the others are built by hand around
one rounding or range edge, where DGEMM's summation order can be lucky or unlucky and only
exact mode and the worst-case bound are meaningful.
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["EDGE", "FAMILIES", "PHIS", "STATISTICAL", "family", "finite_pairs", "phi_entries"]

PHIS = (0.0, 0.5, 1.0, 2.0, 4.0)

_DBL_MAX = float(np.finfo(np.float64).max)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def phi_entries(rng: np.random.Generator, shape, phi: float) -> np.ndarray:
    """(rand − 0.5) · exp(phi · randn): the test matrices of the Ozaki-scheme literature."""
    return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))


def _subnormals(rng: np.random.Generator, shape, mantissa_bits: int = 40) -> np.ndarray:
    """Random multiples of 2^-1074 below 2^(mantissa_bits − 1074): subnormal whenever ≠ 0."""
    return np.ldexp(rng.integers(-(2**mantissa_bits), 2**mantissa_bits, size=shape).astype(np.float64), -1074)


def _phi(phi: float) -> Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]:
    def make(rng):
        return phi_entries(rng, (5, 37), phi), phi_entries(rng, (37, 4), phi)

    return make


def _cancel_pairs(rng):
    # A = [X, −X, t], B = [Y; Y; s]: C = t·s exactly, while XY is 10^20 times larger.
    x, y = phi_entries(rng, (4, 12), 1.0), phi_entries(rng, (12, 3), 1.0)
    t, s = 1e-20 * phi_entries(rng, (4, 1), 1.0), phi_entries(rng, (1, 3), 1.0)
    return np.hstack([x, -x, t]), np.vstack([y, y, s])


def _cancel_nullspace(rng):
    # Columns of B span (numerically) the null space of A: C is the tiny residual of A·B.
    a = phi_entries(rng, (4, 12), 0.5)
    _, _, vt = np.linalg.svd(a)
    return a, np.ascontiguousarray(vt[4:7].T)


def _zero_rows_cols(rng):
    a, b = phi_entries(rng, (6, 10), 1.0), phi_entries(rng, (10, 5), 1.0)
    a[0] = 0.0
    a[3] = -0.0
    a[5, ::2] = -0.0
    a[5, 1::2] = 0.0
    b[:, 2] = 0.0
    b[::3, 4] = -0.0
    return a, b


def _zero_matrix(rng):
    return np.zeros((3, 4)), phi_entries(rng, (4, 2), 1.0)


def _subnormal(rng):
    a = np.vstack(
        [
            _subnormals(rng, (2, 8)),
            np.where(rng.random(8) < 0.5, _subnormals(rng, 8), 1e-300 * phi_entries(rng, 8, 0.5)),
            phi_entries(rng, (1, 8), 1.0),
            np.ldexp(rng.choice([-1.0, 0.0, 1.0], size=(1, 8)), -1074),
        ]
    )
    # Columns: order one (subnormal results), 2^100 (normal), 2^-30 (deep underflow),
    # and subnormal again (products far below 2^-1074).
    b = np.hstack(
        [
            phi_entries(rng, (8, 1), 0.5),
            np.ldexp(phi_entries(rng, (8, 1), 0.5), 100),
            np.ldexp(phi_entries(rng, (8, 1), 0.5), -30),
            _subnormals(rng, (8, 1)),
        ]
    )
    return a, b


def _huge_tiny_rows(rng):
    a = phi_entries(rng, (4, 10), 1.0) * np.array([[1e300], [1e-300], [1.0], [1e150]])
    b = phi_entries(rng, (10, 3), 1.0) * np.array([[1e-300, 1.0, 1e-10]])
    return a, b


def _wide_row_span(rng):
    # Every row mixes entries near 1e300 with entries near 1e-300.
    scale = np.where(rng.random((3, 8)) < 0.5, 1e300, 1e-300)
    return phi_entries(rng, (3, 8), 1.0) * scale, phi_entries(rng, (8, 3), 1.0)


def _span_cancel(rng):
    # [h, −h, t1, t2]·[y, y, b3, b4]: the 1e300 terms cancel exactly, the 1e-300 terms decide C.
    h, y = 1e300 * phi_entries(rng, (3, 1), 1.0), phi_entries(rng, (1, 2), 1.0)
    t, s = 1e-300 * phi_entries(rng, (3, 2), 1.0), phi_entries(rng, (2, 2), 1.0)
    return np.hstack([h, -h, t]), np.vstack([y, y, s])


def _integers(rng):
    return (
        rng.integers(-(2**20), 2**20, size=(6, 30)).astype(np.float64),
        rng.integers(-(2**20), 2**20, size=(30, 5)).astype(np.float64),
    )


def _k1(rng):
    return phi_entries(rng, (7, 1), 2.0), phi_entries(rng, (1, 6), 2.0)


def _long_k(rng):
    return phi_entries(rng, (2, 20000), 1.0), phi_entries(rng, (20000, 3), 1.0)


def _overflow(rng):
    big = 1e200 * (1.0 + rng.random((2, 3)))
    a = np.vstack([big[0], [1e308, 1e308, -1e308], -big[1]])
    cols = 1e200 * (1.0 + rng.random((3, 2)))
    # Column 0 positive, 2 negative: rows 0 and 2 overflow with a definite sign.  Row 1 times
    # column 1 is 1e308 exactly although its partial sums pass the range.
    b = np.hstack([cols[:, :1], np.ones((3, 1)), -cols[:, 1:]])
    return a, b


def _overflow_boundary(rng):
    # The largest float64 has an odd significand, so DBL_MAX + half an ulp (2^970) is a tie
    # that rounds up to 2^1024: overflow.  A 2^900 term below or above breaks the tie.
    a = np.array(
        [
            [_DBL_MAX, 2.0**970, 0.0],
            [_DBL_MAX, 2.0**970, -(2.0**900)],
            [_DBL_MAX, 2.0**970, 2.0**900],
            [-_DBL_MAX, -(2.0**970), 2.0**900],
            [_DBL_MAX, 2.0**969, 2.0**969],
            [_DBL_MAX, 2.0**969, 0.0],
        ]
    )
    return a, np.array([[1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])


def _underflow(rng):
    # Normal inputs whose products are subnormal or below half of 2^-1074, with ties:
    # 2^-1075 ties to +0, 3·2^-1075 ties up to 2^-1073, −2^-1075 gives −0.0, and a 2^-1100
    # term above the tie rounds up to 2^-1074.
    a = np.vstack(
        [
            1e-160 * phi_entries(rng, (3, 2), 0.5),
            [[2.0**-537, 0.0], [3 * 2.0**-537, 0.0], [-(2.0**-537), 0.0], [2.0**-537, 2.0**-600]],
        ]
    )
    b = np.hstack([np.array([[2.0**-538], [2.0**-500]]), 1e-160 * phi_entries(rng, (2, 2), 0.5)])
    return a, b


def _ties(rng):
    # Sums at exactly half an ulp of 1 (ties to even), and just above or below it.
    a = np.array(
        [
            [1.0, 2.0**-53, 0.0],
            [1.0 + 2.0**-52, 2.0**-53, 0.0],
            [1.0, 2.0**-53, 2.0**-200],
            [1.0, 2.0**-53, -(2.0**-200)],
            [-1.0, -(2.0**-53), 0.0],
            [2.0**-53, 2.0**-200, 1.0],
        ]
    )
    return a, np.ones((3, 2))


FAMILIES: dict[str, Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]] = {
    **{f"phi{phi:g}": _phi(phi) for phi in PHIS},
    "cancel_pairs": _cancel_pairs,
    "cancel_nullspace": _cancel_nullspace,
    "zero_rows_cols": _zero_rows_cols,
    "zero_matrix": _zero_matrix,
    "subnormal": _subnormal,
    "huge_tiny_rows": _huge_tiny_rows,
    "wide_row_span": _wide_row_span,
    "integers": _integers,
    "k1": _k1,
    "long_k": _long_k,
    "overflow": _overflow,
    "span_cancel": _span_cancel,
    "overflow_boundary": _overflow_boundary,
    "underflow": _underflow,
    "ties": _ties,
}

EDGE = ("span_cancel", "overflow_boundary", "underflow", "ties")
STATISTICAL = tuple(name for name in FAMILIES if name not in EDGE)


def family(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Fresh copies of the family's (A, B), float64 and C-contiguous."""
    a, b = FAMILIES[name](_rng(name))
    return np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64)


def finite_pairs(max_m: int = 3, max_k: int = 4, max_n: int = 3):
    """Hypothesis strategy: (A, B) of small random shape, entries anywhere in the finite float64
    range (subnormals, ±0.0 and the extremes included): the families nobody wrote down."""
    finite = st.floats(allow_nan=False, allow_infinity=False, width=64)

    def pair(shape):
        m, k, n = shape
        return st.tuples(hnp.arrays(np.float64, (m, k), elements=finite), hnp.arrays(np.float64, (k, n), elements=finite))

    return st.tuples(st.integers(1, max_m), st.integers(1, max_k), st.integers(1, max_n)).flatmap(pair)
