"""`ozaki-check`: bit-equivalence classes, PTX checks and dynamic bit comparison of kernel configurations.

  ozaki-check classes [--json] [--target sm_90|interpreter] [--write]
  ozaki-check ptx [--json] [--kernel NAME ...]
  ozaki-check run [--json] [--kernel NAME ...] [--seed N] [--jobs N]

`run` without a GPU re-executes itself with TRITON_INTERPRET=1, which must be set before any kernel is
defined (importing kernels.check already defined them).  Exit status 1 when a check fails, 2 on a bad
argument (argparse's usage line and one error line).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch

__all__ = ["main"]


def _interpreted():
    from triton.runtime.interpreter import InterpretedFunction

    from kernels.tc_sum import _tc_sum_kernel

    return isinstance(_tc_sum_kernel, InterpretedFunction)


def _classes(args):
    from kernels.check.classes import classes, classes_report, families, proven_classes

    if args.write:
        from kernels.autotune import CLASSES_FILE

        CLASSES_FILE.write_text(json.dumps(proven_classes(), indent=1) + "\n")
        print(f"wrote {CLASSES_FILE}")
        return 0
    if args.json:
        print(json.dumps(classes_report(args.target), indent=1))
        return 0
    for family in families(args.target):
        print(f"{family.name}: {'exact' if family.exact_reason else 'float'}")
        print(f"  reason: {family.exact_reason or family.float_reason}")
        for number, cls in enumerate(classes(family)):
            print(f"  class {number}: configs {cls}")
            for index in cls:
                print(f"    [{index}] {family.configs[index]}")
            for descriptor in dict.fromkeys(family.descriptors[i] for i in cls):
                print(f"    descriptor of {[i for i in cls if family.descriptors[i] == descriptor]}:")
                for key, value in descriptor.to_dict().items():
                    print(f"      {key}: {value}")
    return 0


def _ptx(args):
    from kernels.check.ptx import check_ptx

    report = check_ptx(args.kernel or None)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for name, entry in report.items():
            print(f"{name}: {'ok' if entry['ok'] else 'MISMATCH'}")
            for row in entry["configs"]:
                print(f"  [{row['index']}] {row['mma']} {'; '.join(row['problems']) or 'matches descriptor'}")
            for problem in entry["tree_problems"]:
                print(f"  tree: {problem}")
    return 0 if all(e["ok"] for e in report.values()) else 1


def _print_entry(name, entry):
    print(f"{name} ({entry['target']}): {'sound' if entry['sound'] else 'UNSOUND'}, classes {entry['classes']}")
    for kind, groups in entry["observed"].items():
        print(f"  {kind}: identical bits in {groups}")
    for violation in entry["violations"]:
        print(f"  violation: {violation}")
    print(f"  class pairs seen to differ: {entry['classes_seen_to_differ']}; "
          f"never seen to differ: {entry['classes_not_seen_to_differ']}", flush=True)


def _run(args):
    if not torch.cuda.is_available() and not _interpreted():
        env = dict(os.environ, TRITON_INTERPRET="1")
        return subprocess.run([sys.executable, "-m", "kernels.check.cli", *args.argv], env=env,
                              check=False).returncode
    from kernels.check.run import run_checks

    started = time.monotonic()
    report = run_checks(args.kernel or None, seed=args.seed, jobs=args.jobs,
                        report=None if args.json else _print_entry)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        unsound = [name for name, entry in report.items() if not entry["sound"]]
        print(f"summary: {len(report) - len(unsound)} of {len(report)} kernel families sound"
              f"{'; UNSOUND: ' + ', '.join(unsound) if unsound else ''} ({time.monotonic() - started:.1f} s)")
    return 0 if all(e["sound"] for e in report.values()) else 1


def _refuse_bad_arguments(parser, args):
    """parser.error (exit status 2), before any work, on a --jobs below 1, a GPU the checker has no target for,
    or a --kernel the command has no check for (a name is known for the target the command compiles for)."""
    if getattr(args, "jobs", 1) < 1:
        parser.error(f"--jobs {args.jobs}: at least 1 worker process is needed")
    if args.command not in ("ptx", "run"):
        return
    from kernels.autotune import target_for
    from kernels.check.classes import families

    try:
        target = "sm_90" if args.command == "ptx" else target_for("cuda" if torch.cuda.is_available() else "cpu")
    except ValueError as error:  # a GPU the descriptors do not model
        parser.error(str(error))
    known = [family.name for family in families(target)]
    unknown = [name for name in args.kernel or () if name not in known]
    if unknown:
        parser.error(f"--kernel {', '.join(unknown)}: no such kernel family; known: {', '.join(known)}")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ozaki-check", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    classes = commands.add_parser("classes", help="bit-equivalence classes of every kernel's configurations")
    classes.add_argument("--json", action="store_true")
    classes.add_argument("--target", default="sm_90", choices=("sm_90", "interpreter"))
    classes.add_argument("--write", action="store_true",
                         help="write every target's classes to kernels/classes.json, which the autotuner reads")
    ptx = commands.add_parser("ptx", help="compile for sm_90 and match the PTX to each descriptor")
    ptx.add_argument("--json", action="store_true")
    ptx.add_argument("--kernel", action="append", help="a kernel family, e.g. tc_sum.float16 (repeatable)")
    run = commands.add_parser("run", help="compare bits of all configurations on probe inputs")
    run.add_argument("--json", action="store_true")
    run.add_argument("--kernel", action="append", help="a kernel family, e.g. modular_matmul.e4m3 (repeatable)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--jobs", type=int, default=1,
                     help="worker processes that compile and launch configurations in parallel (compiling is "
                          "most of the time on a GPU); the same checks")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    _refuse_bad_arguments(commands.choices[args.command], args)
    args.argv = argv
    return {"classes": _classes, "ptx": _ptx, "run": _run}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
