"""``ozaki-search``: results written and re-verified, clear errors for impossible requests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from search.cli import main

ROOT = Path(__file__).resolve().parent.parent


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
         "--catalog /nonexistent is not a folder: point --catalog at a catalog folder"),
        (["fastest", "--time-per-product", "fp4=1", "--input-bits", "53", "--k-max", "16", "--catalog", "/nonexistent"],
         2, "--catalog /nonexistent is not a folder: point --catalog at a catalog folder"),
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


@pytest.mark.parametrize("argv, found", [
    (["plan", "--digits", "fp4", "--input-bits", "53", "--k-max", "16384", "--workers", "1"], "fp64-fp4-k16384: "),
    (["fastest", "--time-per-product", "fp4=1", "--input-bits", "53", "--k-max", "16384"], "fastest: fp64-fp4-k16384"),
])
def test_plan_and_fastest_read_the_librarys_catalog_from_any_folder(tmp_path, monkeypatch, capsys, argv, found):
    # From a folder without encodings/ and without $OZAKI_CATALOG: the catalog the library
    # reads (here the checkout's), not one relative to the working directory.
    monkeypatch.delenv("OZAKI_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, *argv)
    assert code == 0, err
    assert found in out


def test_plan_follows_ozaki_catalog(tmp_path, monkeypatch, capsys):
    for m in (7, 8, 9, 11, 13):  # --out makes the new catalog's residue/ folder
        assert _run(capsys, "residue", "--modulus", str(m), "--digits", "fp4", "--quiet",
                    "--out", str(tmp_path / "residue" / f"res{m}.json"))[0] == 0
    monkeypatch.setenv("OZAKI_CATALOG", str(tmp_path))
    code, out, _ = _run(capsys, "plan", "--digits", "fp4", "--input-bits", "4", "--k-max", "16")
    assert code == 0 and "b4-fp4-k16: 4 products" in out


@pytest.mark.parametrize("command", [
    ["plan", "--digits", "fp4", "--input-bits", "53", "--k-max", "16384"],
    ["fastest", "--time-per-product", "fp4=1", "--input-bits", "53", "--k-max", "16384"],
])
@pytest.mark.parametrize("layout", ["empty", "plan files only"])
def test_a_catalog_without_residue_encodings_is_named(tmp_path, capsys, command, layout):
    if layout == "plan files only":
        (tmp_path / "plan").mkdir()
        (tmp_path / "plan" / "p.json").write_text("{}")
    code, _, err = _run(capsys, *command, "--catalog", str(tmp_path))
    assert code == 2
    assert f"--catalog {tmp_path} holds no residue encodings (looked for {tmp_path / 'residue'}/*.json)" in err
    assert "ozaki-search catalog" not in err  # a wrong folder, not a catalog to rebuild


def test_the_librarys_empty_catalog_says_how_to_build_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OZAKI_CATALOG", str(tmp_path))
    code, _, err = _run(capsys, "plan", "--digits", "fp4", "--input-bits", "53", "--k-max", "16384")
    assert code == 2
    assert f"the library's catalog {tmp_path} holds no residue encodings" in err
    assert f"'ozaki-search catalog --out {tmp_path}'" in err


def test_residue_time_limit_bounds_the_whole_command(tmp_path):
    # int8 mod 1000: the two-limb sides alone take far longer than the limit (65536 limb
    # vectors against thousands of weight vectors), so the limit must stop them mid-way.
    limit = 2.0
    env = {k: v for k, v in os.environ.items() if k != "OZAKI_CATALOG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "search.cli", "residue", "--modulus", "1000", "--digits", "int8",
                          "--time-limit", str(limit), "--workers", "1"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    wall = time.monotonic() - started
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "res1000-int8: unknown (not proven), nothing found" in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last == ("res1000-int8: nothing found: the time limit of 2s was hit while searching 2 limbs per side "
                    "(1 limb per side refuted); raise --time-limit (or lower --weight-bound)")
    # Progress: timed lines on stderr, the last of them where the limit stopped the search.
    progress = [line for line in run.stderr.splitlines() if re.match(r"\[\s*\d+\.\d+s\] ", line)]
    assert progress and "time limit reached" in progress[-1]
    assert float(progress[-1].split("s]")[0].strip("[ ")) < limit + 1
    assert wall < limit + 12  # the interpreter and its imports (ortools, sympy) besides the search
