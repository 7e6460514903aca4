"""The layering.  Dependencies run one way (tools -> ``ozaki`` -> ``kernels``) with no import
cycle, and the file formats, the catalog and the search engine import without torch or Triton
(the search engine runs where neither is installed, and torch's import time would dominate
every ``ozaki-search`` call)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_formats_catalog_and_search_import_without_torch():
    code = (
        "import ozaki.formats, ozaki.catalog, search, search.cli, sys; "
        "assert not {'torch', 'triton'} & set(sys.modules), sorted({'torch', 'triton'} & set(sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


_PACKAGES = ("ozaki", "kernels", "search")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, inside a function) for every import of the repository's packages in ``path``,
    relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    in_function = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for node in ast.walk(fn)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from package import module` imports the module.
            names = [f"{base}.{alias.name}" if (ROOT / base.replace(".", "/") / f"{alias.name}.py").exists()
                     else base for alias in node.names]
        else:
            continue
        found += [(name, id(node) in in_function) for name in names if name.split(".")[0] in _PACKAGES]
    return found


_MODULES = {_module_name(p): p for package in _PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


@pytest.mark.parametrize("name", sorted(_MODULES))
def test_dependencies_run_one_way(name):
    # tools (search, kernels.check) -> ozaki (the library) -> kernels (the Triton layer).
    below = {"search": ("search", "ozaki", "kernels"), "ozaki": ("ozaki", "kernels"), "kernels": ("kernels",)}
    allowed = below[name.split(".")[0]]
    for imported, _ in _imports(_MODULES[name]):
        assert imported.split(".")[0] in allowed, f"{name} imports {imported}: a lower layer may not import a higher one"
        if not name.startswith("kernels.check"):
            assert not imported.startswith("kernels.check"), f"{name} imports the checker {imported}, a tool"


def test_module_imports_have_no_cycle():
    graph = {name: {i for i, inside in _imports(path) if not inside and i in _MODULES and i != name}
             for name, path in _MODULES.items()}
    # Every module's package imports it first: that edge is no cycle.
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for child in graph[node]:
            if state.get(child) == 1:
                raise AssertionError(f"import cycle: {' -> '.join(trail + [node, child])}")
            if child not in state:
                visit(child, trail + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])
