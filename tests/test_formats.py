"""ozaki.formats: exhaustive verification of encodings and plans, and exact round trips.

The fixtures are built here by brute force from identities stated beside each one (they are
not catalog content), then written to files and tampered with one defect at a time.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import ozaki
from kernels.digits import digit_set
from ozaki.formats import (
    Encoding,
    Plan,
    dump_json,
    encoding_from_dict,
    encoding_to_dict,
    load_encoding,
    load_plan,
    plan_from_dict,
    plan_to_dict,
)

CATALOG = Path(ozaki.__file__).resolve().parent.parent / "encodings"


def _files(fmt: str) -> list[Path]:
    if not CATALOG.is_dir():
        return []
    found = []
    for path in sorted(CATALOG.rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            doc = None
        # A file that is not even a JSON object joins both lists, so its loader test fails naming it.
        if not isinstance(doc, dict) or doc.get("format") == fmt:
            found.append(path)
    return found


# ------------------------------------------------------------------ fixtures


def _find_limbs(inputs, weights, rows, digits, modulus=None, box=range(-12, 13)):
    """For each input x, the first limb vector d (scanning ``box``) with weights.d = x (mod m)
    whose every plane value rows[t].d lies in the digit set."""
    allowed = digit_set(digits)
    first = {}
    for d in itertools.product(box, repeat=len(weights)):
        if all(sum(f * v for f, v in zip(row, d)) in allowed for row in rows):
            value = sum(w * v for w, v in zip(weights, d))
            first.setdefault(value % modulus if modulus else value, list(d))
    return [first[x % modulus if modulus else x] for x in inputs]


def _operand(lo, hi, weights, rows, digits, modulus=None):
    limbs = _find_limbs(range(lo, hi + 1), weights, rows, digits, modulus)
    return {"min": lo, "max": hi, "weights": list(weights), "limbs": limbs}


def _encoding(name, digits, modulus, a, b, planes):
    return {
        "format": "ozaki-encoding/1",
        "name": name,
        "digits": digits,
        "modulus": modulus,
        "a": a,
        "b": b,
        "planes": [{"a": list(f), "b": list(g), "coefficient": c} for f, g, c in planes],
        "products": len(planes),
    }


@cache
def _int8xint8_fp4_6():
    # ab = W sum w_i d_i e_i - sum_{i<j} w_i w_j (d_i - d_j)(e_i - e_j), W = 1 + 5 + 27.
    rows = [(1, 0, 0), (0, 1, 0), (0, 0, 1), (1, -1, 0), (1, 0, -1), (0, 1, -1)]
    coefficients = [33, 165, 891, -5, -27, -135]
    side = _operand(-128, 127, (1, 5, 27), rows, "fp4")
    return _encoding("int8xint8-fp4-6", "fp4", None, side, copy.deepcopy(side), list(zip(rows, rows, coefficients)))


@cache
def _int8xint4_fp4_4():
    a_rows = [(0, 0, 1), (0, 1, -1), (1, -1, 0), (1, 0, 0)]
    b_rows = [(0, 1), (1, -2), (1, 2), (2, -1)]
    a = _operand(-128, 127, (35, -32, 4), a_rows, "fp4")
    b = _operand(-8, 7, (2, 3), b_rows, "fp4")
    return _encoding("int8xint4-fp4-4", "fp4", None, a, b, list(zip(a_rows, b_rows, [28, -8, 56, 7])))


def _residue_fp4_3(m):
    """Two limbs with weights (1, n): ab = (1+n) d0 e0 + (n+n^2) d1 e1 - n (d0-d1)(e0-e1) mod m."""
    allowed = digit_set("fp4")
    for n in range(2, m):
        hit = {(d0 + n * d1) % m for d0 in allowed for d1 in allowed if d0 - d1 in allowed}
        if len(hit) == m:
            break
    rows = [(1, 0), (0, 1), (1, -1)]
    lo = -(m // 2)
    side = _operand(lo, lo + m - 1, (1, n), rows, "fp4", m)
    planes = list(zip(rows, rows, [1 + n, n + n * n, -n]))
    return _encoding(f"res{m}-fp4-3", "fp4", m, side, copy.deepcopy(side), planes)


def _residue_fp4_1(m):
    lo = -(m // 2)
    side = _operand(lo, lo + m - 1, (1,), [(1,)], "fp4", m)
    return _encoding(f"res{m}-fp4-1", "fp4", m, side, copy.deepcopy(side), [((1,), (1,), 1)])


@cache
def _residues():
    return {d["name"]: d for d in (_residue_fp4_3(89), _residue_fp4_1(7), _residue_fp4_1(9), _residue_fp4_1(3))}


def _plan(moduli, input_bits=4, k_max=1, name="b4-fp4-k1"):
    encs = _residues()
    return {
        "format": "ozaki-plan/1",
        "name": name,
        "digits": "fp4",
        "input_bits": input_bits,
        "k_max": k_max,
        "moduli": [{"modulus": encs[n]["modulus"], "encoding": n} for n in moduli],
        "products": sum(encs[n]["products"] for n in moduli),
    }


def _huge():
    """Weights, limbs and coefficients beyond int64, so verification must leave int64."""
    big = 2**70
    a = {"min": -3, "max": 3, "weights": [big + 1, -big], "limbs": [[x, x] for x in range(-3, 4)]}
    b = {"min": -2, "max": 2, "weights": [1, 1], "limbs": [[x + big, -big] for x in range(-2, 3)]}
    planes = [((1, 0), (1, 1), 1), ((1, 0), (1, 1), 2**80), ((0, 0), (1, 1), 5), ((1, 0), (1, 1), -(2**80))]
    return _encoding("huge", "int8", None, a, b, planes)


def _small(coefficients=(1,), name="small"):
    side = {"min": -3, "max": 3, "weights": [1], "limbs": [[x] for x in range(-3, 4)]}
    return _encoding(name, "int8", None, side, copy.deepcopy(side), [((1,), (1,), c) for c in coefficients])


def _wide():
    """Coefficients that fit int64 but not float64's 53 bits: a float shortcut would lose the 1."""
    return _small((2**58 + 1, -(2**58)), "wide")


def _add_plane(a, b, coefficient):
    def mutate(doc):
        doc["planes"].append({"a": a, "b": b, "coefficient": coefficient})
        doc["products"] += 1

    return mutate


FIXTURES = {
    "int8xint8-fp4-6": _int8xint8_fp4_6,
    "int8xint4-fp4-4": _int8xint4_fp4_4,
    "res89-fp4-3": lambda: _residues()["res89-fp4-3"],
    "res7-fp4-1": lambda: _residues()["res7-fp4-1"],
    "huge": _huge,
    "small": _small,
    "wide": _wide,
}


def _write(tmp_path: Path, doc, name="doc.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _encodings():
    return {n: encoding_from_dict(d, n) for n, d in _residues().items()}


# --------------------------------------------------------------- valid inputs


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_verifies_and_round_trips(tmp_path, name):
    doc = FIXTURES[name]()
    enc = load_encoding(_write(tmp_path, doc))
    assert encoding_to_dict(enc) == doc
    assert enc.products == len(enc.planes) == len(doc["planes"])
    dump_json(enc, tmp_path / "again.json")
    assert load_encoding(tmp_path / "again.json") == enc


@pytest.mark.parametrize("name", FIXTURES)
def test_plane_tables_and_accumulation_window(name):
    doc = FIXTURES[name]()
    enc = encoding_from_dict(doc)
    largest = 0
    for t, plane in enumerate(doc["planes"]):
        maxima = []
        for side in "ab":
            op = doc[side]
            want = [sum(f * d for f, d in zip(plane[side], limbs)) for limbs in op["limbs"]]
            assert enc.plane_table(side)[t] == want
            maxima.append(max(abs(v) for v in want))
        largest = max(largest, maxima[0] * maxima[1])
    assert enc.max_plane_product == largest
    assert enc.accumulation_window() == 2**24 // largest
    assert enc.accumulation_window(31) == 2**31 // largest


def test_plan_verifies_and_round_trips(tmp_path):
    doc = {**_plan(["res89-fp4-3", "res7-fp4-1"]), "note": {"why": ["extra", 1]}}
    plan = load_plan(_write(tmp_path, doc), _encodings())
    assert plan_to_dict(plan) == doc
    assert plan.capacity == 89 * 7
    assert 2**plan.capacity_bits == pytest.approx(89 * 7, rel=1e-12)
    assert plan.extra == {"note": {"why": ["extra", 1]}}
    dump_json(plan_to_dict(plan), tmp_path / "p.json")
    assert load_plan(tmp_path / "p.json", _encodings()) == plan


def test_capacity_bound_is_strict():
    # 2 * 1 * (2^b - 1)^2 for b = 4 is 450; 89 * 7 = 623 passes, and k_max = 2 needs 900.
    plan_from_dict(_plan(["res89-fp4-3", "res7-fp4-1"], k_max=1), "p", _encodings())
    with pytest.raises(ValueError, match=r"p: capacity too small"):
        plan_from_dict(_plan(["res89-fp4-3", "res7-fp4-1"], k_max=2), "p", _encodings())


def test_dump_json_layout(tmp_path):
    doc = {**_residues()["res7-fp4-1"], "search": {"seconds": 1.5}}
    shuffled = dict(reversed(list(doc.items())))
    dump_json(shuffled, tmp_path / "r.json")
    text = (tmp_path / "r.json").read_text()
    assert list(json.loads(text)) == [*list(_residues()["res7-fp4-1"]), "search"]
    lines = text.splitlines()
    # one limb row per line, one plane per line
    assert sum(1 for line in lines if re.fullmatch(r"\s*\[-?\d+\],?", line)) == 2 * 7
    assert any(re.fullmatch(r'\s*\{"a": \[1\], "b": \[1\], "coefficient": 1\}', line) for line in lines)


def test_dump_json_refuses_invalid_encoding(tmp_path):
    doc = copy.deepcopy(_residues()["res7-fp4-1"])
    doc["planes"][0]["coefficient"] = 2
    with pytest.raises(ValueError, match=r"bad\.json: .*not a\*b"):
        dump_json(doc, tmp_path / "bad.json")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("extra", [{"products": 7}, {"format": "x"}, {1: "x"}, ["x"]])
def test_extra_cannot_shadow_format_fields(extra):
    enc = encoding_from_dict(_residues()["res7-fp4-1"])
    with pytest.raises(ValueError, match=r"encoding 'res7-fp4-1': extra"):
        dataclasses.replace(enc, extra=extra)
    plan = Plan("p", "fp4", 4, 1, ((89, "res89-fp4-3"), (7, "res7-fp4-1")), 4)
    with pytest.raises(ValueError, match=r"plan 'p': extra"):
        dataclasses.replace(plan, extra=extra)


def test_plane_table_side_is_checked():
    with pytest.raises(ValueError, match="side must be 'a' or 'b'"):
        encoding_from_dict(_residues()["res7-fp4-1"]).plane_table("c")


def test_encoding_is_hashable_and_immutable():
    enc = encoding_from_dict(_residues()["res7-fp4-1"])
    assert hash(enc) == hash(encoding_from_dict(_residues()["res7-fp4-1"]))
    with pytest.raises(AttributeError):
        enc.products = 2


# ------------------------------------------------------------ tampered files


def _set(path, value):
    def mutate(doc):
        *head, last = path
        target = doc
        for key in head:
            target = target[key]
        target[last] = value(target[last]) if callable(value) else value

    return mutate


def _delete(key):
    return lambda doc: doc.pop(key)


# The first failing pair depends on the limbs the brute force chose; the test re-derives
# the wanted value from the pair it names.
_IDENTITY = r"not a\*b \(a=(?P<a>-?\d+), b=(?P<b>-?\d+): got (?P<got>\d+|-\d+), want (?P<want>-?\d+)( mod (?P<m>\d+))?\)"

ENCODING_TAMPERS = [
    # (id, fixture, mutation, message after "<file>: ")
    ("flip-limb", "int8xint8-fp4-6", _set(["a", "limbs", 145, 1], lambda v: v + 1),
     r"a\.limbs do not sum to their input \(x=17: weights \. limbs = \S+, want 17\)"),
    ("flip-limb-mod", "res89-fp4-3", _set(["b", "limbs", 3, 0], lambda v: v + 1),
     r"b\.limbs do not sum to their input \(x=-41: weights \. limbs = \S+, want -41 mod 89\)"),
    ("digit-outside-set", "int8xint8-fp4-6", _set(["a", "limbs", 128], [27, 0, -1]),
     r"plane value outside the fp4 digit set \(plane 0, side a, x=0: stores 27\)"),
    ("coefficient", "int8xint8-fp4-6", _set(["planes", 3, "coefficient"], -6),
     _IDENTITY),
    ("coefficient-mod", "res89-fp4-3", _set(["planes", 2, "coefficient"], lambda c: c + 1),
     _IDENTITY),
    ("products", "int8xint4-fp4-4", _set(["products"], 5),
     r"products = 5 but the encoding has 4 planes"),
    ("missing-key", "int8xint4-fp4-4", _delete("planes"), r"missing key 'planes'"),
    ("missing-operand-key", "int8xint4-fp4-4", lambda d: d["b"].pop("weights"), r"missing key 'weights' in b"),
    ("bool-limb", "int8xint4-fp4-4", _set(["b", "limbs", 0, 1], True),
     r"b\.limbs\[0\]\[1\] \(x=-8\) must be an integer, got bool True"),
    ("float-min", "res7-fp4-1", _set(["a", "min"], -3.0), r"a\.min must be an integer, got float -3\.0"),
    ("string-coefficient", "res7-fp4-1", _set(["planes", 0, "coefficient"], "1"),
     r"planes\[0\]\.coefficient must be an integer, got str '1'"),
    ("bool-modulus", "res7-fp4-1", _set(["modulus"], True), r"modulus must be an integer, got bool True"),
    ("limb-count", "res7-fp4-1", lambda d: d["a"]["limbs"].pop(), r"a\.limbs has 6 rows, want max - min \+ 1 = 7"),
    ("limb-width", "int8xint4-fp4-4", _set(["a", "limbs", 5], [1, 2]),
     r"a\.limbs row for x=-123 must hold 3 integers"),
    ("plane-width", "int8xint4-fp4-4", _set(["planes", 1, "b"], [1, -2, 0]), r"planes\[1\]\.b must hold 2 integers"),
    ("span-below-modulus", "res7-fp4-1", lambda d: (d["a"].update(max=2), d["a"]["limbs"].pop()),
     r"a inputs \[-3, 2\] span 6 integers, fewer than the modulus 7"),
    ("modulus-one", "res7-fp4-1", _set(["modulus"], 1), r"modulus must be at least 2"),
    ("unknown-digits", "res7-fp4-1", _set(["digits"], "fp6"), r"digits: unknown digit set 'fp6'"),
    ("format", "res7-fp4-1", _set(["format"], "ozaki-encoding/2"), r"format is 'ozaki-encoding/2', want 'ozaki-encoding/1'"),
    ("nested-extra", "res7-fp4-1", _set(["planes", 0, "cost"], 1), r"unknown key 'cost' in planes\[0\]"),
    ("empty-planes", "res7-fp4-1", lambda d: d.update(planes=[], products=0), r"planes must be a non-empty"),
    ("limbs-not-array", "res7-fp4-1", _set(["a", "limbs"], {"0": 1}), r"a\.limbs must be a JSON array, got dict"),
    ("huge-coefficient", "huge", _set(["planes", 1, "coefficient"], lambda c: c + 1),
     r"not a\*b \(a=-3, b=-2: got 12, want 6\)"),
    # 2**62 * (2a)(2b) = 2**64 ab vanishes in wrapping int64 arithmetic.
    ("wraps-in-int64", "small", _add_plane([2], [2], 2**62), _IDENTITY),
    ("huge-plane-value", "huge", _set(["planes", 0, "b"], [1, 0]),
     r"plane value outside the int8 digit set \(plane 0, side b, x=-2: stores 1180591620717411303422\)"),
]


@pytest.mark.parametrize("fixture, mutate, message", [t[1:] for t in ENCODING_TAMPERS],
                         ids=[t[0] for t in ENCODING_TAMPERS])
def test_tampered_encoding_names_file_and_case(tmp_path, fixture, mutate, message):
    doc = copy.deepcopy(FIXTURES[fixture]())
    encoding_from_dict(doc)  # the untampered fixture is valid
    mutate(doc)
    path = _write(tmp_path, doc, "tampered.json")
    with pytest.raises(ValueError) as err:
        load_encoding(path)
    assert str(err.value).startswith(f"{path}: ")
    found = re.search(message, str(err.value))
    assert found, str(err.value)
    if "want" in found.groupdict():
        a, b, got, want = (int(found[k]) for k in ("a", "b", "got", "want"))
        m = int(found["m"]) if found["m"] else None
        assert want == (a * b % m if m else a * b)
        assert got != want


@pytest.mark.parametrize("text, message", [
    ('{"format": "ozaki-encoding/1", "name": "x", ', r"not valid JSON"),
    ("", r"not valid JSON"),
    ("[1, 2]", r"the document must be a JSON object, got list"),
])
def test_unreadable_encoding_file(tmp_path, text, message):
    path = _write(tmp_path, text, "broken.json")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {message}"):
        load_encoding(path)


def test_truncated_catalog_style_file(tmp_path):
    dump_json(_int8xint4_fp4_4(), tmp_path / "full.json")
    text = (tmp_path / "full.json").read_text()
    for cut in (len(text) // 3, len(text) - 3):
        path = _write(tmp_path, text[:cut], "cut.json")
        with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: not valid JSON"):
            load_encoding(path)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"nothing\.json: cannot read"):
        load_encoding(tmp_path / "nothing.json")


def _plan_with(key, value):
    return lambda d: d.update({key: value})


PLAN_TAMPERS = [
    ("not-coprime", _plan(["res9-fp4-1", "res3-fp4-1", "res89-fp4-3"]),
     r"moduli are not pairwise coprime \(9 and 3 share the factor 3\)"),
    ("capacity", _plan(["res89-fp4-3"]), r"capacity too small: product of moduli 2\^6\.48 must exceed .*2\^8\.81"),
    ("missing-encoding", {**_plan(["res7-fp4-1"]), "moduli": [{"modulus": 7, "encoding": "res7-fp4-1"},
                                                               {"modulus": 89, "encoding": "res89-fp4-2"}]},
     r"moduli\[1\] names encoding 'res89-fp4-2', which does not exist \(modulus 89\)"),
    ("other-modulus", {**_plan(["res7-fp4-1"]), "moduli": [{"modulus": 7, "encoding": "res7-fp4-1"},
                                                             {"modulus": 101, "encoding": "res89-fp4-3"}]},
     r"moduli\[1\] names encoding 'res89-fp4-3', which is for modulus 89, want modulus 101"),
    ("other-digits", {**_plan(["res89-fp4-3", "res7-fp4-1"]), "digits": "fp8"},
     r"moduli\[0\] names encoding 'res89-fp4-3' over digits 'fp4', want the plan's digits 'fp8'"),
    ("products", {**_plan(["res89-fp4-3", "res7-fp4-1"]), "products": 3},
     r"products = 3 but the named encodings have 4 planes"),
    ("bool-k-max", {**_plan(["res89-fp4-3", "res7-fp4-1"]), "k_max": True}, r"k_max must be an integer, got bool"),
    ("missing-key", {k: v for k, v in _plan(["res89-fp4-3"]).items() if k != "input_bits"},
     r"missing key 'input_bits'"),
    ("format", {**_plan(["res89-fp4-3", "res7-fp4-1"]), "format": "ozaki-encoding/1"},
     r"format is 'ozaki-encoding/1', want 'ozaki-plan/1'"),
    ("modulus-entry", {**_plan(["res89-fp4-3"]), "moduli": [{"modulus": 89}]}, r"missing key 'encoding' in moduli\[0\]"),
]


@pytest.mark.parametrize("doc, message", [t[1:] for t in PLAN_TAMPERS], ids=[t[0] for t in PLAN_TAMPERS])
def test_tampered_plan_names_file_and_case(tmp_path, doc, message):
    path = _write(tmp_path, doc, "plan.json")
    with pytest.raises(ValueError) as err:
        load_plan(path, _encodings())
    assert str(err.value).startswith(f"{path}: ")
    assert re.search(message, str(err.value)), str(err.value)


# ---------------------------------------------------------------- properties


_json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=5))
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
_extras = st.dictionaries(
    st.text(min_size=1, max_size=6).filter(lambda k: k not in Encoding.__dataclass_fields__ and k != "format"),
    _json_values,
    max_size=3,
)


@st.composite
def _equivalent_encodings(draw):
    """A fixture rewritten in ways that keep it valid: planes reordered, a plane's A side
    negated along with its coefficient (digit sets are symmetric), residue coefficients
    shifted by multiples of the modulus, extra top-level fields."""
    doc = copy.deepcopy(FIXTURES[draw(st.sampled_from(sorted(FIXTURES)))]())
    planes = draw(st.permutations(doc["planes"]))
    for plane in planes:
        if draw(st.booleans()):
            plane["a"] = [-v for v in plane["a"]]
            plane["coefficient"] = -plane["coefficient"]
        if doc["modulus"]:
            plane["coefficient"] += doc["modulus"] * draw(st.integers(-3, 3))
    doc["planes"] = planes
    doc.update(draw(_extras))
    return doc


_fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fast
@given(_equivalent_encodings())
def test_round_trip_dict_encoding_dict(doc):
    enc = encoding_from_dict(doc)
    assert encoding_to_dict(enc) == doc
    assert list(encoding_to_dict(enc))[:8] == list(doc)[:8]
    assert encoding_from_dict(json.loads(json.dumps(encoding_to_dict(enc)))) == enc


@_fast
@given(_equivalent_encodings(), st.data())
def test_any_wrong_coefficient_is_caught(doc, data):
    t = data.draw(st.integers(0, len(doc["planes"]) - 1))
    delta = data.draw(st.integers(1, 10**6) | st.integers(-(10**6), -1))
    m = doc["modulus"]
    if m and delta % m == 0:
        delta += 1
    # A zero plane makes its coefficient irrelevant; only "huge" has one.
    assume(any(encoding_from_dict(doc).plane_table("a")[t]))
    doc["planes"][t]["coefficient"] += delta
    with pytest.raises(ValueError, match=r"not a\*b \(a=-?\d+, b=-?\d+: got"):
        encoding_from_dict(doc)


@_fast
@given(_equivalent_encodings(), st.data())
def test_any_changed_limb_is_caught(doc, data):
    side = data.draw(st.sampled_from("ab"))
    op = doc[side]
    i = data.draw(st.integers(0, len(op["limbs"]) - 1))
    j = data.draw(st.integers(0, len(op["weights"]) - 1))
    delta = data.draw(st.integers(1, 5))
    m = doc["modulus"]
    assume((delta * op["weights"][j]) % (m or 2**200) != 0)
    op["limbs"][i][j] += delta
    with pytest.raises(ValueError, match=rf"{side}\.limbs do not sum to their input \(x={op['min'] + i}:"):
        encoding_from_dict(doc)


# --------------------------------------------------------- the real catalog


@pytest.mark.parametrize("path", _files("ozaki-encoding/1"), ids=lambda p: p.name)
def test_catalog_encoding_file_verifies(path):
    enc = load_encoding(path)
    assert enc.name == path.stem
    assert encoding_to_dict(enc) == json.loads(path.read_text())


@pytest.mark.parametrize("path", _files("ozaki-plan/1"), ids=lambda p: p.name)
def test_catalog_plan_file_verifies(path):
    plan = ozaki.load_plan(path)
    assert plan.name == path.stem
    assert plan.capacity > 2 * plan.k_max * (2**plan.input_bits - 1) ** 2
    assert plan_to_dict(plan) == json.loads(path.read_text())


def test_plan_object_is_a_dataclass_with_capacity():
    plan = Plan("p", "fp4", 4, 1, ((89, "res89-fp4-3"), (7, "res7-fp4-1")), 4)
    assert plan.capacity == 623
    with pytest.raises(ValueError, match=r"plan 'p': moduli are not pairwise coprime"):
        Plan("p", "fp4", 4, 1, ((7, "a"), (14, "b")), 2)


@pytest.mark.parametrize("k_max, ok", [(2, True), (3, False)])
def test_capacity_must_exceed_the_bound_strictly(k_max, ok):
    # 1-bit inputs: the bound is 2 * k_max; moduli 2 and 3 give capacity 6.
    make = lambda: Plan("p", "int8", 1, k_max, ((2, "x"), (3, "y")), 2)  # noqa: E731
    if ok:
        assert make().capacity == 6
    else:
        with pytest.raises(ValueError, match=r"capacity too small"):
            make()
