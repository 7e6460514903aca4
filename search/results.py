"""Search results as catalog files: ``ozaki-encoding/1`` and ``ozaki-plan/1`` dicts.

Every dict is passed through ``ozaki.formats`` (exhaustive re-verification) before it is
returned, so nothing unverified reaches the catalog.  The search record (seed, workers,
time limit, wall time, solver status, family, certificate) rides along as extra
top-level fields.
"""

from __future__ import annotations

import math

from ozaki.formats import encoding_from_dict, encoding_to_dict, plan_from_dict, plan_to_dict

from search.engine import Result
from search.plan import PlanResult, capacity_needed
from search.spec import Family

__all__ = ["encoding_dict", "plan_dict", "search_record"]

# Plane products accumulate in fp32 (24 significand bits) for float digit sets and in
# int32 for integer ones; the window is the K up to which no partial sum can leave the
# exact range.
_ACCUMULATOR = {"fp4": ("fp32", 2**24), "fp8": ("fp32", 2**24), "int8": ("int32", 2**31 - 1), "int4": ("int32", 2**31 - 1)}


def _certificate(result: Result) -> dict:
    fam = result.family.describe()
    if result.status == "optimal":
        claim = f"no encoding with fewer than {result.candidate.products} products within the family"
        proven = True
    elif result.status == "infeasible":
        claim = f"no encoding with at most {result.family.products} products within the family"
        proven = True
    elif result.status == "feasible":
        claim = f"an encoding with {result.candidate.products} products; fewer not refuted within the family"
        proven = False
    else:
        claim = f"search stopped at the time limit; at least {result.products_lower_bound} products within the family"
        proven = False
    out = {"claim": claim, "proven": proven, "family": fam, "products_lower_bound": result.products_lower_bound}
    if result.notes:
        out["beyond_the_family"] = list(result.notes)
    if result.spec.modulus is not None and type(result.family) is Family:
        # search.engine's residue families fix u_0 = 1; search.product_encodings reduces by units
        # without that assumption.
        out["assumes"] = "some A weight is a unit mod m (no restriction when m is a prime power)"
    return out


def search_record(result: Result, join: str, extra: dict | None = None) -> dict:
    """The provenance block stored with a result (also reported by the CLI)."""
    return {
        "engine": "ozaki-search (exhaustive covering sides + identity by lattice / CP-SAT)",
        "join": join,
        "seed": result.seed,
        "workers": result.workers,
        "time_limit_s": result.time_limit,
        "wall_s": round(result.wall_s, 3),
        "status": result.status,
        "family": result.family.as_dict(),
        "certificate": _certificate(result),
        **(extra or {}),
    }


def encoding_dict(result: Result, name: str, record: dict) -> dict:
    """The verified encoding dict for a search that found one."""
    cand, spec = result.candidate, result.spec
    if cand is None:
        raise ValueError(f"{name}: the search found no encoding (status {result.status}); nothing to write")

    def operand(side, weights, limbs):
        lo, hi = spec.side_range(side)
        return {"min": lo, "max": hi, "weights": list(weights), "limbs": [list(limbs[x]) for x in range(lo, hi + 1)]}

    accumulator, limit = _ACCUMULATOR[spec.digits]
    d = {
        "format": "ozaki-encoding/1",
        "name": name,
        "digits": spec.digits,
        "modulus": spec.modulus,
        "a": operand("a", cand.weights_a, cand.limbs_a),
        "b": operand("b", cand.weights_b, cand.limbs_b),
        "planes": [{"a": list(f), "b": list(g), "coefficient": c} for f, g, c in cand.planes],
        "products": cand.products,
        "max_plane_product": cand.max_plane_product,
        "accumulator": accumulator,
        "k_window": limit // cand.max_plane_product,
        "identity": result.identity,
        "search": record,
    }
    return encoding_to_dict(encoding_from_dict(d, name))


def plan_dict(name: str, digits: str, input_bits: int, k_max: int, chosen: PlanResult, encodings: dict) -> dict:
    """The verified plan dict; ``encodings`` maps modulus -> verified residue Encoding."""
    need = capacity_needed(input_bits, k_max)
    capacity = math.prod(chosen.moduli)
    d = {
        "format": "ozaki-plan/1",
        "name": name,
        "digits": digits,
        "input_bits": input_bits,
        "k_max": k_max,
        "moduli": [{"modulus": m, "encoding": encodings[m].name} for m in chosen.moduli],
        "products": sum(encodings[m].products for m in chosen.moduli),
        "capacity_bits": round(math.log2(capacity), 4),
        "needed_bits": round(math.log2(need), 4),
        "k_window": min(encodings[m].extra["k_window"] for m in chosen.moduli),
        "search": {
            "engine": "ozaki-search plan (CP-SAT over residue encodings)",
            "status": chosen.status,
            "products_lower_bound": chosen.lower_bound,
            "wall_s": round(chosen.wall_s, 3),
            "certificate": (
                "optimal among the catalog's residue encodings (conservative and relaxed capacity models agree)"
                if chosen.status == "optimal"
                else "not proven optimal"
            ),
        },
    }
    by_name = {enc.name: enc for enc in encodings.values()}
    return plan_to_dict(plan_from_dict(d, name, by_name))
