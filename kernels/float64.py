"""IEEE 754 binary64 (float64) limits that exactness arguments in every layer rest on.

A float64 has 1 sign bit, 11 exponent bits (bias 2^10 − 1) and 52 stored fraction bits
behind an implicit leading 1.  Plain integers, torch-free, so the kernels, the library and
the search engine can all name them; and the one correct rounding of an exact dyadic value,
which the exact references of both layers end in.
"""

import math

__all__ = [
    "EXPONENT_BIAS",
    "FLOAT64_EXACT",
    "FRACTION_BITS",
    "MAGNITUDE_MASK",
    "MAX_EXPONENT",
    "MIN_NORMAL_EXPONENT",
    "SIGNIFICAND_BITS",
    "ULP_BIAS",
    "round_dyadic",
]

# 52 stored fraction bits plus the implicit leading 1.
SIGNIFICAND_BITS = 53
# Every integer of magnitude at most 2^53 is a float64 (2^53 + 1 is not): integer sums and
# products stay exact while every partial result stays within this bound.
FLOAT64_EXACT = 2**SIGNIFICAND_BITS
# The exponent field is stored with this bias, 2^10 − 1.
EXPONENT_BIAS = 1023
# The largest unbiased exponent, 2^11 − 2 − bias: the all-ones pattern is infinity and NaN.
MAX_EXPONENT = 2**11 - 2 - EXPONENT_BIAS
# The smallest exponent of a normal number, 1 − bias: the all-zeros field holds the subnormals.
MIN_NORMAL_EXPONENT = 1 - EXPONENT_BIAS
# The fraction bits stored behind the implicit leading 1.
FRACTION_BITS = SIGNIFICAND_BITS - 1
# A float64 with biased exponent field E is significand · 2**(max(E, 1) − ULP_BIAS): the
# significand is 2**52 + fraction for E ≥ 1 and the fraction alone for subnormals (E = 0).
ULP_BIAS = EXPONENT_BIAS + FRACTION_BITS
# Clears the sign bit of a bit pattern (as int64): the bits of |x|.
MAGNITUDE_MASK = 2**63 - 1


def round_dyadic(s: int, e: int) -> float:
    """s · 2**e correctly rounded to float64: nearest, ties to even, subnormals included, ±inf
    past the range; +0.0 for s = 0, and -0.0 where a negative value underflows.

    CPython's int / int and float(int) round once.  Only exponents in a window around the
    float64 range can change the result (below it |s| · 2**e < 2**-1076 rounds to zero, above
    it |s| · 2**e >= 2**1025 overflows), so e is clamped to that window: the shifts stay small
    whatever the exponent."""
    if s == 0:
        return 0.0
    e = min(max(e, -1076 - abs(s).bit_length()), 1025)
    try:
        return float(s << e) if e >= 0 else s / (1 << -e)
    except OverflowError:
        return math.inf if s > 0 else -math.inf
