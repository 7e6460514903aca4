"""What the benchmark commands share: the test matrices, the timers, the CSV and table output, and the
argument types (``python -m ozaki demo`` and ``warmup`` take them too)."""

from __future__ import annotations

import argparse
import csv
import math
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ozaki.operands import check_options

__all__ = [
    "accuracy",
    "accuracy_list",
    "call_seconds",
    "device_name",
    "finite_float",
    "input_matrix",
    "int_at_least",
    "int_list",
    "known_names",
    "median_seconds",
    "positive_int",
    "print_table",
    "versions",
    "write_csv",
]


# ---------------------------------------------------------------------------------------------------------------
# Inputs and measurement


def input_matrix(shape: tuple[int, ...], phi: float, generator: torch.Generator, device: str,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The usual test matrix of Ozaki-scheme papers (or a batch of them, ``shape`` (…, rows,
    columns)): entries (rand − 0.5)·exp(phi·randn); complex128 entries have two such parts."""
    if dtype == torch.complex128:
        return torch.complex(*(input_matrix(shape, phi, generator, device) for _ in range(2)))
    if dtype != torch.float64:
        raise ValueError(f"dtype={dtype}: test matrices are torch.float64 or torch.complex128")
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64, device=device)
    normal = torch.randn(shape, generator=generator, dtype=torch.float64, device=device)
    return (uniform - 0.5) * torch.exp(phi * normal)


def call_seconds(product: Callable, cuda: bool):
    """Wall time of one call (device events on CUDA), and its result."""
    if not cuda:
        began = time.perf_counter()
        result = product()
        return time.perf_counter() - began, result
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    result = product()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3, result


def median_seconds(product: Callable, reps: int, cuda: bool):
    """Median wall time of ``reps`` calls, and the last result."""
    times = []
    for _ in range(reps):
        elapsed, result = call_seconds(product, cuda)
        times.append(elapsed)
    return statistics.median(times), result


def device_name(cuda: bool) -> str:
    """The device a run measures, as its header and its CSV rows name it."""
    return torch.cuda.get_device_name() if cuda else f"CPU {platform.processor() or platform.machine()}"


def versions() -> str:
    return f"torch {torch.__version__}, numpy {np.__version__}, python {platform.python_version()}"


# ---------------------------------------------------------------------------------------------------------------
# Output


def write_csv(path: Path, columns: Sequence[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="raise")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: _cell(row.get(c)) for c in columns})


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_table(rows: list[dict], columns: Sequence[str]) -> None:
    """Right-aligned columns; the last one (a status, a free text) is left unpadded."""
    text = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(t[i]) for t in text]) for i, c in enumerate(columns[:-1])]
    for line in [list(columns), *text]:
        print("  ".join([v.rjust(w) for v, w in zip(line, widths)] + [line[-1]]))


# ---------------------------------------------------------------------------------------------------------------
# Argument types: a bad value ends the command with argparse's usage line and one error line (exit status 2).


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must be positive integers")
    return values


def int_at_least(low: int) -> Callable[[str], int]:
    """The argument type of an integer of at least ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text!r}: at least {low} is needed")
        return value

    return parse


positive_int = int_at_least(1)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: a finite number is needed")
    return value


def accuracy(text: str):
    """An accuracy ``ozaki.matmul`` takes: fp64, exact or a number of bits."""
    value = int(text) if text.isdigit() else text
    try:
        check_options(value, "auto")  # every accuracy goes with engine "auto": this checks the accuracy alone
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def accuracy_list(text: str) -> tuple:
    return tuple(accuracy(v) for v in text.split(",") if v)


def known_names(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """The argument type of a comma-separated list of names from ``known`` (``what`` names them in errors)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(v.strip().lower() for v in text.split(",") if v.strip())
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {unknown or text!r}; known: {', '.join(known)}")
        return names

    return parse
