"""Exponent bands: products wider than every plan, as several products that each fit one.

A plan's moduli serve integers of up to K·(2^p − 1)(2^q − 1) (``ozaki.residues.crt_capacity``).
Rows whose exact width goes past that (entries spanning hundreds of binades, or K past a
plan's k_max) are cut into bands of bits of the scaled integers:

    A' = Σ_i 2^(w_a·i) A'_i,   A'_i = sign(A')·⌊|A'| / 2^(w_a·i)⌋ mod 2^w_a,   |A'_i| ≤ 2^w_a − 1

and likewise B' with w_b, so that

    A'·B' = Σ_{i,j} 2^(w_a·i + w_b·j) · A'_i·B'_j

where each A'_i·B'_j is exact through one plan of capacity above 2·K·(2^w_a − 1)(2^w_b − 1).
The band products are added modulo moduli wide enough for the whole A'·B' (ozaki.pipeline),
and the sum is rounded once: the bits are those of the single product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .residues import crt_capacity
from .scaling import Scaled

__all__ = ["Split", "band", "split"]

# |mantissa| ≤ 2^53, so masks of this many bits keep every bit and still fit int64.
_MASK_BITS = 62


@dataclass(frozen=True)
class Split:
    """Bands of ``width_a`` bits of A' (``count_a`` of them) and of ``width_b`` bits of B'."""

    width_a: int
    count_a: int
    width_b: int
    count_b: int
    products: int  # plane GEMMs for all band pairs

    @property
    def pairs(self) -> int:
        return self.count_a * self.count_b


def _widest_fitting(k: int, width_a: int, q: int, capacity: int) -> int:
    """The largest w ≤ q with crt_capacity(k, width_a, w) < capacity (0 if none)."""
    low, high = 0, q  # low fits (crt_capacity is 0 at w = 0); nothing above high does
    while low < high:
        middle = (low + high + 1) // 2
        if crt_capacity(k, width_a, middle) < capacity:
            low = middle
        else:
            high = middle - 1
    return low


def split(k: int, p: int, q: int, plans: Sequence[tuple[int, int]]) -> Split:
    """The bands with the fewest plane GEMMs for K terms of p- and q-bit integers, each band
    pair through the cheapest plan that serves it; ``plans`` holds the (capacity, plane
    GEMMs) of each plan of the engine.

    The optimum is among these candidates: for each plan and each band width of A', the
    widest bands of B' the plan serves.  (Any split that pairs bands through a plan uses at
    least as many bands of B' as that candidate, which the cheapest fitting plan serves at
    no more GEMMs per pair.)
    """

    def products_for(capacity: int) -> int | None:
        return min((products for top, products in plans if top > capacity), default=None)

    if products_for(crt_capacity(k, 1, 1)) is None:
        raise ValueError(
            f"K = {k} is too long for every plan: even 1-bit bands need a capacity above {crt_capacity(k, 1, 1)}; "
            "use engine='reference'"
        )
    best = None
    widths_a = sorted({-(-p // count) for count in range(1, p + 1)})
    for capacity, _ in plans:
        for width_a in widths_a:
            widest_b = _widest_fitting(k, width_a, q, capacity)
            if widest_b == 0:
                break  # wider bands of A' fit even less
            count_a, count_b = -(-p // width_a), -(-q // widest_b)
            width_b = -(-q // count_b)  # as even as the count allows: a cheaper plan may serve it
            products = count_a * count_b * products_for(crt_capacity(k, width_a, width_b))
            if best is None or (products, count_a * count_b) < (best.products, best.pairs):
                best = Split(width_a, count_a, width_b, count_b, products)
    assert best is not None  # 1-bit bands fit some plan
    return best


def band(s: Scaled, width: int, index: int) -> Scaled:
    """Band ``index`` of the integers in ``s``: bits [w·i, w·i + w) of each |integer|, with
    the integer's sign, divided by 2^(w·i) (see the module docstring).

    An integer is |mantissa|·2^e: its bits in the band are those of |mantissa| from position
    max(w·i − e, 0) on, at most w·i + w − max(e, w·i) of them, which land at 2^max(e − w·i, 0).
    """
    low, high = width * index, width * (index + 1)
    magnitude = s.mantissa.abs()
    drop = (low - s.exponent).clamp(0, 63)  # |mantissa| < 2^63: a shift by 63 leaves 0
    count = (high - torch.clamp(s.exponent, min=low)).clamp(0, _MASK_BITS)
    kept = (magnitude >> drop) & ((torch.ones_like(count) << count) - 1)
    return Scaled(
        mantissa=torch.where(s.mantissa < 0, -kept, kept),
        exponent=(s.exponent - low).clamp(min=0),
        shift=s.shift - low,
        bits=(s.bits - low).clamp(0, width),
    )
