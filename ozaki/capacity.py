"""The capacity the moduli of every engine must reach: pure integer arithmetic, without
torch, shared by the file formats (a plan's check), the pipeline's choice of moduli and
the search engine's plans.
"""

from __future__ import annotations

__all__ = ["crt_capacity", "has_capacity"]


def crt_capacity(k: int, p: int, q: int) -> int:
    """2·K·(2^p − 1)(2^q − 1), the number the product of the moduli must exceed for a
    product of K terms of p- and q-bit integers: every entry of A'·B' is an integer with
    |Y| ≤ K·(2^p − 1)(2^q − 1) (|a'| ≤ 2^p − 1, |b'| ≤ 2^q − 1: see ozaki.scaling), which
    ∏m > 2·|Y| puts strictly inside (−∏m/2, ∏m/2), where the CRT decodes exactly
    (ozaki.crt).  It is the ``ozaki-plan/1`` capacity with k_max = K, input_bits = p = q."""
    for name, value in (("K", k), ("p", p), ("q", q)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return 2 * k * ((1 << p) - 1) * ((1 << q) - 1)


def has_capacity(product: int, capacity: int) -> bool:
    """Whether moduli with this product serve ``capacity`` (from :func:`crt_capacity`): the
    comparison every engine's choice of moduli makes, strict because ±∏m/2 are not decoded."""
    return product > capacity
