"""The search: covering sides (exhaustive, numpy) joined by the identity (CP-SAT).

search.sides lists, for each side, every spanning plane-row set in the family with the
weights that cover all inputs; search.model picks one per side and the reconstruction
coefficients, minimising products.  CP-SAT's OPTIMAL is then a proof that no encoding in
the family has fewer products, and INFEASIBLE a proof that none has at most
``family.products``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from ortools.sat.python import cp_model

from search.identity import identity_text
from search.model import build_model, solve
from search.progress import every
from search.lattice import echelon, members
from search.sides import SideCandidate, _block_rows, choose_limbs, peaks, side_candidates, unit_orbits
from search.spec import Family, ProductFamily, Spec

__all__ = ["Candidate", "Result", "search"]

_STATUS = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}


@dataclass(frozen=True)
class Candidate:
    """An encoding found: weights, planes as (A-row, B-row, coefficient), limbs per input."""

    weights_a: tuple[int, ...]
    weights_b: tuple[int, ...]
    planes: tuple[tuple[tuple[int, ...], tuple[int, ...], int], ...]
    limbs_a: dict = field(hash=False, compare=False)
    limbs_b: dict = field(hash=False, compare=False)

    @property
    def products(self) -> int:
        return len(self.planes)

    @property
    def max_plane_product(self) -> int:
        largest = 0
        for f, g, _ in self.planes:
            pa = max(abs(sum(c * x for c, x in zip(f, d))) for d in self.limbs_a.values())
            pb = max(abs(sum(c * x for c, x in zip(g, e))) for e in self.limbs_b.values())
            largest = max(largest, pa * pb)
        return largest


@dataclass
class Result:
    """Outcome of one search.  ``status``: "optimal" (fewest products in the family,
    proven), "feasible" (found, not proven fewest), "infeasible" (proven: none with at
    most ``family.products`` products in the family) or "unknown" (time ran out)."""

    spec: Spec
    family: Family | ProductFamily
    status: str
    candidate: Candidate | None
    products_lower_bound: int
    wall_s: float
    seed: int
    workers: int
    time_limit: float
    identity: str | None = None
    notes: tuple[str, ...] = ()  # proofs beyond the family (e.g. a lower bound for every encoding)


def search(
    spec: Spec,
    family: Family,
    *,
    seed: int = 0,
    workers: int = 2,
    time_limit: float = 60.0,
    progress: Callable[[str], None] | None = None,
    join: str = "model",
) -> Result:
    """The encoding of ``spec`` with the fewest products within ``family``.

    ``join`` = "model" solves one CP-SAT model over every plane choice; "enumerate" runs
    through plane sets by size with a small model each, which proves "no fewer
    products" quickly when the menus are small (two limbs, as for residues)."""
    if join not in ("model", "enumerate"):
        raise ValueError(f"join must be 'model' or 'enumerate', got {join!r}")
    start = time.monotonic()
    report = progress or (lambda _msg: None)

    def result(status, candidate=None, lower=0):
        out = Result(spec, family, status, candidate, lower, time.monotonic() - start, seed, workers, time_limit)
        if candidate is not None:
            out.identity = identity_text(candidate.weights_a, candidate.weights_b, candidate.planes, spec.modulus)
        return out

    try:
        sides = {side: side_candidates(spec, side, family, report, start + time_limit) for side in "ab"}
    except TimeoutError as err:
        report(str(err))
        return result("unknown")
    if not sides["a"][1] or not sides["b"][1]:
        report("no covering row set on one side: infeasible within the family")
        return result("infeasible", lower=family.products + 1)
    joined = (_join_enumerate if join == "enumerate" else _join_model)(
        spec, family, sides, seed=seed, workers=workers, deadline=start + time_limit, report=report
    )
    name, found, lower = joined
    if found is None:
        return result(name, lower=lower)
    solver, mv, side_a, side_b = found
    rows_a, rows_b = side_a[0], side_b[0]
    planes = tuple(
        (rows_a[r], rows_b[s], solver.Value(var)) for (r, s), var in sorted(mv.lam.items()) if solver.Value(var)
    )
    u = tuple(solver.Value(x) for x in mv.u)
    v = tuple(solver.Value(x) for x in mv.v)
    used_a = sorted({f for f, _, _ in planes})
    used_b = sorted({g for _, g, _ in planes})
    candidate = Candidate(u, v, planes, choose_limbs(spec, "a", u, used_a), choose_limbs(spec, "b", v, used_b))
    report(f"{name}: {len(planes)} products ({time.monotonic() - start:.1f}s)")
    return result(name, candidate, lower)


def _join_model(spec, family, sides, *, seed, workers, deadline, report):
    """One CP-SAT model over all menu pairs and all covering candidates."""
    model, mv = build_model(spec, family, sides["a"], sides["b"])
    left = deadline - time.monotonic()
    report(f"joining sides in one CP-SAT model ({left:.0f}s left)")
    solver, status = solve(model, seed=seed, workers=workers, time_limit=left)
    name = _STATUS.get(status, "unknown")
    if name == "infeasible":
        return name, None, family.products + 1
    if name == "unknown":
        return name, None, int(solver.BestObjectiveBound())
    lower = int(solver.ObjectiveValue()) if name == "optimal" else int(solver.BestObjectiveBound())
    return name, (solver, mv, sides["a"], sides["b"]), lower


def _pair_sets(rows_a, rows_b, size):
    """Sets of ``size`` (A-row, B-row) pairs that use every given row: the planes."""
    cells = list(itertools.product(rows_a, rows_b))
    for combo in itertools.combinations(cells, size):
        if {r for r, _ in combo} == set(rows_a) and {s for _, s in combo} == set(rows_b):
            yield list(combo)


def _join_enumerate(spec, family, sides, *, seed, workers, deadline, report):
    """Every plane set, fewest products first, refuted or solved.

    A plane set is a choice of covering row sets (one per side) and pairs using all
    their rows.  Its lattice (search.lattice) selects the weight pairs whose u v^T the
    pairs can express.  At the smallest size with any, those candidates are tried in
    order of the product of the two sides' plane-value peaks (search.sides.peaks), and
    CP-SAT finds nonzero coefficients for the first that admits them: fewest products
    (every smaller set was refuted), then the smallest peak product among them."""
    (rows_a, cand_a), (rows_b, cand_b) = sides["a"], sides["b"]
    m = spec.modulus
    orbits = {id(c): unit_orbits(c.weights, m) for c in cand_a + cand_b}
    tick = every(report)

    def timed_out(size):
        report(f"time limit reached while joining {size}-product plane sets")
        return "unknown", None, size

    for size in range(1, family.products + 1):
        tried, found = 0, []
        for ca in cand_a:
            for cb in cand_b:
                if len(ca.rows) > size or len(cb.rows) > size or len(ca.rows) * len(cb.rows) < size:
                    continue
                (first_a, orbit_a), (first_b, orbit_b) = orbits[id(ca)], orbits[id(cb)]
                for pairs in _pair_sets(ca.rows, cb.rows, size):
                    if time.monotonic() > deadline:
                        return timed_out(size)
                    tick(lambda: f"{size} products: {tried} plane sets joined, {len(found)} in the lattice")
                    tried += 1
                    gens = [[x * y for x in rows_a[r] for y in rows_b[s]] for r, s in pairs]
                    inside = _members_outer(echelon(gens, m), ca.weights[first_a], cb.weights[first_b], m, deadline)
                    if inside is None:
                        return timed_out(size)
                    if inside.any():
                        found.append((ca, cb, pairs, np.flatnonzero(inside[orbit_a][:, orbit_b])))
        if found:
            report(f"{size} products: {len(found)} of {tried} plane sets in the lattice with "
                   f"{sum(len(hits) for *_, hits in found)} weight pairs; ranking them by plane-value peaks")
            outcome = _best_of(spec, family, sides, found, seed=seed, workers=workers, deadline=deadline)
            if outcome == "timeout":
                return timed_out(size)
            if outcome is not None:
                return "optimal", outcome, size
        report(f"no encoding with {size} products ({tried} plane sets refuted)")
    return "infeasible", None, family.products + 1


def _best_of(spec, family, sides, found, *, seed, workers, deadline):
    """The lattice hits of one size in order of peak product; the first with nonzero
    coefficients as (solver, vars, side_a, side_b), "timeout", or None when none admits
    nonzero coefficients."""
    (rows_a, _), (rows_b, _) = sides["a"], sides["b"]
    split = [np.divmod(hits, len(cb.weights)) for _, cb, _, hits in found]
    # Peaks only for the weight vectors some hit uses: a side of a large modulus keeps far
    # more covering weights than the lattice lets through.
    wanted = {}
    for (ca, cb, _, _), (i, j) in zip(found, split):
        for side, rows, cand, idx in (("a", rows_a, ca, i), ("b", rows_b, cb, j)):
            wanted.setdefault(id(cand), (side, rows, cand, []))[3].append(idx)
    peak = {}
    try:
        for key, (side, rows, cand, idx) in wanted.items():
            idx = np.unique(np.concatenate(idx))
            peak[key] = np.zeros(len(cand.weights), dtype=np.int64)
            peak[key][idx] = peaks(spec, side, [rows[r] for r in cand.rows], cand.weights[idx], deadline)
    except TimeoutError:
        return "timeout"
    n = np.concatenate([np.full(len(hits), k) for k, (_, _, _, hits) in enumerate(found)])
    i = np.concatenate([i for i, _ in split])
    j = np.concatenate([j for _, j in split])
    keys = np.concatenate([peak[id(ca)][i] * peak[id(cb)][j] for (ca, cb, _, _), (i, j) in zip(found, split)])
    order = zip(*(x[np.lexsort((j, i, n, keys))].tolist() for x in (keys, n, i, j)))
    for _, n, i, j in order:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        ca, cb, pairs, _ = found[n]
        side_a = (rows_a, [SideCandidate(ca.rows, ca.weights[i : i + 1])])
        side_b = (rows_b, [SideCandidate(cb.rows, cb.weights[j : j + 1])])
        model, mv = build_model(spec, family, side_a, side_b, pairs)
        solver, status = solve(model, seed=seed, workers=workers, time_limit=left)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return solver, mv, side_a, side_b
        if status != cp_model.INFEASIBLE:
            return "timeout"
    return None


def _outer(u: np.ndarray, v: np.ndarray, modulus: int | None) -> np.ndarray:
    """vec(u v^T) for every (u, v) pair, row index i * len(v) + j."""
    w = (u[:, None, :, None] * v[None, :, None, :]).reshape(len(u) * len(v), -1)
    return w % modulus if modulus is not None else w


def _members_outer(basis, u: np.ndarray, v: np.ndarray, modulus: int | None, deadline: float) -> np.ndarray | None:
    """Matrix over (u, v) pairs: vec(u v^T) in the lattice ``basis`` spans; None once
    ``time.monotonic()`` passes ``deadline``.  A block of u at a time, so memory stays
    bounded however many weight vectors the sides keep.

    With a modulus the lattice contains m Z^N, so c x is in it exactly when x is, for a unit
    c: the callers pass one weight vector per unit orbit (search.sides.unit_orbits)."""
    out = np.zeros((len(u), len(v)), dtype=bool)
    rows = _block_rows(len(v) * u.shape[1] * v.shape[1])
    for start in range(0, len(u), rows):
        if time.monotonic() > deadline:
            return None
        block = u[start : start + rows]
        out[start : start + len(block)] = members(basis, _outer(block, v, modulus)).reshape(len(block), len(v))
    return out
