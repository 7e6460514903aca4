"""Stage 2, residues: each scaled integer becomes its balanced residue modulo each modulus.

    A'_i = A' mod m_i ∈ [−⌊m_i/2⌋, m_i − 1 − ⌊m_i/2⌋]      (the int8 range for m = 256)

The integer is ``mantissa · 2^exponent`` (see :mod:`ozaki.scaling`), so the residue is
``(mantissa mod m)·(2^exponent mod m) mod m``: no big integer is ever formed.

Also here: the moduli of the reference engine, the largest primes that keep a float64
BLAS product of residues exact.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Sequence

import sympy
import torch

from .scaling import Scaled

__all__ = ["balanced", "reference_moduli", "residues", "FLOAT64_EXACT"]

# float64 sums are exact while every partial sum is an integer below 2^53.
FLOAT64_EXACT = 2**53
_MAX_HALF = 2**21 - 1
_MAX_CHUNK = 2**16


def balanced(r: torch.Tensor, m: int) -> torch.Tensor:
    """The representative of r mod m in [−⌊m/2⌋, m − 1 − ⌊m/2⌋]."""
    r = torch.remainder(r, m)
    return torch.where(r > m - 1 - m // 2, r - m, r)


@cache
def _powers_of_two(m: int, count: int) -> list[int]:
    return [pow(2, e, m) for e in range(count)]


def residues(s: Scaled, moduli: Sequence[int]) -> torch.Tensor:
    """Balanced residues of the integers in ``s``, shape (len(moduli), ..., M, K), int64."""
    max_exponent = int(s.exponent.max()) if s.exponent.numel() else 0
    out = torch.empty((len(moduli), *s.mantissa.shape), dtype=torch.int64, device=s.mantissa.device)
    for index, m in enumerate(moduli):
        if not 2 <= m < 2**31:
            raise ValueError(f"modulus {m} outside [2, 2^31): residues are multiplied in int64")
        r = s.mantissa
        if max_exponent > 0:
            # Rows keep more than 53 bits: multiply by 2^exponent mod m, looked up per entry.
            table = torch.tensor(_powers_of_two(m, max_exponent + 1), dtype=torch.int64, device=r.device)
            r = torch.remainder(r, m) * table[s.exponent]
        out[index] = balanced(r, m)
    return out


def reference_moduli(k: int, min_product: int) -> tuple[int, ...]:
    """Primes m, largest first, with min(K, 2^16)·⌊m/2⌋² < 2^53 (a float64 GEMM of balanced
    residues over that many terms is exact in any summation order) and ∏m > min_product.  They stay below 2^22, which keeps
    the CRT's float64 sums exact for up to 512 moduli (over 10000 bits)."""
    if k < 1:
        raise ValueError(f"K must be positive, got {k}")
    # Longer K is cut into chunks of _MAX_CHUNK (see products.direct_products) rather than
    # shrinking the moduli further.
    k = min(k, _MAX_CHUNK)
    half = min(math.isqrt((FLOAT64_EXACT - 1) // k), _MAX_HALF)  # the largest ⌊m/2⌋ with K·⌊m/2⌋² < 2^53
    count = 1
    while math.prod(moduli := _primes_below(2 * half + 1, count)) <= min_product:
        count += 1
    return moduli


@cache
def _primes_below(bound: int, count: int) -> tuple[int, ...]:
    """The ``count`` largest primes ≤ bound, descending."""
    if count == 1:
        return (sympy.prevprime(bound + 1),)
    head = _primes_below(bound, count - 1)
    return head + (sympy.prevprime(head[-1]),)
