"""Residue encodings mod a composite m assembled by the CRT from encodings mod its parts.

For pairwise coprime m_1 ⋯ m_n = m, the idempotents e_j ≡ 1 (mod m_j), ≡ 0 (mod m/m_j)
split Z_m into the Z_{m_j}.  Given an encoding mod each m_j (weights w_j, limbs d_j(x) of
x mod m_j, planes (f, g, λ) with Σ λ (f·d_j)(g·e_j) ≡ (w_j·d_j)(w_j·e_j) mod m_j), the
encoding mod m takes

    limbs  d(x) = (d_1(x mod m_1), …, d_n(x mod m_n))      weights  W = (e_1·w_1, …, e_n·w_n) mod m
    planes each part's planes on its own limbs, coefficients e_j·λ mod m

Then W·d(x) ≡ x (mod m), and Σ_j e_j·Σ λ (f·d_j)(g·e_j) ≡ (W·d)(W·e) (mod m), because
e_j·e_k ≡ 0 (j ≠ k), e_j² ≡ e_j, and e_j times anything ≡ 0 mod m_j is ≡ 0 mod m.  The plane
values are the parts' own, so they stay in the digit set; products add up: P = Σ_j P_j.

This is a construction, not a proof of fewest products: the catalog records it as
"feasible" with the parts' own search records (search.catalog_writer.find_residue tries it when
the direct search finds nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import sympy

from search.engine import Candidate
from search.spec import Spec

__all__ = ["CrtFamily", "compose", "coprime_parts", "idempotents"]


def coprime_parts(modulus: int) -> tuple[int, ...]:
    """The prime-power parts of ``modulus``, ascending (one part: nothing to compose)."""
    return tuple(sorted(q**e for q, e in sympy.factorint(modulus).items()))


def idempotents(parts: Sequence[int]) -> list[int]:
    """e_j ≡ 1 (mod m_j) and ≡ 0 (mod m/m_j), in [0, m), for pairwise coprime parts."""
    m = math.prod(parts)
    return [(m // part) * pow(m // part, -1, part) % m for part in parts]


def _balanced(value: int, m: int) -> int:
    return (value + m // 2) % m - m // 2


@dataclass(frozen=True)
class CrtFamily:
    """What a composed encoding is: one encoding per coprime part, each found by its own
    search (recorded with it), joined by the CRT idempotents."""

    modulus: int
    parts: tuple[int, ...]
    products: int

    def as_dict(self) -> dict:
        return {"crt_parts": list(self.parts), "products": self.products}

    def describe(self) -> str:
        return (f"CRT composition mod {self.modulus} = {' * '.join(map(str, self.parts))}: one encoding per part "
                f"on its own limbs, coefficients times the CRT idempotents; {self.products} products")


def compose(spec: Spec, parts: Sequence[tuple[Spec, Candidate]]) -> Candidate:
    """The encoding mod spec.modulus from one (spec, candidate) per pairwise coprime part
    whose moduli multiply to it (module doc)."""
    moduli = [part.modulus for part, _ in parts]
    m = spec.modulus
    if math.prod(moduli) != m or any(sympy.gcd(x, y) != 1 for i, x in enumerate(moduli) for y in moduli[i + 1 :]):
        raise ValueError(f"parts {moduli} are not pairwise coprime factors of {m}")
    units = idempotents(moduli)

    def limbs(side: str) -> dict[int, tuple[int, ...]]:
        lo, hi = spec.side_range(side)
        out = {}
        for x in range(lo, hi + 1):
            vector = []
            for part, found in parts:
                part_lo, _ = part.side_range(side)  # a full residue system from part_lo on
                table = found.limbs_a if side == "a" else found.limbs_b
                vector.extend(table[part_lo + (x - part_lo) % part.modulus])
            out[x] = tuple(vector)
        return out

    weights_a, weights_b, planes = [], [], []
    offset_a = offset_b = 0
    total_a = sum(len(found.weights_a) for _, found in parts)
    total_b = sum(len(found.weights_b) for _, found in parts)
    for unit, (_, found) in zip(units, parts):
        weights_a.extend(_balanced(unit * w, m) for w in found.weights_a)
        weights_b.extend(_balanced(unit * w, m) for w in found.weights_b)
        for f, g, coefficient in found.planes:
            row_a = [0] * total_a
            row_b = [0] * total_b
            row_a[offset_a : offset_a + len(f)] = f
            row_b[offset_b : offset_b + len(g)] = g
            planes.append((tuple(row_a), tuple(row_b), _balanced(unit * coefficient, m)))
        offset_a += len(found.weights_a)
        offset_b += len(found.weights_b)
    return Candidate(tuple(weights_a), tuple(weights_b), tuple(planes), limbs("a"), limbs("b"))
