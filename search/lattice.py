"""Integer lattices spanned by a few plane-pair matrices: which u v^T they contain.

With the planes fixed, the identity sum_t lam_t vec(r_t s_t^T) == vec(u v^T) (mod m)
asks whether vec(u v^T) lies in the lattice spanned by the vec(r_t s_t^T) (plus m Z^n).
An echelon basis answers that for thousands of weight pairs at once by back
substitution, so the search only hands CP-SAT the pairs that can succeed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["echelon", "members"]


def echelon(generators, modulus: int | None = None) -> list[tuple[int, list[int]]]:
    """A basis of the lattice the integer vectors ``generators`` span (with ``modulus``:
    plus modulus * Z^n), as (pivot row, vector) pairs: each vector is zero above its pivot
    row and the pivots increase, so membership is back substitution."""
    n = len(generators[0])
    pool = [list(g) for g in generators if any(g)]
    if modulus is not None:
        pool += [[modulus if k == i else 0 for k in range(n)] for i in range(n)]
    basis = []
    for i in range(n):
        active = [c for c in pool if c[i] != 0]
        rest = [c for c in pool if c[i] == 0]
        # Euclid on column i: reduce every vector by the one with the smallest entry until
        # one vector is left with the gcd there; the remainders (zero at i) stay in play.
        while len(active) > 1:
            active.sort(key=lambda c: abs(c[i]))
            pivot = active[0]
            keep = [pivot]
            for c in active[1:]:
                q = c[i] // pivot[i]
                reduced = [a - q * b for a, b in zip(c, pivot)]
                (keep if reduced[i] != 0 else rest).append(reduced)
            active = keep
        if active:
            pivot = active[0] if active[0][i] > 0 else [-a for a in active[0]]
            basis.append((i, pivot))
        pool = [c for c in rest if any(c)]
    return basis


def members(basis, vectors: np.ndarray) -> np.ndarray:
    """Mask over the rows of ``vectors``: those in the lattice with this echelon basis."""
    alive = np.arange(len(vectors))
    w = np.asarray(vectors, dtype=np.int64)
    pivots = dict(basis)
    for i in range(w.shape[1]):
        if i in pivots:
            p = np.array(pivots[i], dtype=np.int64)
            keep = w[:, i] % p[i] == 0
            alive, w = alive[keep], w[keep]
            w = w - (w[:, i] // p[i])[:, None] * p[None, :]
        else:
            keep = w[:, i] == 0
            alive, w = alive[keep], w[keep]
    out = np.zeros(len(vectors), dtype=bool)
    out[alive] = True
    return out
