"""The CP-SAT model that joins two covering sides with the bilinear identity.

Each side arrives as a menu of plane rows and the (row set, weights) pairs that cover it
(search.sides).  A plane is a pair (A-row r, B-row s) with coefficient ``lam[r,s]``, used
when that coefficient is nonzero.  Unknowns, named with their indices: weights ``u[i]``,
``v[j]``; row flags ``use_a[r]``, ``use_b[s]``; pair coefficients ``lam[r,s]`` and flags
``nz[r,s]``.  Constraints:

* (u, use_a) is one of side A's covering pairs (a table), likewise (v, use_b);
* a pair is used only with both rows in use, and every row in use is in some pair;
* identity   sum_{r,s} lam[r,s] r_i s_j == u[i] v[j]       (mod m: plus m * k[i,j]).

The identity makes sum lam[r,s] (r.d)(s.e) == (u.d)(v.e) for all limb vectors, and the
covering tables give every input a limb vector with all plane values in the digit set,
so a solution is an encoding.  The objective is the number of used pairs (products);
the model's optimum is the fewest products within the family.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ortools.sat.python import cp_model

from search.spec import Family, Spec

__all__ = ["ModelVars", "build_model", "solve"]


@dataclass
class ModelVars:
    u: list
    v: list
    lam: dict  # (r, s) -> coefficient variable
    nz: dict  # (r, s) -> Boolean


def _side(model: cp_model.CpModel, name: str, rows, candidates, limbs: int, bound: int):
    weights = [model.NewIntVar(0, bound, f"{name}[{i}]") for i in range(limbs)]
    use = [model.NewBoolVar(f"use_{name}[{r}]") for r in range(len(rows))]
    table = []
    for cand in candidates:
        bits = [1 if r in cand.rows else 0 for r in range(len(rows))]
        table.extend([*map(int, w), *bits] for w in cand.weights)
    # The covering pairs were computed exhaustively (search.sides); the weights there are
    # already in canonical order (symmetry breaking: limb permutations and sign flips).
    model.AddAllowedAssignments(weights + use, table)
    return weights, use


def build_model(spec: Spec, family: Family, side_a, side_b, pairs=None):
    """(model, ModelVars) joining ``side_a`` and ``side_b`` = (menu, candidates).

    ``pairs`` (a list of (r, s)) fixes the planes: exactly those pairs, each with a
    nonzero coefficient; ``None`` lets the model choose among all menu pairs."""
    model = cp_model.CpModel()
    m = spec.modulus
    (rows_a, cand_a), (rows_b, cand_b) = side_a, side_b
    bound_a = family.weight_bound_a if m is None else min(family.weight_bound_a, m // 2)
    bound_b = family.weight_bound_b if m is None else min(family.weight_bound_b, m // 2)
    u, use_a = _side(model, "u", rows_a, cand_a, family.limbs_a, bound_a)
    v, use_b = _side(model, "v", rows_b, cand_b, family.limbs_b, bound_b)
    lam_lo, lam_hi = (-family.lambda_bound, family.lambda_bound) if m is None else (-(m // 2), m - 1 - m // 2)

    lam, nz = {}, {}
    keys = pairs if pairs is not None else itertools.product(range(len(rows_a)), range(len(rows_b)))
    for r, s in keys:
        lam[r, s] = model.NewIntVar(lam_lo, lam_hi, f"lam[{r},{s}]")
        nz[r, s] = model.NewBoolVar(f"nz[{r},{s}]")
        model.Add(lam[r, s] == 0).OnlyEnforceIf(nz[r, s].Not())
        model.Add(lam[r, s] != 0).OnlyEnforceIf(nz[r, s])
        model.AddImplication(nz[r, s], use_a[r])
        model.AddImplication(nz[r, s], use_b[s])
        if pairs is not None:
            model.Add(nz[r, s] == 1)
    for r in range(len(rows_a)):
        model.AddBoolOr([nz[k] for k in nz if k[0] == r]).OnlyEnforceIf(use_a[r])
    for s in range(len(rows_b)):
        model.AddBoolOr([nz[k] for k in nz if k[1] == s]).OnlyEnforceIf(use_b[s])
    products = sum(nz.values())
    model.Add(products <= family.products)

    for i in range(family.limbs_a):
        for j in range(family.limbs_b):
            lhs = sum(lam[r, s] * (rows_a[r][i] * rows_b[s][j]) for (r, s) in lam if rows_a[r][i] * rows_b[s][j])
            uv = model.NewIntVar(0, bound_a * bound_b, f"uv[{i},{j}]")
            model.AddMultiplicationEquality(uv, [u[i], v[j]])
            if m is None:
                model.Add(lhs == uv)
            else:
                reach = (len(lam) * max(-lam_lo, lam_hi) + bound_a * bound_b) // m + 1
                k = model.NewIntVar(-reach, reach, f"k[{i},{j}]")
                model.Add(lhs == uv + m * k)
    model.Minimize(products)
    return model, ModelVars(u, v, lam, nz)


def solve(model: cp_model.CpModel, *, seed: int, workers: int, time_limit: float):
    """Runs CP-SAT with an explicit seed, worker count and time limit; returns the solver
    (for values and bounds) and its status."""
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = workers
    solver.parameters.max_time_in_seconds = max(0.01, time_limit)
    return solver, solver.Solve(model)
