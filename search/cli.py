"""``ozaki-search``: find encodings and plans from their specification, verify catalog files.

    ozaki-search residue --modulus 89 --digits fp4 --out res.json
    ozaki-search product --a int8 --b int4 --digits fp4 --max-products 4 --time-limit 60 --out p.json
    ozaki-search plan --digits fp4 --input-bits 53 --k-max 16384 --out plan.json
    ozaki-search verify encodings/residue/*.json
    ozaki-search catalog --out encodings          # regenerates residue encodings and plans

``plan`` and ``fastest`` read the catalog the library reads (ozaki.catalog.catalog_dir():
$OZAKI_CATALOG, else the installed one) unless --catalog names another folder; ``catalog``
writes to --out, by default ./encodings (a checkout's own catalog when run from its root;
elsewhere set $OZAKI_CATALOG to the folder for the library to read it).

Progress goes to stderr; the last stdout line of a search states status, products,
proof status, seed and wall time.  --time-limit bounds a search's whole wall time.  Exit
status: 0 found; 1 nothing found (proven none, or the time limit was hit first: a last
stderr line says which and what to raise); 2 an impossible request or a wrong catalog
folder, with a message.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kernels.digits import DIGIT_SETS
from ozaki.catalog import catalog_dir
from ozaki.formats import dump_json

from search import catalog_writer
from search.plan import choose_moduli
from search.results import encoding_dict, plan_dict, search_record

__all__ = ["main"]


def _progress(quiet: bool):
    start = time.monotonic()

    def report(message: str) -> None:
        if not quiet:
            print(f"[{time.monotonic() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    return report


def _summary(result, name: str) -> str:
    cert = "proven" if result.status in ("optimal", "infeasible") else "not proven"
    found = f"{result.candidate.products} products" if result.candidate else "nothing found"
    return (f"{name}: {result.status} ({cert}), {found}, seed {result.seed}, {result.workers} workers, "
            f"{result.wall_s:.1f}s")


def _write(d: dict, out: str | None) -> None:
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)  # e.g. a new catalog's residue/
        dump_json(d, out)
        print(f"wrote {out}")


def _cmd_residue(args) -> int:
    result, ladder = catalog_writer.find_residue(
        args.modulus, args.digits, weight_bound=args.weight_bound, seed=args.seed, workers=args.workers,
        time_limit=args.time_limit, max_products=args.max_products, progress=_progress(args.quiet),
    )
    name = f"res{args.modulus}-{args.digits}"
    print(_summary(result, name))
    if result.candidate is None:
        last = ladder[-1]
        if last["join"] == "crt":
            where = f"while composing encodings mod its parts {', '.join(str(p['modulus']) for p in last['parts'])}"
            timed_out = any(p["status"] == "unknown" for p in last["parts"])
        else:
            refuted = sorted({r["limbs"] for r in ladder if r["status"] == "infeasible"} - {last["limbs"]})
            where = f"while searching {last['limbs']} limbs per side" + (
                f" ({' and '.join(map(str, refuted))} limb{'s' * (refuted[-1] > 1)} per side refuted)" if refuted
                else "")
            timed_out = result.status == "unknown"
        if timed_out:
            print(_time_limit_hit(name, args.time_limit, where) + " (or lower --weight-bound)", file=sys.stderr)
        else:
            print(f"no residue encoding mod {args.modulus} over {args.digits} with up to 3 limbs per side and "
                  f"{args.max_products} products (proven: none within the searched families)", file=sys.stderr)
        return 1
    d = encoding_dict(result, f"{name}-{result.candidate.products}",
                      search_record(result, ladder[-1]["join"], {"ladder": ladder}))
    _write(d, args.out)
    return 0


def _time_limit_hit(name: str, seconds: float, where: str) -> str:
    return f"{name}: nothing found: the time limit of {seconds:g}s was hit {where}; raise --time-limit"


def _cmd_product(args) -> int:
    result, ladder = catalog_writer.find_product(
        args.a, args.b, args.digits, args.max_products, limbs_a=args.limbs_a, limbs_b=args.limbs_b,
        coefficient_bound_a=args.coefficient_bound_a, coefficient_bound_b=args.coefficient_bound_b,
        weight_bound_a=args.weight_bound_a, weight_bound_b=args.weight_bound_b, join=args.join, seed=args.seed,
        workers=args.workers, time_limit=args.time_limit, progress=_progress(args.quiet),
    )
    name = f"{args.a}x{args.b}-{args.digits}".replace(":", "_")
    print(_summary(result, name))
    for rung in ladder[:-1]:
        print(f"refuted family ({rung['status']}): {rung['family']}")
    print(f"family: {result.family.describe()}")
    for note in result.notes:
        print(f"proven for every encoding: {note}")
    if result.candidate is None:
        if result.status == "unknown":
            print(_time_limit_hit(name, args.time_limit, f"in the family above, after {len(ladder) - 1} refuted"),
                  file=sys.stderr)
        return 1
    d = encoding_dict(result, f"{name}-{result.candidate.products}", search_record(result, args.join, {"ladder": ladder}))
    _write(d, args.out)
    return 0


def _residue_folder(catalog: str | None) -> Path:
    """``<catalog>/residue`` for --catalog, else that of the catalog the library reads
    (ozaki.catalog.catalog_dir()), so that the command works from any working directory.
    ``ValueError`` naming the folder looked in when it holds no residue encodings."""
    try:
        root, named = (Path(catalog), "--catalog") if catalog is not None else (catalog_dir(), "the library's catalog")
    except FileNotFoundError as err:  # $OZAKI_CATALOG set to something that is not a folder
        raise ValueError(err) from None
    folder = root / "residue"
    if not root.is_dir():
        raise ValueError(f"{named} {root} is not a folder: point --catalog at a catalog folder "
                         f"(one with residue/*.json)")
    if not any(folder.glob("*.json")):
        fix = ("point --catalog at a catalog folder (one with residue/*.json)" if catalog is not None else
               f"build one with 'ozaki-search catalog --out {root}', or set $OZAKI_CATALOG or --catalog to one")
        raise ValueError(f"{named} {root} holds no residue encodings (looked for {folder}/*.json): {fix}")
    return folder


def _cmd_plan(args) -> int:
    folder = _residue_folder(args.catalog)
    encodings = catalog_writer.cheapest_residues(folder, args.digits, args.min_k_window)
    if not encodings:
        raise ValueError(f"no {args.digits} residue encodings with k_window >= {args.min_k_window} under {folder}: "
                         f"lower --min-k-window, or add {args.digits} encodings to the catalog "
                         f"('ozaki-search catalog --digits {args.digits}')")
    costs = {m: enc.products for m, enc in encodings.items()}
    chosen = choose_moduli(costs, args.input_bits, args.k_max, seed=args.seed, workers=args.workers,
                           time_limit=args.time_limit)
    name = catalog_writer.plan_name(args.digits, args.input_bits, args.k_max)
    if not chosen.moduli:
        raise ValueError(f"{name}: the {len(costs)} residue encodings (k_window >= {args.min_k_window}) cannot reach "
                         f"the capacity 2*K*(2^b-1)^2 with pairwise coprime moduli; lower --input-bits, --k-max "
                         f"or --min-k-window")
    print(f"{name}: {chosen.cost} products over moduli {chosen.moduli} ({chosen.status}, lower bound "
          f"{chosen.lower_bound}, {chosen.wall_s:.2f}s)")
    _write(plan_dict(name, args.digits, args.input_bits, args.k_max, chosen, encodings), args.out)
    return 0


def _cmd_fastest(args) -> int:
    """The planner: the fastest plan over digit sets given a time per product for each."""
    times = {}
    for item in args.time_per_product.split(","):
        digits, _, value = item.partition("=")
        if digits not in DIGIT_SETS:
            raise ValueError(f"--time-per-product: unknown digit set {digits!r}; known: {', '.join(sorted(DIGIT_SETS))}")
        try:
            times[digits] = float(value)
        except ValueError:
            raise ValueError(f"--time-per-product: {item!r} is not DIGITS=SECONDS") from None
        if times[digits] <= 0:
            raise ValueError(f"--time-per-product: time for {digits} must be positive")
    folder = _residue_folder(args.catalog)
    rows, absent = [], []
    for digits, per in sorted(times.items()):
        encodings = catalog_writer.cheapest_residues(folder, digits)
        if not encodings:
            absent.append(digits)
            continue
        chosen = choose_moduli({m: e.products for m, e in encodings.items()}, args.input_bits, args.k_max)
        if chosen.moduli:
            rows.append((chosen.cost * per, digits, chosen))
    if not rows:
        none = f" ({', '.join(absent)}: no encodings there)" if absent else ""
        raise ValueError(f"no digit set's residue encodings under {folder}{none} reach the capacity "
                         f"2*K*(2^b-1)^2 for --input-bits {args.input_bits} and --k-max {args.k_max}: lower them, "
                         f"or name digit sets the catalog holds")
    for modeled, digits, chosen in sorted(rows, key=lambda r: r[:2]):
        print(f"{digits}: {chosen.cost} products x {times[digits]} = {modeled:g} (moduli {chosen.moduli})")
    print(f"fastest: {catalog_writer.plan_name(min(rows, key=lambda r: r[:2])[1], args.input_bits, args.k_max)}")
    return 0


def _cmd_verify(args) -> int:
    for line in catalog_writer.verify(args.files):
        print(line)
    return 0


def _cmd_catalog(args) -> int:
    catalog_writer.regenerate(args.out, digits=tuple(args.digits),
                              moduli=range(args.min_modulus, args.max_modulus + 1), jobs=args.jobs,
                              products=args.products, product_time_limit=args.product_time_limit,
                              report=_progress(False))
    return 0


_CATALOG_HELP = ("catalog folder to read residue/*.json from (default: the library's, ozaki.catalog.catalog_dir(): "
                 "$OZAKI_CATALOG, else the installed catalog)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ozaki-search", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(q, time_limit):
        q.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")
        q.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
        q.add_argument("--time-limit", type=float, default=time_limit, help=f"seconds (default {time_limit:g})")
        q.add_argument("--out", help="write the result here")
        q.add_argument("--quiet", action="store_true", help="no progress on stderr")

    digits = sorted(DIGIT_SETS)
    q = sub.add_parser("residue", help="residue encoding for one modulus")
    q.add_argument("--modulus", type=int, required=True)
    q.add_argument("--digits", choices=digits, required=True)
    q.add_argument("--weight-bound", type=int, help="largest weight searched (default 24 for fp8, else m // 2)")
    q.add_argument("--max-products", type=int, default=catalog_writer.RESIDUE_MAX_PRODUCTS,
                   help=f"most products the 3-limb rung searches (default {catalog_writer.RESIDUE_MAX_PRODUCTS})")
    common(q, 120)
    q.set_defaults(run=_cmd_residue)

    q = sub.add_parser("product", help="exact encoding of a x b")
    q.add_argument("--a", required=True, help="input type (int8, int4, ...) or range lo:hi")
    q.add_argument("--b", required=True, help="input type (int8, int4, ...) or range lo:hi")
    q.add_argument("--digits", choices=digits, required=True)
    q.add_argument("--max-products", type=int, required=True)
    q.add_argument("--limbs-a", type=int)
    q.add_argument("--limbs-b", type=int)
    q.add_argument("--coefficient-bound-a", type=int,
                   help="plane row entries in [-c, c] (default: the ladder of search.catalog_writer.product_ladder for "
                        "--join pairs, 1 otherwise)")
    q.add_argument("--coefficient-bound-b", type=int)
    q.add_argument("--weight-bound-a", type=int)
    q.add_argument("--weight-bound-b", type=int)
    q.add_argument("--join", choices=("pairs", "model", "enumerate"), default="pairs",
                   help="pairs: plane coordinates, joined per pair of row sets (default); model / enumerate: the "
                        "limb-coordinate engine of search.engine (small cases)")
    common(q, 60)
    q.set_defaults(run=_cmd_product)

    q = sub.add_parser("plan", help="moduli for an FP64 plan from a catalog's residue encodings")
    q.add_argument("--digits", choices=digits, required=True)
    q.add_argument("--input-bits", type=int, required=True)
    q.add_argument("--k-max", type=int, required=True)
    q.add_argument("--catalog", help=_CATALOG_HELP)
    q.add_argument("--min-k-window", type=int, default=0,
                   help="use only residue encodings whose exact accumulation window is at least this K")
    common(q, 60)
    q.set_defaults(run=_cmd_plan)

    q = sub.add_parser("fastest", help="planner: fastest plan given a time per product per digit set")
    q.add_argument("--time-per-product", required=True, help="e.g. fp4=1,fp8=2,int8=2")
    q.add_argument("--input-bits", type=int, required=True)
    q.add_argument("--k-max", type=int, required=True)
    q.add_argument("--catalog", help=_CATALOG_HELP)
    q.set_defaults(run=_cmd_fastest)

    q = sub.add_parser("verify", help="exhaustively re-verify catalog files")
    q.add_argument("files", nargs="+")
    q.set_defaults(run=_cmd_verify)

    q = sub.add_parser("catalog", help="regenerate the whole catalog")
    # Not the library's catalog folder: installed, that lies inside the package, which a
    # regeneration must not overwrite; from a checkout's root the two are the same folder.
    q.add_argument("--out", default="encodings",
                   help="folder to write residue/, plan/ (and product/) into (default ./encodings, relative to "
                        "the working directory); set $OZAKI_CATALOG to it for the library to read it")
    q.add_argument("--digits", nargs="+", default=["int8", "fp8", "fp4"], choices=digits)
    q.add_argument("--min-modulus", type=int, default=2)
    q.add_argument("--max-modulus", type=int, default=256)
    q.add_argument("--jobs", type=int, default=2)
    q.add_argument("--products", action="store_true",
                   help="also search INT8xINT4 and INT8xINT8 over fp4 (slow: see benchmarks/search.md)")
    q.add_argument("--product-time-limit", type=float, default=600)
    q.set_defaults(run=_cmd_catalog)
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, TypeError) as err:
        print(f"ozaki-search {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
