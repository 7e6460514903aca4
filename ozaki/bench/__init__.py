"""The benchmark commands behind ``python -m ozaki bench``: a tool on top of the library, which no library
module imports.

* :mod:`ozaki.bench.one_device`: ``ozaki.matmul`` against the native float64 product on one device (the
  CSV schema :data:`COLUMNS`, the projection onto other devices :data:`PROJECTION_COLUMNS`);
* :mod:`ozaki.bench.distributed`: ``--distributed``, :mod:`ozaki.distributed` on a mesh under torchrun;
* :mod:`ozaki.bench.common`: what both share (inputs, timers, output, argument types).
"""

from __future__ import annotations

import sys
from typing import Sequence

from . import one_device
from .one_device import COLUMNS, DEVICES, PROJECTION_COLUMNS, Device

__all__ = ["COLUMNS", "DEVICES", "PROJECTION_COLUMNS", "Device", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ozaki bench [--distributed] ...``: each command parses its own options."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--distributed" in argv:
        from . import distributed  # imports torch.distributed, which the one-device command does without

        return distributed.main([arg for arg in argv if arg != "--distributed"])
    return one_device.main(argv)
