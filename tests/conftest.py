"""Run every Triton kernel through the interpreter when there is no GPU, and fix hypothesis's
randomness under CI.

TRITON_INTERPRET must be set before any ``@triton.jit`` function is defined, so it is set
here, before the test modules import ``kernels``.
"""

import os

import numpy
import pytest
import torch
from hypothesis import HealthCheck, settings

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # Only now: Triton's own @triton.jit helpers (tl.cumsum among them) are defined at its import.
    import triton

    _TRITON = tuple(int(part) for part in triton.__version__.split(".")[:2])
    _NUMPY = tuple(int(part) for part in numpy.__version__.split(".")[:2])
    if _TRITON < (3, 7) and _NUMPY >= (2, 4):
        # Its interpreter takes int() of one-element arrays, which numpy 2.4 refuses: every kernel
        # with a loop over a runtime bound would fail, so say why once instead.
        pytest.exit(f"Triton {triton.__version__}'s interpreter (the kernels' CPU path) needs numpy < 2.4, found "
                    f"{numpy.__version__}: pip install 'numpy<2.4', or triton >= 3.7", returncode=4)

# Tuned kernel configurations persist in a cache folder (kernels.autotune.cache_file); tests start
# from none and leave none behind (the tests of that cache name their own folder).
os.environ["OZAKI_CACHE_DIR"] = ""

# CI (CI=true) must not pass or fail on luck: every run draws the same examples from a seed
# derived from each test, keeps no example database between runs, and does not judge tests
# by the speed of the machine (a deadline or the too-slow health check would).  Local runs
# keep exploring with fresh examples; the inputs that once found bugs are explicit tests.
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")


@pytest.fixture
def cut_catalog(monkeypatch):
    """``cut_catalog(plans_for)``: for one test, the catalog's plans are ``plans_for(digits)``,
    for the planning's table of them too (built once per catalog folder and kept, so a cut of
    ``ozaki.catalog.plans_for`` alone would not reach the choice of moduli)."""
    import functools

    from ozaki import catalog, planning

    def cut(plans_for):
        monkeypatch.setattr(catalog, "plans_for", plans_for)
        monkeypatch.setattr(planning, "_plan_frontier", functools.cache(planning._plan_frontier.__wrapped__))

    return cut
