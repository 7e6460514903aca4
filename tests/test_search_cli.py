"""``ozaki-search``: results written and re-verified, clear errors for impossible requests."""

from __future__ import annotations

import json

import pytest

from search.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_residue_then_plan_then_verify(tmp_path, capsys):
    (tmp_path / "residue").mkdir()
    (tmp_path / "plan").mkdir()
    for m in (7, 8, 9, 11, 13):
        code, out, _ = _run(capsys, "residue", "--modulus", str(m), "--digits", "fp4", "--quiet",
                            "--out", str(tmp_path / "residue" / f"res{m}.json"))
        assert code == 0 and "optimal (proven), 1 products, seed 0" in out
    plan = tmp_path / "plan" / "p.json"
    code, out, _ = _run(capsys, "plan", "--digits", "fp4", "--input-bits", "4", "--k-max", "16",
                        "--catalog", str(tmp_path), "--out", str(plan))
    assert code == 0 and "b4-fp4-k16: 4 products" in out and "(optimal" in out
    d = json.loads(plan.read_text())
    assert d["products"] == 4 and d["search"]["status"] == "optimal"
    code, out, _ = _run(capsys, "verify", str(plan), str(tmp_path / "residue" / "res13.json"))
    assert code == 0 and out.count(": ok") == 2


def test_product_reports_progress_and_family(tmp_path, capsys):
    out_file = tmp_path / "p.json"
    code, out, err = _run(capsys, "product", "--a", "int4", "--b", "int4", "--digits", "fp4", "--max-products", "4",
                          "--join", "enumerate", "--out", str(out_file))
    assert code == 0
    assert "int4xint4-fp4: optimal (proven), 3 products" in out
    assert "family: at most 4 products" in out
    assert "no encoding with 2 products" in err  # progress on stderr
    record = json.loads(out_file.read_text())["search"]
    assert record["seed"] == 0 and record["status"] == "optimal" and record["certificate"]["proven"]


def test_product_pairs_join_records_ladder_and_rank_bound(tmp_path, capsys):
    out_file = tmp_path / "p.json"
    code, out, _ = _run(capsys, "product", "--a", "int4", "--b", "int4", "--digits", "fp4", "--max-products", "4",
                        "--quiet", "--out", str(out_file))
    assert code == 0
    assert "int4xint4-fp4: optimal (proven), 3 products" in out
    assert "proven for every encoding: every exact encoding needs at least 3 products" in out
    d = json.loads(out_file.read_text())
    assert d["search"]["join"] == "pairs" and d["search"]["ladder"][-1]["status"] == "optimal"
    assert d["search"]["certificate"]["beyond_the_family"]


def test_product_time_limit_bounds_the_search(capsys):
    code, out, _ = _run(capsys, "product", "--a", "int8", "--b", "int8", "--digits", "fp4", "--max-products", "6",
                        "--time-limit", "1", "--quiet")
    assert code == 1
    assert "int8xint8-fp4: unknown (not proven), nothing found" in out


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["residue", "--modulus", "1", "--digits", "fp4"], 2, "modulus must be at least 2"),
        (["product", "--a", "5:3", "--b", "int4", "--digits", "fp4", "--max-products", "2"], 2, "bad range for a"),
        (["product", "--a", "x:3", "--b", "int4", "--digits", "fp4", "--max-products", "2"], 2, "bad input range 'x:3'"),
        (["product", "--a", "int8", "--b", "int4", "--digits", "fp4", "--max-products", "0"], 2,
         "products must be at least 1"),
        (["product", "--a=-20:20", "--b=-1:1", "--digits", "int4", "--max-products", "1", "--limbs-a", "1"], 1,
         "infeasible (proven), nothing found"),
        # 163 is prime and no alpha S + beta S covers Z_163: over F_163 every encoding needs
        # 5 products, so a cap of 4 is refuted without a search (after 1 and 2 limbs).
        (["residue", "--modulus", "163", "--digits", "fp4", "--max-products", "4"], 1,
         "no residue encoding mod 163 over fp4 with up to 3 limbs per side and 4 products (proven"),
        (["plan", "--digits", "fp4", "--input-bits", "53", "--k-max", "16384", "--catalog", "/nonexistent"], 2,
         "no fp4 residue encodings"),
        (["fastest", "--time-per-product", "fp9=1", "--input-bits", "53", "--k-max", "16"], 2, "unknown digit set 'fp9'"),
    ],
)
def test_impossible_requests_fail_clearly(capsys, argv, code, message):
    got, out, err = _run(capsys, *argv)
    assert got == code
    assert message in out + err


def test_verify_names_the_broken_file_and_case(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert _run(capsys, "residue", "--modulus", "13", "--digits", "fp4", "--quiet", "--out", str(path))[0] == 0
    d = json.loads(path.read_text())
    d["a"]["limbs"][0][0] += 13  # same residue, but the plane now stores a value outside fp4
    path.write_text(json.dumps(d))
    code, _, err = _run(capsys, "verify", str(path))
    assert code == 2
    assert str(path) in err and "outside the fp4 digit set" in err
