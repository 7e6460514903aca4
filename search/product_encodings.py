"""Product encodings found per pair of row sets by linear algebra: exact products, and
residue encodings (the identity mod m; see the "Residues" section below).

Plane coordinates.  Whenever an encoding's A plane rows contain a unimodular basis, the
change of limb coordinates d -> (values of those planes) turns the basis into the
identity rows: the limbs *are* stored digits, every other plane row is an integer vector
c, and the weights are integers again.  The family searched here is exactly that: limbs
in S^n (the identity rows), extra plane rows with entries in [-c, c], weights in [-W, W].
In these coordinates one side's covering question is cheap: D(I) = S^n for every weight
vector, and each extra row only filters it.

Symmetry (signed permutations of one side's limbs).  S = -S and the identity rows are
permuted among themselves, so the group acts on (extra row set, weights) and leaves
coverage unchanged; it acts on the two sides independently.  Every solution is therefore
mapped to one whose A and B row sets are both orbit representatives (the smallest
image), with weights taking every sign and order.  That is the only symmetry breaking.

Join.  With the A rows F, B rows G and the planes (a support E in F x G) fixed, the
identity sum_t lam_t r_t s_t^T = u v^T is linear in lam: u v^T must lie in the span of
the rank-one terms, i.e. u^T C_k v = 0 for a basis C_k of their orthogonal complement,
and in their integer lattice.  For each weight vector of the smaller side the other
side's weights are the kernel of a K x n matrix: one direction (looked up among that
side's covering weights) or, rarely, a plane scanned directly.  Sizes run from the lower
bound upwards, so the first size with a solution is the fewest products in the family.

Lower bound for every encoding (any limbs, weights, coefficients).  Distinct inputs need
distinct plane-value vectors, and those are fixed by r = rank of the side's rows values
in S, so r >= minimal_limbs(count).  For phi with phi(v) = 0 the vectors
(lam_t phi(s_t))_t lie in ker R^T (dim P - r_A) and span r_B - 1 dimensions, so
P >= r_A + r_B - 1.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

import numpy as np
import sympy
from ortools.sat.python import cp_model

from search.engine import Candidate, Result
from search.identity import identity_text
from search.lattice import echelon, members
from search.model import solve
from search.sides import (
    _covering,
    _residue_keys,
    _unit_canonical,
    choose_limbs,
    limb_vectors,
    peaks,
    targets,
)
from search.spec import ProductFamily, Spec, minimal_limbs

__all__ = [
    "SideSets",
    "build_lambda_model",
    "extra_rows",
    "lower_bound",
    "nullspace",
    "row_permutations",
    "search_product",
    "side_sets",
    "signed_permutations",
    "supports",
]


def lower_bound(spec: Spec) -> int:
    """Fewest products any exact encoding of ``spec`` can have (rank argument, module doc)."""
    if spec.modulus is not None:
        raise ValueError("the rank bound holds for exact products only")
    if any(spec.side_range(s) == (0, 0) for s in "ab"):
        return 1
    ra, rb = (minimal_limbs(spec.count(s), spec.digits) for s in "ab")
    return max(1, ra + rb - 1)


def _closed_under_division(digits: frozenset[int]) -> bool:
    """k*x in S implies x in S: then a row k*r is never better than r (same plane up to
    the coefficient, weaker constraint), so non-primitive rows can be left out."""
    top = max(abs(s) for s in digits)
    return all(s // k in digits for s in digits for k in range(2, top + 1) if s % k == 0)


def extra_rows(limbs: int, bound: int, digits: frozenset[int]) -> list[tuple[int, ...]]:
    """Plane rows besides the identity: entries in [-bound, bound], last nonzero entry
    positive (a row and its negative store negated values), not an identity row, and
    primitive when the digit set makes that no loss (:func:`_closed_under_division`)."""
    primitive_only = _closed_under_division(digits)
    rows = []
    for row in itertools.product(range(-bound, bound + 1), repeat=limbs):
        nonzero = [c for c in row if c]
        if not nonzero or nonzero[-1] < 0 or len(nonzero) == 1 and nonzero[0] == 1:
            continue
        if primitive_only and math.gcd(*row) != 1:
            continue
        rows.append(row)
    return rows


def signed_permutations(n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The group of signed permutations of n limbs as (perm, signs): x -> (s_i x_perm[i])."""
    return [(p, s) for p in itertools.permutations(range(n)) for s in itertools.product((1, -1), repeat=n)]


def _act(g, x):
    perm, signs = g
    return tuple(signs[i] * x[perm[i]] for i in range(len(perm)))


def _normal(row):
    """The sign-normalised row (last nonzero entry positive)."""
    last = next(c for c in reversed(row) if c)
    return row if last > 0 else tuple(-c for c in row)


def _act_weights(g, w: np.ndarray) -> np.ndarray:
    perm, signs = g
    return w[:, list(perm)] * np.array(signs, dtype=np.int64)


@dataclass(frozen=True)
class SideSets:
    """One side: every orbit representative of extra-row sets that covers, with the
    identity rows first in ``rows`` and every covering weight vector (all signs, orders)."""

    rows: tuple[tuple[tuple[int, ...], ...], ...]
    weights: tuple[np.ndarray, ...]
    bound: int
    modulus: int | None = None  # residues: weights are unit-canonical residues (see _unit_canonical)

    def keys(self, w: np.ndarray) -> np.ndarray:
        return _keys(w, self.bound) if self.modulus is None else _residue_keys(w, self.modulus)

    def representatives(self, n: int) -> np.ndarray:
        """Row set n's weights up to the sign flips that map every one of its rows to
        plus or minus itself.  Such a flip h fixes every support, and (u, v) solves a
        support exactly when (h u, v) does (limbs h d, coefficients up to sign), so the
        join only needs one weight vector per orbit (symmetry breaking)."""
        rows, limbs = self.rows[n], len(self.rows[n][0])
        flips = [(tuple(range(limbs)), s) for s in itertools.product((1, -1), repeat=limbs)]
        fixing = [g for g in flips if all(_normal(_act(g, r)) == r for r in rows)]
        m = self.modulus
        least = np.stack([self.keys(_act_weights(g, self.weights[n]) if m is None
                                    else _unit_canonical(_act_weights(g, self.weights[n]), m))
                          for g in fixing]).min(axis=0)
        return self.weights[n][np.unique(least, return_index=True)[1]]

    def lookup(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted keys, order) of row set n's weights, for membership by searchsorted."""
        keys = self.keys(self.weights[n])
        order = np.argsort(keys)
        return keys[order], order


def _grid(limbs: int, bound: int) -> np.ndarray:
    combos = list(itertools.combinations_with_replacement(range(bound + 1), limbs))
    return np.array([c for c in combos if any(c)], dtype=np.int64).reshape(-1, limbs)


def _expand(canonical: np.ndarray, group, bound: int) -> np.ndarray:
    """Every image of the rows of ``canonical`` (entries in [-bound, bound]) under ``group``,
    once each, in lexicographic order (np.unique(axis=0)'s, through one integer key a row:
    sorting rows as records took seconds for INT8's side)."""
    images = np.concatenate([_act_weights(g, canonical) for g in group])
    base = 2 * bound + 1
    lex = ((images + bound) * base ** np.arange(images.shape[1] - 1, -1, -1, dtype=np.int64)).sum(axis=1)
    return images[np.unique(lex, return_index=True)[1]]


def _stabilized_cover(spec, side, rows, weights, bound, group) -> np.ndarray:
    """The rows of ``weights`` that cover with ``rows``.  Coverage is invariant under the
    stabilizer of the row set, so only the smallest weight vector of each stabilizer
    orbit is tested and the covering ones are expanded again (symmetry breaking)."""
    limbs = len(rows[0])
    extras = sorted(rows[limbs:])
    stab = [g for g in group if sorted(_normal(_act(g, r)) for r in extras) == extras]
    images = np.stack([_keys(_act_weights(g, weights), bound) for g in stab])
    least = images.min(axis=0)
    _, first = np.unique(least, return_index=True)
    reps = weights[first]
    reps = reps[_covering(spec, side, limb_vectors(rows, spec.digit_values), reps)]
    if not len(reps):
        return reps
    return _expand(reps, stab, bound)


def side_sets(spec: Spec, side: str, limbs: int, coefficient_bound: int, weight_bound: int, max_rows: int,
              deadline: float = math.inf, progress=None) -> SideSets:
    """Every covering (row set, weights) of ``side`` up to the signed-permutation group,
    breadth-first by number of extra rows (a set is extended only while it covers)."""
    if spec.modulus is not None:
        return _residue_side_sets(spec, side, limbs, coefficient_bound, max_rows, deadline, progress)
    digits = spec.digit_values
    identity = tuple(tuple(int(i == j) for j in range(limbs)) for i in range(limbs))
    group = signed_permutations(limbs)
    # Coverage over D(I) = S^n is invariant under the group: test sorted non-negative
    # weights once, then take every signed permutation.
    free = limb_vectors(identity, digits)
    grid = _grid(limbs, weight_bound)
    covering = grid[_covering(spec, side, free, grid, deadline)]
    if time.monotonic() > deadline:
        raise TimeoutError(f"side {side}: time limit reached while checking which weight vectors cover")
    base = _expand(covering, group, weight_bound)
    menu = extra_rows(limbs, coefficient_bound, digits)

    def cover(rows, g, weights):
        # Covering weights of the representative: the parent's, carried by g, filtered.
        return _stabilized_cover(spec, side, rows, _act_weights(g, weights), weight_bound, group)

    found_rows, found_weights = _grow_row_sets(side, identity, base, menu, group, max_rows, cover, deadline, progress)
    return SideSets(found_rows, found_weights, weight_bound)


def _grow_row_sets(side: str, identity, base, menu, group, max_rows: int, cover, deadline: float, progress):
    """Breadth-first over extra plane rows: each covering set is extended by every menu row
    and kept, one per orbit of the signed-permutation group (symmetry breaking: the set is
    replaced by its smallest image), when ``cover(rows, g, parent_weights)`` leaves weights."""

    def canon(extras):
        """(smallest image of the extra-row set, group element reaching it)."""
        return min((tuple(sorted(_normal(_act(g, r)) for r in extras)), g) for g in group)

    found_rows, found_weights = [identity], [base]
    level = {(): base} if len(base) else {}
    for size in range(1, max_rows - len(identity) + 1):
        nxt = {}
        for extras, weights in level.items():
            for row in menu:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"side {side}: time limit reached while enumerating covering row sets")
                if row in extras:
                    continue
                rep, g = canon(extras + (row,))
                if rep in nxt:
                    continue
                keep = cover(identity + rep, g, weights)
                if len(keep):
                    nxt[rep] = keep
        level = {k: nxt[k] for k in sorted(nxt)}
        if progress:
            progress(f"side {side}: {len(level)} covering row sets with {size} extra rows (up to symmetry)")
        for extras, weights in level.items():
            found_rows.append(identity + extras)
            found_weights.append(weights)
        if not level:
            break
    return tuple(found_rows), tuple(found_weights)



# ---------------------------------------------------------------------------------------
# Residues (spec.modulus = m).  The same plane-coordinate family, with the identity a
# congruence mod m.  Two things change:
#
# * Weights are residues, and besides the signed limb permutations the units of Z_m act:
#   (u, v) -> (c u, v) keeps coverage (x -> c x permutes Z_m) and the identity (lam ->
#   c lam), on each side independently.  Each side therefore keeps one weight vector per
#   unit orbit (:func:`_unit_canonical`, symmetry breaking); any unit multiple is as good.
# * The join: u v^T must lie in L = span(r_t s_t^T) + m Z^(na nb).  Subgroups of Z_m^N
#   are their own double annihilators, so that is u^T C_k v == 0 (mod m) for generators
#   C_k of the annihilator of L (:func:`_annihilator`).  For fixed u these are rows w_k of
#   a K x nb matrix; when two rows have a cross product x with gcd(x, m) = 1 the kernel
#   mod m is exactly Z_m x (locally at each p | m two rows are independent mod p, so the
#   kernel is free of rank one and x generates it), and a covering v must be a unit
#   multiple of x: one look-up.  Otherwise the covering list is scanned for that u.


def _unique_canonical(w: np.ndarray, m: int) -> np.ndarray:
    w = _unit_canonical(w, m)
    return w[np.unique(_residue_keys(w, m), return_index=True)[1]]


_IDENTITY_COVER: dict = {}


def _residue_side_sets(spec: Spec, side: str, limbs: int, coefficient_bound: int, max_rows: int,
                       deadline: float = math.inf, progress=None) -> SideSets:
    """:func:`side_sets` for residues: covering weights kept one per unit orbit.  The
    stabilizer trick of the exact case is not used (the lists are small after the unit
    reduction); each extra row filters the parent's list directly."""
    m, digits = spec.modulus, spec.digit_values
    identity = tuple(tuple(int(i == j) for j in range(limbs)) for i in range(limbs))
    group = signed_permutations(limbs)
    # Balanced residues |w| <= m // 2 reach every residue; coverage over D(I) = S^n is
    # invariant under the group, so sorted non-negative weights are tested once.
    key = (spec.digits, m, spec.side_range(side), limbs)
    if key not in _IDENTITY_COVER:
        grid = _grid(limbs, m // 2)
        free = limb_vectors(identity, digits)
        reps = _unique_canonical(grid[_covering(spec, side, free, grid, deadline)], m)
        base = _unique_canonical(np.concatenate([_act_weights(g, reps) for g in group]), m) if len(reps) else reps
        # Kept for the process: the residue ladder (search.catalog_writer.find_residue) asks for the
        # same side again with a larger product cap.  One entry per (modulus, side range).
        _IDENTITY_COVER.clear()
        _IDENTITY_COVER[key] = base
    base = _IDENTITY_COVER[key]
    menu = extra_rows(limbs, coefficient_bound, digits)

    def cover(rows, g, weights):
        moved = _unique_canonical(_act_weights(g, weights), m)
        return moved[_covering(spec, side, limb_vectors(rows, digits), moved, deadline)]

    found_rows, found_weights = _grow_row_sets(side, identity, base, menu, group, max_rows, cover, deadline, progress)
    if progress:
        progress(f"side {side}: {len(base)} covering weight vectors for the identity rows (up to units)")
    return SideSets(found_rows, found_weights, m // 2, m)


def _annihilator(generators, m: int) -> list[list[int]]:
    """Generators of {c in Z_m^N : g . c == 0 (mod m) for every generator g}: the first N
    coordinates of an integer-kernel basis of [G | -m I] (column Hermite reduction with a
    unimodular transform, exact Python integers)."""
    g = [list(map(int, row)) for row in generators]
    p, n = len(g), len(g[0])
    a = [row + [-m if i == k else 0 for k in range(p)] for i, row in enumerate(g)]
    width = n + p
    t = [[int(i == j) for j in range(width)] for i in range(width)]  # columns transform
    col = 0
    for i in range(p):
        if col >= width:
            break
        while True:
            live = [j for j in range(col, width) if a[i][j]]
            if not live:
                break
            j0 = min(live, key=lambda j: abs(a[i][j]))
            for mat in (a, t):  # swap columns col and j0
                for row in mat:
                    row[col], row[j0] = row[j0], row[col]
            done = True
            for j in range(col + 1, width):
                if a[i][j]:
                    q = a[i][j] // a[i][col]
                    for mat in (a, t):
                        for row in mat:
                            row[j] -= q * row[col]
                    done = done and a[i][j] == 0
            if done:
                col += 1
                break
    out = []
    for j in range(col, width):
        c = [t[k][j] % m for k in range(n)]
        if any(c):
            out.append(c)
    return out


def _pairs_mod(comp, ws_x, ws_y, lookup_y, m, x_is_a):
    """(i, j) index pairs with x^T C_k y == 0 (mod m) for every C_k (or y^T C_k x): the
    look-up of the kernel direction where it is one, a scan of ws_y elsewhere."""
    c = np.array(comp, dtype=np.int64) % m
    if not x_is_a:
        c = c.transpose(0, 2, 1)
    w = np.einsum("kij,ni->nkj", c, ws_x) % m  # constraints on y, per x
    count, k, n = w.shape
    # Per prime power q^e || m: where two rows are independent mod q, the kernel mod q^e
    # is Z x_q (x_q their cross product); where that holds for every q the kernel mod m
    # is Z x with x the CRT combination of the x_q, and a covering y is a unit times x.
    direction = np.zeros((count, n), dtype=np.int64)
    done = np.ones(count, dtype=bool)
    for q, e in sympy.factorint(m).items():
        qe = q**e
        part = np.zeros((count, n), dtype=np.int64)
        have = np.zeros(count, dtype=bool)
        if n == 2:
            candidates = (np.stack([w[:, a, 1], -w[:, a, 0]], axis=1) for a in range(k))
        elif n == 3:
            candidates = (np.cross(w[:, a], w[:, b]) for a, b in itertools.combinations(range(k), 2))
        else:
            candidates = ()
        for x in candidates:
            new = ~have & (x % q != 0).any(axis=1)
            part[new] = x[new] % qe
            have |= new
        done &= have
        # CRT: add the q^e component, (m / q^e) * ((m / q^e)^-1 mod q^e) * x_q.
        rest = m // qe
        direction = (direction + part * (rest * pow(rest, -1, qe) % m)) % m
    hits_i, hits_j = [], []
    sorted_keys, order = lookup_y
    idx = np.flatnonzero(done)
    if len(idx):
        cand = _unit_canonical(direction[idx], m)
        keys = _residue_keys(cand, m)
        pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
        ok = (sorted_keys[pos] == keys) & ~(np.einsum("nkj,nj->nk", w[idx], cand) % m).any(axis=1)
        hits_i.extend(idx[ok].tolist())
        hits_j.extend(order[pos[ok]].tolist())
    # The scan, a block of x at a time: y . w_k for every covering y and every row k.
    wide = np.flatnonzero(~done)
    y_float = ws_y.astype(np.float64)
    block = max(1, 2**21 // max(1, len(ws_y) * k))
    for start in range(0, len(wide), block):
        idx = wide[start : start + block]
        # float64 BLAS: every dot is below n m^2 < 2^53, so exact.
        dots = np.fmod(y_float @ w[idx].reshape(-1, n).T.astype(np.float64), m)  # N_y x (len(idx) * K)
        ok = ~dots.reshape(len(ws_y), len(idx), k).any(axis=2)
        j, i = np.nonzero(ok)
        hits_i.extend(idx[i].tolist())
        hits_j.extend(j.tolist())
    return hits_i, hits_j


def residue_lower_bound(spec: Spec) -> tuple[int, str | None]:
    """(bound, reason) for every residue encoding of ``spec`` when m is prime, else (1, None).

    Over the field F_p the rank argument of the module doc holds verbatim: P >= r_A + r_B
    - 1 with r the rank mod p of a side's plane rows.  With rank r, u is (mod p) a
    combination of r independent rows, so the residues reached are alpha . S^r: r is at
    least the fewest terms alpha_1 S + ... + alpha_r S that give all of Z_p, found here
    exhaustively for r <= 2 (alpha_1 = 1 after scaling by a unit)."""
    m = spec.modulus
    if m is None or not sympy.isprime(m):
        return 1, None
    s = np.array(sorted(spec.digit_values), dtype=np.int64)
    if len(np.unique(s % m)) == m:
        return 1, None
    two = any(len(np.unique((s[:, None] + b * s[None, :]) % m)) == m for b in range(1, m))
    r = 2 if two else 3
    reason = (f"{m} is prime: over F_{m} every encoding needs P >= r_A + r_B - 1 with r >= {r} the rank mod {m} "
              f"of a side's plane rows ({'one term' if r == 2 else 'no two terms'} alpha S"
              f"{'' if r == 2 else ' + beta S'} cover Z_{m}), so P >= {2 * r - 1}")
    return 2 * r - 1, reason


def supports(ka: int, kb: int, size: int):
    """Sets of ``size`` cells of ka x kb using every row and every column, in row-major order."""
    cells = [(i, j) for i in range(ka) for j in range(kb)]

    def grow(start, chosen, rows, cols):
        left = size - len(chosen)
        if ka - len(rows) > left or kb - len(cols) > left:
            return
        if left == 0:
            yield tuple(chosen)
            return
        for n in range(start, len(cells)):
            i, j = cells[n]
            if i > 0 and i - 1 not in rows:
                return  # row i-1 can no longer be used: later cells lie in rows >= i
            yield from grow(n + 1, chosen + [(i, j)], rows | {i}, cols | {j})

    yield from grow(0, [], frozenset(), frozenset())


def row_permutations(rows) -> list[tuple[int, ...]]:
    """How the stabilizer of a row set (signed limb permutations mapping it onto itself)
    permutes its rows: supports related by these permutations are equivalent."""
    n = len(rows[0])
    index = {r: i for i, r in enumerate(rows)}
    found = set()
    for g in signed_permutations(n):
        image = [index.get(_normal(_act(g, r))) for r in rows]
        if None not in image:
            found.add(tuple(image))
    return sorted(found)


def _orbit(cells, perms_a, perms_b, transpose: bool):
    """Every image of a support under the two stabilizers (and, for a spec with equal
    sides and one row set on both, under exchanging the sides)."""
    out = set()
    for pa in perms_a:
        for pb in perms_b:
            image = tuple(sorted((pa[i], pb[j]) for i, j in cells))
            out.add(image)
            if transpose:
                out.add(tuple(sorted((j, i) for i, j in image)))
    return out


def nullspace(vectors: list[list[int]], width: int) -> list[list[int]]:
    """Integer basis of {c : g . c = 0 for every g in ``vectors``} (exact, fractions)."""
    rows = [[Fraction(x) for x in v] for v in vectors]
    pivots, r = [], 0
    for col in range(width):
        pivot = next((k for k in range(r, len(rows)) if rows[k][col] != 0), None)
        if pivot is None:
            continue
        rows[r], rows[pivot] = rows[pivot], rows[r]
        lead = rows[r][col]
        rows[r] = [x / lead for x in rows[r]]
        for k in range(len(rows)):
            if k != r and rows[k][col] != 0:
                f = rows[k][col]
                rows[k] = [a - f * b for a, b in zip(rows[k], rows[r])]
        pivots.append(col)
        r += 1
    out = []
    for free in (c for c in range(width) if c not in pivots):
        vec = [Fraction(0)] * width
        vec[free] = Fraction(1)
        for k, col in enumerate(pivots):
            vec[col] = -rows[k][free]
        scale = math.lcm(*(x.denominator for x in vec))
        ints = [int(x * scale) for x in vec]
        g = math.gcd(*ints)
        out.append([x // g for x in ints])
    return out


def _kernel_directions(w: np.ndarray):
    """Per row of ``w`` (shape N x K x n, n <= 3): a primitive vector orthogonal to all K
    vectors when they span n - 1 dimensions, and a mask of the rows where they span fewer
    (the kernel is larger; those are scanned directly)."""
    count, k, n = w.shape
    direction = np.zeros((count, n), dtype=np.int64)
    done = np.zeros(count, dtype=bool)
    if n == 1:
        return direction, ~w.any(axis=(1, 2))
    if n == 2:
        candidates = (np.stack([w[:, a, 1], -w[:, a, 0]], axis=1) for a in range(k))
    elif n == 3:
        candidates = (np.cross(w[:, a], w[:, b]) for a, b in itertools.combinations(range(k), 2))
    else:
        raise ValueError(f"the product join handles at most 3 limbs per side, got {n}")
    for x in candidates:
        new = ~done & x.any(axis=1)
        direction[new] = x[new]
        done |= new
    g = np.gcd.reduce(np.abs(direction), axis=1)
    g[g == 0] = 1
    direction //= g[:, None]
    fits = done & ~(np.einsum("nkj,nj->nk", w, direction).any(axis=1))
    # No direction found: rank below n - 1, kernel of dimension >= 2.
    return np.where(fits[:, None], direction, 0), ~done


def _keys(w: np.ndarray, bound: int) -> np.ndarray:
    base = 2 * bound + 1
    return ((w + bound) * base ** np.arange(w.shape[1], dtype=np.int64)).sum(axis=1)


def _pairs_in_span(comp, ws_x, ws_y, lookup_y, bound_y, divisors, x_is_a):
    """(i, j) index pairs of weight vectors x = ws_x[i], y = ws_y[j] with
    x^T C_k y == 0 (or y^T C_k x, per side) for every complement matrix C_k."""
    c = np.array(comp, dtype=np.int64)  # K x na x nb
    if not x_is_a:
        c = c.transpose(0, 2, 1)
    w = np.einsum("kij,ni->nkj", c, ws_x)  # the constraints on y, per x
    direction, wide = _kernel_directions(w)
    sorted_keys, order = lookup_y
    hits_i, hits_j = [], []
    have = direction.any(axis=1)
    for k in divisors:
        cand = direction * k
        ok = have & (np.abs(cand) <= bound_y).all(axis=1)
        idx = np.flatnonzero(ok)
        pos = np.searchsorted(sorted_keys, _keys(cand[idx], bound_y))
        pos = np.minimum(pos, len(sorted_keys) - 1)
        found = sorted_keys[pos] == _keys(cand[idx], bound_y)
        hits_i.extend(idx[found].tolist())
        hits_j.extend(order[pos[found]].tolist())
    for i in np.flatnonzero(wide):
        j = np.flatnonzero(~(ws_y @ w[i].T).any(axis=1))
        hits_i.extend([int(i)] * len(j))
        hits_j.extend(j.tolist())
    return hits_i, hits_j


def build_lambda_model(generators, target, bound: int, modulus: int | None = None):
    """CP-SAT model: nonzero integer coefficients ``lam[t]`` in [-bound, bound] with
    sum_t lam[t] * generators[t] == target (the identity with the planes fixed); with a
    modulus, coefficients are balanced nonzero residues and the sums agree mod m."""
    model = cp_model.CpModel()
    lo, hi = (-bound, bound) if modulus is None else (-(modulus // 2), modulus - 1 - modulus // 2)
    lam = [model.NewIntVar(lo, hi, f"lam[{t}]") for t in range(len(generators))]
    for t, var in enumerate(lam):
        model.Add(var != 0)
    for i, want in enumerate(target):
        lhs = sum(int(g[i]) * var for g, var in zip(generators, lam))
        if modulus is None:
            model.Add(lhs == int(want))
        else:
            reach = (sum(abs(int(g[i])) for g in generators) * max(-lo, hi) + abs(int(want))) // modulus + 1
            model.Add(lhs == int(want) + modulus * model.NewIntVar(-reach, reach, f"k[{i}]"))
    return model, lam


@dataclass(frozen=True)
class _Hit:
    rows_a: tuple
    rows_b: tuple
    cells: tuple
    u: tuple
    v: tuple


def search_product(spec: Spec, family: ProductFamily, *, seed: int = 0, workers: int = 2, time_limit: float = 60.0,
                   progress: Callable[[str], None] | None = None, cache: dict | None = None) -> Result:
    """The exact encoding of ``spec`` with the fewest products in ``family`` (module doc).

    ``time_limit`` bounds everything: side enumeration, join and coefficient solving.
    ``cache`` (a dict) keeps enumerated sides between calls on the same spec, so a ladder
    of families that share one side's bounds enumerates it once."""
    start = time.monotonic()
    deadline = start + time_limit
    report = progress or (lambda _msg: None)
    m = spec.modulus
    if m is None:
        bound = lower_bound(spec)
        notes = (f"every exact encoding needs at least {bound} products: plane values in a set of "
                 f"{len(spec.digit_values)} digits need rank >= {minimal_limbs(spec.count('a'), spec.digits)} (A) "
                 f"and >= {minimal_limbs(spec.count('b'), spec.digits)} (B), and P >= rank_A + rank_B - 1",)
    else:
        bound, reason = residue_lower_bound(spec)
        notes = (f"every residue encoding needs at least {bound} products: {reason}",) if reason else ()

    def result(status, candidate=None, lower=bound):
        out = Result(spec, family, status, candidate, lower, time.monotonic() - start, seed, workers, time_limit,
                     notes=notes)
        if candidate is not None:
            out.identity = identity_text(candidate.weights_a, candidate.weights_b, candidate.planes, m)
        return out

    if bound > family.products:
        report(f"at least {bound} products are needed (rank bound); the family allows {family.products}")
        return result("infeasible", lower=bound)
    try:
        # Keyed by the side's range rather than its name: INT8 x INT8 enumerates one side.
        cache = {} if cache is None else cache
        sides = {}
        for s in "ab":
            key = (spec.digits, spec.side_range(s), m, family.limbs(s), family.coefficient_bound(s),
                   family.weight_bound(s), family.products)
            if key not in cache:
                cache[key] = side_sets(spec, s, *key[3:], deadline, report)
            sides[s] = cache[key]
    except TimeoutError as err:
        report(str(err))
        return result("unknown")
    report(f"sides: {len(sides['a'].rows)} A and {len(sides['b'].rows)} B row sets ({time.monotonic() - start:.1f}s)")
    lookups = {(s, n): sides[s].lookup(n) for s in "ab" for n in range(len(sides[s].rows))}
    reps = {(s, n): sides[s].representatives(n) for s in "ab" for n in range(len(sides[s].rows))}
    perms = {(s, n): row_permutations(rows) for s in "ab" for n, rows in enumerate(sides[s].rows)}
    same_sides = sides["a"] is sides["b"]
    need = targets(spec, "a") + targets(spec, "b")
    g_targets = math.gcd(*need)
    divisors = [k for d in range(1, g_targets + 1) if g_targets % d == 0 for k in (d, -d)]
    if m is None:
        def pairs_in_span(comp, ws_x, ws_y, lookup_y, bound_y, x_is_a):
            return _pairs_in_span(comp, ws_x, ws_y, lookup_y, bound_y, divisors, x_is_a)
    else:
        def pairs_in_span(comp, ws_x, ws_y, lookup_y, bound_y, x_is_a):
            return _pairs_mod(comp, ws_x, ws_y, lookup_y, m, x_is_a)

    for size in range(bound, family.products + 1):
        hits, tried, solved = [], 0, 0
        for na, (fa, wa) in enumerate(zip(sides["a"].rows, sides["a"].weights)):
            for nb, (gb, wb) in enumerate(zip(sides["b"].rows, sides["b"].weights)):
                if len(fa) > size or len(gb) > size or len(fa) * len(gb) < size:
                    continue
                # Symmetry breaking: with the same side on both ends, (G, F, E^T, v, u) is a
                # solution whenever (F, G, E, u, v) is, so only na <= nb is joined.
                if same_sides and na > nb:
                    continue
                seen = set()
                for cells in supports(len(fa), len(gb), size):
                    if time.monotonic() > deadline:
                        report(f"time limit reached while joining {size}-product plane sets")
                        return result("unknown", lower=size)
                    if cells in seen:
                        continue
                    seen |= _orbit(cells, perms["a", na], perms["b", nb], same_sides and na == nb)
                    tried += 1
                    gens = [[x * y for x in fa[i] for y in gb[j]] for i, j in cells]
                    basis = nullspace(gens, len(gens[0])) if m is None else _annihilator(gens, m)
                    comp = [np.array(c).reshape(len(fa[0]), len(gb[0])) for c in basis]
                    ra, rb = reps["a", na], reps["b", nb]
                    if comp and len(ra) <= len(rb):
                        ii, jj = pairs_in_span(comp, ra, wb, lookups["b", nb], family.weight_bound_b, True)
                        xa, xb = ra, wb
                    elif comp:
                        jj, ii = pairs_in_span(comp, rb, wa, lookups["a", na], family.weight_bound_a, False)
                        xa, xb = wa, rb
                    else:
                        ii, jj = (x.ravel().tolist() for x in np.meshgrid(np.arange(len(ra)), np.arange(len(wb))))
                        xa, xb = ra, wb
                    if not ii:
                        continue
                    uv = (xa[ii][:, :, None] * xb[jj][:, None, :]).reshape(len(ii), -1)
                    inside = members(echelon(gens, m), uv if m is None else uv % m)
                    for i, j in zip(np.asarray(ii)[inside], np.asarray(jj)[inside]):
                        hits.append(_Hit(fa, gb, cells, tuple(map(int, xa[i])), tuple(map(int, xb[j]))))
                    if m is not None and len(hits) > solved:
                        # Residues: the first plane set whose hits admit coefficients is
                        # taken (every smaller size is refuted already, so the count is
                        # still fewest); peaks rank only within it.  Six-product residue
                        # joins run through ~10^3-10^4 plane sets, ranking all would cost
                        # minutes per modulus for a wider window only.
                        found = _best(spec, family, hits[solved:], seed=seed, workers=workers, deadline=deadline)
                        if found == "timeout":
                            return result("unknown", lower=size)
                        if found is not None:
                            report(f"{size} products: found after {tried} plane sets ({time.monotonic() - start:.1f}s)")
                            return result("optimal", found, size)
                        solved = len(hits)
        report(f"{size} products: {tried} plane sets joined, {len(hits)} in the lattice "
               f"({time.monotonic() - start:.1f}s)")
        if hits and m is None:
            found = _best(spec, family, hits, seed=seed, workers=workers, deadline=deadline)
            if found == "timeout":
                return result("unknown", lower=size)
            if found is not None:
                return result("optimal", found, size)
    return result("infeasible", lower=family.products + 1)


def _best(spec, family, hits, *, seed, workers, deadline):
    """The hit with the smallest product of plane-value peaks whose identity admits
    nonzero coefficients within the family's bound, as a Candidate."""
    # One vectorised peaks() call per (side, row set) over all its hit weights.
    wanted = {}
    for h in hits:
        wanted.setdefault(("a", h.rows_a), set()).add(h.u)
        wanted.setdefault(("b", h.rows_b), set()).add(h.v)
    peak = {}
    for (side, rows), ws in wanted.items():
        ws = sorted(ws)
        for w, p in zip(ws, peaks(spec, side, list(rows), np.array(ws, dtype=np.int64))):
            peak[side, rows, w] = int(p)
    ranked = sorted(hits, key=lambda h: (peak["a", h.rows_a, h.u] * peak["b", h.rows_b, h.v], h.cells, h.u, h.v))
    for hit in ranked:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        gens = [[x * y for x in hit.rows_a[i] for y in hit.rows_b[j]] for i, j in hit.cells]
        target = [x * y for x in hit.u for y in hit.v]
        model, lam = build_lambda_model(gens, target, family.lambda_bound, spec.modulus)
        solver, status = solve(model, seed=seed, workers=workers, time_limit=left)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if status == cp_model.INFEASIBLE:
                continue
            return "timeout"
        planes = tuple((hit.rows_a[i], hit.rows_b[j], solver.Value(x)) for (i, j), x in zip(hit.cells, lam))
        used_a = sorted({f for f, _, _ in planes})
        used_b = sorted({g for _, g, _ in planes})
        u, v = hit.u, hit.v
        if spec.modulus is not None:  # balanced residues read better; any representative works
            u, v = (tuple(x - spec.modulus if x > spec.modulus // 2 else x for x in w) for w in (u, v))
        return Candidate(u, v, planes, choose_limbs(spec, "a", u, used_a), choose_limbs(spec, "b", v, used_b))
    return None
