"""The command lines ``python -m ozaki`` and ``ozaki-check``: the commands listed one line each, a bad argument
refused with argparse's usage line and one error line (exit status 2, never a traceback), and the demo saying
what it does while it works.  A few cases run as the user runs them, in a subprocess; the rest call ``main``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.check.cli import main as check_main
from ozaki.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("demo", "bench", "warmup")


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _lists_the_commands(text: str) -> bool:
    """Each command on a line of its own with its one-line help after it."""
    return all(re.search(rf"^\s+{command}\s+\w", text, re.MULTILINE) for command in COMMANDS)


@pytest.mark.parametrize("argv", [["-h"], ["--help"]])
def test_help_lists_the_commands(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0 and _lists_the_commands(capsys.readouterr().out)


def test_no_command_lists_the_commands_and_exits_2():
    run = _run("-m", "ozaki")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert _lists_the_commands(run.stderr)


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param(["-m", "ozaki", "demo", "--device", "cuda"], "this machine has no CUDA device",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
        (["-m", "ozaki", "demo", "--n", "0"], "argument --n: '0': at least 1 is needed"),
        (["-m", "ozaki", "bench", "--distributed", "--layouts", "diagonal"], "unknown layout(s) ['diagonal']"),
        (["-m", "kernels.check.cli", "run", "--kernel", "nonsense"], "--kernel nonsense: no such kernel family"),
    ],
)
def test_a_bad_argument_ends_in_one_error_line_without_a_traceback(argv, message):
    run = _run(*argv)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    usage, error = run.stderr.splitlines()[0], run.stderr.splitlines()[-1]
    assert usage.startswith("usage: ") and message in error


MAINS = {"python -m ozaki": main, "ozaki-check": check_main}


@pytest.mark.parametrize(
    "prog, argv, message",
    [
        ("python -m ozaki", ["frob"], "invalid choice: 'frob'"),
        ("python -m ozaki", ["demo", "--device", "cuda:99"], "CUDA device"),
        ("python -m ozaki", ["demo", "--device", "tpu"], "'tpu' is not a device such as cpu, cuda or cuda:1"),
        ("python -m ozaki", ["demo", "--device", "meta"], "'meta': the demo runs on cpu or cuda"),
        ("python -m ozaki", ["demo", "--n", "-3"], "'-3': at least 1 is needed"),
        ("python -m ozaki", ["demo", "--n", "many"], "'many' is not an integer"),
        ("python -m ozaki", ["demo", "--phi", "nan"], "'nan': a finite number is needed"),
        ("python -m ozaki", ["demo", "--phi", "inf"], "'inf': a finite number is needed"),
        ("python -m ozaki", ["demo", "--seed", "-1"], "'-1': at least 0 is needed"),
        ("python -m ozaki", ["demo", "--size", "8"], "unrecognized arguments: --size 8"),
        ("python -m ozaki", ["warmup", "--sizes", "0"], "sizes must be positive integers"),
        ("python -m ozaki", ["warmup", "--engines", "int8,int7"], "unknown engine(s) ['int7']; known: int8, fp8, fp4"),
        ("python -m ozaki", ["warmup", "--accuracy", "fast"], "accuracy='fast' is not one of"),
        ("python -m ozaki", ["bench", "--sizes", "x"], "'x' is not a comma-separated list of integers"),
        ("ozaki-check", [], "the following arguments are required: command"),
        ("ozaki-check", ["frob"], "invalid choice: 'frob'"),
        ("ozaki-check", ["run", "--kernel", "tc_sum.int8", "--kernel", "tc_sum.int9"],
         "--kernel tc_sum.int9: no such kernel family"),
        ("ozaki-check", ["ptx", "--kernel", "nonsense"],
         "--kernel nonsense: no such kernel family; known: tc_sum.int8"),
        ("ozaki-check", ["run", "--jobs", "0"], "--jobs 0: at least 1 worker process is needed"),
        ("ozaki-check", ["run", "--seed", "x"], "invalid int value: 'x'"),
        ("ozaki-check", ["classes", "--target", "sm_80"], "invalid choice: 'sm_80'"),
    ],
)
def test_bad_arguments_are_refused(prog, argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        MAINS[prog](argv)
    error = capsys.readouterr().err.splitlines()[-1]
    assert refused.value.code == 2 and error.startswith(prog) and message in error


def test_ozaki_check_run_on_a_gpu_the_checker_does_not_model_says_so(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    with pytest.raises(SystemExit) as refused:
        check_main(["run"])
    error = capsys.readouterr().err.splitlines()[-1]
    assert refused.value.code == 2 and error == "ozaki-check run: error: descriptors model sm_90 only; cuda is sm_80"


def test_the_demo_says_what_it_does_then_prints_its_table():
    run = _run("-m", "ozaki", "demo", "--n", "64", "--device", "cpu")
    assert run.returncode == 0, run.stderr
    progress = ["making two 64x64 matrices", "first call, untimed (loads the catalog)", "timing ozaki.matmul",
                "timing native float64", "exact reference of a 16x16 block",
                "making two complex 64x64 matrices", "first call, untimed (loads the catalog)", "timing ozaki.matmul",
                "timing native complex128", "exact reference of a 16x16 block"]  # fmt: skip
    assert [line for line in run.stderr.splitlines() if line in progress] == progress
    real, complex_ = run.stdout.split("\n\n")
    assert real.startswith("C = A @ B, n = 64") and complex_.startswith("complex C = A @ B, n = 64")
    assert [line.split()[0] for line in real.splitlines()[2:]] == ["ozaki.matmul", "native"]
    assert [line.split()[0] for line in complex_.splitlines()[2:]] == ["ozaki.matmul", "native"]
    # The emulated complex product's error is measured per part against the exact one: DGEMM-level.
    assert float(complex_.splitlines()[2].split()[3]) < 1e-14
