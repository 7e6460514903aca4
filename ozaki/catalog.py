"""The installed catalog of encodings and plans, loaded once and verified on load.

Where it lives: ``$OZAKI_CATALOG`` when set (a catalog the search engine just wrote, or a
test's); else ``ozaki/_catalog/`` inside a built wheel (pyproject force-includes the
repository's ``encodings/`` there); else ``<repo>/encodings/`` for a source checkout or
editable install.  Every ``**/*.json`` file is dispatched on its ``format`` field, so the
``product/``, ``residue/`` and ``plan/`` subfolders are a convention, not a rule; each
file must be called ``<name>.json`` after the name inside it, and names are unique.

One invalid file fails the whole load with a ``ValueError`` naming it rather than being
skipped, so a corrupted catalog is noticed at once instead of quietly serving fewer plans.
"""

from __future__ import annotations

import difflib
import os
from functools import cache
from pathlib import Path
from typing import Mapping

from kernels.digits import digit_set
from ozaki import formats
from ozaki.formats import (
    ENCODING_FORMAT,
    PLAN_FORMAT,
    Encoding,
    Plan,
    _read_json,
    encoding_from_dict,
    plan_from_dict,
)

__all__ = [
    "catalog_dir",
    "encoding",
    "encodings",
    "load_plan",
    "plan",
    "plans",
    "plans_for",
    "reload",
    "residue_encodings",
]

_ENV = "OZAKI_CATALOG"
_PACKAGE = Path(__file__).resolve().parent


def catalog_dir() -> Path:
    """The folder the catalog is read from (see the module docstring for the search order).

    Without ``$OZAKI_CATALOG`` and with neither folder present (a fresh checkout before any
    search has run) this is ``<repo>/encodings``, read as an empty catalog; an explicit
    ``$OZAKI_CATALOG`` that is not a folder is an error."""
    override = os.environ.get(_ENV)
    if override:
        folder = Path(override)
        if not folder.is_dir():
            raise FileNotFoundError(f"${_ENV} is {override!r}, which is not a folder; point it at a catalog folder")
        return folder
    wheel = _PACKAGE / "_catalog"
    return wheel if wheel.is_dir() else _PACKAGE.parent / "encodings"


@cache
def _load(folder: Path) -> tuple[dict[str, Encoding], dict[str, Plan]]:
    documents = {}
    for path in sorted(folder.rglob("*.json")):
        doc = _read_json(path)
        if not isinstance(doc, dict):
            raise ValueError(f"{path}: the document must be a JSON object, got {type(doc).__name__}")
        if doc.get("format") not in (ENCODING_FORMAT, PLAN_FORMAT):
            got = doc.get("format")
            raise ValueError(f"{path}: format is {got!r}, want {ENCODING_FORMAT!r} or {PLAN_FORMAT!r}")
        documents[path] = doc

    found: dict[str, Path] = {}
    encodings_by_name: dict[str, Encoding] = {}
    plan_docs = []
    for path, doc in documents.items():
        if doc["format"] == PLAN_FORMAT:
            plan_docs.append((path, doc))
            continue
        enc = encoding_from_dict(doc, str(path))
        _claim(found, enc.name, path)
        encodings_by_name[enc.name] = enc

    plans_by_name = {}
    for path, doc in plan_docs:
        plan_ = plan_from_dict(doc, str(path), encodings_by_name)
        _claim(found, plan_.name, path)
        plans_by_name[plan_.name] = plan_
    return encodings_by_name, plans_by_name


def _claim(found: dict[str, Path], name: str, path: Path) -> None:
    # Lookups go by name, so a name must identify one file, and the file must carry it.
    if path.stem != name:
        raise ValueError(f"{path}: file name must be {name}.json, the name inside it")
    if name in found:
        raise ValueError(f"{path}: name {name!r} is already used by {found[name]}")
    found[name] = path


def encodings() -> dict[str, Encoding]:
    """Every encoding in the catalog, by name (loaded and verified on first use)."""
    return dict(_load(catalog_dir())[0])


def plans() -> dict[str, Plan]:
    """Every plan in the catalog, by name (loaded and verified on first use)."""
    return dict(_load(catalog_dir())[1])


def load_plan(path: str | os.PathLike, encodings: Mapping[str, Encoding] | None = None) -> Plan:
    """Reads and re-verifies one ``ozaki-plan/1`` file (a plan outside the catalog, or one
    of its files) against ``encodings`` (name -> Encoding; ``None``: the installed catalog's)."""
    return formats.load_plan(path, encodings if encodings is not None else _load(catalog_dir())[0])


def reload() -> None:
    """Forgets the loaded catalog, so the next lookup reads the files again."""
    _load.cache_clear()


def _lookup(kind: str, items: Mapping[str, object], name: str):
    if name in items:
        return items[name]
    close = difflib.get_close_matches(str(name), list(items), n=5, cutoff=0.5)
    hint = f"close names: {', '.join(close)}" if close else f"the catalog has {len(items)} {kind}s"
    folder = catalog_dir()
    missing = "" if folder.is_dir() else ", a folder that does not exist"
    raise ValueError(f"no {kind} named {name!r} in {folder}{missing} ({hint})")


def encoding(name: str) -> Encoding:
    """The catalog encoding called ``name``; ``ValueError`` listing close names otherwise."""
    return _lookup("encoding", _load(catalog_dir())[0], name)


def plan(name: str) -> Plan:
    """The catalog plan called ``name``; ``ValueError`` listing close names otherwise."""
    return _lookup("plan", _load(catalog_dir())[1], name)


def residue_encodings(digits: str) -> dict[int, Encoding]:
    """For each modulus, the residue encoding over ``digits`` with the fewest products
    (ties broken by name, so the choice does not depend on file order)."""
    digit_set(digits)
    best: dict[int, Encoding] = {}
    for enc in sorted(_load(catalog_dir())[0].values(), key=lambda e: (e.products, e.name)):
        if enc.digits == digits and enc.modulus is not None:
            best.setdefault(enc.modulus, enc)
    return dict(sorted(best.items()))


def plans_for(digits: str) -> list[Plan]:
    """The plans over ``digits``, cheapest (fewest products) first, ties by name."""
    digit_set(digits)
    found = [p for p in _load(catalog_dir())[1].values() if p.digits == digits]
    return sorted(found, key=lambda p: (p.products, p.name))
