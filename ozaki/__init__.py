"""ozaki: FP64 matrix products from low-precision tensor cores (Ozaki scheme II).

    >>> import numpy as np, ozaki
    >>> c = ozaki.matmul(np.eye(3), np.arange(9.0).reshape(3, 3))

See :func:`matmul` for the accuracy contract and :func:`emulate` to route existing torch
float64 code through the emulation.
"""

from .emulate import emulate
from .formats import Encoding, Plan, load_encoding, load_plan
from .frontend import matmul

__all__ = ["Encoding", "Plan", "emulate", "load_encoding", "load_plan", "matmul"]
__version__ = "0.1.0"
