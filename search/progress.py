"""Progress from loops whose steps are many and short: a line at most every few seconds, so
that a long enumeration says how far it has got without flooding stderr."""

from __future__ import annotations

import time
from typing import Callable

__all__ = ["every"]

INTERVAL_S = 2.0


def every(report: Callable[[str], None] | None, seconds: float = INTERVAL_S) -> Callable:
    """A reporter for a loop: ``tick(message)`` passes ``message()`` (a callable, built only
    when it is passed on) to ``report`` when ``seconds`` have passed since the last line; a
    step costs one clock read.  Without ``report`` it does nothing."""
    last = time.monotonic()

    def tick(message: Callable[[], str]) -> None:
        nonlocal last
        if report is None:
            return
        now = time.monotonic()
        if now - last >= seconds:
            last = now
            report(message())

    return tick
