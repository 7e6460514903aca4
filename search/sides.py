"""One side of an encoding, searched exhaustively: which plane-row sets and weights cover
every input.

For a set R of plane rows that spans the limbs, the limb vectors whose plane values all
lie in the digit set S are D(R) = {d : r.d in S for r in R}: pick a basis B of R, run over
the digit vectors p in S^n, keep d = B^-1 p when it is integral and its other plane values
lie in S.  A weight vector u covers the side when {u.d : d in D(R)} reaches every input
(every residue).  Adding a row can only shrink D(R), so the row sets are searched
breadth-first and a set is extended only with the weights that still cover.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import sympy

from search.progress import every
from search.spec import Family, Spec

__all__ = [
    "SideCandidate",
    "canonical",
    "choose_limbs",
    "limb_vectors",
    "menu",
    "peaks",
    "side_candidates",
    "targets",
    "unit_orbits",
]

_CHUNK = 4096
# Cells (weight vectors x limb vectors or residues) one block of a vectorised pass holds:
# bounded, so that memory stays flat for a large digit set (int8's two limbs have 65536
# limb vectors) and a deadline is checked between blocks.
_BLOCK_CELLS = 2**22


def _block_rows(cells_per_row: int) -> int:
    return max(1, min(_CHUNK, _BLOCK_CELLS // max(1, cells_per_row)))


def menu(limbs: int, bound: int) -> list[tuple[int, ...]]:
    """Plane rows with entries in [-bound, bound] whose last nonzero entry is positive: a
    row and its negative store negated values, absorbed by the coefficient."""
    rows = []
    for row in itertools.product(range(-bound, bound + 1), repeat=limbs):
        nonzero = [c for c in row if c]
        if nonzero and nonzero[-1] > 0:
            rows.append(row)
    return rows


def canonical(x: int, spec: Spec) -> tuple[int, int]:
    """(representative, sign) with x == sign * representative (mod m).

    With a symmetric digit set, D(R) = -D(R), so d(-x) = -d(x) and only representatives
    x >= 0 (residues r <= m - r) need a limb vector of their own."""
    if spec.modulus is not None:
        r = x % spec.modulus
        if spec.symmetric and spec.modulus - r < r:
            return spec.modulus - r, -1
        return r, 1
    if spec.symmetric and x < 0:
        return -x, -1
    return x, 1


def targets(spec: Spec, side: str) -> list[int]:
    """The representatives that need a limb vector on ``side``, sorted."""
    lo, hi = spec.side_range(side)
    return sorted({canonical(x, spec)[0] for x in range(lo, hi + 1)})


def limb_vectors(rows, digits: frozenset[int]) -> np.ndarray:
    """D(rows) as an int64 array (one limb vector a row); empty when rows do not span."""
    rows = [tuple(r) for r in rows]
    n = len(rows[0])
    basis = []
    for r in rows:
        if sympy.Matrix(basis + [r]).rank() == len(basis) + 1:
            basis.append(r)
        if len(basis) == n:
            break
    if len(basis) < n:
        return np.zeros((0, n), dtype=np.int64)
    matrix = sympy.Matrix(basis)
    det = int(matrix.det())
    adjugate = np.array(matrix.adjugate().tolist(), dtype=np.int64)
    values = np.array(sorted(digits), dtype=np.int64)
    grid = np.stack(np.meshgrid(*([values] * n), indexing="ij"), axis=-1).reshape(-1, n)
    scaled = grid @ adjugate.T  # det * d
    keep = (scaled % det == 0).all(axis=1)
    d = scaled[keep] // det
    member = np.isin(d @ np.array(rows, dtype=np.int64).T, values).all(axis=1)
    return d[member]


def _weight_grid(limbs: int, bound: int, unit_first: bool) -> np.ndarray:
    """Non-decreasing weight vectors in [0, bound]^limbs (limbs can be permuted).

    ``unit_first``: the first weight is 1 and the rest non-decreasing.  For a residue
    encoding whose A side has a weight that is a unit mod m (always so for prime powers:
    some weight must be prime to p to reach residue 1), scaling u by that unit's inverse
    and v by the unit maps any encoding to one of this form."""
    if unit_first:
        rest = itertools.combinations_with_replacement(range(bound + 1), limbs - 1)
        combos = [(1, *c) for c in rest]
    else:
        combos = list(itertools.combinations_with_replacement(range(bound + 1), limbs))
    return np.array(combos, dtype=np.int64).reshape(-1, limbs)


def _residue_keys(w: np.ndarray, m: int) -> np.ndarray:
    return ((np.asarray(w, dtype=np.int64) % m) * m ** np.arange(w.shape[1], dtype=np.int64)).sum(axis=1)


def _units(m: int) -> np.ndarray:
    return np.array([c for c in range(1, m) if math.gcd(c, m) == 1] or [1], dtype=np.int64)


def _unit_canonical(w: np.ndarray, m: int) -> np.ndarray:
    """Per row of ``w``: one representative of its orbit under the units of Z_m (any unit
    multiple covers and solves as well).  A row with a unit entry is scaled so that its
    first unit entry is 1 (the position is orbit-invariant, the scale unique); a row
    without one (possible only for composite m) takes the multiple with the smallest
    residue key."""
    w = np.asarray(w, dtype=np.int64) % m
    units = _units(m)
    inverse = np.zeros(m, dtype=np.int64)
    inverse[units] = [pow(int(c), -1, m) for c in units]
    is_unit = inverse[w] != 0
    has = is_unit.any(axis=1)
    first = is_unit.argmax(axis=1)
    out = w.copy()
    rows = np.flatnonzero(has)
    out[rows] = (w[rows] * inverse[w[rows, first[rows]]][:, None]) % m
    rest = np.flatnonzero(~has)
    chunk = max(1, 2**22 // (len(units) * max(1, w.shape[1])))
    for start in range(0, len(rest), chunk):
        idx = rest[start : start + chunk]
        images = (units[:, None, None] * w[idx][None]) % m  # U x N x n
        keys = (images * m ** np.arange(w.shape[1], dtype=np.int64)).sum(axis=2)
        out[idx] = images[keys.argmin(axis=0), np.arange(len(idx))]
    return out


def _covering(spec: Spec, side: str, d: np.ndarray, weights: np.ndarray, deadline: float = math.inf,
              tick=None) -> np.ndarray:
    """Mask over ``weights``: those for which u.D reaches every representative.

    With a modulus, covering means reaching all of Z_m (the representatives, and with a
    symmetric digit set D = -D the rest), and the reached set of c u is c times that of u:
    for a unit c both cover or neither.  One weight vector per unit orbit is tested, which
    turns the m^2 / 2 weight pairs of a two-limb side into about m^2 / phi(m) tests.
    ``TimeoutError`` once ``time.monotonic()`` passes ``deadline``; ``tick`` (search.progress.every)
    hears how far a long check has got."""
    first, orbit = unit_orbits(weights, spec.modulus)
    return _covering_each(spec, side, d, weights[first], deadline, tick)[orbit]


def unit_orbits(weights: np.ndarray, modulus: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(first, orbit): the index of one weight vector per orbit of the units of Z_m, and
    per weight vector the position of its orbit in ``first``, so that a property every
    unit multiple shares is computed on ``weights[first]`` and read back through ``orbit``.
    Without a modulus every vector is its own orbit."""
    if modulus is None or not len(weights):
        every = np.arange(len(weights))
        return every, every
    _, first, orbit = np.unique(_residue_keys(_unit_canonical(weights, modulus), modulus), return_index=True,
                                return_inverse=True)
    return first, orbit.ravel()


def _covering_each(spec: Spec, side: str, d: np.ndarray, weights: np.ndarray, deadline: float, tick) -> np.ndarray:
    """:func:`_covering` testing every weight vector, a block at a time."""
    need = np.array(targets(spec, side), dtype=np.int64)
    if len(d) < len(need) or len(weights) == 0:
        return np.zeros(len(weights), dtype=bool)
    lo, width = int(need[0]), int(need[-1] - need[0] + 1)
    # Products go through BLAS in float32 and are exact while |u.d| < 2^24 (checked);
    # int32 keeps the passes over the block cheap.
    if np.abs(d).max(initial=0) * np.abs(weights).max(initial=0) * d.shape[1] >= 2**24:
        raise ValueError("weights and limbs too large for the float32 covering check; lower the weight bound")
    d_float = d.astype(np.float32)
    out = np.zeros(len(weights), dtype=bool)
    step = _block_rows(max(len(d), width))
    for start in range(0, len(weights), step):
        if time.monotonic() > deadline:
            raise TimeoutError(f"side {side}: time limit reached while checking which weight vectors cover")
        if tick:
            tick(lambda: f"side {side}: {start} of {len(weights)} weight vectors checked against {len(d)} limb vectors")
        block = weights[start : start + step]
        x = (block.astype(np.float32) @ d_float.T).astype(np.int32)  # one row per weight vector
        if spec.modulus is not None:
            x %= spec.modulus
        x -= lo
        flat = (x + np.arange(len(block), dtype=np.int32)[:, None] * width)[(x >= 0) & (x < width)]
        hits = np.bincount(flat, minlength=len(block) * width).reshape(len(block), width)
        out[start : start + len(block)] = (hits[:, need - lo] > 0).all(axis=1)
    return out


@dataclass(frozen=True)
class SideCandidate:
    """A row set (indices into the side's menu) and the weight vectors that cover with it."""

    rows: tuple[int, ...]
    weights: np.ndarray


def side_candidates(spec: Spec, side: str, family: Family, progress=None,
                    deadline: float = math.inf) -> tuple[list, list[SideCandidate]]:
    """(menu, candidates): every spanning row set of at most ``family.products`` rows with
    the weight vectors that cover ``side``; breadth-first, extending only covering sets.
    ``TimeoutError`` once ``time.monotonic()`` passes ``deadline``: a partial list would
    make the search's proofs wrong, so none is returned."""
    limbs = getattr(family, f"limbs_{side}")
    rows = menu(limbs, getattr(family, f"coefficient_bound_{side}"))
    bound = getattr(family, f"weight_bound_{side}")
    if spec.modulus is not None:
        bound = min(bound, spec.modulus // 2)
    grid = _weight_grid(limbs, bound, unit_first=spec.modulus is not None and side == "a")
    digits = spec.digit_values
    tick = every(progress)
    found: list[SideCandidate] = []
    level = []
    for n, combo in enumerate(itertools.combinations(range(len(rows)), limbs)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"side {side}: time limit reached while enumerating covering row sets")
        tick(lambda: f"side {side}: {n} of {math.comb(len(rows), limbs)} row sets of {limbs} rows checked, "
                     f"{len(level)} cover")
        d = limb_vectors([rows[r] for r in combo], digits)
        if len(d):
            mask = _covering(spec, side, d, grid, deadline, tick)
            if mask.any():
                level.append(SideCandidate(combo, grid[mask]))
    while level:
        found.extend(level)
        if progress:
            progress(f"side {side}: {len(level)} covering row sets of {len(level[0].rows)} rows")
        if len(level[0].rows) >= family.products:
            break
        nxt = []
        for n, cand in enumerate(level):
            for r in range(cand.rows[-1] + 1, len(rows)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"side {side}: time limit reached while enumerating covering row sets")
                tick(lambda: f"side {side}: {n} of {len(level)} covering row sets of {len(cand.rows)} rows extended, "
                             f"{len(nxt)} cover with one more")
                combo = cand.rows + (r,)
                d = limb_vectors([rows[i] for i in combo], digits)
                mask = _covering(spec, side, d, cand.weights, deadline, tick)
                if mask.any():
                    nxt.append(SideCandidate(combo, cand.weights[mask]))
        level = nxt
    return rows, found


def choose_limbs(spec: Spec, side: str, weights, rows) -> dict[int, tuple[int, ...]]:
    """A limb vector for every input of ``side``: weights . d == x (mod m) and every plane
    value in the digit set; per input the vector with the smallest largest plane value
    (then smallest limbs) is taken, so plane magnitudes, and with them the accumulation
    window, come out as good as this choice allows.  ``ValueError`` if one is missing."""
    d = limb_vectors(rows, spec.digit_values)
    w = np.asarray(weights, dtype=np.int64)
    x = d @ w
    if spec.modulus is not None:
        x %= spec.modulus
    values = d @ np.array(rows, dtype=np.int64).T
    order = np.lexsort((np.abs(d).sum(axis=1), np.abs(values).max(axis=1), x))
    best: dict[int, tuple[int, ...]] = {}
    for i in order:
        best.setdefault(int(x[i]), tuple(int(v) for v in d[i]))
    lo, hi = spec.side_range(side)
    out = {}
    for value in range(lo, hi + 1):
        rep, sign = canonical(value, spec)
        key = rep if spec.modulus is None else rep % spec.modulus
        if key not in best:
            raise ValueError(f"no limb vector for {side}={value} with weights {list(weights)} and rows {rows}")
        out[value] = tuple(sign * v for v in best[key])
    return out


def peaks(spec: Spec, side: str, rows, weights: np.ndarray, deadline: float = math.inf) -> np.ndarray:
    """Per weight vector: the largest |plane value| any input needs when each input takes
    its limb vector with the smallest largest plane value (what :func:`choose_limbs`
    picks).  The product of the two sides' peaks bounds every plane product, so it ranks
    encodings by accumulation window.  ``TimeoutError`` once ``time.monotonic()`` passes
    ``deadline``."""
    d = limb_vectors(rows, spec.digit_values)
    cost = np.abs(d @ np.array(rows, dtype=np.int64).T).max(axis=1)
    need = np.array(targets(spec, side), dtype=np.int64)
    lo, width = int(need[0]), int(need[-1] - need[0] + 1)
    out = np.zeros(len(weights), dtype=np.int64)
    step = _block_rows(max(len(d), width))
    for start in range(0, len(weights), step):
        if time.monotonic() > deadline:
            raise TimeoutError(f"side {side}: time limit reached while ranking weight vectors by plane-value peaks")
        block = weights[start : start + step]
        x = block @ d.T
        if spec.modulus is not None:
            x %= spec.modulus
        x -= lo
        row, col = np.nonzero((x >= 0) & (x < width))
        best = np.full((len(block), width), np.iinfo(np.int64).max)
        np.minimum.at(best, (row, x[row, col]), cost[col])
        out[start : start + len(block)] = best[:, need - lo].max(axis=1)
    return out
