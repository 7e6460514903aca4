"""The search engine finds small encodings from scratch, proves what it claims, and
every result it returns passes ozaki.formats' exhaustive verification."""

from __future__ import annotations

import itertools
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from ozaki.formats import load_encoding
import search.catalog_writer as catalog_writer
from search.catalog_writer import find_product, find_residue, product_ladder, residue_dict, write_plans
from search.compose import compose, coprime_parts, idempotents
from search.engine import Result, search
from search.identity import identity_text
from search.lattice import echelon, members
from search.plan import capacity_needed, choose_moduli
from search.product_encodings import (
    _annihilator,
    extra_rows,
    lower_bound,
    nullspace,
    residue_lower_bound,
    row_permutations,
    search_product,
    supports,
)
from search.results import encoding_dict, search_record
from search.sides import choose_limbs, limb_vectors, menu, peaks
from search.spec import Family, Spec, default_family, minimal_limbs, product_family

# ------------------------------------------------------------------ residue encodings


@pytest.mark.parametrize(
    "modulus, digits, products",
    [
        (2, "int8", 1),
        (256, "int8", 1),
        (13, "fp4", 1),  # the fp4 digit set holds every residue mod 13
        (14, "fp4", 2),  # two limbs, two planes: one fewer than the difference-plane family
        (89, "fp4", 3),
        (169, "fp4", 3),
        (157, "fp4", 4),
        (16, "fp8", 1),
    ],
)
def test_residue_found_from_scratch_with_fewest_products(modulus, digits, products):
    result, ladder = find_residue(modulus, digits, workers=1, time_limit=60)
    assert result.status == "optimal"
    assert result.candidate.products == products
    assert ladder[-1]["status"] == "optimal"
    # encoding_dict re-verifies every input pair through ozaki.formats.
    d = encoding_dict(result, f"res{modulus}-{digits}-{products}", search_record(result, "enumerate"))
    assert d["products"] == products and d["modulus"] == modulus
    assert d["search"]["certificate"]["proven"] is True
    limit = 2**24 if digits.startswith("fp") else 2**31 - 1
    assert d["k_window"] == limit // d["max_plane_product"]


def test_three_limb_residue_found_from_scratch_by_the_modular_pairs_join():
    # 126 (= 2 * 7 * 9): the 1- and 2-limb families are refuted first (no 2-limb side
    # covers Z_126), then the plane-coordinate join mod 126 finds 3 products: one plane
    # per limb, a CRT split into 9, 7 and 2 (each a single digit mod its factor).
    # max_products = 3 keeps the side enumeration to the identity rows (seconds).
    result, ladder = find_residue(126, "fp4", workers=1, time_limit=60, max_products=3)
    assert [rung["status"] for rung in ladder] == ["infeasible", "infeasible", "optimal"]
    assert ladder[-1]["join"] == "pairs"
    assert result.status == "optimal" and result.candidate.products == 3
    d = encoding_dict(result, "res126-fp4-3", search_record(result, "pairs"))  # exhaustive re-verification
    assert d["modulus"] == 126 and d["products"] == 3
    assert "assumes" not in d["search"]["certificate"]  # units are reduced without assuming a unit weight


def test_residue_lower_bound_over_prime_fields():
    assert residue_lower_bound(Spec.residue(13, "fp4"))[0] == 1  # S holds every residue mod 13
    assert residue_lower_bound(Spec.residue(157, "fp4"))[0] == 3  # S + 24 S = Z_157
    bound, reason = residue_lower_bound(Spec.residue(163, "fp4"))
    assert bound == 5 and "no two terms" in reason  # alpha S + beta S never covers Z_163
    assert residue_lower_bound(Spec.residue(126, "fp4")) == (1, None)  # composite: no claim


@pytest.mark.parametrize("modulus", [6, 8, 9])
def test_annihilator_generates_every_solution(modulus):
    rng = np.random.default_rng(modulus)
    gens = rng.integers(-3, 4, size=(2, 4)).tolist()
    ann = _annihilator(gens, modulus)
    g = np.array(gens, dtype=np.int64)
    assert all(((g @ np.array(c)) % modulus == 0).all() for c in ann)
    every = np.array(list(itertools.product(range(modulus), repeat=4)), dtype=np.int64)
    solutions = every[((every @ g.T) % modulus == 0).all(axis=1)]
    assert members(echelon(ann, modulus), solutions).all()


def test_plan_uses_a_three_limb_residue_encoding(tmp_path):
    # 2 * 1 * (2^5 - 1)^2 = 1922 > 5 * 13 = 65: without res126 (found with three limbs by
    # the modular pairs join) no plan over these files exists; with it, {5, 13, 126}.
    repo = Path(__file__).resolve().parent.parent / "encodings" / "residue"
    (tmp_path / "residue").mkdir()
    for name in ("res5-fp4-1", "res13-fp4-1", "res126-fp4-3"):
        shutil.copy(repo / f"{name}.json", tmp_path / "residue" / f"{name}.json")
    assert write_plans(tmp_path, "fp4", bits=(5,), ks=(1,), report=lambda _m: None) == ["b5-fp4-k1"]
    plan = json.loads((tmp_path / "plan" / "b5-fp4-k1.json").read_text())
    assert [m["modulus"] for m in plan["moduli"]] == [5, 13, 126] and plan["products"] == 5
    assert load_encoding(repo / "res126-fp4-3.json").extra["search"]["join"] == "pairs"


def test_residue_infeasible_is_proven():
    # |S|^2 = 225 < 256 digit pairs: two fp4 limbs cannot reach all 256 residues.
    spec = Spec.residue(256, "fp4")
    result = search(spec, default_family(spec, 4, limbs_a=2, limbs_b=2), workers=1, join="enumerate")
    assert result.status == "infeasible"
    assert result.candidate is None
    assert result.products_lower_bound == 5
    assert residue_dict(256, "fp4", time_limit=30) is None


# ------------------------------------------------------------------ CRT composition


def _check_residue_encoding(candidate, spec):
    """Every input pair, by a route of its own: the limbs spell x, every plane value is a
    digit, and the planes give x·y mod m."""
    m, digits = spec.modulus, set(spec.digit_values)

    def planes(side, x):
        limbs = (candidate.limbs_a if side == "a" else candidate.limbs_b)[x]
        rows = [f if side == "a" else g for f, g, _ in candidate.planes]
        return [sum(c * d for c, d in zip(row, limbs)) for row in rows]

    for side, weights in (("a", candidate.weights_a), ("b", candidate.weights_b)):
        lo, hi = spec.side_range(side)
        for x in range(lo, hi + 1):
            limbs = (candidate.limbs_a if side == "a" else candidate.limbs_b)[x]
            assert sum(w * d for w, d in zip(weights, limbs)) % m == x % m
            assert set(planes(side, x)) <= digits
    coefficients = [c for _, _, c in candidate.planes]
    (lo_a, hi_a), (lo_b, hi_b) = spec.side_range("a"), spec.side_range("b")
    pa = {x: planes("a", x) for x in range(lo_a, hi_a + 1)}
    pb = {y: planes("b", y) for y in range(lo_b, hi_b + 1)}
    for x, y in itertools.product(pa, pb):
        assert sum(c * p * q for c, p, q in zip(coefficients, pa[x], pb[y])) % m == x * y % m, (x, y)


@pytest.mark.parametrize("modulus", [6, 35, 63, 143, 210])
def test_crt_composition_is_an_encoding_with_the_parts_products(modulus):
    parts = coprime_parts(modulus)
    found = []
    for part in parts:
        result, _ = find_residue(part, "fp4", workers=1, time_limit=30)
        found.append((result.spec, result.candidate))
    spec = Spec.residue(modulus, "fp4")
    composed = compose(spec, found)
    assert composed.products == sum(c.products for _, c in found)
    _check_residue_encoding(composed, spec)


def test_idempotents_split_the_ring():
    parts = (8, 9, 5, 7)
    units = idempotents(parts)
    m = math.prod(parts)
    for j, (unit, part) in enumerate(zip(units, parts)):
        assert unit % part == 1 and all(unit % other == 0 for k, other in enumerate(parts) if k != j)
        assert unit * unit % m == unit
    assert sum(units) % m == 1


def test_compose_refuses_parts_that_are_not_coprime_factors():
    found = find_residue(3, "fp4", workers=1, time_limit=30)[0]
    with pytest.raises(ValueError, match="not pairwise coprime factors of 9"):
        compose(Spec.residue(9, "fp4"), [(found.spec, found.candidate), (found.spec, found.candidate)])


def test_find_residue_composes_where_the_direct_search_finds_nothing(monkeypatch):
    # The direct search mod 35 is cut short (as the 3-limb rung times out for 206, 212, ...):
    # the ladder ends in the composition of 5 and 7, recorded as a construction.
    real = catalog_writer.search

    def cut_short(spec, family, **kwargs):
        if spec.modulus == 35:
            return Result(spec, family, "unknown", None, 1, 0.0, 0, 1, 0.0)
        return real(spec, family, **kwargs)

    monkeypatch.setattr(catalog_writer, "search", cut_short)
    result, ladder = find_residue(35, "fp4", workers=1, time_limit=30)
    assert [rung["join"] for rung in ladder] == ["enumerate", "crt"]
    assert ladder[-1]["status"] == "feasible" and [p["modulus"] for p in ladder[-1]["parts"]] == [5, 7]
    assert result.status == "feasible" and result.candidate.products == 2
    d = encoding_dict(result, "res35-fp4-2", search_record(result, "crt", {"ladder": ladder}))  # formats re-verifies
    assert d["search"]["certificate"]["proven"] is False
    assert d["search"]["family"] == {"crt_parts": [5, 7], "products": 2}


def test_prime_powers_are_not_composed():
    assert coprime_parts(256) == (256,) and coprime_parts(243) == (243,)
    assert coprime_parts(2 * 103) == (2, 103) and coprime_parts(252) == (4, 7, 9)


# ------------------------------------------------------------------ product encodings


@pytest.mark.parametrize(
    "a, b, cap, join, products",
    [
        ("int4", "int4", 4, "enumerate", 3),
        ("int4", "int4", 4, "model", 3),
        ("int4", "int4", 4, "pairs", 3),
        ("-20:20", "int4", 4, "enumerate", 3),
        ("-20:20", "int4", 4, "pairs", 3),
        ("int4", "-3:3", 2, "enumerate", 2),
        ("int4", "-3:3", 2, "pairs", 2),
    ],
)
def test_small_products_found_and_verified(a, b, cap, join, products):
    result, ladder = find_product(a, b, "fp4", cap, join=join, workers=1, time_limit=60)
    assert result.status == "optimal" and ladder[-1]["status"] == "optimal"
    assert result.candidate.products == products
    d = encoding_dict(result, f"t-{products}", search_record(result, join))
    lo, hi = (-8, 7) if a == "int4" else tuple(map(int, a.split(":")))
    assert (d["a"]["min"], d["a"]["max"]) == (lo, hi)


def test_product_one_fewer_is_refuted():
    result, _ = find_product("int4", "int4", "fp4", 2, join="enumerate", workers=1, time_limit=60)
    assert result.status == "infeasible"
    assert result.products_lower_bound == 3


# ------------------------------------------------------- product search (plane coordinates)


@pytest.mark.parametrize(
    "a, b, bound",
    [((-128, 127), (-8, 7), 4), ((-128, 127), (-128, 127), 5), ((-8, 7), (-8, 7), 3), ((-7, 7), (-1, 1), 1)],
)
def test_rank_lower_bound(a, b, bound):
    # 15 fp4 digits: 256 inputs need rank 3, 16 need 2, 15 need 1; P >= rank_A + rank_B - 1.
    assert lower_bound(Spec("fp4", *a, *b)) == bound


def test_below_the_rank_bound_is_refuted_without_search():
    spec = Spec("fp4", -128, 127, -8, 7)
    result = search_product(spec, product_family(spec, 3), workers=1)
    assert result.status == "infeasible" and result.products_lower_bound == 4
    assert "at least 4 products" in result.notes[0]


def test_the_rank_bound_is_tight_where_the_search_reaches_it():
    # int4 x int4: rank 2 + 2 - 1 = 3, and the search finds 3.
    spec = Spec("fp4", -8, 7, -8, 7)
    result = search_product(spec, product_family(spec, 4), workers=1)
    assert result.status == "optimal" and result.candidate.products == lower_bound(spec) == 3
    d = encoding_dict(result, "int4xint4-fp4-3", search_record(result, "pairs"))
    cert = d["search"]["certificate"]
    assert cert["proven"] and "at least 3 products" in cert["beyond_the_family"][0]


def test_a_refuted_family_is_recorded_and_the_ladder_moves_on():
    # [-30, 30] x int4 in 3 products (the rank bound): the first six families of the
    # ladder are refuted, coefficient bounds (2, 3) hold an encoding.
    result, ladder = find_product("-30:30", "-8:7", "fp4", 3, workers=1, time_limit=60)
    assert result.status == "optimal" and result.candidate.products == 3
    assert [r["status"] for r in ladder] == ["infeasible"] * 6 + ["optimal"]
    assert (result.family.coefficient_bound_a, result.family.coefficient_bound_b) == (2, 3)
    encoding_dict(result, "t-3", search_record(result, "pairs", {"ladder": ladder}))


def test_family_too_small_is_infeasible_and_proven():
    # [-30, 30] x int4: 3 products meet the rank bound, but not with extra rows in [-1, 1].
    spec = Spec("fp4", -30, 30, -8, 7)
    result = search_product(spec, product_family(spec, 3), workers=1)
    assert result.status == "infeasible" and result.candidate is None and result.products_lower_bound == 4


def test_product_time_limit_bounds_the_whole_search():
    spec = Spec("fp4", -128, 127, -128, 127)
    result = search_product(spec, product_family(spec, 6), workers=1, time_limit=0.5)
    assert result.status == "unknown" and result.candidate is None
    assert result.wall_s < 30  # the first coverage pass is one vectorised step; the rest checks the clock


def test_product_ladder_tries_small_menus_first():
    rungs = product_ladder(Spec("fp4", -128, 127, -8, 7))
    assert rungs[:3] == [(1, 1), (1, 2), (1, 3)]
    assert len(extra_rows(3, 1, Spec.residue(13, "fp4").digit_values)) == 10


@pytest.mark.parametrize("ka, kb, size", [(3, 3, 5), (4, 3, 4), (2, 2, 2), (3, 2, 4), (4, 4, 4)])
def test_supports_are_exactly_the_covering_cell_sets(ka, kb, size):
    cells = list(itertools.product(range(ka), range(kb)))
    brute = {c for c in itertools.combinations(cells, size)
             if {i for i, _ in c} == set(range(ka)) and {j for _, j in c} == set(range(kb))}
    got = list(supports(ka, kb, size))
    assert len(got) == len(set(got)) and set(got) == brute


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=4, max_size=4), min_size=1, max_size=3))
def test_nullspace_is_an_integer_basis_of_the_complement(vectors):
    basis = nullspace(vectors, 4)
    m = sympy.Matrix(vectors)
    assert len(basis) == 4 - m.rank()
    assert all(sum(a * b for a, b in zip(v, c)) == 0 for v in vectors for c in basis)
    if basis:
        assert sympy.Matrix(basis).rank() == len(basis)


def test_row_permutations_of_symmetric_row_sets():
    identity = ((1, 0, 0), (0, 1, 0), (0, 0, 1))
    assert len(row_permutations(identity)) == 6
    diffs = identity + ((-1, 1, 0), (-1, 0, 1), (0, -1, 1))
    perms = row_permutations(tuple(tuple(r) for r in diffs))
    assert len(perms) == 6 and all(sorted(p) == list(range(6)) for p in perms)


def test_digit_set_that_cannot_cover_is_infeasible():
    # One int4 limb cannot store 20; the engine proves it rather than guessing.
    spec = Spec("int4", -20, 20, -1, 1)
    result = search(spec, default_family(spec, 1, limbs_a=1, limbs_b=1), workers=1)
    assert result.status == "infeasible"


# ---------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Spec("fp5", 0, 1, 0, 1), ValueError, "unknown digit set 'fp5'"),
        (lambda: Spec("fp4", 3, 1, 0, 1), ValueError, "bad range for a"),
        (lambda: Spec("fp4", 0, 1.5, 0, 1), TypeError, "a_max must be an integer"),
        (lambda: Spec("fp4", 0, 5, 0, 9, 7), ValueError, "range of a spans 6 integers, fewer than the modulus 7"),
        (lambda: Spec.residue(1, "fp4"), ValueError, "modulus must be at least 2"),
        (lambda: Family(0, 1, 1, 1, 1, 1, 1, 1), ValueError, "products must be at least 1"),
        (lambda: search(Spec.residue(5, "fp4"), Family(1, 1, 1, 1, 1, 2, 2, 5), join="sat"), ValueError, "join must be"),
    ],
)
def test_bad_requests_raise_clear_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_minimal_limbs_counts_digit_vectors():
    assert minimal_limbs(13, "fp4") == 1
    assert minimal_limbs(16, "fp4") == 2
    assert minimal_limbs(256, "fp4") == 3
    assert minimal_limbs(256, "int8") == 1


# ------------------------------------------------------------------- building blocks


def test_menu_holds_one_row_per_sign_pair():
    rows = menu(2, 1)
    assert len(rows) == (3**2 - 1) // 2
    assert all(tuple(-c for c in r) not in rows for r in rows)


def test_limb_vectors_keep_every_plane_in_the_digit_set():
    rows = [(1, 0), (0, 1), (1, -1)]
    s = Spec.residue(89, "fp4").digit_values
    d = limb_vectors(rows, s)
    brute = {(x, y) for x in s for y in s if x - y in s}
    assert {tuple(map(int, v)) for v in d} == brute


def test_identity_text_rejects_a_broken_identity():
    ok = identity_text((1, 2), (1,), [((1, 0), (1,), 1), ((0, 1), (1,), 2)], None)
    assert "==" in ok
    with pytest.raises(ValueError, match="coefficient of d1\\*e0 is 1, want 0"):
        identity_text((1, 2), (1,), [((1, 0), (1,), 1), ((0, 1), (1,), 3)], None)
    # Modulo 5, a coefficient off by 5 is fine.
    identity_text((1, 2), (1,), [((1, 0), (1,), 1), ((0, 1), (1,), 7)], 5)


def _gcd_of_maximal_minors(rows):
    """(rank, gcd of the rank x rank minors) of an integer matrix: for lattices L <= L' of
    one rank, [L' : L] = d(L) / d(L'), so w is in L exactly when adding it keeps d."""
    m = sympy.Matrix(rows)
    r = m.rank()
    minors = [
        m.extract(list(ri), list(ci)).det()
        for ri in itertools.combinations(range(m.rows), r)
        for ci in itertools.combinations(range(m.cols), r)
    ]
    return r, math.gcd(*(int(x) for x in minors))


@settings(max_examples=60, deadline=None)
@given(
    gens=st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=1, max_size=3),
    modulus=st.sampled_from([None, 4, 5, 6]),
    coeffs=st.lists(st.integers(-4, 4), min_size=3, max_size=3),
    noise=st.lists(st.integers(-2, 2), min_size=3, max_size=3),
)
def test_lattice_membership_matches_an_independent_criterion(gens, modulus, coeffs, noise):
    if not any(any(g) for g in gens) and modulus is None:
        gens = gens + [[1, 0, 0]]
    inside = [sum(c * g[k] for c, g in zip(coeffs, gens)) for k in range(3)]
    outside = [x + n for x, n in zip(inside, noise)]
    basis = echelon(gens, modulus)
    got = members(basis, np.array([inside, outside]))
    assert got[0]

    if modulus is None:
        # Coefficients of a member can be far outside any small box, so decide by minors.
        expected = _gcd_of_maximal_minors(gens) == _gcd_of_maximal_minors(gens + [outside])
    else:
        box = range(modulus)
        expected = any(
            all((outside[k] - sum(c * g[k] for c, g in zip(lam, gens))) % modulus == 0 for k in range(3))
            for lam in itertools.product(box, repeat=len(gens))
        )
    assert got[1] == expected


def test_lattice_membership_with_coefficients_beyond_any_small_box():
    # Unimodular generators span Z^3; (1, 0, 1) needs the coefficients (-15, 5, 2).
    gens = [[0, 1, 0], [1, 3, -1], [-2, 0, 3]]
    assert members(echelon(gens), np.array([[1, 0, 1]]))[0]


# --------------------------------------------------------------------------- plans


def _brute_plan(costs, need, most=5):
    best = None
    for r in range(1, most + 1):
        for combo in itertools.combinations(sorted(costs), r):
            if math.prod(combo) > need and all(math.gcd(x, y) == 1 for x, y in itertools.combinations(combo, 2)):
                c = sum(costs[m] for m in combo)
                best = c if best is None else min(best, c)
    return best


@pytest.mark.parametrize("bits, k", [(2, 1), (3, 4), (4, 16), (5, 8)])
def test_plan_model_is_optimal_on_small_cases(bits, k):
    # Costs rise with the modulus and multiples of 5 are missing, so the choice is not trivial.
    costs = {m: 1 + (m > 13) + 2 * (m > 19) for m in range(2, 25) if m % 5}
    chosen = choose_moduli(costs, bits, k, workers=1)
    need = capacity_needed(bits, k)
    assert chosen.status == "optimal"
    assert math.prod(chosen.moduli) > need
    assert all(math.gcd(x, y) == 1 for x, y in itertools.combinations(chosen.moduli, 2))
    assert chosen.cost == chosen.lower_bound == _brute_plan(costs, need)


def test_plan_reports_unreachable_capacity():
    chosen = choose_moduli({7: 1, 8: 1, 9: 1}, 10, 16, workers=1)
    assert chosen.status == "infeasible" and chosen.moduli == []
    with pytest.raises(ValueError, match="input_bits must be a positive integer"):
        capacity_needed(0, 16)
    with pytest.raises(ValueError, match="no residue encodings"):
        choose_moduli({}, 53, 16384)


@pytest.mark.parametrize("modulus, rows", [(89, [(1, 0), (0, 1), (1, -1)]), (157, [(1, 0), (0, 1)])])
def test_peaks_match_the_limbs_choose_limbs_picks(modulus, rows):
    spec = Spec.residue(modulus, "fp4")
    weights = np.array([[1, n] for n in range(2, 30)], dtype=np.int64)
    got = peaks(spec, "a", rows, weights)
    for w, peak in zip(weights, got):
        try:
            limbs = choose_limbs(spec, "a", tuple(w), rows)
        except ValueError:
            continue  # these weights do not cover; their peak is meaningless
        want = max(abs(sum(c * x for c, x in zip(r, d))) for d in limbs.values() for r in rows)
        assert peak == want
