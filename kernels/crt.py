"""Fused decode: residue products -> one correctly rounded float64, in one pass with a
linear (one-step) CRT.

Per entry, with residues c_i of the exact product Y and its scale 2**e, Y the
representative in (-M/2, M/2) (M = prod m_i; |Y| < M/2 is the capacity the pipeline asks
for, 2 * K * (2**p - 1) * (2**q - 1) < M):

1. Linear CRT.  With w_i = (M/m_i) * ((M/m_i)^-1 mod m_i), X' = sum_i c_i * w_i is
   congruent to Y mod M.  It is never formed: the kernel accumulates its limbs
   S_l = sum_i c_i * limb_l(w_i) (unnormalized) in float64, and the estimate
   E = sum_i c_i * (w_i / M) of X' / M.  q = round(E) is within 1/2 + 2**-5 of X' / M
   (see _constants), so Y0 = X' - q * M, whose limbs are S_l - q * limb_l(M), lies in
   (-M, M).  N * L multiply-adds per entry and no modular reduction.
2. Carries settle the limbs of Y0 into [0, 2**b), the top limb signed.  Y0 ≡ Y (mod M) and
   |Y0 - Y| < 3M/2, so Y0 is Y, Y + M or Y - M: exactly one of Y0, Y0 - M, Y0 + M lies in
   (-M/2, M/2), and with G = floor(M/2) it is Y0 - M where Y0 > G, Y0 + M where Y0 < -G, and
   Y0 itself otherwise (for even M, Y0 = ±G = ±M/2 is the class without a representative:
   flagged).  The comparison is exact: settled limbs compare lexicographically from the top
   (lower limbs in [0, 2**b) weigh less than one unit of the limb above), a few register
   operations per limb.  The float64 estimate only has to pick q within one; where it is
   off by one -- Y within about 2**-5 * M of +-M/2, the only entries the rounding of E can
   mislead -- the correction adds +-M to the limbs in the same pass.  It is branch-free:
   every entry pays the comparison (a subtraction, then a select per limb, in registers)
   and only entries in that band change; skipping it for a whole block would take a
   cross-thread reduction (shuffles, shared memory), dearer than the comparison itself.
   The sign of Y is the top limb's sign, flipped by a correction; negating where Y < 0 and
   settling again leaves the limbs of |Y|.
3. One rounding to nearest even of |Y| * 2**e from the top four limbs plus a sticky bit,
   subnormals and overflow included.

The limb width b (21 to 31 bits) is picked per moduli set: the fewest limbs L, padded to a
power of two, that the float64 bound on S_l admits (22 int8 moduli, 170 bits: 6 limbs of
29 bits padded to 8, rather than 9 of 21 padded to 16; the 121-bit FP4 plan: 4 of 31
rather than 6 of 21 padded to 8).

The limb axis is the first axis of a [limbs, entries] tile: with at least 32 * num_warps
entries per program every entry's limbs sit in one thread's registers, so picking a limb
is a register move once the compiler folds the constant masks (the tests check the PTX for
the absence of shared memory and shuffles).

The bits are those of :func:`reference_decode` (the CRT in exact integers, one correct
rounding) and of the library's staged torch path (``ozaki.crt.garner`` +
``ozaki.crt.round_to_float64``), which the tests check entry for entry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels import ptx
from kernels.float64 import FLOAT64_EXACT, round_dyadic
from kernels.moduli import check_modulus

__all__ = ["DECODE_BLOCK", "DECODE_WARPS", "HALF_MODULUS_ERROR", "compile_ptx", "decode_residues", "ldexp_factors",
           "reference_decode"]

# Here, below both decoders (this kernel and ozaki.crt's staged path), so that they refuse
# the class of M/2 for even M with one message.
HALF_MODULUS_ERROR = (
    "a CRT value is congruent to M/2 with M even: ±M/2 lie outside (−M/2, M/2), so the product "
    "reaches M/2 in magnitude and the moduli's capacity is too small for these products"
)

# Entries per program and warps: every thread holds DECODE_BLOCK / (32 * DECODE_WARPS)
# whole entries (all their limbs), see the module docstring.
DECODE_BLOCK = 256
DECODE_WARPS = 4
# The residue types decode_residues reads (kernels.products.residue_dtype writes the narrowest).
_RESIDUE_DTYPES = (torch.uint8, torch.int16, torch.int32, torch.int64)
# Limb widths.  Four limbs hold at least 3 * 21 + 1 >= 54 bits under the top bit (the
# 53 kept and the rounding bit); two limbs of at most 31 bits fit one int64 in _round.
_MIN_LIMB_BITS = 21
_MAX_LIMB_BITS = 31
# Exponent sums saturate at +-2**34 in the kernel; see the proof there.
_EXPONENT_CLAMP = 2**34


@triton.jit
def _row(tile, index, j):
    # Row j of a [rows, entries] tile, rows numbered by ``index`` (broadcast against the
    # tile; per entry when 2-D); 0 where no row is numbered j.
    return tl.sum(tl.where(index == j, tile, 0), axis=0)


@triton.jit
def _pow2(e):
    # 2**e for e in [-1022, 1023] from its bit pattern (clamped outside), exact.
    e = tl.minimum(tl.maximum(e, -1022), 1023).to(tl.int64)
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def ldexp_factors(e):
    """The two powers of two whose product with x is x * 2**e rounded once (ozaki._bits.ldexp,
    which multiplies by them in this order): the first exact over the normal exponents, the
    second taking the rest into the subnormal range or to overflow."""
    first = tl.minimum(tl.maximum(e, -1022), 1023)
    return _pow2(first), _pow2(e - first)


@triton.jit
def _settle(limbs, offs_l, N_LIMBS: tl.constexpr, LIMB: tl.constexpr):
    # Limbs 0 .. N_LIMBS - 2 into [0, 2**LIMB), bottom up; the top limb keeps the signed
    # rest.  The shift is arithmetic, so a negative limb borrows from the next.
    for l in tl.static_range(N_LIMBS - 1):
        carry = _row(limbs, offs_l[:, None], l) >> LIMB
        limbs = tl.where(offs_l[:, None] == l, limbs & ((1 << LIMB) - 1),
                         tl.where(offs_l[:, None] == l + 1, limbs + carry[None, :], limbs))
    return limbs


@triton.jit
def _round(limbs, offs_l, exponent, LIMB: tl.constexpr):
    # |Y| * 2**exponent rounded to nearest even, from the settled limbs of |Y|.  The top
    # four limbs (at least 64 bits under the top one's leading bit) hold the 53 kept bits
    # and the rounding bit; lower limbs only matter through the sticky bit.  high and low
    # (two limbs each, at most 62 bits) and every shifted value stay inside int64.  A result
    # under 2**-1022 keeps fewer bits (its last one weighs 2**-1074), so it is rounded once,
    # straight to the subnormal grid.
    nonzero = limbs != 0
    top = tl.max(tl.where(nonzero, offs_l[:, None], 0), axis=0)
    bottom = tl.maximum(top - 3, 0)
    w0 = _row(limbs, offs_l[:, None] - bottom[None, :], 0)
    w1 = _row(limbs, offs_l[:, None] - bottom[None, :], 1)
    w2 = _row(limbs, offs_l[:, None] - bottom[None, :], 2)
    w3 = _row(limbs, offs_l[:, None] - bottom[None, :], 3)
    high = (w3 << LIMB) | w2
    low = (w1 << LIMB) | w0
    below = tl.max(tl.where(nonzero & (offs_l[:, None] < bottom[None, :]), 1, 0), axis=0) > 0

    base = LIMB * bottom
    top_limb = _row(limbs, offs_l[:, None] - top[None, :], 0)
    top_bits = ((top_limb.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022
    length = LIMB * top + tl.where(top_limb == 0, 0, top_bits)
    drop = tl.minimum(tl.maximum(tl.maximum(length - 53, -1074 - exponent) - base, 0), 4 * LIMB + 1)
    kept = tl.where(
        drop >= 2 * LIMB,
        high >> tl.minimum(tl.maximum(drop - 2 * LIMB, 0), 63),
        (high << tl.maximum(2 * LIMB - drop, 0)) | (low >> tl.minimum(drop, 63)),
    )
    half_position = drop - 1
    in_high = half_position >= 2 * LIMB
    high_shift = tl.minimum(tl.maximum(half_position - 2 * LIMB, 0), 63)
    low_shift = tl.minimum(tl.maximum(half_position, 0), 63)
    half_bit = tl.where(in_high, high >> high_shift, low >> low_shift) & 1
    half_bit = tl.where(half_position >= 0, half_bit, 0)
    one = tl.full(drop.shape, 1, tl.int64)
    sticky = below | tl.where(
        in_high,
        (low != 0) | ((high & ((one << high_shift) - 1)) != 0),
        (low & ((one << low_shift) - 1)) != 0,
    )
    kept = kept + ((half_bit == 1) & (sticky | ((kept & 1) == 1))).to(tl.int64)
    scale = base + drop + exponent
    first, second = ldexp_factors(scale)
    return kept.to(tl.float64) * first * second


@triton.jit
def _decode_kernel(
    c_ptr, row_exp_ptr, col_exp_ptr, moduli_ptr, fraction_ptr, weight_limb_ptr, modulus_limb_ptr, half_limb_ptr,
    out_ptr, flag_ptr, cols, col_blocks, stride_cn, stride_cr, stride_cc,
    N_MODULI: tl.constexpr, N_LIMBS: tl.constexpr, LIMB_PAD: tl.constexpr, LIMB: tl.constexpr,
    EVEN: tl.constexpr, EXPONENT_CLAMP: tl.constexpr, BLOCK: tl.constexpr,
):
    # One program: BLOCK consecutive columns of one row (no per-entry division).
    pid = tl.program_id(0)
    row = pid // col_blocks
    offs_c = (pid % col_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = offs_c < cols
    offs_l = tl.arange(0, LIMB_PAD)
    # |Y| < 2**bits(M) with bits(M) < 2**32 (the launcher's sum bound), so past +-2**34 the
    # result is 0 or inf either way: the exponent saturates there, which keeps every later
    # exponent sum far inside int64.  The int64 sum wraps; a wrap (both terms of one sign,
    # the sum of the other) saturates by the sign of the terms.
    row_exp = tl.load(row_exp_ptr + row)
    col_exp = tl.load(col_exp_ptr + offs_c, mask=mask, other=0)
    exponent = row_exp + col_exp
    wrapped = ((row_exp ^ exponent) & (col_exp ^ exponent)) < 0
    exponent = tl.where(wrapped, tl.where(col_exp < 0, -EXPONENT_CLAMP, EXPONENT_CLAMP),
                        tl.minimum(tl.maximum(exponent, -EXPONENT_CLAMP), EXPONENT_CLAMP))

    # 1. Linear CRT: limb sums and the estimate of X'/M, one residue at a time.
    c_ptrs = c_ptr + tl.cast(row, tl.int64) * stride_cr + tl.cast(offs_c, tl.int64) * stride_cc
    estimate = tl.zeros((BLOCK,), tl.float64)
    sums = tl.zeros((LIMB_PAD, BLOCK), tl.float64)
    outside = tl.zeros((BLOCK,), tl.int1)
    for i in tl.static_range(N_MODULI):
        residue = tl.load(c_ptrs, mask=mask, other=0).to(tl.int64)
        modulus = tl.load(moduli_ptr + i)
        wrong = (residue <= -modulus) | (residue >= modulus)
        outside |= wrong
        # Zeroed, a residue out of range cannot break the float64 bounds of its neighbours.
        value = tl.where(wrong, 0, residue).to(tl.float64)
        estimate += value * tl.load(fraction_ptr + i)
        sums += value[None, :] * tl.load(weight_limb_ptr + i * LIMB_PAD + offs_l)[:, None]
        c_ptrs += stride_cn
    # Any integer within 1 of X'/M will do (see _constants): E + 1/2 may round.
    nearest = tl.floor(estimate + 0.5)
    modulus_limbs = tl.load(modulus_limb_ptr + offs_l)
    sums -= nearest[None, :] * modulus_limbs[:, None]

    # 2. Settle Y0 = X' - q * M in (-M, M); its sign is the top limb's.
    limbs = _settle(sums.to(tl.int64), offs_l, N_LIMBS, LIMB)
    negative = _row(limbs, offs_l[:, None], N_LIMBS - 1) < 0
    # The sign of Y0 - G (Y0 >= 0) or of Y0 + G (Y0 < 0): the top non-zero limb difference.
    # Settled limbs of -G (top limb signed) come from the table's second row.
    bound = tl.where(negative[None, :], tl.load(half_limb_ptr + LIMB_PAD + offs_l)[:, None],
                     tl.load(half_limb_ptr + offs_l)[:, None])
    difference = limbs - bound
    order = tl.zeros((BLOCK,), tl.int64)
    for j in tl.static_range(N_LIMBS):
        order = tl.where(order == 0, _row(difference, offs_l[:, None], N_LIMBS - 1 - j), order)
    # Y0 beyond +-G (and |Y0| < M): the representative is Y0 -+ M, of the other sign.
    beyond = tl.where(negative, order < 0, order > 0)
    step = tl.where(beyond, tl.where(negative, 1, -1), 0).to(tl.int64)
    limbs += step[None, :] * modulus_limbs.to(tl.int64)[:, None]
    negative = negative != beyond
    # Flag 2: a residue out of range, 1: Y0 = +-M/2 with M even, no representative in
    # (-M/2, M/2).  Only flagged entries touch the flag, so a clean launch pays no
    # reduction or atomic.
    code = tl.where(outside, 2, tl.where((order == 0) & EVEN, 1, 0))
    tl.atomic_max(flag_ptr + tl.zeros_like(offs_c), code, mask=mask & (code != 0), sem="relaxed")

    # Negate where Y < 0 and settle again: limbs of |Y| < M/2.
    limbs = _settle(tl.where(negative[None, :], -limbs, limbs), offs_l, N_LIMBS, LIMB)

    # 3. One rounding.
    magnitude = _round(limbs, offs_l, exponent, LIMB)
    # The sign goes in as a bit.  On the H200 the float select of -magnitude returned +0.0
    # for a negative Y that underflows to zero (tests/test_kernels_crt.py, subnormal
    # exponents; the interpreter keeps -0.0): an integer OR leaves no float rule about
    # signed zeros for the compiler to relax.
    signed = magnitude.to(tl.int64, bitcast=True) | (negative.to(tl.int64) << 63)
    tl.store(out_ptr + tl.cast(row, tl.int64) * cols + offs_c, signed.to(tl.float64, bitcast=True), mask=mask)


class _Layout(NamedTuple):
    n_limbs: int
    limb_bits: int
    even: bool  # M is even: Y0 = +-M/2 is flagged


@cache
def _constants(moduli: tuple[int, ...]) -> tuple[_Layout, dict[str, torch.Tensor]]:
    """Limb layout and the host tables of the kernel."""
    for m in moduli:
        check_modulus(m)
    for i, m in enumerate(moduli):
        for other in moduli[:i]:
            if math.gcd(m, other) != 1:
                raise ValueError(f"moduli {other} and {m} are not coprime: the CRT needs pairwise coprime moduli")
    # Exactness of the limb sums (n = len(moduli)).  Residues satisfy |c_i| <= m_i - 1
    # (checked per entry), so sum |c_i| <= spread, and inv_i <= m_i - 1 gives |E| <= sum (m_i - 1)**2 / m_i + slack
    # <= spread - n/2 + slack < spread - 1/4 (slack below): |q| <= spread even where
    # E + 1/2 rounds.  Every partial sum of S_l, the q * limb_l(M) term included, is then an
    # integer of magnitude at most 2 * spread * (2**b - 1), exact in float64 below 2**53.
    spread = sum(m - 1 for m in moduli)
    widths = [b for b in range(_MIN_LIMB_BITS, _MAX_LIMB_BITS + 1) if 2 * spread * ((1 << b) - 1) < FLOAT64_EXACT]
    if not widths:
        raise ValueError(
            f"moduli sum(m - 1) = {spread}: the limb sums 2 * sum(m - 1) * (2**{_MIN_LIMB_BITS} - 1) reach 2**53 "
            "and would round in float64; use fewer or smaller moduli (sum(m - 1) < 2**31)"
        )
    # Error of E against X'/M: each w_i / M = inv_i / m_i < 1 is stored rounded (relative
    # error <= u = 2**-53), and a sum of n products of magnitude below |c_i| errs by at most
    # gamma_n * sum |c_i * f_i|, gamma_n = n * u / (1 - n * u) (fused multiply-adds only
    # tighten it): |E - X'/M| <= (u + gamma_n * (1 + u)) * spread <= (n + 2) * u * spread =
    # slack.  The check above gives spread < 2**31 * (1 + 2**-20); pairwise coprime moduli
    # >= 2 are distinct, so spread >= n * (n + 1) / 2 and n < 2**16: slack < 2**-5.  The
    # kernel's q = floor(fl(E + 1/2)) errs from E by at most 1/2 plus half an ulp of E + 1/2
    # (|E| < 2**32, so at most 2**-22): |X'/M - q| < 1/2 + 2**-22 + 2**-5 < 1 and
    # Y0 = X' - q * M lies in (-M, M).  Nothing here depends on where Y lies: the exact
    # comparison of Y0 with +-floor(M/2) settles the representative (module docstring).
    product = math.prod(moduli)
    # |Y0| < M fits the limbs, the top one signed.  Cost: multiply-adds ~ the padded count,
    # carry steps ~ the count.
    limb_bits = min(widths, key=lambda b: (triton.next_power_of_2(_limb_count(product, b)), _limb_count(product, b)))
    n_limbs = _limb_count(product, limb_bits)
    pad = triton.next_power_of_2(n_limbs)

    def limbs_of(x: int) -> list[int]:
        """The settled limbs of x: limbs below the top in [0, 2**b), the top one signed
        (Python's >> floors), zeros in the padding."""
        mask = (1 << limb_bits) - 1
        return [(x >> (limb_bits * j)) & (mask if j < n_limbs - 1 else -1) if j < n_limbs else 0 for j in range(pad)]

    weight_limbs, fractions = [], []
    for m in moduli:
        cofactor = product // m
        inverse = pow(cofactor, -1, m)
        weight_limbs.append(limbs_of(cofactor * inverse))  # below M: non-negative limbs
        fractions.append(inverse / m)  # int / int rounds once, to nearest
    tables = {
        "moduli": torch.tensor(moduli, dtype=torch.int64),
        "fractions": torch.tensor(fractions, dtype=torch.float64),
        "weight_limbs": torch.tensor(weight_limbs, dtype=torch.float64),
        "modulus_limbs": torch.tensor(limbs_of(product), dtype=torch.float64),
        "half_limbs": torch.tensor([limbs_of(product // 2), limbs_of(-(product // 2))], dtype=torch.int64),
    }
    return _Layout(n_limbs, limb_bits, product % 2 == 0), tables


def _limb_count(product: int, limb_bits: int) -> int:
    return max(1, -(-product.bit_length() // limb_bits))


@cache
def _device_tables(moduli: tuple[int, ...], device: torch.device) -> dict[str, torch.Tensor]:
    # Kept per device: five host-to-device copies per call would cost more than a small decode.
    return {name: t.to(device) for name, t in _constants(moduli)[1].items()}


def _constexprs(n_moduli: int, layout: _Layout) -> dict[str, int]:
    return dict(N_MODULI=n_moduli, N_LIMBS=layout.n_limbs, LIMB_PAD=triton.next_power_of_2(layout.n_limbs),
                LIMB=layout.limb_bits, EVEN=layout.even, EXPONENT_CLAMP=_EXPONENT_CLAMP, BLOCK=DECODE_BLOCK)


def decode_residues(c: torch.Tensor, moduli: Sequence[int], row_exponent: torch.Tensor,
                    col_exponent: torch.Tensor) -> torch.Tensor:
    """float64 ``[R, C]``: the signed integer Y with ``Y ≡ c[i] (mod moduli[i])`` and
    ``-M/2 < Y < M/2`` (M = prod(moduli)), times ``2**(row_exponent[r] + col_exponent[c])``,
    rounded once to nearest even.  ``c`` is an integer tensor (uint8, int16, int32 or int64,
    as narrow as the plane GEMM writes them) ``[len(moduli), R, C]`` of residues, any
    representative with ``|c[i]| < moduli[i]`` (``[0, m)`` or balanced).  Raises ValueError for a residue out of that range and, for
    even M, where Y ≡ M/2 (mod M), the one class without a representative in the window:
    the product reached M/2 in magnitude, the moduli's capacity too small.  Every other
    product past the capacity is indistinguishable from its representative, which is what
    the result rounds: the caller guarantees the capacity (the pipeline asks for
    M > 2 * K * (2**p - 1) * (2**q - 1))."""
    if not isinstance(c, torch.Tensor) or c.dtype not in _RESIDUE_DTYPES:
        raise TypeError(f"c must be a uint8, int16, int32 or int64 tensor, got "
                        f"{getattr(c, 'dtype', type(c).__name__)}")
    moduli = tuple(moduli)
    if not moduli:
        raise ValueError("decode needs at least one modulus")
    if c.dim() != 3 or c.shape[0] != len(moduli):
        raise ValueError(f"c has shape {tuple(c.shape)}: expected [{len(moduli)} moduli, R, C]")
    rows, cols = c.shape[1:]
    for name, exp, size in (("row_exponent", row_exponent, rows), ("col_exponent", col_exponent, cols)):
        if not isinstance(exp, torch.Tensor) or exp.dtype != torch.int64 or exp.shape != (size,):
            raise ValueError(f"{name} must be an int64 tensor of shape ({size},)")
        if exp.device != c.device:
            raise ValueError(f"{name} is on {exp.device}, c on {c.device}: pass both on one device")
    layout = _constants(moduli)[0]
    device = c.device
    out = torch.empty((rows, cols), dtype=torch.float64, device=device)
    if out.numel() == 0:
        return out
    col_blocks = triton.cdiv(cols, DECODE_BLOCK)
    grid = (rows * col_blocks,)
    flag = torch.zeros(1, dtype=torch.int32, device=device)
    tables = _device_tables(moduli, device)
    _decode_kernel[grid](
        c, row_exponent.contiguous(), col_exponent.contiguous(), tables["moduli"], tables["fractions"],
        tables["weight_limbs"], tables["modulus_limbs"], tables["half_limbs"], out, flag,
        cols, col_blocks, c.stride(0), c.stride(1), c.stride(2),
        **_constexprs(len(moduli), layout), num_warps=DECODE_WARPS,
    )
    worst = int(flag)
    if worst >= 2:
        raise ValueError("c holds a residue with |c[i]| >= moduli[i]: reduce it first, e.g. torch.remainder(c, m)")
    if worst == 1:
        raise ValueError(HALF_MODULUS_ERROR)
    return out


def reference_decode(c: torch.Tensor, moduli: Sequence[int], row_exponent: torch.Tensor,
                     col_exponent: torch.Tensor) -> torch.Tensor:
    """What :func:`decode_residues` computes, in exact Python integers (small shapes): per
    entry, the CRT integer Y in (-M/2, M/2) of the residues, raising
    ``ValueError(HALF_MODULUS_ERROR)`` for the class of M/2 (even M), then
    ``Y * 2**(row_exponent[r] + col_exponent[c])`` rounded once to nearest even."""
    moduli = tuple(moduli)
    residues = c.detach().cpu().to(torch.int64).tolist()
    out = [[round_dyadic(_signed_crt([plane[r][j] for plane in residues], moduli), row + col)
            for j, col in enumerate(col_exponent.tolist())]
           for r, row in enumerate(row_exponent.tolist())]
    return torch.tensor(out, dtype=torch.float64).reshape(c.shape[1:]).to(c.device)


def _signed_crt(residues: list[int], moduli: tuple[int, ...]) -> int:
    big = math.prod(moduli)
    y = sum(r * (big // m) * pow(big // m, -1, m) for r, m in zip(residues, moduli)) % big
    if 2 * y == big:
        raise ValueError(HALF_MODULUS_ERROR)
    return y - big if 2 * y > big else y


def compile_ptx(moduli: Sequence[int], capability: int = 90) -> str:
    """PTX of the decode kernel for ``moduli`` on ``sm_<capability>``, compiled without a
    GPU (int32 residues, unit column stride).  Needs a process without
    ``TRITON_INTERPRET=1`` (see :func:`kernels.ptx.compile_kernel`)."""
    layout = _constants(tuple(moduli))[0]
    constexprs = _constexprs(len(moduli), layout)
    pointers = {"c_ptr": "*i32", "fraction_ptr": "*fp64", "weight_limb_ptr": "*fp64", "modulus_limb_ptr": "*fp64",
                "out_ptr": "*fp64", "flag_ptr": "*i32"}
    signature = {name: pointers.get(name, "*i64" if name.endswith("_ptr") else "i32")
                 for name in _decode_kernel.arg_names if name not in constexprs}
    # What a launch on a contiguous c specializes: the column stride is 1.
    signature["stride_cc"] = "constexpr"
    constexprs["stride_cc"] = 1
    signature.update({name: "constexpr" for name in _constexprs(len(moduli), layout)})
    return ptx.compile_ptx(_decode_kernel, signature, constexprs, capability=capability, num_warps=DECODE_WARPS)
