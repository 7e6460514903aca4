"""The layering.  Dependencies run one way (tools -> ``ozaki`` -> ``kernels``; the benchmark commands
``ozaki.bench`` and the command line ``ozaki.__main__`` are tools no library module imports) with no import
cycle, imports inside functions and dynamic ones (``import_module``, ozaki's lazy ``_HOMES``) counted; and
the file formats, the catalog and the search engine import without torch or Triton (the search engine runs
where neither is installed, and torch's import time would dominate every ``ozaki-search`` call)."""

from __future__ import annotations

import ast
import contextlib
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

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
# Tools on top of a layer: only the tool's own modules and the dispatchers named here import one.
_TOOLS = {"ozaki.bench": ("ozaki.__main__",), "ozaki.__main__": (), "kernels.check": ()}


class Edge(NamedTuple):
    """One import of a module by another: where it is written and how."""

    target: str
    line: int
    how: str  # "" at the top level, else "in a function", "dynamic" or "dynamic, in a function"


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _relative(name: str, anchor: str, where: str) -> str:
    """``name`` (".x", "..x" or absolute) resolved against the package ``anchor``, as importlib resolves it."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    parts = anchor.split(".") if anchor else []
    if level > len(parts):
        raise ValueError(f"{where}: {name!r} climbs above the top-level package")
    return ".".join(parts[: len(parts) - level + 1] + ([name[level:]] if name[level:] else []))


def _tables(tree: ast.Module) -> dict:
    """The module-level dicts of string literals (such as ozaki's ``_HOMES``), by name."""
    tables = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
            with contextlib.suppress(ValueError):
                tables[target.id] = ast.literal_eval(node.value)
    return tables


def _dynamic(call: ast.Call, name: str, package: str, tables: dict, where: str) -> list[str]:
    """The modules an ``import_module(...)`` call imports: its argument a literal, or an f-string around one
    subscript of a module-level table (every value of the table); anything else is an import this check
    cannot follow, and an error."""
    keywords = {k.arg: k.value for k in call.keywords}
    argument = call.args[0] if call.args else keywords.get("name")
    anchor_node = call.args[1] if len(call.args) > 1 else keywords.get("package")
    anchors = {"__name__": name, "__package__": package}
    if anchor_node is None:
        anchor = ""
    elif isinstance(anchor_node, ast.Name) and anchor_node.id in anchors:
        anchor = anchors[anchor_node.id]
    elif isinstance(anchor_node, ast.Constant) and isinstance(anchor_node.value, str):
        anchor = anchor_node.value
    else:
        raise ValueError(f"{where}: the package of a dynamic import is neither a literal, __name__ nor __package__")
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        names = [argument.value]
    elif isinstance(argument, ast.JoinedStr):
        holes = [v for v in argument.values if isinstance(v, ast.FormattedValue)]
        hole = holes[0].value if len(holes) == 1 else None
        if not (isinstance(hole, ast.Subscript) and isinstance(hole.value, ast.Name) and hole.value.id in tables):
            raise ValueError(f"{where}: a dynamic import's f-string must hold one subscript of a module-level table")
        head = "".join(v.value for v in argument.values[: argument.values.index(holes[0])])
        tail = "".join(v.value for v in argument.values[argument.values.index(holes[0]) + 1 :])
        names = [f"{head}{value}{tail}" for value in tables[hole.value.id].values()]
    else:
        raise ValueError(f"{where}: a dynamic import whose module is neither a literal nor an f-string of a table")
    return [_relative(n, anchor, where) for n in names]


def _imports(path: Path, root: Path = ROOT, packages: tuple[str, ...] = _PACKAGES) -> list[Edge]:
    """Every import of ``packages``' modules in ``path``: at the top level or in a function, static or dynamic
    (``import_module``), relative imports resolved.  An import of a.b.c also runs the packages a
    and a.b: those count too, but for the packages of ``path`` itself, which Python imports before it (an
    explicit ``import a`` of its own package counts)."""
    tree = ast.parse(path.read_text(), str(path))
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own = {".".join(package.split(".")[:i]) for i in range(1, len(package.split(".")) + 1)} if package else set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    in_function = {id(node) for fn in ast.walk(tree) if isinstance(fn, functions) for node in ast.walk(fn)}
    tables = _tables(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom, ast.Call)):
            continue
        where = f"{path.relative_to(root)}:{node.lineno}"
        if isinstance(node, ast.Import):
            named, how = [alias.name for alias in node.names], ""
        elif isinstance(node, ast.ImportFrom):
            base = _relative("." * node.level + (node.module or ""), package, where)
            # `from package import module` imports the module; `from package import name` runs the package.
            named = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}", root) else base for a in node.names]
            how = ""
        elif getattr(node.func, "id", getattr(node.func, "attr", None)) == "import_module":
            named, how = _dynamic(node, name, package, tables, where), "dynamic"
        else:
            continue
        inside = id(node) in in_function
        how = ", ".join(filter(None, [how, "in a function" if inside else ""]))
        for target in named:
            parts = target.split(".")
            if parts[0] not in packages:
                continue
            runs = [".".join(parts[:i]) for i in range(1, len(parts))]
            found += [Edge(t, node.lineno, how) for t in [*(r for r in runs if r not in own), target] if t != name]
    return found


def _graph(root: Path, packages: tuple[str, ...]) -> dict[str, list[Edge]]:
    modules = {_module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}
    return {name: list(dict.fromkeys(e for e in _imports(path, root, packages) if e.target in modules))
            for name, path in modules.items()}


def _cycles(graph: dict[str, list[Edge]]) -> list[str]:
    """One cycle for each import that closes one in a depth-first walk (none when there is no cycle at all),
    written module:line -> module:line -> ... back to the first module."""
    state: dict[str, int] = {}
    found = []

    def visit(node: str, trail: list[tuple[str, Edge]]) -> None:
        state[node] = 1
        for edge in graph[node]:
            if state.get(edge.target) == 1:
                steps = trail + [(node, edge)]
                first = next(i for i, (module, _) in enumerate(steps) if module == edge.target)
                found.append(" -> ".join(f"{module}:{e.line}" + (f" ({e.how})" if e.how else "")
                                         for module, e in steps[first:]) + f" -> {edge.target}")
            elif edge.target not in state:
                visit(edge.target, trail + [(node, edge)])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return found


_MODULES = {_module_name(p): p for package in _PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _refusal(name: str, imported: str) -> str | None:
    """Why module ``name`` may not import ``imported``; None where it may."""
    # tools (search, kernels.check) -> ozaki (the library) -> kernels (the Triton layer); ozaki.bench and
    # ozaki.__main__ (the command line) sit on the library as tools, which no library module imports.
    below = {"search": ("search", "ozaki", "kernels"), "ozaki": ("ozaki", "kernels"), "kernels": ("kernels",)}
    if imported.split(".")[0] not in below[name.split(".")[0]]:
        return "a lower layer may not import a higher one"
    for tool, dispatchers in _TOOLS.items():
        if _within(imported, tool) and not _within(name, tool) and name not in dispatchers:
            return f"{tool} is a tool: only {', '.join(dispatchers) or 'its own modules'} may import it"
    return None


@pytest.mark.parametrize(
    "name, imported, refused",
    [
        ("ozaki.frontend", "kernels.scaling", False),
        ("kernels.products", "ozaki.frontend", True),
        ("ozaki.planning", "search.plan", True),
        ("search.cli", "ozaki.catalog", False),
        ("ozaki.__main__", "ozaki.bench", False),
        ("ozaki.bench.distributed", "ozaki.bench.common", False),
        ("ozaki.frontend", "ozaki.bench.common", True),
        ("search.cli", "ozaki.bench", True),
        ("ozaki.emulation", "ozaki.__main__", True),
        ("kernels.check.cli", "kernels.check.run", False),
        ("kernels.autotune", "kernels.check.classes", True),
    ],
)
def test_the_layer_rule(name, imported, refused):
    assert (_refusal(name, imported) is not None) == refused


@pytest.mark.parametrize("name", sorted(_MODULES))
def test_dependencies_run_one_way(name):
    refused = [f"{name}:{line} imports {imported}: {why}"
               for imported, line, _ in _imports(_MODULES[name]) if (why := _refusal(name, imported))]  # fmt: skip
    assert not refused, "\n".join(refused)


def test_module_imports_have_no_cycle():
    # Function-level and dynamic imports count: a cycle through a deferred import is still two modules that
    # need each other.  A module's own package runs before it, so that implicit import is no edge; an explicit
    # `import ozaki` (or `from ozaki import matmul`, which ozaki's `_HOMES` resolves) is one, and closes a cycle
    # in any module the package's table leads back to: such a module imports the defining module instead.
    cycles = _cycles(_graph(ROOT, _PACKAGES))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


_LAZY_INIT = """\
from importlib import import_module

_HOMES = {"f": "a"}


def __getattr__(name):
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
"""


@pytest.mark.parametrize(
    "files, cycle",
    [
        # A function-level import closing a cycle with a top-level one.
        ({"a.py": "from . import b\n", "b.py": "def g():\n    from . import a\n"},
         "pkg.a:1 -> pkg.b:2 (in a function) -> pkg.a"),
        # importlib.import_module with a literal, relative to __package__.
        ({"a.py": "import importlib\n\n\ndef g():\n    return importlib.import_module('.b', __package__)\n",
          "b.py": "from pkg.a import g\n"},
         "pkg.a:5 (dynamic, in a function) -> pkg.b:1 -> pkg.a"),
        # The package's lazy table leads to a module that imports the package to reach a name.
        ({"__init__.py": _LAZY_INIT, "a.py": "import pkg\n"}, "pkg:7 (dynamic, in a function) -> pkg.a:1 -> pkg"),
        ({"__init__.py": _LAZY_INIT, "a.py": "def g():\n    from pkg import f\n"},
         "pkg:7 (dynamic, in a function) -> pkg.a:2 (in a function) -> pkg"),
        # Importing pkg.sub.c runs pkg.sub, which imports the importer.
        ({"a.py": "def g():\n    import pkg.sub.c\n", "sub/__init__.py": "from pkg import a\n", "sub/c.py": ""},
         "pkg.a:2 (in a function) -> pkg.sub:1 -> pkg.a"),
        # No cycle: the table leads to a, a tool imports the package, a submodule's own package is no edge.
        ({"__init__.py": _LAZY_INIT, "a.py": "from . import b\n", "b.py": "",
          "tool.py": "import pkg\n\npkg.f\n", "sub/__init__.py": "", "sub/c.py": "from pkg.sub import d\n",
          "sub/d.py": "from .. import b\n"}, None),
    ],
    ids=["function-level", "import_module", "lazy-table", "lazy-name", "package-run", "acyclic"],
)
def test_the_cycle_check_sees_deferred_and_dynamic_imports(tmp_path, files, cycle):
    for name, text in {"__init__.py": "", **files}.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    assert _cycles(_graph(tmp_path, ("pkg",))) == ([cycle] if cycle else [])


@pytest.mark.parametrize(
    "text, message",
    [
        ("from importlib import import_module\n\nimport_module(name)\n", "neither a literal nor an f-string"),
        ("import importlib\n\nimportlib.import_module(f'pkg.{x}')\n", "one subscript of a module-level table"),
        ("from importlib import import_module\n\nimport_module('.b', anchor)\n", "neither a literal, __name__"),
    ],
)
def test_a_dynamic_import_the_check_cannot_read_is_an_error(tmp_path, text, message):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text(text)
    with pytest.raises(ValueError, match=message):
        _graph(tmp_path, ("pkg",))
