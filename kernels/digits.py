"""Digit sets: the integers one plane value may hold in a tensor-core operand type.

Each set is derived from its number format rather than listed, so a new format is one
more function.  ``fp4`` is twice the FP4 E2M1 values (the factor 2 makes them
integers and is folded into the reconstruction coefficients); ``fp8`` is the integers
that FP8 E4M3 (the ``fn`` variant: no infinities, one NaN pattern) represents exactly.
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

__all__ = ["DIGIT_SETS", "digit_set", "minifloat_values"]


def minifloat_values(exponent_bits: int, mantissa_bits: int, *, nan_top: bool) -> frozenset[Fraction]:
    """Every finite non-negative value of a sign/exponent/mantissa float with IEEE-style
    subnormals.  ``nan_top`` marks formats (E4M3FN) whose all-ones pattern is NaN and that
    use the top exponent for finite values."""
    bias = 2 ** (exponent_bits - 1) - 1
    values = set()
    for e in range(2**exponent_bits):
        for m in range(2**mantissa_bits):
            if nan_top and e == 2**exponent_bits - 1 and m == 2**mantissa_bits - 1:
                continue
            if e == 0:
                value = Fraction(m, 2**mantissa_bits) * Fraction(2) ** (1 - bias)
            else:
                value = (1 + Fraction(m, 2**mantissa_bits)) * Fraction(2) ** (e - bias)
            values.add(value)
    return frozenset(values)


def _signed_integers(values, scale: int = 1) -> frozenset[int]:
    scaled = {v * scale for v in values}
    ints = {int(v) for v in scaled if v.denominator == 1}
    return frozenset(ints | {-x for x in ints})


@cache
def _build() -> dict[str, frozenset[int]]:
    # E2M1 has no NaN or infinity: all 16 patterns are finite.
    e2m1 = minifloat_values(2, 1, nan_top=False)
    e4m3 = minifloat_values(4, 3, nan_top=True)
    return {
        "fp4": _signed_integers(e2m1, scale=2),
        "fp8": _signed_integers(e4m3),
        "int8": frozenset(range(-128, 128)),
        "int4": frozenset(range(-8, 8)),
    }


DIGIT_SETS: dict[str, frozenset[int]] = _build()


def digit_set(name: str) -> frozenset[int]:
    """The digit set called ``name``; ``ValueError`` listing the known names otherwise."""
    if not isinstance(name, str) or name not in DIGIT_SETS:
        raise ValueError(f"unknown digit set {name!r}; known digit sets: {', '.join(sorted(DIGIT_SETS))}")
    return DIGIT_SETS[name]
