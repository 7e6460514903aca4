"""IEEE 754 binary64 (float64) limits that exactness arguments in every layer rest on.

A float64 has 1 sign bit, 11 exponent bits (bias 2^10 − 1) and 52 stored fraction bits
behind an implicit leading 1.  Plain integers, torch-free, so the kernels, the library and
the search engine can all name them.
"""

__all__ = ["EXPONENT_BIAS", "FLOAT64_EXACT", "MAX_EXPONENT", "MIN_NORMAL_EXPONENT", "SIGNIFICAND_BITS"]

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
