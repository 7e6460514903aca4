"""The layering: the file formats, the catalog and the search engine import without torch or
Triton (the search engine runs where neither is installed, and torch's import time would
dominate every ``ozaki-search`` call)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_formats_catalog_and_search_import_without_torch():
    code = (
        "import ozaki.formats, ozaki.catalog, search, search.cli, sys; "
        "assert not {'torch', 'triton'} & set(sys.modules), sorted({'torch', 'triton'} & set(sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
