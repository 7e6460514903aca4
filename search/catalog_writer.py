"""Regenerating the ``encodings/`` catalog from specifications alone.

Residue encodings: for each digit set and modulus, the engine searches 1 limb, then 2
limbs per side (plane rows with entries in [-1, 1]), fewest products first; where both
are refuted, 3 limbs per side in plane coordinates (search.product_encodings with a
modulus); where nothing is found for a composite modulus, the CRT composition of its
parts' encodings (search.compose).  Plans: for each digit set, input width and K, the
moduli model (search.plan) over the residue encodings just written.  Product encodings
(only when asked: slow, see benchmarks/search.md): the specs INT8 x INT4 and INT8 x INT8
over fp4, searched by search.product_encodings.  Nothing here names an answer; it names
only what is asked.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import time
from pathlib import Path
from typing import Callable

from kernels.digits import digit_set
from kernels.float64 import SIGNIFICAND_BITS
from ozaki.formats import dump_json, load_encoding, load_plan

from search.compose import CrtFamily, compose, coprime_parts
from search.engine import Result, search
from search.identity import identity_text
from search.plan import choose_moduli
from search.product_encodings import extra_rows, residue_lower_bound, search_product
from search.results import encoding_dict, plan_dict, search_record
from search.spec import ProductFamily, Spec, default_family, minimal_limbs, product_family

__all__ = [
    "DEFAULT_WEIGHT_BOUNDS",
    "PLAN_BITS",
    "PRODUCT_COEFFICIENT_BOUNDS",
    "PLAN_K",
    "find_product",
    "find_residue",
    "cheapest_residues",
    "input_range",
    "plan_name",
    "product_ladder",
    "regenerate",
    "residue_dict",
    "verify",
    "write_plans",
]

PLAN_BITS = (16, 24, 32, 40, 44, 48, SIGNIFICAND_BITS, 56, 60, 64, 72, 80, 96)
PLAN_K = (4096, 16384, 65536)
_RESIDUE_LIMBS = 2
# Products the 3-limb residue rung may use: a modulus m costing P products helps an FP64
# plan only while P / log2(m) beats the plan's marginal rate; for fp4 (53 bits, K = 16384)
# 5 products never does (benchmarks/search.md); 6 (three limbs and their differences, as
# for INT8 x INT8) fills the catalog for the primes from 163 on, where 5 is refuted.
RESIDUE_MAX_PRODUCTS = 6
# fp8 stores integers up to 448, so small weights already cover every modulus up to
# 256; bounding them keeps the exhaustive side enumeration to seconds.  Recorded in
# each file's family like every other bound.
DEFAULT_WEIGHT_BOUNDS = {"fp8": 24}


def input_range(name: str) -> tuple[int, int]:
    """The integers an input type holds: a digit-set name (int8, int4, ...) or 'lo:hi'."""
    if ":" in name:
        lo, _, hi = name.partition(":")
        try:
            return int(lo), int(hi)
        except ValueError:
            raise ValueError(f"bad input range {name!r}: want an integer type name or 'lo:hi'") from None
    values = digit_set(name)
    return min(values), max(values)


def find_residue(modulus: int, digits: str, *, weight_bound: int | None = None, seed: int = 0, workers: int = 1,
                 time_limit: float = 120.0, max_products: int = RESIDUE_MAX_PRODUCTS,
                 progress: Callable[[str], None] | None = None) -> tuple[Result, list]:
    """(result, ladder): the residue encoding mod ``modulus`` with the fewest products
    found with 1, then 2 limbs per side (search.engine, limb coordinates), then 3 limbs
    per side in plane coordinates (search.product_encodings with a modulus: identity rows plus
    extra rows in [-1, 1], weights all residues up to units, at most ``max_products``);
    ``ladder`` records each family's outcome and join.  Where all of that finds nothing and
    m is composite, the CRT composition of encodings mod its prime-power parts (search.compose,
    each part searched from scratch by this ladder).  ``weight_bound`` defaults to
    :data:`DEFAULT_WEIGHT_BOUNDS` (else m // 2); it bounds the first two rungs only.
    ``time_limit`` bounds the whole call: each rung, and each part of a composition, gets
    what is left of it, and a composition is not started once it is spent."""
    started = time.monotonic()
    deadline = started + time_limit
    spec = Spec.residue(modulus, digits)
    search_options = dict(weight_bound=weight_bound, seed=seed, workers=workers, time_limit=time_limit,
                          max_products=max_products, progress=progress)
    if weight_bound is None:
        weight_bound = DEFAULT_WEIGHT_BOUNDS.get(digits)
    ladder = []
    result = None
    for limbs in range(1, _RESIDUE_LIMBS + 1):
        family = default_family(spec, limbs * limbs, limbs_a=limbs, limbs_b=limbs)
        if weight_bound is not None:
            family = dataclasses.replace(family, weight_bound_a=weight_bound, weight_bound_b=weight_bound)
        result = search(spec, family, seed=seed, workers=workers, time_limit=deadline - time.monotonic(),
                        progress=progress, join="enumerate")
        ladder.append({"limbs": limbs, "join": "enumerate", "family": family.describe(), "status": result.status})
        if result.candidate is not None:
            return result, ladder
        if result.status == "unknown":
            return _composed_if_composite(spec, result, ladder, started, deadline, **search_options)
    # Two limbs per side refuted: three, where the plane-coordinate join pays off (3375
    # digit vectors per side instead of 225).  Not capped below: the rung proves its own
    # fewest products within its family (or that none has at most max_products).
    # Caps rise one product at a time: a cap of P enumerates row sets of at most P rows,
    # so a modulus that needs 3 or 4 products never pays for the 6-row side sets.  Each
    # rung re-proves the sizes below it (cheap); the identity-row coverage pass is shared
    # (search.product_encodings caches it).
    half = max(1, modulus // 2)
    for cap in range(3, max_products + 1):
        family = ProductFamily(cap, 3, 3, 1, 1, half, half, modulus)
        result = search_product(spec, family, seed=seed, workers=workers, time_limit=deadline - time.monotonic(),
                                progress=progress)
        ladder.append({"limbs": 3, "join": "pairs", "family": family.describe(), "status": result.status})
        if result.candidate is not None or result.status == "unknown" or time.monotonic() >= deadline:
            break
    if result.candidate is None:
        return _composed_if_composite(spec, result, ladder, started, deadline, **search_options)
    return result, ladder


def _composed_if_composite(spec: Spec, direct: Result, ladder: list, started: float, deadline: float,
                           **search) -> tuple[Result, list]:
    """Where the direct search found nothing and m has several prime-power parts: the CRT
    composition (search.compose) of the fewest-product encodings found mod each part, each
    by its own find_residue, appended to ``ladder`` with the parts' records.  A construction:
    status "feasible" (not proven fewest), or "unknown" when a part has no encoding.  Its wall
    time is the whole ladder's, from ``started``; each part gets what is left until ``deadline``,
    and with nothing left there is no composition (``direct`` is returned)."""
    parts = coprime_parts(spec.modulus)
    if len(parts) == 1 or time.monotonic() >= deadline:
        return direct, ladder
    found, records = [], []
    for part in parts:
        part_result, part_ladder = find_residue(part, spec.digits,
                                                **{**search, "time_limit": deadline - time.monotonic()})
        records.append({"modulus": part, "status": part_result.status, "ladder": part_ladder,
                        "products": part_result.candidate.products if part_result.candidate else None})
        found.append((part_result.spec, part_result.candidate))
    candidate = compose(spec, found) if all(c is not None for _, c in found) else None
    family = CrtFamily(spec.modulus, parts, candidate.products if candidate else 0)
    # A composite m: residue_lower_bound claims no more than one product, so no notes.
    result = Result(spec, family, "feasible" if candidate else "unknown", candidate, residue_lower_bound(spec)[0],
                    time.monotonic() - started, search["seed"], search["workers"], search["time_limit"])
    if candidate is not None:
        result.identity = identity_text(candidate.weights_a, candidate.weights_b, candidate.planes, spec.modulus)
    ladder.append({"join": "crt", "family": family.describe(), "status": result.status, "parts": records})
    return result, ladder


def residue_dict(modulus: int, digits: str, **kwargs) -> dict | None:
    """The verified catalog dict for one modulus, or None when nothing was found."""
    result, ladder = find_residue(modulus, digits, **kwargs)
    if result.candidate is None:
        return None
    name = f"res{modulus}-{digits}-{result.candidate.products}"
    return encoding_dict(result, name, search_record(result, ladder[-1]["join"], {"ladder": ladder}))


# Plane-row coefficient bounds the product ladder tries per side (see find_product).
PRODUCT_COEFFICIENT_BOUNDS = (1, 2, 3, 4)


def product_ladder(spec: Spec) -> list[tuple[int, int]]:
    """(A, B) plane-row coefficient bounds in the order the product search tries them:
    by the number of extra plane rows they allow (smaller menus first, their searches are
    cheaper and their refutations stronger statements), ties by the bounds."""
    digits = spec.digit_values
    limbs = {s: minimal_limbs(spec.count(s), spec.digits) for s in "ab"}
    size = {(s, c): len(extra_rows(limbs[s], c, digits)) for s in "ab" for c in PRODUCT_COEFFICIENT_BOUNDS}
    pairs = itertools.product(PRODUCT_COEFFICIENT_BOUNDS, repeat=2)
    return sorted(pairs, key=lambda p: (size["a", p[0]] + size["b", p[1]], p))


def find_product(a: str, b: str, digits: str, max_products: int, *, limbs_a=None, limbs_b=None,
                 coefficient_bound_a: int | None = None, coefficient_bound_b: int | None = None,
                 weight_bound_a=None, weight_bound_b=None, join: str = "pairs", seed: int = 0, workers: int = 2,
                 time_limit: float = 60.0, progress=None) -> tuple[Result, list]:
    """(result, ladder): the exact encoding of a x b (input type names or 'lo:hi' ranges)
    with the fewest products.

    ``join`` = "pairs" (search.product_encodings, plane coordinates): without coefficient bounds,
    the families of :func:`product_ladder` are searched in turn until one holds an
    encoding; ``ladder`` records each family's outcome (a refuted family is a proof).
    "model" / "enumerate" run search.engine on one limb-coordinate family (coefficient
    bounds default to 1).  ``time_limit`` bounds the whole call."""
    (a_lo, a_hi), (b_lo, b_hi) = input_range(a), input_range(b)
    spec = Spec(digits, a_lo, a_hi, b_lo, b_hi)
    weights = {k: v for k, v in (("weight_bound_a", weight_bound_a), ("weight_bound_b", weight_bound_b)) if v}
    if join != "pairs":
        family = default_family(spec, max_products, limbs_a=limbs_a, limbs_b=limbs_b,
                                coefficient_bound_a=coefficient_bound_a or 1,
                                coefficient_bound_b=coefficient_bound_b or 1)
        family = dataclasses.replace(family, **weights)
        result = search(spec, family, seed=seed, workers=workers, time_limit=time_limit, progress=progress, join=join)
        return result, [{"family": family.describe(), "status": result.status}]
    if coefficient_bound_a is not None or coefficient_bound_b is not None:
        rungs = [(coefficient_bound_a or 1, coefficient_bound_b or 1)]
    else:
        rungs = product_ladder(spec)
    started = time.monotonic()
    deadline = started + time_limit
    cache, ladder, result = {}, [], None
    for ca, cb in rungs:
        family = product_family(spec, max_products, limbs_a=limbs_a, limbs_b=limbs_b, coefficient_bound_a=ca,
                                coefficient_bound_b=cb, **weights)
        if progress:
            progress(f"family: coefficient bounds A {ca}, B {cb}")
        result = search_product(spec, family, seed=seed, workers=workers, time_limit=deadline - time.monotonic(),
                                progress=progress, cache=cache)
        ladder.append({"family": family.describe(), "status": result.status})
        if result.candidate is not None or result.status == "unknown" or time.monotonic() >= deadline:
            break
    result.wall_s = time.monotonic() - started  # the whole ladder, not its last family
    return result, ladder


def plan_name(digits: str, input_bits: int, k_max: int) -> str:
    """``fp64-<digits>-k16384`` for the FP64 case (53 bits, K = 16384), else ``b<bits>-<digits>-k<k>``."""
    if input_bits == SIGNIFICAND_BITS and k_max == 16384:
        return f"fp64-{digits}-k{k_max}"
    return f"b{input_bits}-{digits}-k{k_max}"


def _residue_task(args):
    modulus, digits, weight_bound, time_limit = args
    return modulus, digits, residue_dict(modulus, digits, weight_bound=weight_bound, time_limit=time_limit)


def cheapest_residues(directory: Path, digits: str, min_k_window: int = 0) -> dict:
    """modulus -> the residue encoding with the fewest products (then widest window) in
    ``directory``, ignoring encodings whose exact accumulation window is below ``min_k_window``."""
    best = {}
    for path in sorted(directory.glob("*.json")):
        enc = load_encoding(path)
        window = enc.extra.get("k_window", enc.accumulation_window())
        if enc.digits != digits or enc.modulus is None or window < min_k_window:
            continue
        key = (enc.products, -window)
        if enc.modulus not in best or key < best[enc.modulus][0]:
            best[enc.modulus] = (key, enc)
    return {m: enc for m, (_, enc) in best.items()}


def write_plans(out: Path, digits: str, bits=PLAN_BITS, ks=PLAN_K, *, report=print, time_limit: float = 60.0) -> list[str]:
    """Writes every plan (digits x bits x K) that the residue encodings in ``out/residue`` allow."""
    encodings = cheapest_residues(out / "residue", digits)
    costs = {m: enc.products for m, enc in encodings.items()}
    written = []
    (out / "plan").mkdir(parents=True, exist_ok=True)
    for input_bits in bits:
        for k_max in ks:
            chosen = choose_moduli(costs, input_bits, k_max, time_limit=time_limit)
            name = plan_name(digits, input_bits, k_max)
            if not chosen.moduli:
                report(f"{name}: no plan ({chosen.status}): the residue encodings cannot reach the capacity")
                continue
            dump_json(plan_dict(name, digits, input_bits, k_max, chosen, encodings), out / "plan" / f"{name}.json")
            report(f"{name}: {chosen.cost} products over {len(chosen.moduli)} moduli ({chosen.status})")
            written.append(name)
    return written


def regenerate(out: str | Path, digits=("int8", "fp8", "fp4"), moduli=range(2, 257), *, jobs: int = 2,
               residue_time_limit: float = 120.0, weight_bounds: dict | None = None, products: bool = False,
               product_time_limit: float = 600.0, report=print) -> None:
    """Rebuilds the catalog under ``out``: residue/, plan/ and product/ (see module doc)."""
    out = Path(out)
    (out / "residue").mkdir(parents=True, exist_ok=True)
    tasks = [(m, d, (weight_bounds or {}).get(d), residue_time_limit) for d in digits for m in moduli]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for modulus, d, found in pool.imap_unordered(_residue_task, tasks):
            if found is None:
                report(f"res{modulus}-{d}: none found within the searched families")
                continue
            dump_json(found, out / "residue" / f"{found['name']}.json")
            report(f"{found['name']}: {found['search']['status']}, {found['search']['wall_s']}s")
    for d in digits:
        write_plans(out, d, report=report)
    if products:
        (out / "product").mkdir(parents=True, exist_ok=True)
        for a, b, cap in (("int8", "int4", 4), ("int8", "int8", 6)):
            result, ladder = find_product(a, b, "fp4", cap, time_limit=product_time_limit, workers=jobs,
                                          progress=report)
            if result.candidate is None:
                report(f"{a}x{b}-fp4: none found ({result.status})")
                continue
            name = f"{a}x{b}-fp4-{result.candidate.products}"
            found = encoding_dict(result, name, search_record(result, "pairs", {"ladder": ladder}))
            dump_json(found, out / "product" / f"{name}.json")
            report(f"{name}: {result.status}")


def _encodings_near(path: Path) -> dict:
    """name -> Encoding for every encoding file in the catalog a plan file sits in
    (``<root>/plan/x.json`` -> everything under ``<root>``)."""
    found = {}
    for candidate in sorted(path.resolve().parent.parent.rglob("*.json")):
        if json.loads(candidate.read_text(encoding="utf-8")).get("format") == "ozaki-encoding/1":
            enc = load_encoding(candidate)
            found[enc.name] = enc
    return found


def verify(paths) -> list[str]:
    """Loads every file through ozaki.formats (exhaustive re-verification; a plan is
    checked against the encodings of its own catalog); one line per file.  Raises
    ``ValueError`` naming the file and the first failing case."""
    lines = []
    for path in map(Path, paths):
        try:
            kind = json.loads(path.read_text(encoding="utf-8")).get("format")
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: cannot read as JSON: {err}") from None
        if kind == "ozaki-plan/1":
            plan = load_plan(path, _encodings_near(path))
            lines.append(f"{path}: ok (plan {plan.name}, {plan.products} products, capacity 2^{plan.capacity_bits:.2f})")
        else:
            enc = load_encoding(path)
            lines.append(f"{path}: ok (encoding {enc.name}, {enc.products} products, every input pair checked)")
    return lines
