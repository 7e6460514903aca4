"""ozaki: FP64 matrix products from low-precision tensor cores (Ozaki scheme II).

    >>> import numpy as np, ozaki
    >>> ozaki.matmul(np.eye(2), np.arange(4.0).reshape(2, 2)).tolist()
    [[0.0, 1.0], [2.0, 3.0]]

See :func:`matmul` for the accuracy contract, :func:`explain` for how a call would run,
:func:`emulate` to route existing torch float64 code through the emulation, and
:func:`load_encoding`, :func:`load_plan` (:class:`Encoding`, :class:`Plan`) for the catalog's
files.  Every public function documents its parameters and errors, with examples that run as
the test suite's doctests.
"""

from importlib import import_module

__all__ = ["Encoding", "Plan", "emulate", "explain", "load_encoding", "load_plan", "matmul"]
__version__ = "0.1.0"

# Loaded on first use, so that importing the file formats and the catalog (all the search
# engine needs of the library) never imports torch.
_HOMES = {
    "Encoding": "formats",
    "Plan": "formats",
    "load_encoding": "formats",
    "load_plan": "catalog",
    "emulate": "emulation",
    "explain": "frontend",
    "matmul": "frontend",
}


def __getattr__(name: str):
    if name in _HOMES:
        value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
        # Kept as a module attribute: later lookups (ozaki.matmul in a loop) skip this hook.
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ozaki' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
