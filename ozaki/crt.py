"""Stage 4 and 5, CRT and unscaling: residues become one correctly rounded float64.

Garner's algorithm gives the mixed-radix digits of the unique X ∈ [0, M), M = ∏ m_i, with
X ≡ C'_i (mod m_i):

    X = v_0 + P_1·(v_1 + …) = Σ v_i·P_i,     v_i ∈ [0, m_i),  P_i = m_0 ⋯ m_{i−1}

The signed product is the representative Y of X in (−M/2, M/2): Y = X for X ≤ G, Y = X − M
for X > G, G = ⌊M/2⌋.  So |A'B'| < M/2 is recovered exactly, the whole window the capacity
∏m > 2·K·(2^p − 1)(2^q − 1) pays for.  For even M the class X = G = M/2 has no
representative in the open window (it holds both M/2 and −M/2) and is refused.

The sign is decided exactly, on the digits: with g_i the digits of G,

    X − G = Σ (v_i − g_i)·P_i   and   |Σ_{i<t} (v_i − g_i)·P_i| ≤ Σ_{i<t} (m_i − 1)·P_i = P_t − 1,

so the most significant non-zero difference v_t − g_t (|·|·P_t ≥ P_t) has the sign of
X − G, and X = G exactly when every difference is zero: a lexicographic comparison of the
digit vectors from the top, no estimate and no margin.

Y is expanded into 21-bit limbs and rounded once, to nearest with ties to even, as
Y · 2^exponent (exponent = −s_i − t_j undoes the scaling): subnormal results and overflow to
±inf included, or to ±DBL_MAX where the caller's slack says that the exact product Y stands
for may be finite (``kernels.crt.slack_exponent``).  The bits depend only on the exact
integer, never on the moduli.

All of it is exact integer arithmetic carried in float64 (sums below 2^53, reductions by
:func:`ozaki._bits.floor_mod`) or int64, done in cache-sized blocks of columns.
"""

from __future__ import annotations

import math
from functools import cache
from typing import NamedTuple, Sequence

import numpy as np
import torch

from kernels.crt import DBL_MAX, HALF_MODULUS_ERROR, slack_exponent
from kernels.float64 import FLOAT64_EXACT
from kernels.moduli import check_modulus

from ._bits import FLOOR_MOD_LIMIT, blocks, floor_mod, ldexp

__all__ = ["HALF_MODULUS_ERROR", "garner", "round_to_float64", "signed_limbs", "signed_residues"]

LIMB_BITS = 21
_LIMB_MASK = (1 << LIMB_BITS) - 1
_GARNER_MAX_MODULUS = 2**24
_WINDOW = 4  # limbs rounded together: the top one and three under it
# Below this magnitude a result may be subnormal, and is rounded bit by bit.
_SMALLEST_SAFE = 2.0**-1021


def _radix_weights(moduli: Sequence[int]) -> list[int]:
    """P_i = m_0 ⋯ m_{i-1}, the weight of mixed-radix digit i."""
    return [math.prod(moduli[:i]) for i in range(len(moduli))]


def _check_moduli(moduli: Sequence[int]) -> None:
    for m in moduli:
        check_modulus(m)
    # Garner sums N terms below max(m)², the limb expansion N terms below max(m)·2^21.
    biggest = max(moduli)
    # The limb expansion runs as a float64 product of integers: exact while every partial sum
    # stays below 2^53.
    if len(moduli) * biggest * max(biggest, 1 << LIMB_BITS) >= FLOAT64_EXACT:
        raise ValueError(
            f"{len(moduli)} moduli up to {biggest}: N·max(m)·max(m, 2^{LIMB_BITS}) reaches 2^53, so the CRT's "
            "float64 sums would round; use fewer or smaller moduli"
        )


@cache
def _garner_constants(moduli: tuple[int, ...]) -> list[tuple[int, list[list[int]]]]:
    """Per digit i: the inverse of P_i mod m_i and the weights −P_j·P_i⁻¹ mod m_i (balanced)
    of the lower digits, in groups whose float64 sums stay within floor_mod's range."""
    weights = _radix_weights(moduli)
    biggest = max(moduli)
    # |c_i·P_i⁻¹| < max(m)² and each lower term is below max(m)²/2.
    group = int(2 * (FLOOR_MOD_LIMIT // biggest**2 - 1))
    constants = []
    for i, m in enumerate(moduli):
        inverse = pow(weights[i] % m, -1, m)  # ValueError here: the moduli are not coprime
        lower = [(-w * inverse + m // 2) % m - m // 2 for w in weights[:i]]
        constants.append((inverse, [lower[g : g + group] for g in range(0, i, group)]))
    return constants


def garner(c: torch.Tensor, moduli: Sequence[int]) -> torch.Tensor:
    """Mixed-radix digits v (shape of ``c``, int64) of X ≡ c_i (mod m_i); c may hold any integers.

        v_i = c_i·P_i⁻¹ − Σ_{j<i} v_j·(P_j·P_i⁻¹ mod m_i)   mod m_i

    in float64, block by block: every term is an integer below max(m)², each group of sums
    stays below 2^50 and is brought back to [0, m_i) by the exact :func:`floor_mod`.
    """
    if c.shape[0] != len(moduli):
        raise ValueError(f"{c.shape[0]} residue planes for {len(moduli)} moduli")
    _check_moduli(moduli)
    if max(moduli) >= _GARNER_MAX_MODULUS:
        raise ValueError(
            f"modulus {max(moduli)} reaches 2^24: Garner's float64 products of two residues would pass "
            "2^48 and leave floor_mod's exact range; use smaller moduli"
        )
    constants = _garner_constants(tuple(moduli))
    flat = c.reshape(len(moduli), -1)
    out = torch.empty(flat.shape, dtype=torch.int64, device=c.device)
    # Row by row within a block: each op stays under torch's threading grain.
    for block in blocks(flat.shape[1], 1, c.device):
        x = []
        for i, m in enumerate(moduli):
            part = flat[i, block]
            low, high = part.aminmax()
            if max(-int(low), int(high)) >= max(moduli):
                part = torch.remainder(part, m)  # keeps every c_i·P_i⁻¹ below max(m)²
            x.append(part.to(torch.float64))
        v = []
        for i, (m, (inverse, groups)) in enumerate(zip(moduli, constants)):
            t = torch.mul(x[i], inverse)
            j = 0
            for weights in groups:
                # One multiply-add per lower digit: a BLAS call per block would wake the
                # thread pool for a few thousand elements.
                for weight in weights:
                    t.add_(v[j], alpha=weight)
                    j += 1
                if j < i:
                    floor_mod(t, m, out=t)
            v.append(floor_mod(t, m, out=t))
            out[i, block] = v[i]
    return out.reshape(c.shape)


@cache
def _limb_constants(moduli: tuple[int, ...]) -> tuple[list[int], list[list[int]], list[int]]:
    """The mixed-radix digits of G = ⌊M/2⌋, the 21-bit limbs of each P_i (one row per limb)
    and those of M."""
    modulus = math.prod(moduli)
    weights = _radix_weights(moduli)
    count = modulus.bit_length() // LIMB_BITS + 1
    half = [(modulus // 2 // w) % m for w, m in zip(weights, moduli)]
    chunks = [[(w >> (LIMB_BITS * c)) & _LIMB_MASK for w in weights] for c in range(count)]
    modulus_limbs = [(modulus >> (LIMB_BITS * c)) & _LIMB_MASK for c in range(count)]
    return half, chunks, modulus_limbs


class _Limbs(NamedTuple):
    half: torch.Tensor  # (N, 1) int64: the digits of G = ⌊M/2⌋
    even: bool  # M is even: X = G is the class without a representative
    weights: torch.Tensor  # (L, N + 1) float64


def _limb_tensors(moduli: Sequence[int], device: torch.device) -> _Limbs:
    """The digits of G and the (L, N + 1) limb weights that map the column
    (s·v_0, …, s·v_{N−1}, [Y < 0]) to the limbs of |Y| = s·X + [Y < 0]·M, s = ±1."""
    _check_moduli(moduli)
    half, chunks, modulus_limbs = _limb_constants(tuple(moduli))
    weights = [row + [limb] for row, limb in zip(chunks, modulus_limbs)]
    return _Limbs(
        torch.tensor(half, dtype=torch.int64, device=device)[:, None],
        math.prod(moduli) % 2 == 0,
        torch.tensor(weights, dtype=torch.float64, device=device),
    )


def _small_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for the small products of one block: numpy's BLAS on the CPU keeps them on this
    thread, where torch's would wake its thread pool for a few thousand columns (ruinous on a
    loaded machine).  Exact either way: the callers' integer sums stay below 2^53."""
    if a.device.type == "cpu":
        return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))
    return torch.mm(a, b)


def _negative(mixed_radix: torch.Tensor, half: torch.Tensor, even: bool) -> torch.Tensor:
    """Y < 0, i.e. X > G, for digits (N, B): the sign of the most significant non-zero
    v_t − g_t (see the module docstring).  Raises where X = G and M is even."""
    # The top digit decides unless it ties, which needs X within P_{N−1} = M/m_{N−1} of G:
    # products far inside the capacity (X near 0 or M) never get that far.
    negative = mixed_radix[-1] > half[-1]
    tied = mixed_radix[-1] == half[-1]
    if bool(tied.any()):
        (index,) = tied.nonzero(as_tuple=True)
        difference = mixed_radix[:, index] - half
        positions = torch.arange(mixed_radix.shape[0], device=mixed_radix.device)[:, None]
        # t = 0 where every difference is zero, and then v_0 − g_0 = 0 itself says X = G.
        top = torch.where(difference != 0, positions, 0).amax(dim=0)
        lead = difference.gather(0, top[None])[0]
        if even and bool((lead == 0).any()):
            raise ValueError(HALF_MODULUS_ERROR)
        negative[index] = lead > 0
    return negative


def _signed_limbs(mixed_radix: torch.Tensor, limbs: _Limbs, zeros: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Limbs of |Y| under len(zeros) zero rows (shape (len(zeros) + L, B)) and Y < 0, for
    digits (N, B); ``zeros`` is int64 (pad, ≥ B), copied rather than filled per block (fill
    wakes the thread pool)."""
    n = mixed_radix.shape[0]
    negative = _negative(mixed_radix, limbs.half, limbs.even)
    v = torch.empty((n + 1, mixed_radix.shape[1]), dtype=torch.float64, device=mixed_radix.device)
    v[:n] = mixed_radix
    v[n] = negative
    v[:n].mul_(v[n].mul(-2.0).add_(1.0))  # s = ±1
    # Limb c of |Y| before carries: Σ_i ±v_i·(limb c of P_i) (+ limb c of M), an integer
    # below N·max(m)·2^21 < 2^53 (checked by _check_moduli): one exact float64 product.
    pad = zeros.shape[0]
    out = torch.empty((pad + limbs.weights.shape[0], v.shape[1]), dtype=torch.int64, device=v.device)
    out[:pad] = zeros[:, : v.shape[1]]
    out[pad:] = _small_mm(limbs.weights, v)
    for c in range(pad, out.shape[0] - 1):
        # In-place methods: `out[c] &= …` would also copy the row onto itself.
        out[c + 1].add_(out[c] >> LIMB_BITS)  # arithmetic shift: a negative limb borrows
        out[c].bitwise_and_(_LIMB_MASK)
    return out, negative


def signed_limbs(mixed_radix: torch.Tensor, moduli: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """|Y| as little-endian 21-bit limbs (shape (L, ...)) and the sign (True where Y < 0),
    Y the representative in (−M/2, M/2) of the mixed-radix digits (see :func:`garner`).

    The sign is exact (a comparison of digits, see the module docstring); a ValueError says
    that a value is congruent to M/2 with M even, the one class with no such representative.
    """
    flat = mixed_radix.reshape(mixed_radix.shape[0], -1)
    nothing = torch.empty((0, flat.shape[1]), dtype=torch.int64, device=mixed_radix.device)
    limbs, negative = _signed_limbs(flat, _limb_tensors(moduli, mixed_radix.device), nothing)
    return limbs.reshape(-1, *mixed_radix.shape[1:]), negative.reshape(mixed_radix.shape[1:])


def signed_residues(mixed_radix: torch.Tensor, moduli: Sequence[int], targets: Sequence[int]) -> torch.Tensor:
    """Y mod r in [0, r) for each target modulus r, shape (len(targets), ...), int64, Y the
    representative in (−M/2, M/2) of the mixed-radix digits (as :func:`signed_limbs`): the CRT
    integer moved to other moduli without being formed (ozaki.bands adds band products so).

        Y = Σ v_i·P_i − [Y < 0]·M  ≡  Σ v_i·(P_i mod r) + [Y < 0]·(−M mod r)   (mod r)

    one float64 product of integers whose sums stay within :func:`floor_mod`'s range (checked).
    """
    _check_moduli(moduli)
    for r in targets:
        check_modulus(r, "target modulus")
    bound = (len(moduli) + 1) * max(moduli) * max(targets)
    if bound > FLOOR_MOD_LIMIT:
        raise ValueError(
            f"{len(moduli)} moduli up to {max(moduli)} into targets up to {max(targets)}: the sums reach "
            f"{bound} > 2^50, past floor_mod's exact range; use smaller moduli"
        )
    limbs = _limb_tensors(moduli, mixed_radix.device)
    modulus = math.prod(moduli)
    weights = torch.tensor(
        [[w % r for w in _radix_weights(moduli)] + [-modulus % r] for r in targets],
        dtype=torch.float64, device=mixed_radix.device,
    )
    flat = mixed_radix.reshape(mixed_radix.shape[0], -1)
    out = torch.empty((len(targets), flat.shape[1]), dtype=torch.int64, device=mixed_radix.device)
    for block in blocks(flat.shape[1], len(targets) + len(moduli), mixed_radix.device):
        v = torch.cat([flat[:, block], _negative(flat[:, block], limbs.half, limbs.even)[None]]).to(torch.float64)
        sums = _small_mm(weights, v)
        for t, r in enumerate(targets):
            out[t, block] = floor_mod(sums[t], r, out=sums[t])
    return out.reshape(len(targets), *mixed_radix.shape[1:])


def _low_bits(x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """x mod 2^count for 0 ≤ count ≤ 63 (per element)."""
    return x & ((torch.ones_like(x) << count) - 1)


def round_to_float64(mixed_radix: torch.Tensor, moduli: Sequence[int], exponent: torch.Tensor,
                     slack: int = 0) -> torch.Tensor:
    """Y · 2^exponent rounded to float64 (nearest, ties to even), Y the signed CRT integer.

    Only the top four limbs (84 bits) can hold the 53 kept bits and the rounding bit; every
    lower limb only matters through the sticky bit.  An exact zero gives +0.0.  Y is the
    representative in (−M/2, M/2), as in :func:`signed_limbs` (which raises for the class of
    M/2 when M is even).  Runs block by block; each result depends on its own digits alone.

    ``slack``: a bound on |Y − Y_exact| for the exact product Y stands for (0: Y is exact); a
    result that rounds past ±DBL_MAX saturates there unless the exact product certainly
    overflows (``kernels.crt.slack_exponent``, whose bits ``decode_residues`` shares).
    """
    sigma = slack_exponent(slack)
    limbs = _limb_tensors(moduli, mixed_radix.device)
    shape = mixed_radix.shape[1:]
    flat = mixed_radix.reshape(mixed_radix.shape[0], -1)
    exponent = exponent.to(torch.int64).expand(shape).reshape(-1)
    out = torch.empty(flat.shape[1], dtype=torch.float64, device=mixed_radix.device)
    parts = blocks(flat.shape[1], _WINDOW + limbs.weights.shape[0], mixed_radix.device)
    zeros = torch.zeros((_WINDOW - 1, parts[0].stop if parts else 0), dtype=torch.int64, device=mixed_radix.device)
    for block in parts:
        magnitude, negative = _signed_limbs(flat[:, block], limbs, zeros)
        out[block] = _round_window(magnitude, negative, exponent[block], sigma)
    return out.reshape(shape)


def _round_window(padded: torch.Tensor, negative: torch.Tensor, exponent: torch.Tensor, sigma: int) -> torch.Tensor:
    """±|Y|·2^exponent rounded, from the limbs of |Y| under three zero rows (shape (3 + L, B)).

    The window W = Σ_{j<4} l_{top−3+j}·2^(21j) holds the top limb and the three under it
    (zeros below limb 0): |Y| = (W + f)·2^(21(top−3)) with 0 ≤ f < 1, f > 0 exactly when a
    lower limb is non-zero.  s = fl(high·2^42 + low) is W rounded to 53 bits and the Fast2Sum
    error e = W − s is exact (high·2^42 is 0 or at least 2^63 > low).  W + f rounds like W
    unless W is a tie (|e| = ulp(s)/2 and W ≥ 2^63, where ulp(s) ≥ 2^11 > f) and f > 0: then
    only e > 0 moves, up to s + ulp(s).
    Scaling s by 2^(21(top−3) + exponent) is exact or overflows correctly for normal results;
    results under 2^-1021 in magnitude are redone bit by bit (:func:`_round_limbs`), as
    rounding to the subnormal grid after rounding to 53 bits could round twice.  Results past
    the range saturate at ±DBL_MAX as σ ≥ 0 allows (:func:`_within_slack`).
    """
    limbs = padded[_WINDOW - 1 :]
    count = limbs.shape[0]
    positions = torch.arange(count, device=limbs.device)[:, None]
    top = limbs.clamp(max=1).mul_(positions).amax(dim=0)  # limbs are non-negative
    window = padded.gather(0, top + torch.arange(_WINDOW, device=limbs.device)[:, None])
    below = limbs.sum(dim=0) > window.sum(dim=0)  # limbs are non-negative
    window = window.to(torch.float64)
    high = torch.add(window[2], window[3], alpha=2.0**LIMB_BITS).mul_(2.0 ** (2 * LIMB_BITS))
    low = torch.add(window[0], window[1], alpha=2.0**LIMB_BITS)
    rounded = high + low
    error = low - (rounded - high)
    up = torch.nextafter(rounded, rounded.new_full((1,), math.inf))
    rounded = torch.where((2 * error == up - rounded) & below, up, rounded)
    magnitude = ldexp(rounded, LIMB_BITS * (top - (_WINDOW - 1)) + exponent)
    result = torch.where(negative, -magnitude, magnitude)
    tiny = (rounded != 0) & (magnitude < _SMALLEST_SAFE)
    if bool(tiny.any()):
        (index,) = tiny.nonzero(as_tuple=True)
        result[index] = _round_limbs(limbs[:, index], negative[index], exponent[index])
    if sigma >= 0:
        huge = magnitude.isinf()
        if bool(huge.any()):
            (index,) = huge.nonzero(as_tuple=True)
            within = _within_slack(limbs[:, index], exponent[index], sigma)
            past = result[index]  # ±inf
            result[index] = torch.where(within, torch.full_like(past, DBL_MAX).copysign_(past), past)
    return result


def _within_slack(limbs: torch.Tensor, exponent: torch.Tensor, sigma: int) -> torch.Tensor:
    """Whether |Y| − 2^σ, from the limbs of |Y| (shape (L, B)), is negative or rounds times
    2^exponent to a finite float64: the exact product may then be finite."""
    position, bit = divmod(sigma, LIMB_BITS)
    if position >= limbs.shape[0]:  # 2^σ ≥ 2^(21·L), above every |Y|
        return torch.ones(limbs.shape[1], dtype=torch.bool, device=limbs.device)
    rest = limbs.clone()
    rest[position] -= 1 << bit
    for c in range(position, rest.shape[0] - 1):
        rest[c + 1].add_(rest[c] >> LIMB_BITS)  # arithmetic shift: a negative limb borrows
        rest[c].bitwise_and_(_LIMB_MASK)
    short = rest[-1] < 0
    rest[:, short] = 0  # rounded as zero, below: finite either way
    positive = torch.zeros_like(short)
    return short | _round_limbs(rest, positive, exponent).isfinite()


def _round_limbs(limbs: torch.Tensor, negative: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """Round ±limbs (shape (L, B)) · 2^exponent (shape (B,)) to float64."""
    count = limbs.shape[0]

    nonzero = limbs != 0
    positions = torch.arange(count, device=limbs.device).reshape(count, *([1] * (limbs.dim() - 1)))
    top = torch.where(nonzero, positions, 0).amax(dim=0)
    bottom = (top - 3).clamp(min=0)  # the window: limbs bottom … bottom + 3
    window = torch.gather(limbs, 0, torch.stack([bottom, bottom + 1, bottom + 2, bottom + 3]).clamp(max=count - 1))
    window[1:] *= (torch.arange(1, 4, device=limbs.device).reshape(3, *([1] * (limbs.dim() - 1))) + bottom) < count
    high = (window[3] << LIMB_BITS) | window[2]  # bits 42…83 of the window
    low = (window[1] << LIMB_BITS) | window[0]  # bits 0…41
    below = nonzero.sum(dim=0) > (window != 0).sum(dim=0)  # a set bit under the window

    # |Y| has `length` bits; drop the window's lowest `drop` bits so that 53 remain, more
    # where the result is subnormal (its last bit may weigh no less than 2^-1074).
    base = LIMB_BITS * bottom
    top_limb = torch.gather(limbs, 0, top.unsqueeze(0)).squeeze(0)
    length = LIMB_BITS * top + torch.frexp(top_limb.to(torch.float64))[1].to(torch.int64)
    drop = (torch.maximum(length - 53, -1074 - exponent) - base).clamp(min=0, max=4 * LIMB_BITS + 1)
    high_part = drop >= 2 * LIMB_BITS
    kept = torch.where(
        high_part,
        high >> (drop - 2 * LIMB_BITS).clamp(0, 63),
        (high << (2 * LIMB_BITS - drop).clamp(min=0)) | (low >> drop.clamp(max=63)),
    )
    half_position = drop - 1
    half_bit = torch.where(
        half_position >= 2 * LIMB_BITS,
        high >> (half_position - 2 * LIMB_BITS).clamp(0, 63),
        low >> half_position.clamp(0, 63),
    ) & (half_position >= 0)
    sticky = below | torch.where(
        half_position >= 2 * LIMB_BITS,
        (low != 0) | (_low_bits(high, (half_position - 2 * LIMB_BITS).clamp(0, 63)) != 0),
        _low_bits(low, half_position.clamp(0, 63)) != 0,
    )
    kept = kept + ((half_bit == 1) & (sticky | ((kept & 1) == 1))).to(torch.int64)
    magnitude = ldexp(kept.to(torch.float64), base + drop + exponent)
    return torch.where(negative, -magnitude, magnitude)
