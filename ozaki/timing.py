"""Seconds per pipeline stage, collected on request (the benchmark's stage columns)."""

from __future__ import annotations

import contextlib
import threading
import time

import torch

__all__ = ["collecting", "stage", "stage_times"]

_timing = threading.local()


@contextlib.contextmanager
def stage_times():
    """Collects seconds per stage ("plan", "encode", "products", "decode") of the products run inside,
    on this thread; CUDA is synchronized at each stage boundary only while collecting, and no
    call starts its encodes before its plan's read (``ozaki.pipeline.prepare``'s ``early``), so that
    each stage keeps its own time."""
    times: dict[str, float] = {}
    outer = getattr(_timing, "times", None)
    _timing.times = times
    try:
        yield times
    finally:
        _timing.times = outer


# What stage() returns while nothing collects: no generator to build on every call.
_UNTIMED = contextlib.nullcontext()


def stage(name: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Adds the seconds of the block to stage ``name`` while :func:`stage_times` collects."""
    times = getattr(_timing, "times", None)
    return _UNTIMED if times is None else _timed(name, device, times)


@contextlib.contextmanager
def _timed(name: str, device: torch.device, times: dict[str, float]):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    try:
        yield
    finally:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times[name] = times.get(name, 0.0) + time.perf_counter() - start


def collecting() -> bool:
    """Whether :func:`stage_times` collects on this thread."""
    return getattr(_timing, "times", None) is not None
