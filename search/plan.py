"""Choosing moduli for an FP64 plan: a CP-SAT set-cover-like model over residue encodings.

Pick pairwise coprime moduli m (each with its cheapest residue encoding, cost c_m
products, or modeled time c_m * t) with prod m > N = 2 K (2^b - 1)^2, minimising total
cost.  Capacity is a sum of logarithms; CP-SAT needs integers, so each log2 m is scaled
by 2^14 and rounded both ways, exactly (by bit lengths of powers, no floats):

* conservative model, floor(2^14 log2 m): a solution certainly has prod m > N;
* relaxed model, ceil(2^14 log2 m): every valid choice satisfies it, so its optimum is
  a lower bound.

Equal optima prove the plan optimal among the given encodings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ozaki.capacity import crt_capacity

__all__ = ["PlanResult", "capacity_needed", "choose_moduli"]

_SCALE_BITS = 14


def capacity_needed(input_bits: int, k_max: int) -> int:
    """N = 2 K (2^b - 1)^2 (ozaki.capacity.crt_capacity): the moduli's product must exceed
    it for exact recovery."""
    for name, value in (("input_bits", input_bits), ("k_max", k_max)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return crt_capacity(k_max, input_bits, input_bits)


def _scaled_log2_floor(n: int) -> int:
    # floor(2^14 * log2 n) == bit_length(n^(2^14)) - 1, exactly.
    return (n ** (1 << _SCALE_BITS)).bit_length() - 1


def _primes_upto(n: int) -> list[int]:
    return [p for p in range(2, n + 1) if all(p % q for q in range(2, math.isqrt(p) + 1))]


@dataclass
class PlanResult:
    moduli: list[int]
    cost: int
    lower_bound: int
    status: str  # "optimal" (proven among the candidates), "feasible", "infeasible", "unknown"
    wall_s: float


def _model(costs: dict[int, int], need: int, logs: dict[int, int]):
    model = cp_model.CpModel()
    pick = {m: model.NewBoolVar(f"pick[{m}]") for m in sorted(costs)}
    for p in _primes_upto(max(costs)):
        # Pairwise coprime: at most one chosen modulus per prime factor.
        sharing = [pick[m] for m in pick if m % p == 0]
        if len(sharing) > 1:
            model.AddAtMostOne(sharing)
    model.Add(sum(logs[m] * pick[m] for m in pick) >= need)
    cost = sum(costs[m] * pick[m] for m in pick)
    # Ties in cost go to fewer moduli (fewer CRT steps): cost dominates the fold.
    model.Minimize(cost * (len(pick) + 1) + sum(pick.values()))
    return model, pick, cost


def choose_moduli(costs: dict[int, int], input_bits: int, k_max: int, *, seed: int = 0, workers: int = 2,
                  time_limit: float = 60.0) -> PlanResult:
    """The cheapest pairwise coprime moduli (keys of ``costs``, cost per modulus as value)
    whose product exceeds :func:`capacity_needed`."""
    if not costs:
        raise ValueError("no residue encodings to choose from: run the residue search first")
    bad = [m for m in costs if type(m) is not int or m < 2]
    if bad:
        raise ValueError(f"moduli must be integers >= 2, got {bad[0]!r}")
    target = capacity_needed(input_bits, k_max)
    need = _scaled_log2_floor(target) + 1
    floor_logs = {m: _scaled_log2_floor(m) for m in costs}
    ceil_logs = {m: v + (0 if m & (m - 1) == 0 else 1) for m, v in floor_logs.items()}
    results = {}
    wall = 0.0
    for label, logs in (("conservative", floor_logs), ("relaxed", ceil_logs)):
        model, pick, cost = _model(costs, need, logs)
        solver = cp_model.CpSolver()
        solver.parameters.random_seed = seed
        solver.parameters.num_workers = workers
        solver.parameters.max_time_in_seconds = time_limit
        status = solver.Solve(model)
        wall += solver.WallTime()
        results[label] = (solver, status, pick, cost)
    solver, status, pick, cost = results["conservative"]
    if status == cp_model.INFEASIBLE:
        return PlanResult([], 0, 0, "infeasible", wall)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return PlanResult([], 0, 0, "unknown", wall)
    moduli = [m for m in pick if solver.Value(pick[m])]
    if math.prod(moduli) <= target:
        # The floor-rounded logs make this impossible; checked because exactness rests on it.
        raise RuntimeError(f"internal error: moduli {moduli} do not exceed the capacity {target}")
    found = solver.Value(cost)
    r_solver, r_status, _, r_cost = results["relaxed"]
    lower = r_solver.Value(r_cost) if r_status == cp_model.OPTIMAL else int(r_solver.BestObjectiveBound()) // (len(costs) + 1)
    proven = status == cp_model.OPTIMAL and r_status == cp_model.OPTIMAL and lower == found
    return PlanResult(sorted(moduli), found, lower, "optimal" if proven else "feasible", wall)
