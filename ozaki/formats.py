"""The two catalog file formats, ``ozaki-encoding/1`` and ``ozaki-plan/1``.

Exactness of every engine rests on these files, so nothing read from one is trusted:
constructing an :class:`Encoding` re-checks every limb sum, every stored plane value and
the bilinear identity on every input pair, and constructing a :class:`Plan` re-checks
coprimality and capacity; :func:`plan_from_dict` then checks the plan against the
encodings it names.  Failures raise ``ValueError("<source>: <what> (<first failing
case>)")`` where ``source`` is the file (or the label the caller gave).

The identity is checked on the full |A| x |B| table of pairs, built as a product of the
per-plane value tables.  Products run in numpy int64 when a bound on their magnitude
proves they cannot overflow, and in Python integers (numpy object arrays) otherwise, so
the check is exact for any integers a file may hold.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import tempfile
from dataclasses import InitVar, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from kernels.digits import digit_set
from kernels.float64 import FLOAT64_EXACT
from ozaki.capacity import crt_capacity, has_capacity

__all__ = [
    "ENCODING_FORMAT",
    "PLAN_FORMAT",
    "Encoding",
    "Operand",
    "Plan",
    "Plane",
    "dump_json",
    "encoding_from_dict",
    "encoding_to_dict",
    "load_encoding",
    "load_plan",
    "plan_from_dict",
    "plan_to_dict",
]

ENCODING_FORMAT = "ozaki-encoding/1"
PLAN_FORMAT = "ozaki-plan/1"

_ENCODING_KEYS = ("format", "name", "digits", "modulus", "a", "b", "planes", "products")
_OPERAND_KEYS = ("min", "max", "weights", "limbs")
_PLANE_KEYS = ("a", "b", "coefficient")
_PLAN_KEYS = ("format", "name", "digits", "input_bits", "k_max", "moduli", "products")
_MODULUS_KEYS = ("modulus", "encoding")

# Intermediate values stay below 2**62 in int64 so that one further sum or difference
# of two of them (identity minus target) cannot overflow either.
_INT64_SAFE = 2**62


# --------------------------------------------------------------------------- checks


def _is_int(value: Any) -> bool:
    # bool is an int subclass and numpy integers are not ints: both are rejected so that
    # a file's ``true`` or a stray float never passes as a limb or a count.
    return type(value) is int


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def _require_int(value: Any, where: str, source: str) -> None:
    if not _is_int(value):
        raise ValueError(f"{source}: {where} must be an integer, got {_describe(value)}")


def _require_ints(values: Sequence[Any], where: str, source: str, note: str = "") -> None:
    if all(type(v) is int for v in values):
        return
    for i, v in enumerate(values):
        _require_int(v, f"{where}[{i}]{note}", source)


def _require_modulus(value: Any, where: str, source: str, note: str = "") -> None:
    _require_int(value, where, source)
    if value < 2:
        raise ValueError(f"{source}: {where} must be at least 2{note}, got {value}")


def _require_str(value: Any, where: str, source: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{source}: {where} must be a non-empty string, got {_describe(value)}")


def _require_extra(extra: Any, keys: Sequence[str], source: str) -> None:
    # Extra fields are written after the format's own keys: one with a format key's name
    # would overwrite that key in the file.
    if not isinstance(extra, dict):
        raise ValueError(f"{source}: extra must be a dict of additional JSON fields, got {_describe(extra)}")
    for key in extra:
        if not isinstance(key, str) or key in keys:
            raise ValueError(f"{source}: extra field {key!r} is not allowed (a format key or not a string)")


def _digits(name: Any, source: str) -> frozenset[int]:
    try:
        return digit_set(name)
    except ValueError as err:
        raise ValueError(f"{source}: digits: {err}") from None


# ------------------------------------------------------------------ exact arithmetic


def _int_array(values) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return np.array(values, dtype=object)


def _abs_max(x: np.ndarray) -> int:
    if x.size == 0:
        return 0
    return max(int(x.max()), -int(x.min()))


def _exact_matmul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` without overflow or rounding, in the cheapest arithmetic a magnitude bound allows."""
    if x.dtype == np.int64 and y.dtype == np.int64:
        bound = _abs_max(x) * _abs_max(y) * x.shape[-1]
        if bound <= FLOAT64_EXACT:
            # Every partial sum is an integer within float64's exact range, and BLAS is far
            # faster than numpy's integer matmul.
            return (x.astype(np.float64) @ y.astype(np.float64)).astype(np.int64)
        if bound < _INT64_SAFE:
            return x @ y
    return x.astype(object) @ y.astype(object)


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


# ------------------------------------------------------------------------ dataclasses


@dataclass(frozen=True)
class Operand:
    """One side of an encoding: input range, limb weights and a limb vector per input.

    ``limbs[x - min]`` is d(x); ``weights . d(x)`` equals x (or x mod the modulus)."""

    min: int
    max: int
    weights: tuple[int, ...]
    limbs: tuple[tuple[int, ...], ...] = field(repr=False)

    @property
    def inputs(self) -> range:
        return range(self.min, self.max + 1)


@dataclass(frozen=True)
class Plane:
    """One low-precision product: stored values f.d(a) and g.e(b), weighted by ``coefficient``."""

    a: tuple[int, ...]
    b: tuple[int, ...]
    coefficient: int


@dataclass(frozen=True)
class Encoding:
    """A verified ``ozaki-encoding/1``: how one residue product is computed from low-precision
    plane products.

    Each input x of side A (``a.min`` ≤ x ≤ ``a.max``) is written as a limb vector d(x) with
    ``a.weights · d(x)`` = x (mod ``modulus``), likewise for B; each plane t stores the values
    f_t·d(a) and g_t·e(b), which must lie in the digit set, and Σ_t coefficient_t ·
    (f_t·d(a))·(g_t·e(b)) ≡ a·b (mod ``modulus``) on every input pair.  Construction checks
    both, exhaustively.

    Parameters
    ----------
    name : str
        The catalog name (the file's, without ``.json``).
    digits : str
        The digit set of the stored plane values: ``"int8"``, ``"fp8"`` or ``"fp4"``
        (``kernels.digits``).
    modulus : int or None
        The modulus the identity holds for; None for an exact (non-modular) product.
    a, b : Operand
        Each side's input range, limb weights and limb vectors.
    planes : tuple of Plane
        The low-precision products: the stored values of each side and a coefficient.
    products : int
        The low-precision GEMMs the encoding costs.
    extra : dict, optional
        Further fields of the file, kept as they are.
    source : str, optional
        Only labels error messages (the file name when loaded from one).

    Raises
    ------
    ValueError
        A stored plane value outside the digit set, or an input pair on which the identity
        fails, named with ``source``.

    Examples
    --------
    >>> import ozaki
    >>> from ozaki.catalog import catalog_dir
    >>> enc = ozaki.load_encoding(catalog_dir() / "residue" / "res10-int8-1.json")
    >>> enc.name, enc.digits, enc.modulus
    ('res10-int8-1', 'int8', 10)
    >>> len(enc.plane_table("a")) == len(enc.planes)
    True
    """

    name: str
    digits: str
    modulus: int | None
    a: Operand
    b: Operand
    planes: tuple[Plane, ...]
    products: int
    extra: dict = field(default_factory=dict, hash=False)
    source: InitVar[str | None] = None

    def __post_init__(self, source: str | None) -> None:
        label = source if source is not None else f"encoding {self.name!r}"
        tables = _verify_encoding(self, label)
        # Kept on the instance so the engines get the tables without recomputing them.
        object.__setattr__(self, "_tables", tables)

    def __hash__(self) -> int:
        # Equal encodings share their name and modulus: hashing those alone keeps the launch
        # caches keyed by a product's encodings (kernels.residues) a lookup, where the hash of
        # every field cost some 50 µs per 16 encodings.
        return hash((self.name, self.modulus))

    def plane_table(self, side: str) -> list[list[int]]:
        """``table[t][x - min]`` = the value plane t stores for input x on ``side`` ("a" or "b")."""
        if side not in ("a", "b"):
            raise ValueError(f"side must be 'a' or 'b', got {side!r}")
        return self._tables[side].tolist()

    @cached_property
    def max_plane_product(self) -> int:
        """max over planes of max|P_t| * max|Q_t|: the largest term one plane GEMM accumulates."""
        p, q = self._tables["a"], self._tables["b"]
        return max(_abs_max(p[t]) * _abs_max(q[t]) for t in range(len(self.planes)))

    def accumulation_window(self, mantissa_bits: int = 24) -> int:
        """The largest K for which a plane GEMM accumulated in a float with ``mantissa_bits``
        significand bits (fp32: 24) stays exact: every partial sum is an integer of
        magnitude at most K * max_plane_product <= 2**mantissa_bits, hence representable.
        Longer K must be split into chunks of this size combined in integer arithmetic."""
        if not _is_int(mantissa_bits) or mantissa_bits < 1:
            raise ValueError(f"mantissa_bits must be a positive integer, got {mantissa_bits!r}")
        return 2**mantissa_bits // self.max_plane_product


@dataclass(frozen=True)
class Plan:
    """A verified ``ozaki-plan/1``: pairwise coprime moduli whose product exceeds
    2 * k_max * (2**input_bits - 1)**2, so that the CRT recovers every product of K ≤ k_max
    terms of integers of ``input_bits`` bits exactly.

    Parameters
    ----------
    name : str
        The catalog name (the file's, without ``.json``).
    digits : str
        The digit set of every encoding of the plan: ``"int8"``, ``"fp8"`` or ``"fp4"``.
    input_bits : int
        The bits of every integer of a row of A and a column of B.
    k_max : int
        The longest product (K) the capacity covers.
    moduli : tuple of (int, str)
        Each modulus with the name of its residue encoding; :func:`plan_from_dict` checks
        those names against encodings.
    products : int
        The low-precision GEMMs of the whole plan.
    extra : dict, optional
        Further fields of the file, kept as they are.
    source : str, optional
        Only labels error messages (the file name when loaded from one).

    Raises
    ------
    ValueError
        Moduli that are not pairwise coprime, out of range, or whose product does not exceed
        the capacity the plan claims, named with ``source``.

    Examples
    --------
    >>> import ozaki
    >>> from ozaki.catalog import catalog_dir
    >>> plan = ozaki.load_plan(catalog_dir() / "plan" / "b16-fp4-k16384.json")
    >>> plan.digits, plan.input_bits, plan.k_max
    ('fp4', 16, 16384)
    >>> plan.capacity > 2 * plan.k_max * (2**plan.input_bits - 1) ** 2
    True
    """

    name: str
    digits: str
    input_bits: int
    k_max: int
    moduli: tuple[tuple[int, str], ...]
    products: int
    extra: dict = field(default_factory=dict, hash=False)
    source: InitVar[str | None] = None

    def __post_init__(self, source: str | None) -> None:
        _verify_plan(self, source if source is not None else f"plan {self.name!r}")

    @cached_property
    def capacity(self) -> int:
        """The product of the moduli: results are recovered exactly in (-capacity/2, capacity/2)."""
        return math.prod(m for m, _ in self.moduli)

    @property
    def capacity_bits(self) -> float:
        return math.log2(self.capacity)


# ----------------------------------------------------------------------- verification


def _operand_limbs(op: Operand, side: str, modulus: int | None, source: str) -> np.ndarray:
    """Checks one operand's shape, types and limb sums; returns its limbs as an array."""
    for key in ("min", "max"):
        _require_int(getattr(op, key), f"{side}.{key}", source)
    if op.max < op.min:
        raise ValueError(f"{source}: {side}.max = {op.max} is below {side}.min = {op.min}")
    if not isinstance(op.weights, tuple) or not op.weights:
        raise ValueError(f"{source}: {side}.weights must be a non-empty tuple of integers")
    _require_ints(op.weights, f"{side}.weights", source)
    count = op.max - op.min + 1
    if modulus is not None and count < modulus:
        raise ValueError(
            f"{source}: {side} inputs [{op.min}, {op.max}] span {count} integers, fewer than the "
            f"modulus {modulus}: every residue needs an input (widen [min, max])"
        )
    if not isinstance(op.limbs, tuple) or len(op.limbs) != count:
        got = len(op.limbs) if isinstance(op.limbs, tuple) else _describe(op.limbs)
        raise ValueError(f"{source}: {side}.limbs has {got} rows, want max - min + 1 = {count}")
    width = len(op.weights)
    # The set-of-types tests run in C; the per-row loop only runs to name a failure.
    well_formed = set(map(type, op.limbs)) == {tuple} and set(map(len, op.limbs)) == {width}
    if not (well_formed and set(map(type, itertools.chain.from_iterable(op.limbs))) == {int}):
        for i, row in enumerate(op.limbs):
            if not isinstance(row, tuple) or len(row) != width:
                raise ValueError(
                    f"{source}: {side}.limbs row for x={op.min + i} must hold {width} integers "
                    f"(one per weight), got {row!r}"
                )
            _require_ints(row, f"{side}.limbs[{i}]", source, f" (x={op.min + i})")

    limbs = _int_array(op.limbs)
    sums = _exact_matmul(limbs, _int_array(op.weights)[:, None])[:, 0]
    xs = _int_array(op.inputs)
    bad = sums != xs if modulus is None else (sums - xs) % modulus != 0
    if bad.any():
        (i,) = _first(bad)
        x = op.min + i
        want = f"{x}" if modulus is None else f"{x} mod {modulus}"
        raise ValueError(
            f"{source}: {side}.limbs do not sum to their input (x={x}: weights . limbs = "
            f"{int(sums[i])}, want {want})"
        )
    return limbs


def _plane_rows(planes: Sequence[Plane], side: str, width: int, source: str) -> np.ndarray:
    for t, plane in enumerate(planes):
        row = getattr(plane, side)
        if not isinstance(row, tuple) or len(row) != width:
            raise ValueError(
                f"{source}: planes[{t}].{side} must hold {width} integers (one per {side} weight), got {row!r}"
            )
        _require_ints(row, f"planes[{t}].{side}", source)
    return _int_array([getattr(plane, side) for plane in planes])


def _plane_values(rows, limbs, op: Operand, side: str, digits: str, source: str) -> np.ndarray:
    """The (planes x inputs) table of stored values, each checked against the digit set."""
    values = _exact_matmul(rows, limbs.T)
    allowed = np.array(sorted(digit_set(digits)), dtype=np.int64)
    if values.dtype == object:
        inside = np.vectorize(lambda v: -_INT64_SAFE < v < _INT64_SAFE, otypes=[bool])(values)
        inside[inside] = np.isin(values[inside].astype(np.int64), allowed)
    else:
        inside = np.isin(values, allowed)
    if not inside.all():
        t, i = _first(~inside)
        raise ValueError(
            f"{source}: plane value outside the {digits} digit set (plane {t}, side {side}, "
            f"x={op.min + i}: stores {int(values[t, i])})"
        )
    return values.astype(np.int64)


def _verify_encoding(enc: Encoding, source: str) -> dict[str, np.ndarray]:
    _require_str(enc.name, "name", source)
    _require_extra(enc.extra, _ENCODING_KEYS, source)
    _digits(enc.digits, source)
    modulus = enc.modulus
    if modulus is not None:
        _require_modulus(modulus, "modulus", source, " (or null for an exact product)")
    operands = {"a": enc.a, "b": enc.b}
    for side, op in operands.items():
        if not isinstance(op, Operand):
            raise ValueError(f"{source}: {side} must be an Operand, got {_describe(op)}")
    limbs = {side: _operand_limbs(op, side, modulus, source) for side, op in operands.items()}

    if not isinstance(enc.planes, tuple) or not enc.planes:
        raise ValueError(f"{source}: planes must be a non-empty tuple of Plane")
    for t, plane in enumerate(enc.planes):
        if not isinstance(plane, Plane):
            raise ValueError(f"{source}: planes[{t}] must be a Plane, got {_describe(plane)}")
        _require_int(plane.coefficient, f"planes[{t}].coefficient", source)
    _require_int(enc.products, "products", source)
    if enc.products != len(enc.planes):
        raise ValueError(
            f"{source}: products = {enc.products} but the encoding has {len(enc.planes)} planes "
            f"(products counts the planes)"
        )

    tables = {}
    for side, op in operands.items():
        rows = _plane_rows(enc.planes, side, len(op.weights), source)
        tables[side] = _plane_values(rows, limbs[side], op, side, enc.digits, source)

    coefficients = [p.coefficient for p in enc.planes]
    if modulus is not None:
        # Only the residue of a coefficient matters; reducing keeps the table in int64.
        coefficients = [c % modulus for c in coefficients]
    weighted_b = _exact_matmul(np.diag(_int_array(coefficients)), tables["b"])
    got = _exact_matmul(tables["a"].T, weighted_b)
    xa, xb = _int_array(enc.a.inputs), _int_array(enc.b.inputs)
    want = _exact_matmul(xa[:, None], xb[None, :])
    bad = got != want if modulus is None else (got - want) % modulus != 0
    if bad.any():
        i, j = _first(bad)
        a, b = enc.a.min + i, enc.b.min + j
        g, w = int(got[i, j]), a * b
        if modulus is None:
            case = f"a={a}, b={b}: got {g}, want {w}"
        else:
            case = f"a={a}, b={b}: got {g % modulus}, want {w % modulus} mod {modulus}"
        raise ValueError(f"{source}: sum of coefficient * plane products is not a*b ({case})")
    return tables


def _verify_plan(plan: Plan, source: str) -> None:
    _require_str(plan.name, "name", source)
    _require_extra(plan.extra, _PLAN_KEYS, source)
    _digits(plan.digits, source)
    for key in ("input_bits", "k_max", "products"):
        value = getattr(plan, key)
        _require_int(value, key, source)
        if value < 1:
            raise ValueError(f"{source}: {key} must be positive, got {value}")
    if not isinstance(plan.moduli, tuple) or not plan.moduli:
        raise ValueError(f"{source}: moduli must be a non-empty tuple of (modulus, encoding name)")
    for i, entry in enumerate(plan.moduli):
        if not isinstance(entry, tuple) or len(entry) != 2:
            raise ValueError(f"{source}: moduli[{i}] must be a (modulus, encoding name) pair, got {entry!r}")
        _require_modulus(entry[0], f"moduli[{i}].modulus", source)
        _require_str(entry[1], f"moduli[{i}].encoding", source)
    values = [m for m, _ in plan.moduli]
    for i, m in enumerate(values):
        for n in values[i + 1 :]:
            if math.gcd(m, n) != 1:
                raise ValueError(
                    f"{source}: moduli are not pairwise coprime ({m} and {n} share the factor "
                    f"{math.gcd(m, n)}): the CRT needs coprime moduli"
                )
    need = crt_capacity(plan.k_max, plan.input_bits, plan.input_bits)
    if not has_capacity(plan.capacity, need):
        raise ValueError(
            f"{source}: capacity too small: product of moduli 2^{plan.capacity_bits:.2f} must exceed "
            f"2 * k_max * (2^input_bits - 1)^2 = 2^{math.log2(need):.2f} (k_max={plan.k_max}, "
            f"input_bits={plan.input_bits}); add moduli or lower k_max/input_bits"
        )


def _check_plan_encodings(plan: Plan, encodings: Mapping[str, Encoding], source: str) -> None:
    total = 0
    for i, (m, name) in enumerate(plan.moduli):
        enc = encodings.get(name)
        if enc is None:
            raise ValueError(f"{source}: moduli[{i}] names encoding {name!r}, which does not exist (modulus {m})")
        if enc.modulus != m:
            kind = "an exact product encoding" if enc.modulus is None else f"modulus {enc.modulus}"
            raise ValueError(f"{source}: moduli[{i}] names encoding {name!r}, which is for {kind}, want modulus {m}")
        if enc.digits != plan.digits:
            raise ValueError(
                f"{source}: moduli[{i}] names encoding {name!r} over digits {enc.digits!r}, "
                f"want the plan's digits {plan.digits!r} (modulus {m})"
            )
        total += enc.products
    if plan.products != total:
        raise ValueError(
            f"{source}: products = {plan.products} but the named encodings have {total} planes in all"
        )


# ------------------------------------------------------------------------ dict <-> obj


def _take(d: Any, keys: Sequence[str], where: str, source: str) -> dict[str, Any]:
    """The values of ``keys`` in mapping ``d``, requiring each to be present."""
    if not isinstance(d, dict):
        raise ValueError(f"{source}: {where or 'the document'} must be a JSON object, got {_describe(d)}")
    for key in keys:
        if key not in d:
            raise ValueError(f"{source}: missing key {key!r}" + (f" in {where}" if where else ""))
    return {key: d[key] for key in keys}


def _nested_extra(d: dict, keys: Sequence[str], where: str, source: str) -> None:
    # Extra fields are kept only at the top level, where round-tripping can preserve them.
    unknown = [k for k in d if k not in keys]
    if unknown:
        raise ValueError(
            f"{source}: unknown key {unknown[0]!r} in {where} (extra fields belong at the top level "
            f"of the file)"
        )


def _tuple(value: Any, where: str, source: str) -> tuple:
    if not isinstance(value, list):
        raise ValueError(f"{source}: {where} must be a JSON array, got {_describe(value)}")
    return tuple(value)


def _check_format(d: dict, want: str, source: str) -> None:
    if d["format"] != want:
        raise ValueError(f"{source}: format is {d['format']!r}, want {want!r}")


def _operand_from_dict(d: Any, side: str, source: str) -> Operand:
    fields = _take(d, _OPERAND_KEYS, side, source)
    _nested_extra(d, _OPERAND_KEYS, side, source)
    limbs = _tuple(fields["limbs"], f"{side}.limbs", source)
    if set(map(type, limbs)) - {list}:
        for i, row in enumerate(limbs):
            _tuple(row, f"{side}.limbs[{i}]", source)
    return Operand(
        min=fields["min"],
        max=fields["max"],
        weights=_tuple(fields["weights"], f"{side}.weights", source),
        limbs=tuple(map(tuple, limbs)),
    )


def _plane_from_dict(d: Any, t: int, source: str) -> Plane:
    where = f"planes[{t}]"
    fields = _take(d, _PLANE_KEYS, where, source)
    _nested_extra(d, _PLANE_KEYS, where, source)
    return Plane(
        a=_tuple(fields["a"], f"{where}.a", source),
        b=_tuple(fields["b"], f"{where}.b", source),
        coefficient=fields["coefficient"],
    )


def encoding_from_dict(d: Mapping[str, Any], source: str = "<dict>") -> Encoding:
    """A verified :class:`Encoding` from the JSON object ``d``; ``source`` names it in errors."""
    fields = _take(d, _ENCODING_KEYS, "", source)
    _check_format(fields, ENCODING_FORMAT, source)
    planes = _tuple(fields["planes"], "planes", source)
    return Encoding(
        name=fields["name"],
        digits=fields["digits"],
        modulus=fields["modulus"],
        a=_operand_from_dict(fields["a"], "a", source),
        b=_operand_from_dict(fields["b"], "b", source),
        planes=tuple(_plane_from_dict(p, t, source) for t, p in enumerate(planes)),
        products=fields["products"],
        extra=copy.deepcopy({k: v for k, v in d.items() if k not in _ENCODING_KEYS}),
        source=source,
    )


def _plan_alone(d: Mapping[str, Any], source: str) -> Plan:
    """The plan in ``d``, verified except for the encodings it names."""
    fields = _take(d, _PLAN_KEYS, "", source)
    _check_format(fields, PLAN_FORMAT, source)
    moduli = []
    for i, entry in enumerate(_tuple(fields["moduli"], "moduli", source)):
        pair = _take(entry, _MODULUS_KEYS, f"moduli[{i}]", source)
        _nested_extra(entry, _MODULUS_KEYS, f"moduli[{i}]", source)
        moduli.append((pair["modulus"], pair["encoding"]))
    return Plan(
        name=fields["name"],
        digits=fields["digits"],
        input_bits=fields["input_bits"],
        k_max=fields["k_max"],
        moduli=tuple(moduli),
        products=fields["products"],
        extra=copy.deepcopy({k: v for k, v in d.items() if k not in _PLAN_KEYS}),
        source=source,
    )


def plan_from_dict(d: Mapping[str, Any], source: str, encodings: Mapping[str, Encoding]) -> Plan:
    """A verified :class:`Plan` from the JSON object ``d``, its named residue encodings
    checked against ``encodings`` (name -> Encoding; :func:`ozaki.catalog.load_plan`
    checks a plan file against the installed catalog); ``source`` names it in errors."""
    plan = _plan_alone(d, source)
    _check_plan_encodings(plan, encodings, source)
    return plan


def _operand_to_dict(op: Operand) -> dict[str, Any]:
    return {"min": op.min, "max": op.max, "weights": list(op.weights), "limbs": [list(r) for r in op.limbs]}


def encoding_to_dict(enc: Encoding) -> dict[str, Any]:
    """The JSON object for ``enc``, keys in the order of ``_ENCODING_KEYS``, extra fields last."""
    return {
        "format": ENCODING_FORMAT,
        "name": enc.name,
        "digits": enc.digits,
        "modulus": enc.modulus,
        "a": _operand_to_dict(enc.a),
        "b": _operand_to_dict(enc.b),
        "planes": [{"a": list(p.a), "b": list(p.b), "coefficient": p.coefficient} for p in enc.planes],
        "products": enc.products,
        **copy.deepcopy(enc.extra),
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON object for ``plan``, keys in the order of ``_PLAN_KEYS``, extra fields last."""
    return {
        "format": PLAN_FORMAT,
        "name": plan.name,
        "digits": plan.digits,
        "input_bits": plan.input_bits,
        "k_max": plan.k_max,
        "moduli": [{"modulus": m, "encoding": name} for m, name in plan.moduli],
        "products": plan.products,
        **copy.deepcopy(plan.extra),
    }


# ---------------------------------------------------------------------------- files


def _read_json(path: str | os.PathLike) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON (truncated or corrupt?): {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read: {err}") from None


def load_encoding(path: str | os.PathLike) -> Encoding:
    """Reads and exhaustively re-verifies one ``ozaki-encoding/1`` file.

    Parameters
    ----------
    path : str or os.PathLike
        The JSON file.

    Returns
    -------
    Encoding
        The encoding, verified on every input pair.

    Raises
    ------
    ValueError
        The file cannot be read, is not valid JSON, is not an ``ozaki-encoding/1``, or fails
        the verification (see :class:`Encoding`); the message names the file.

    Examples
    --------
    >>> import ozaki
    >>> from ozaki.catalog import catalog_dir
    >>> enc = ozaki.load_encoding(catalog_dir() / "residue" / "res10-int8-1.json")
    >>> enc.modulus, enc.a.min <= 0 <= enc.a.max
    (10, True)
    """
    return encoding_from_dict(_read_json(path), str(path))


def load_plan(path: str | os.PathLike, encodings: Mapping[str, Encoding]) -> Plan:
    """Reads and re-verifies one ``ozaki-plan/1`` file against ``encodings`` (name -> Encoding)."""
    return plan_from_dict(_read_json(path), str(path), encodings)


def _is_flat(value: Any) -> bool:
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, list):
        return all(isinstance(v, scalar) for v in value)
    if isinstance(value, dict):
        return all(isinstance(v, scalar) or (isinstance(v, list) and _is_flat(v)) for v in value.values())
    return True


def _render(value: Any, indent: str) -> str:
    """JSON with every flat array or object on one line, so a limb vector or a plane is one row."""
    if _is_flat(value):
        return json.dumps(value, separators=(", ", ": "))
    inner = indent + "  "
    if isinstance(value, list):
        items = [inner + _render(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    items = [f"{inner}{json.dumps(k)}: {_render(v, inner)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def _canonical(obj: Mapping[str, Any] | Encoding | Plan, source: str) -> dict[str, Any]:
    if isinstance(obj, Mapping) and obj.get("format") == ENCODING_FORMAT:
        obj = encoding_from_dict(obj, source)
    elif isinstance(obj, Mapping) and obj.get("format") == PLAN_FORMAT:
        # A plan may be written before the encodings it names are installed.
        obj = _plan_alone(obj, source)
    if isinstance(obj, Encoding):
        return encoding_to_dict(obj)
    if isinstance(obj, Plan):
        return plan_to_dict(obj)
    return dict(obj)


def dump_json(obj: Mapping[str, Any] | Encoding | Plan, path: str | os.PathLike) -> None:
    """Writes ``obj`` as JSON with one limb row, plane or modulus per line.

    Encodings and plans (objects, or dicts with their ``format``) are verified first and
    written with their format's keys first, in order; other objects are written as given.
    The text goes to a temporary file renamed over ``path``, so a reader (engines load the
    catalog while the search engine writes it) never sees half a file."""
    text = _render(_canonical(obj, str(path)), "") + "\n"
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; catalog files are read by everyone
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
