"""Stage 2, residues: each scaled integer becomes its balanced residue modulo each modulus.

    A'_i = A' mod m_i ∈ [−⌊m_i/2⌋, m_i − 1 − ⌊m_i/2⌋]      (the int8 range for m = 256)

The integer is ``mantissa · 2^exponent`` (see :mod:`ozaki.scaling`): it is cut into a few
float64 pieces whose weighted sum mod m is exact (see :func:`residues`), or, for integers
too wide for that, reduced as ``(mantissa mod m)·(2^exponent mod m) mod m`` in int64.  No
big integer is ever formed.

Also here: the moduli of the reference engine, the largest primes that keep a float64 BLAS
product of residues exact.  ``crt_capacity`` and ``has_capacity`` live in the torch-free
:mod:`ozaki.capacity` and stay importable from here.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Sequence

import torch

from kernels.float64 import FLOAT64_EXACT, MAX_EXPONENT, SIGNIFICAND_BITS
from kernels.moduli import check_modulus

from ._bits import FLOOR_MOD_LIMIT, blocks, floor_mod, pow2
from .capacity import crt_capacity, has_capacity
from .scaling import Scaled

__all__ = ["balanced", "crt_capacity", "has_capacity", "reference_moduli", "residues"]

_MAX_HALF = 2**21 - 1
_MAX_CHUNK = 2**16
_MAX_PIECES = 8


def balanced(r: torch.Tensor, m: int) -> torch.Tensor:
    """The representative of r mod m in [−⌊m/2⌋, m − 1 − ⌊m/2⌋]."""
    r = torch.remainder(r, m)
    return torch.where(r > m - 1 - m // 2, r - m, r)


def _balanced_power(e: int, m: int) -> int:
    """2^e mod m, balanced."""
    return (pow(2, e, m) + m // 2) % m - m // 2


@cache
def _powers_of_two(m: int, count: int) -> list[int]:
    return [pow(2, e, m) for e in range(count)]


def _pieces_plan(max_exponent: int, halves: Sequence[int]) -> tuple[int, int] | None:
    """(count, width) of the pieces y_j ∈ (−2^width, 2^width) that split integers up to
    2^(53 + max_exponent) with Σ_j |y_j|·⌊m/2⌋ ≤ 2^50 for every modulus, or None."""
    length = SIGNIFICAND_BITS + 1 + max_exponent
    # y = mantissa·2^exponent is a finite float64 while it stays below 2^1023.
    if length > MAX_EXPONENT:
        return None
    for count in range(2, _MAX_PIECES + 1):  # one piece never fits: 2^54·⌊m/2⌋ > 2^50
        width = -(-length // count)
        if count * max(halves) << width <= FLOOR_MOD_LIMIT:
            return count, width
    return None


def residues(s: Scaled, moduli: Sequence[int]) -> torch.Tensor:
    """Balanced residues of the integers in ``s``, shape (len(moduli), ..., M, K), int64.

    Block by block, each integer y = mantissa·2^exponent is formed in float64 (exact: at most
    53 significant bits, below 2^1024) and cut into a few pieces y = Σ_j y_j·2^(width·j)
    (truncation keeps every piece exact and of y's sign); then y ≡ Σ_j y_j·(2^(width·j) mod m)
    (mod m) is an integer sum below 2^50 that :func:`floor_mod` reduces exactly.  Blocks whose
    integers are too wide for that fall back to int64 arithmetic.
    """
    for m in moduli:
        check_modulus(m)
    mantissa, exponent = s.mantissa.reshape(-1), s.exponent.reshape(-1)
    out = torch.empty((len(moduli), mantissa.shape[0]), dtype=torch.int64, device=mantissa.device)
    halves = [m // 2 for m in moduli]
    for block in blocks(mantissa.shape[0], 1, mantissa.device):
        max_exponent = int(exponent[block].max())
        plan = _pieces_plan(max_exponent, halves)
        if plan is None:
            for i, m in enumerate(moduli):
                out[i, block] = _residues_int64(mantissa[block], exponent[block], m, max_exponent)
            continue
        count, width = plan
        y = mantissa[block].to(torch.float64)
        if max_exponent:
            y.mul_(pow2(exponent[block]))
        pieces = []
        for j in range(count - 1, 0, -1):
            # Truncation through int64 (|piece| < 2^width): torch.trunc wakes the thread pool.
            piece = torch.mul(y, 2.0 ** -(width * j)).to(torch.int64).to(torch.float64)
            y.add_(piece, alpha=-(2.0 ** (width * j)))
            pieces.append((width * j, piece))
        for i, m in enumerate(moduli):
            (shift, piece), *higher = pieces
            t = torch.add(y, piece, alpha=_balanced_power(shift, m))
            for shift, piece in higher:
                t.add_(piece, alpha=_balanced_power(shift, m))
            out[i, block] = floor_mod(t, m, out=t, low=-(m // 2))
    return out.reshape(len(moduli), *s.mantissa.shape)


def _residues_int64(mantissa: torch.Tensor, exponent: torch.Tensor, m: int, max_exponent: int) -> torch.Tensor:
    """Balanced residues of mantissa·2^exponent for any exponent: (mantissa mod m) times
    2^exponent mod m, looked up per entry, both below 2^31."""
    r = mantissa
    if max_exponent > 0:
        table = torch.tensor(_powers_of_two(m, max_exponent + 1), dtype=torch.int64, device=r.device)
        r = torch.remainder(r, m) * table[exponent]
    return balanced(r, m)


def reference_moduli(k: int, min_product: int) -> tuple[int, ...]:
    """Primes m, largest first, with min(K, 2^16)·⌊m/2⌋² < 2^53 (a float64 GEMM of balanced
    residues over that many terms is exact in any summation order) that serve ``min_product``
    (:func:`has_capacity`).  They stay below 2^22, which keeps the CRT's float64 sums exact
    for up to 512 moduli (over 10000 bits)."""
    if k < 1:
        raise ValueError(f"K must be positive, got {k}")
    # Longer K is cut into chunks of _MAX_CHUNK (see products.direct_products) rather than
    # shrinking the moduli further.
    k = min(k, _MAX_CHUNK)
    half = min(math.isqrt((FLOAT64_EXACT - 1) // k), _MAX_HALF)  # the largest ⌊m/2⌋ with K·⌊m/2⌋² < 2^53
    count = 1
    while not has_capacity(math.prod(moduli := _primes_below(2 * half + 1, count)), min_product):
        count += 1
    return moduli


@cache
def _primes_below(bound: int, count: int) -> tuple[int, ...]:
    """The ``count`` largest primes ≤ bound, descending."""
    # Imported here: sympy takes a third of a second to import, which every process would pay
    # on its first product while only the reference engine's moduli need it.
    import sympy

    if count == 1:
        return (sympy.prevprime(bound + 1),)
    head = _primes_below(bound, count - 1)
    return head + (sympy.prevprime(head[-1]),)
