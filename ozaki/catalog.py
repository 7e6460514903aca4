"""The installed catalog of encodings and plans, read once, each verified before its first use.

Where it lives: ``$OZAKI_CATALOG`` when set (a catalog the search engine just wrote, or a
test's); else ``ozaki/_catalog/`` inside a built wheel (pyproject force-includes the
repository's ``encodings/`` there); else ``<repo>/encodings/`` for a source checkout or
editable install.  Every ``**/*.json`` file is dispatched on its ``format`` field, so the
``product/``, ``residue/`` and ``plan/`` subfolders are a convention, not a rule; each
file must be called ``<name>.json`` after the name inside it, and names are unique.

A file that is not a JSON object of either format, or whose name is taken, fails the whole
read with a ``ValueError`` naming it.  An encoding file that begins as ``dump_json`` writes
them is parsed when first looked up (a process's first product reads the plans and their
encodings, not every file); each encoding and plan is verified (``ozaki.formats``
recomputes every claim it makes, and the name inside must be the file's) when first looked
up, and an invalid one raises then, naming its file, rather than being skipped:
``encodings()`` and ``plans()`` verify all, so a corrupted catalog is noticed instead of
quietly serving fewer plans.
"""

from __future__ import annotations

import difflib
import os
from functools import cache
from pathlib import Path
from typing import Iterator, Mapping

from kernels.digits import digit_set
from ozaki import formats
from ozaki.formats import (
    ENCODING_FORMAT,
    PLAN_FORMAT,
    Encoding,
    Plan,
    _plan_alone,
    _read_json,
    encoding_from_dict,
    plan_from_dict,
)

__all__ = [
    "catalog_dir",
    "encoding",
    "encodings",
    "encodings_of",
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
    wheel, source = _installed_dirs(_PACKAGE)
    return wheel if os.path.isdir(wheel) else source


@cache
def _installed_dirs(package: Path) -> tuple[Path, Path]:
    # The two places, built once: a product's planning asks for the catalog several times per
    # call, and pathlib's joins cost more than the one stat that picks between them.
    return package / "_catalog", package.parent / "encodings"


# How ``ozaki.formats.dump_json`` starts every encoding file: such a file is indexed by its
# file name and parsed only when first looked up (a product's planning needs the 31 encodings
# of the int8 plans, not the 757 files, whose parsing took half a second of a process's first
# call).  Any other file is parsed, and so classified by its format, at once.
_ENCODING_HEADER = f'{{\n  "format": "{ENCODING_FORMAT}",'.encode()


class _Catalog(Mapping[str, Encoding]):
    """One folder's files, each checked for its format and name when parsed; each encoding and
    plan verified (``ozaki.formats``) the first time it is looked up, so that a call pays for
    the encodings its plans name rather than all of them.  As a mapping, its verified
    encodings by name (what a plan's check looks its names up in)."""

    def __init__(self, folder: Path):
        found: dict[str, Path] = {}
        # name -> (path, the parsed document, None while the file is known only by its header)
        self._documents: dict[str, tuple[Path, dict | None]] = {}
        self._plan_documents: dict[str, tuple[Path, dict]] = {}
        for path in sorted(folder.rglob("*.json")):
            with open(path, "rb") as f:
                header = f.read(len(_ENCODING_HEADER))
            if header == _ENCODING_HEADER:
                _claim(found, path.stem, path)
                self._documents[path.stem] = (path, None)
                continue
            doc = _parsed(path)
            name = doc.get("name")
            if not isinstance(name, str):  # the full check says what is wrong with it
                (encoding_from_dict if doc["format"] == ENCODING_FORMAT else _plan_alone)(doc, str(path))
            _claim(found, name, path)
            (self._documents if doc["format"] == ENCODING_FORMAT else self._plan_documents)[name] = (path, doc)
        self._encodings: dict[str, Encoding] = {}
        self._plans: dict[str, Plan] = {}
        self._sorted: dict[str, tuple[Plan, ...]] = {}

    def __getitem__(self, name: str) -> Encoding:
        if name not in self._encodings:
            path, doc = self._documents[name]
            if doc is None:
                doc = _parsed(path)
                if doc["format"] != ENCODING_FORMAT or doc.get("name") != name:
                    encoding_from_dict(doc, str(path))  # says what is wrong with it, if anything
                    raise ValueError(f"{path}: file name must be {doc['name']}.json, the name inside it")
            self._encodings[name] = encoding_from_dict(doc, str(path))
        return self._encodings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def plan(self, name: str) -> Plan:
        if name not in self._plans:
            path, doc = self._plan_documents[name]
            self._plans[name] = plan_from_dict(doc, str(path), self)
        return self._plans[name]

    def plans_over(self, digits: str) -> tuple[Plan, ...]:
        """The plans over ``digits``, cheapest (fewest products) first, ties by name; sorted
        once (a product's planning asks for them three times)."""
        if digits not in self._sorted:
            found = [self.plan(name) for name in self.plan_names(digits)]
            self._sorted[digits] = tuple(sorted(found, key=lambda p: (p.products, p.name)))
        return self._sorted[digits]

    def plan_names(self, digits: str | None = None) -> list[str]:
        """Every plan's name, or those over ``digits`` (read before verifying: a plan whose
        digits are not a string is verified, and refused, by :meth:`plans`' full check)."""
        return [name for name, (_, doc) in self._plan_documents.items() if digits is None or doc.get("digits") == digits]


@cache
def _load(folder: Path) -> _Catalog:
    return _Catalog(folder)


def _parsed(path: Path) -> dict:
    """The file's JSON object, once it is one of the two formats."""
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: the document must be a JSON object, got {type(doc).__name__}")
    if doc.get("format") not in (ENCODING_FORMAT, PLAN_FORMAT):
        got = doc.get("format")
        raise ValueError(f"{path}: format is {got!r}, want {ENCODING_FORMAT!r} or {PLAN_FORMAT!r}")
    return doc


def _claim(found: dict[str, Path], name: str, path: Path) -> None:
    # Lookups go by name, so a name must identify one file, and the file must carry it.
    if path.stem != name:
        raise ValueError(f"{path}: file name must be {name}.json, the name inside it")
    if name in found:
        raise ValueError(f"{path}: name {name!r} is already used by {found[name]}")
    found[name] = path


def encodings() -> dict[str, Encoding]:
    """Every encoding in the catalog, by name, once every file is verified."""
    return _verified(_load(catalog_dir()))[0]


def plans() -> dict[str, Plan]:
    """Every plan in the catalog, by name, once every file is verified."""
    return _verified(_load(catalog_dir()))[1]


def _verified(loaded: _Catalog) -> tuple[dict[str, Encoding], dict[str, Plan]]:
    return dict(loaded.items()), {name: loaded.plan(name) for name in loaded.plan_names()}


def load_plan(path: str | os.PathLike, encodings: Mapping[str, Encoding] | None = None) -> Plan:
    """Reads and re-verifies one ``ozaki-plan/1`` file: a plan outside the catalog, or one of
    its files.

    Parameters
    ----------
    path : str or os.PathLike
        The JSON file.
    encodings : Mapping of str to Encoding, optional
        The encodings the plan's moduli may name, by name; None (the default): the installed
        catalog's.

    Returns
    -------
    Plan
        The plan, its capacity and its encodings checked.

    Raises
    ------
    ValueError
        The file cannot be read, is not valid JSON, is not an ``ozaki-plan/1``, fails the
        verification (see :class:`ozaki.Plan`), or names an encoding that ``encodings`` lacks
        or whose modulus differs; the message names the file.

    Examples
    --------
    >>> import ozaki
    >>> from ozaki.catalog import catalog_dir, encoding
    >>> plan = ozaki.load_plan(catalog_dir() / "plan" / "b16-fp4-k16384.json")
    >>> plan.name, {encoding(name).digits for _, name in plan.moduli}
    ('b16-fp4-k16384', {'fp4'})
    """
    return formats.load_plan(path, encodings if encodings is not None else _load(catalog_dir()))


def reload() -> None:
    """Forgets the loaded catalog, so the next lookup reads the files again."""
    _load.cache_clear()


def _missing(kind: str, names: list[str], name: str) -> ValueError:
    close = difflib.get_close_matches(str(name), names, n=5, cutoff=0.5)
    hint = f"close names: {', '.join(close)}" if close else f"the catalog has {len(names)} {kind}s"
    folder = catalog_dir()
    missing = "" if folder.is_dir() else ", a folder that does not exist"
    return ValueError(f"no {kind} named {name!r} in {folder}{missing} ({hint})")


def encoding(name: str) -> Encoding:
    """The catalog encoding called ``name``; ``ValueError`` listing close names otherwise."""
    loaded = _load(catalog_dir())
    if name not in loaded:
        raise _missing("encoding", list(loaded), name)
    return loaded[name]


def encodings_of(plan_: Plan) -> tuple[Encoding, ...]:
    """The catalog encodings ``plan_``'s moduli name, in its order (one lookup of the catalog
    for all: a product's planning asks for them on every call)."""
    loaded = _load(catalog_dir())
    return tuple(loaded[name] for _, name in plan_.moduli)


def plan(name: str) -> Plan:
    """The catalog plan called ``name``; ``ValueError`` listing close names otherwise."""
    loaded = _load(catalog_dir())
    if name not in loaded.plan_names():
        raise _missing("plan", loaded.plan_names(), name)
    return loaded.plan(name)


def residue_encodings(digits: str) -> dict[int, Encoding]:
    """For each modulus, the residue encoding over ``digits`` with the fewest products
    (ties broken by name, so the choice does not depend on file order)."""
    digit_set(digits)
    best: dict[int, Encoding] = {}
    for enc in sorted(encodings().values(), key=lambda e: (e.products, e.name)):
        if enc.digits == digits and enc.modulus is not None:
            best.setdefault(enc.modulus, enc)
    return dict(sorted(best.items()))


def plans_for(digits: str) -> list[Plan]:
    """The plans over ``digits``, cheapest (fewest products) first, ties by name."""
    digit_set(digits)
    return list(_load(catalog_dir()).plans_over(digits))
