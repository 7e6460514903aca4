"""ozaki.catalog: finding, loading, verifying and querying a folder of encodings and plans.

Each test builds its own small catalog in a temporary folder and points $OZAKI_CATALOG at
it; the installed catalog is checked as it stands (it may be empty while the search engine
is still writing it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ozaki
from ozaki import catalog
from kernels.digits import digit_set
from ozaki.formats import dump_json, encoding_from_dict, load_encoding, plan_from_dict

REPO_CATALOG = Path(ozaki.__file__).resolve().parent.parent / "encodings"


def _residue(m, digits="fp4", coefficients=(1,)):
    """A one-limb residue encoding: each input's limb is the smallest digit congruent to it.
    Several coefficients split the single product a*b into that many planes."""
    lo = -(m // 2)
    allowed = sorted(digit_set(digits), key=lambda d: (abs(d), d))
    limbs = [[next(d for d in allowed if (d - x) % m == 0)] for x in range(lo, lo + m)]
    side = {"min": lo, "max": lo + m - 1, "weights": [1], "limbs": limbs}
    return {
        "format": "ozaki-encoding/1",
        "name": f"res{m}-{digits}-{len(coefficients)}",
        "digits": digits,
        "modulus": m,
        "a": side,
        "b": side,
        "planes": [{"a": [1], "b": [1], "coefficient": c} for c in coefficients],
        "products": len(coefficients),
    }


def _product():
    side = {"min": -2, "max": 1, "weights": [1], "limbs": [[x] for x in range(-2, 2)]}
    return {
        "format": "ozaki-encoding/1", "name": "int2xint2-int4-1", "digits": "int4", "modulus": None,
        "a": side, "b": side, "planes": [{"a": [1], "b": [1], "coefficient": 1}], "products": 1,
    }


def _plan(name, encodings, k_max=1, input_bits=4, digits="fp4"):
    return {
        "format": "ozaki-plan/1", "name": name, "digits": digits, "input_bits": input_bits, "k_max": k_max,
        "moduli": [{"modulus": e["modulus"], "encoding": e["name"]} for e in encodings],
        "products": sum(e["products"] for e in encodings),
    }


def _docs():
    """Folder -> documents: 7 * 9 * 11 = 693 > 2 * 1 * 15^2 = 450 for 4-bit inputs, K = 1."""
    r7, r9, r11 = _residue(7), _residue(9), _residue(11)
    r7_split = _residue(7, coefficients=(3, -2))
    f7, f9, f11 = _residue(7, "fp8"), _residue(9, "fp8"), _residue(11, "fp8")
    return {
        "product": [_product()],
        "residue": [r7, r9, r11, r7_split, f7, f9, f11],
        "plan": [
            _plan("b4-fp4-k1-split", [r7_split, r9, r11]),
            _plan("b4-fp4-k1", [r7, r9, r11]),
            _plan("b4-fp8-k1", [f7, f9, f11], digits="fp8"),
        ],
    }


@pytest.fixture
def folder(tmp_path, monkeypatch):
    for sub, docs in _docs().items():
        (tmp_path / sub).mkdir()
        for doc in docs:
            dump_json(doc, tmp_path / sub / f"{doc['name']}.json")
    monkeypatch.setenv("OZAKI_CATALOG", str(tmp_path))
    catalog.reload()
    yield tmp_path
    catalog.reload()


def _raw(path: Path, doc) -> None:
    # Written without dump_json, which refuses invalid documents.
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


def test_loads_every_file_by_format(folder):
    docs = _docs()
    assert catalog.catalog_dir() == folder
    encs, plans = catalog.encodings(), catalog.plans()
    assert sorted(encs) == sorted(d["name"] for d in docs["product"] + docs["residue"])
    assert sorted(plans) == sorted(d["name"] for d in docs["plan"])
    for doc in docs["product"] + docs["residue"]:
        assert encs[doc["name"]] == encoding_from_dict(doc)
    for doc in docs["plan"]:
        assert plans[doc["name"]] == plan_from_dict(doc, "p", encs)


def test_load_plan_checks_a_file_against_the_installed_catalog(folder, tmp_path_factory):
    doc = _docs()["plan"][1]
    path = tmp_path_factory.mktemp("outside") / "p.json"
    dump_json(doc, path)
    assert catalog.load_plan(path) == ozaki.load_plan(path) == catalog.plan(doc["name"])
    with pytest.raises(ValueError, match=r"names encoding 'res7-fp4-1', which does not exist"):
        catalog.load_plan(path, {})


def test_lookups_and_close_names(folder):
    assert catalog.encoding("res9-fp4-1").modulus == 9
    assert catalog.plan("b4-fp4-k1").products == 3
    with pytest.raises(ValueError, match=r"no encoding named 'res9-fp4' in .*close names: res9-fp4-1"):
        catalog.encoding("res9-fp4")
    with pytest.raises(ValueError, match=r"no plan named 'b4-fp4-k2' .*close names: b4-fp4-k1"):
        catalog.plan("b4-fp4-k2")


def test_residue_encodings_picks_the_cheapest(folder):
    fp4 = catalog.residue_encodings("fp4")
    assert sorted(fp4) == [7, 9, 11]
    assert {m: e.name for m, e in fp4.items()} == {7: "res7-fp4-1", 9: "res9-fp4-1", 11: "res11-fp4-1"}
    assert {m: e.digits for m, e in catalog.residue_encodings("fp8").items()} == {7: "fp8", 9: "fp8", 11: "fp8"}
    assert catalog.residue_encodings("int8") == {}
    with pytest.raises(ValueError, match="unknown digit set 'fp5'"):
        catalog.residue_encodings("fp5")


def test_plans_for_sorted_by_products(folder):
    assert [(p.name, p.products) for p in catalog.plans_for("fp4")] == [("b4-fp4-k1", 3), ("b4-fp4-k1-split", 4)]
    assert [p.name for p in catalog.plans_for("fp8")] == ["b4-fp8-k1"]
    assert catalog.plans_for("int4") == []


def test_cached_until_reload(folder):
    first = catalog.encodings()
    first.clear()  # callers get a copy; the cache is untouched
    assert catalog.encoding("res7-fp4-1") is catalog.encodings()["res7-fp4-1"]
    dump_json(_residue(13), folder / "residue" / "res13-fp4-1.json")
    assert "res13-fp4-1" not in catalog.encodings()
    catalog.reload()
    assert catalog.encoding("res13-fp4-1").modulus == 13


def _tampered_coefficient(folder):
    doc = _residue(9)
    doc["planes"][0]["coefficient"] = 2
    _raw(folder / "residue" / "res9-fp4-1.json", doc)
    return folder / "residue" / "res9-fp4-1.json", r"not a\*b \(a=-4, b=-4: got 5, want 7 mod 9\)"


def _truncated(folder):
    path = folder / "residue" / "res11-fp4-1.json"
    _raw(path, path.read_text()[:200])
    return path, "not valid JSON"


def _unknown_format(folder):
    path = folder / "residue" / "notes.json"
    _raw(path, {"format": "something-else/1"})
    return path, r"format is 'something-else/1', want 'ozaki-encoding/1' or 'ozaki-plan/1'"


def _not_an_object(folder):
    path = folder / "list.json"
    _raw(path, [1, 2])
    return path, r"the document must be a JSON object, got list"


def _renamed(folder):
    old = folder / "residue" / "res9-fp4-1.json"
    path = folder / "residue" / "res9.json"
    old.rename(path)
    return path, r"file name must be res9-fp4-1\.json"


def _duplicate(folder):
    dump_json(_residue(9), folder / "product" / "res9-fp4-1.json")
    return folder / "residue" / "res9-fp4-1.json", r"name 'res9-fp4-1' is already used by .*product/res9-fp4-1\.json"


def _plan_missing_encoding(folder):
    (folder / "residue" / "res11-fp4-1.json").unlink()
    return folder / "plan" / "b4-fp4-k1-split.json", r"moduli\[2\] names encoding 'res11-fp4-1', which does not exist"


def _plan_too_small(folder):
    path = folder / "plan" / "b4-fp4-k1.json"
    _raw(path, _plan("b4-fp4-k1", [_residue(7), _residue(9), _residue(11)], k_max=2))
    return path, r"capacity too small"


BROKEN = [_tampered_coefficient, _truncated, _unknown_format, _not_an_object, _renamed, _duplicate,
          _plan_missing_encoding, _plan_too_small]


@pytest.mark.parametrize("breaks", BROKEN, ids=[f.__name__.strip("_") for f in BROKEN])
def test_one_bad_file_fails_the_catalog_naming_it(folder, breaks):
    path, message = breaks(folder)
    catalog.reload()
    for load in (catalog.encodings, catalog.plans, lambda: catalog.residue_encodings("fp4")):
        with pytest.raises(ValueError) as err:
            load()
        assert str(err.value).startswith(f"{path}: "), str(err.value)
        assert re.search(message, str(err.value)), str(err.value)


def test_each_encoding_is_verified_before_its_first_use(folder):
    # A call verifies the encodings it looks up, not every file; an invalid one still raises
    # when used, naming its file, and the whole catalog's listings verify everything.
    path, message = _tampered_coefficient(folder)
    catalog.reload()
    assert catalog.encoding("res7-fp4-1").modulus == 7
    for load in (lambda: catalog.encoding("res9-fp4-1"), catalog.encodings):
        with pytest.raises(ValueError, match=message) as err:
            load()
        assert str(err.value).startswith(f"{path}: ")


def test_encoding_files_are_parsed_when_first_looked_up(folder):
    # Files as dump_json writes them are indexed by name and parsed on first use; any other
    # layout of the same document (compact, written by hand) is parsed at once, alike.
    _raw(folder / "residue" / "res13-fp4-1.json", _residue(13))
    catalog.reload()
    loaded = catalog._load(catalog.catalog_dir())
    assert [name for name, (_, doc) in loaded._documents.items() if doc is not None] == ["res13-fp4-1"]
    assert catalog.encoding("res13-fp4-1").modulus == 13 and catalog.encoding("res7-fp4-1").modulus == 7
    assert catalog.encodings()["res9-fp4-1"] is catalog.encoding("res9-fp4-1")


def test_catalog_dir_override_must_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("OZAKI_CATALOG", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=r"OZAKI_CATALOG is '.*missing', which is not a folder"):
        catalog.catalog_dir()
    with pytest.raises(FileNotFoundError):
        catalog.encodings()


def test_empty_catalog_is_empty(tmp_path, monkeypatch):
    monkeypatch.setenv("OZAKI_CATALOG", str(tmp_path))
    assert catalog.encodings() == {} and catalog.plans() == {}
    assert catalog.plans_for("fp4") == [] and catalog.residue_encodings("fp4") == {}
    with pytest.raises(ValueError, match=r"no plan named 'fp64-fp4-k16384' .*the catalog has 0 plans"):
        catalog.plan("fp64-fp4-k16384")


def test_source_checkout_reads_repository_catalog(monkeypatch):
    monkeypatch.delenv("OZAKI_CATALOG", raising=False)
    if (Path(ozaki.__file__).resolve().parent / "_catalog").is_dir():
        pytest.skip("installed from a wheel: the catalog is ozaki/_catalog")
    assert catalog.catalog_dir() == REPO_CATALOG


def test_wheel_catalog_first_and_missing_folder_is_empty(tmp_path, monkeypatch):
    # A stand-in package folder: a wheel puts the catalog at ozaki/_catalog beside the
    # modules; a source tree has it at ../encodings; a fresh checkout may have neither.
    monkeypatch.delenv("OZAKI_CATALOG", raising=False)
    package = tmp_path / "src" / "ozaki"
    package.mkdir(parents=True)
    monkeypatch.setattr(catalog, "_PACKAGE", package)
    assert catalog.catalog_dir() == tmp_path / "src" / "encodings"
    assert catalog.plans() == {}
    with pytest.raises(ValueError, match=r"src/encodings, a folder that does not exist \(the catalog has 0 plans\)"):
        catalog.plan("fp64-fp4-k16384")
    (tmp_path / "src" / "encodings").mkdir()
    assert catalog.catalog_dir() == tmp_path / "src" / "encodings"
    (package / "_catalog").mkdir()
    assert catalog.catalog_dir() == package / "_catalog"


@pytest.mark.skipif(not list(REPO_CATALOG.rglob("*.json")), reason="the repository catalog has no files yet")
def test_repository_catalog_loads(monkeypatch):
    monkeypatch.delenv("OZAKI_CATALOG", raising=False)
    catalog.reload()
    encs, plans = catalog.encodings(), catalog.plans()
    assert len(encs) + len(plans) == len(list(REPO_CATALOG.rglob("*.json")))
    for digits in {p.digits for p in plans.values()}:
        for plan in catalog.plans_for(digits):
            assert all(encs[name].modulus == m for m, name in plan.moduli)


@pytest.mark.skipif(not list((REPO_CATALOG / "product").glob("*.json")), reason="no product encodings yet")
def test_repository_product_encodings_verify_exhaustively():
    # load_encoding re-checks every input pair (256 x 16, 256 x 256) against a*b.
    for path in sorted((REPO_CATALOG / "product").glob("*.json")):
        enc = load_encoding(path)
        assert enc.modulus is None
        assert enc.products == len(enc.planes)
        assert enc.extra["search"]["certificate"]["proven"] in (True, False)
    names = {load_encoding(p).name for p in (REPO_CATALOG / "product").glob("*.json")}
    assert "int8xint4-fp4-4" in names
