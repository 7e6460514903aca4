"""The range every modulus of the pipeline lies in, in both layers.

Residues below 2^31 keep a product of two residues below 2^62 and a few such products summed
inside int64, the arithmetic every stage (torch or Triton) folds them in; the plane GEMM also
carries a residue in int32 and a coefficient times a chunk sum in int64.  Plain Python, no
torch, like :mod:`kernels.float64`.
"""

from __future__ import annotations

import numbers

__all__ = ["MODULUS_LIMIT", "check_modulus"]

MODULUS_LIMIT = 2**31


def check_modulus(m, what: str = "modulus") -> int:
    """``m`` as an int, or a ValueError unless it is an integer (not a bool) in [2, 2**31)."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or not 2 <= m < MODULUS_LIMIT:
        raise ValueError(f"{what} {m!r} must be an int in [2, 2**31): residues are multiplied in int64")
    return int(m)
