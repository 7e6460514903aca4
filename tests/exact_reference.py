"""The tests' view of the exact reference (:mod:`ozaki.exact`), and their bitwise assertion."""

from __future__ import annotations

import numpy as np
import pytest

from ozaki.exact import abs_product_dyadic, exact_dyadic, exact_matmul, round_dyadic, to_fraction

__all__ = [
    "abs_product_dyadic",
    "assert_same_bits",
    "exact_dyadic",
    "exact_matmul",
    "round_dyadic",
    "to_fraction",
]


def assert_same_bits(got, want: np.ndarray) -> None:
    """got is a float64 numpy array with exactly the bits of want (−0.0 ≠ +0.0; NaN payloads count too)."""
    assert isinstance(got, np.ndarray) and got.dtype == np.float64, (type(got), getattr(got, "dtype", None))
    assert got.shape == want.shape, (got.shape, want.shape)
    differ = got.view(np.uint64) != want.view(np.uint64)
    if differ.any():
        where = [tuple(int(i) for i in p) for p in np.argwhere(differ)[:5]]
        detail = ", ".join(f"{p}: got {got[p].hex()} want {want[p].hex()}" for p in where)
        pytest.fail(f"{int(differ.sum())} of {got.size} entries differ in their bits; first: {detail}")
