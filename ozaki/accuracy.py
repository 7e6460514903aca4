"""accuracy="fp64": the bits each row of A and column of B keeps, chosen from the data so that

    |Ĉ_ij − C_ij| ≤ u·|C_ij| + 2^-g·√K·u·(|A||B|)_ij·(1 + 2^-19) + 2^-1075,   u = 2^-53,

with g ≥ FP64_GUARD (the plan reports its g).  That is DGEMM's own error level: its
worst-case bound is u|C| + K·u·(|A||B|), √K·2^g times this one, and its typical error
grows like √K·u·(|A||B|) (probabilistic rounding analysis).

Derivation.  Row i of A keeps p_i bits: each entry moves by at most ε_i = 2^(top_i − p_i − 1)
(half the row's grid), or twice that where the rounding carry of ``ozaki.scaling.row_shifts``
applies (only below 53 bits); column j of B likewise by ζ_j.  Then the exact product of the
rounded inputs differs from C by

    T_ij ≤ ε_i·S^B_j + ζ_j·S^A_i + K·ε_i·ζ_j,    S^B_j = Σ_k |B_kj|,  S^A_i = Σ_k |A_ik|,

and the one final rounding adds u·|C̃_ij| ≤ u|C_ij| + u·T_ij (or 2^-1075 below the normal
range).  So T_ij ≤ τ·L_ij (1 + 2^-20) with τ = 2^-g·√K·u and L = |A||B| holds once

    ε_i ≤ (τ/2)·min_j L_ij / S^B_j    and    ζ_j ≤ (τ/2)·min_i L_ij / S^A_i

(the product term is below 2^-20·τ·L_ij for K ≤ 2^22, as L_ij ≤ S^A_i·S^B_j).  Neither L nor
the sums are needed exactly, only a lower bound of L and upper bounds of the sums, and both
are computed *exactly* in integers, so the bits are the same on every device:

* each |x| lies in [2^(e−1), 2^e) (e from frexp), d = top − e binades under its row's top:
  |x| < 2^(top − W)·2^max(W − d, 0), summed in int64, gives S ≤ 2^(top − W)·U;
* with a window top r per row (2^3 above the row's mean magnitude bound, at most its top),
  |x| ≥ 2^(r − D)·c for the int8 code c = min(⌊|x|·2^(D − r)⌋, 127), so one int8 GEMM of
  codes G = c_A·c_B gives L_ij ≥ 2^(r_i + r_j − 2D)·G_ij.

With h = ⌊log2 √K⌋ and 2^e_i ≤ min_j G_ij·2^(r_j − top_j)/U^B_j (frexp of the quotient as
G·2^(r_j − top_j) times the correctly rounded 1/U^B_j, made a lower bound by a margin for its two
roundings), p_i = g + 53 + 2D − W − h + top_i − r_i
− e_i meets the first condition (one more below 53 bits, for the carry); a row with no such
lower bound (G_ij = 0 for some column j that has non-zero entries) keeps its lossless width.
A row kept at its lossless width contributes no error.

The moduli.  The CRT needs ∏m > 2·max|A'B'|; the plans' capacity 2·K·(2^p − 1)(2^q − 1)
assumes every entry at its row's maximum.  :class:`MagnitudeBound` bounds Σ_k |A'_ik||B'_kj|
from the data instead, through *upper* codes c = ⌈|x|·2^(16 − top)⌉ and their product
G = c_A·c_Bᵀ, exactly in integers; on phi = 0.5 data it is some 2^10 below, which the plan
spends on more bits per row (ozaki.planning: every row keeps what the int8 plan of its need
pays for).  G itself is never formed: only its maximum enters, and Cauchy–Schwarz bounds
that by √(max_i Q^A_i · max_j Q^B_j) from the codes' sums of squares Q (and Hölder by 2^16
times the largest row sum of codes), read in the same pass as U.  For rows of i.i.d. entries
that is E[c²]/E[c]² above the typical G_ij (1.7 at phi = 0.5), about what the rounding up of
int8 codes (64 levels) cost when an int8 GEMM of them formed G, at none of that GEMM's cost
(one plane GEMM of the product's).

:func:`fp64_reading` reads both from the data, leaving on the device what the planning reads
with its own maxima (:func:`fp64_statistics` reads the bound at once).  On a GPU
(``kernels=True``, which the planning passes on CUDA tensors) its reads of the operands and
of the code product run as the Triton passes of ``kernels.accuracy``, and so do the per-line
steps between them (window tops, levels), which give these torch functions' integers and floats
bit for bit, and the code GEMM runs on the plane GEMM kernel
(``torch._int_mm`` on the torch path): exact integers either way.  Where A's rows are
K-contiguous on one device, :func:`row_reading` makes A's reads and its extents in one launch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from kernels import accuracy as accuracy_kernels
from kernels.autotune import tuned_plane_config
from kernels.products import EXACT_SUM_MODULUS, exact_int8_matmul
from kernels.accuracy import (CODE_LEVELS, CODE_MAX, QUOTIENT_MARGIN, UNBOUNDED, UPPER_CODE_MAX, UPPER_LEVELS,
                              UPPER_MAX_K, WINDOW_LIFT, UpperReading)
from kernels.float64 import SIGNIFICAND_BITS

from ._bits import ldexp
from .agreement import ONE_DEVICE, Agreement, extremes
from .scaling import Extents

__all__ = ["CODE_LEVELS", "FP64_GUARD", "MAX_K", "UNBOUNDED", "CodeSums", "MagnitudeBound", "fp64_reading",
           "fp64_statistics", "lower_abs_product_codes", "row_reading", "upper_abs_product_codes"]

# The guard g the rule starts from (a plan keeps more where its moduli pay for it).
FP64_GUARD = 4
# The product term of the derivation stays below 2^-20·τ·L up to this K; past it every row
# keeps its lossless width (the product is then correctly rounded).
MAX_K = 2**22
# D (CODE_LEVELS): the codes of the lower bound of |A||B| count in units of 2^(r − D) up to
# int8's 127 (CODE_MAX); kernels.accuracy holds the codes' constants, as both layers write them.
# int8 GEMMs accumulate in int32: a chunk of K codes of at most 127 sums exactly while
# chunk·127² ≤ 2^31 − 1; the largest power of two, 2^17.
_INT32_MAX = 2**31 - 1
_INT_MM_CHUNK = 1 << (_INT32_MAX // CODE_MAX**2).bit_length() - 1
# W for the upper sums: U ≤ K·2^W must stay below 2^53 to be exact as float64.
_SUM_LEVELS = 30
# The d of a zero entry: past every code and every sum.
_ZERO = 1 << 20


def _tops(extents: Extents) -> torch.Tensor:
    """top per row: the smallest t with every |x| < 2^t (frexp's exponent of the maximum)."""
    return torch.frexp(extents.row_max)[1].to(torch.int64)


def _binades_below(x: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """d = top − e per entry of x (R, K), |x| in [2^(e−1), 2^e); _ZERO for zeros."""
    e = torch.frexp(x)[1].to(torch.int64)
    return torch.where(x != 0, top[..., None] - e, _ZERO)


def _upper_sums(x: torch.Tensor, top: torch.Tensor, levels: int) -> torch.Tensor:
    """U per row (int64) with Σ_k |x_k| ≤ 2^(top − W)·U, W = ``levels``."""
    d = _binades_below(x, top)
    return torch.where(d < _ZERO, torch.ones_like(d) << (levels - d).clamp(min=0), 0).sum(dim=-1)


def _window_tops(top: torch.Tensor, sums: torch.Tensor, k: int, levels: int) -> torch.Tensor:
    """r per row: the codes see the D binades under 2^r, placed 2^3 above the row's mean
    magnitude bound 2^(top − W)·U/K and never above its top, so that a row's bulk, not only
    its few largest entries, enters the lower bound.  2^(top − W)·U/K < 2^mean_top, in exact
    integer steps (U < 2^bit_length(U), K ≥ 2^(bit_length(K) − 1))."""
    mean_top = top - levels + _bit_length(sums) - k.bit_length() + 1
    return torch.minimum(mean_top + WINDOW_LIFT, top)


def _bit_length(n: torch.Tensor) -> torch.Tensor:
    """Bit length of non-negative int64 values (0 for 0), exactly."""
    return torch.where(n > 0, torch.frexp(n.to(torch.float64))[1].to(torch.int64), 0)


def lower_abs_product_codes(x: torch.Tensor, window_top: torch.Tensor) -> torch.Tensor:
    """Per entry of x (R, K), the int8 code c = min(⌊|x|·2^(D − r)⌋, 127), r = ``window_top``:
    |x| ≥ 2^(r − D)·c, as the floor only lowers and an entry clamped to 127 is at least
    2^r > 127·2^(r − D).  (The scaling by a power of two is exact, or underflows, which
    only lowers it too.)"""
    scaled = ldexp(x.abs(), (CODE_LEVELS - window_top)[..., None])
    return scaled.clamp_(max=CODE_MAX).floor_().to(torch.int8)


def _gemm_shape(m: int, k: int, n: int, device: torch.device) -> tuple[int, int, int]:
    """(M, K, N) of the code GEMM once zero-padded (zeros add nothing).  K goes to a multiple
    of 8 everywhere: cuBLASLt's int8 GEMM wants it, and torch 2.11's CPU kernel returns wrong
    sums for K = 1 (checked against int64 products in tests/test_accuracy.py); on CUDA also
    M > 16 and N a multiple of 8, which torch._int_mm requires there."""
    pad_k = -(-k // 8) * 8
    if device.type != "cuda":
        return m, pad_k, n
    return max(17, -(-m // 8) * 8), pad_k, -(-n // 8) * 8


def _padded(codes: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    return torch.nn.functional.pad(codes, (0, k - codes.shape[-1], 0, rows - codes.shape[-2]))


def _code_product(codes_a: torch.Tensor, codes_bt: torch.Tensor, m: int, n: int, k: int,
                  kernels: bool) -> torch.Tensor:
    """G = codes_a·codes_btᵀ of the first m and n rows exactly, from int8 codes in [0, 127]
    zero-padded to :func:`_gemm_shape`.  ``k`` is the whole product's K (a mesh sums this
    device's G over it): up to one int32-exact chunk, G is the int32 result of one GEMM, exact
    for the sum over every device too; beyond, int64 sums of chunks."""
    dtype = torch.int32 if k <= _INT_MM_CHUNK else torch.int64
    if m == 0 or n == 0 or codes_a.shape[-1] == 0:
        # A device of a mesh holding no line of a side (or no K): no GEMM to launch.
        return torch.zeros((*codes_a.shape[:-2], m, n), dtype=dtype, device=codes_a.device)
    if dtype == torch.int32:
        return _int8_sums(codes_a, codes_bt, kernels)[..., :m, :n]
    total = torch.zeros((*codes_a.shape[:-1], codes_bt.shape[-2]), dtype=torch.int64, device=codes_a.device)
    for start in range(0, codes_a.shape[-1], _INT_MM_CHUNK):
        chunk = slice(start, start + _INT_MM_CHUNK)
        total += _int8_sums(codes_a[..., chunk], codes_bt[..., chunk], kernels)
    return total[..., :m, :n]


def _int8_sums(a: torch.Tensor, bt: torch.Tensor, kernels: bool) -> torch.Tensor:
    """a·btᵀ in int32 for codes in [0, 127], exact (K·127² < 2^31): with ``kernels`` the plane
    GEMM of ``kernels.products``, tuned on the device, which outruns ``torch._int_mm`` on Hopper
    (benchmarks/RESULTS.md, "2026-12-02 08:51 UTC, one H200: faster than DGEMM at n = 16384", against
    "2026-12-02 07:48 UTC, one H200: the "fp64" rule's reads on Triton"), else ``torch._int_mm``."""
    if not kernels and a.dim() > 2:
        # A batch of products in one float64 GEMM: every sum, below 2^31, is exact there.
        return torch.matmul(a.to(torch.float64), bt.mT.to(torch.float64)).to(torch.int32)
    if not kernels:
        return torch._int_mm(a, bt.T)
    config = tuned_plane_config("int8", a.shape[0], bt.shape[0], a.shape[1], 1, CODE_MAX**2, a.device,
                                moduli=[EXACT_SUM_MODULUS], exact_sums=True)
    return exact_int8_matmul(a.contiguous(), bt.contiguous(), CODE_MAX, config=config)


def _least_quotients(g: torch.Tensor, sums: torch.Tensor, offset: torch.Tensor, dim: int) -> torch.Tensor:
    """Per line along the other axis of G, the minimum over the other side's lines (axis
    ``dim``) that have U > 0 of G·2^offset/U: inf where there is none (also where this device
    holds none of them, the identity of the minimum its agreement takes over the rest).  Each
    quotient is G times the line's factor ldexp(fl(1/U), offset), exact for the offsets the
    window tops make (r − top in [−48, 0]): one multiplication per entry where a division
    cost the kernel several times that (kernels.accuracy)."""
    # The axes of G (…, M, N), a batch of products before them: the minimum's, and the one the
    # other side's lines run along.
    axis, lines = (-1, -2) if dim == 1 else (-2, -1)
    factor = ldexp(1.0 / sums.to(torch.float64), offset).unsqueeze(lines)
    quotient = g.to(torch.float64) * factor
    quotient = torch.where(sums.unsqueeze(lines) > 0, quotient, torch.inf)
    if quotient.shape[axis] == 0:
        return quotient.new_full(quotient.shape[:axis] + quotient.shape[axis:][1:], torch.inf)
    return quotient.amin(dim=axis)


def _levels(base: torch.Tensor, least: torch.Tensor) -> torch.Tensor:
    """p = base − e per line, with 2^e ≤ ``least`` (:func:`_least_quotients`, over the whole
    product); UNBOUNDED where that minimum is 0 (no lower bound of |A||B| reaches some output),
    0 where it is inf (the line meets only zeros, so makes no error).  Every step is exact or
    correctly rounded, so the result is the same on every device."""
    least = least * QUOTIENT_MARGIN
    level = _with_carry(base - (torch.frexp(least)[1].to(torch.int64) - 1))
    return torch.where(least == 0, UNBOUNDED, torch.where(least.isinf(), 0, level))


def upper_abs_product_codes(x: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """Per entry of x (R, K), the int64 code c = ⌈|x|·2^(D_U − top)⌉ ≤ 2^D_U (at least 1 for a
    non-zero entry, also where the scaling underflows): |x| ≤ 2^(top − D_U)·c."""
    scaled = ldexp(x.abs(), (UPPER_LEVELS - top)[..., None]).ceil_()
    return torch.where(x != 0, scaled.clamp_(min=1), 0).to(torch.int64)


@dataclass(frozen=True)
class MagnitudeBound:
    """What bounds |A'B'| for rows of A kept to at most p bits and columns of B to q:

        Σ_k |A'_ik|·|B'_kj| ≤ 2^(p+q−2D)·G_ij + 2^(p−D−1)·R^A_i + 2^(q−D−1)·R^B_j + K/4

    with D = D_U, G = c_A·c_B the product of upper codes and R the row sums of the codes:
    |A'_ik| ≤ |A_ik|·2^(p − top_i) + ½ ≤ 2^(p − D)·c_ik + ½ (a row's shift is at most
    p − top_i).  The fields hold maxima over i and j (``products`` an upper bound of
    max_ij G_ij, :meth:`from_code_sums`), so the bound holds for every entry."""

    products: int  # ≥ max_ij G_ij
    rows_a: int  # max_i R^A_i
    rows_b: int  # max_j R^B_j
    k: int

    @classmethod
    def from_code_sums(cls, rows_a: int, rows_b: int, squares_a: int, squares_b: int, k: int) -> MagnitudeBound:
        """The bound from the largest row sums R and sums of squares Q of each side's codes:
        G_ij = Σ_k c_ik·c_jk ≤ √(Q^A_i·Q^B_j) (Cauchy–Schwarz), and G_ij ≤ 2^D_U·R^A_i, 2^D_U·R^B_j
        as every code is at most 2^D_U; G_ij is an integer, so the integer square root bounds it too."""
        products = min(math.isqrt(squares_a * squares_b), UPPER_CODE_MAX * rows_a, UPPER_CODE_MAX * rows_b)
        return cls(products, rows_a, rows_b, k)

    def capacity(self, p: int, q: int) -> int:
        """⌊2·bound⌋: moduli whose product exceeds it recover A'B' exactly (the CRT's window
        is |Y| < ∏m/2), as crt_capacity's 2·K·(2^p − 1)(2^q − 1) does from the maxima alone."""
        # 2·bound·2^(2D) = 2^(p+q+1)·G + 2^(p+D)·R^A + 2^(q+D)·R^B + 2^(2D−1)·K, all integers.
        d = UPPER_LEVELS
        scaled = ((self.products << (p + q + 1)) + (self.rows_a << (p + d)) + (self.rows_b << (q + d))
                  + (self.k << (2 * d - 1)))
        return scaled >> (2 * d)


def _upper_reading(x: torch.Tensor, top: torch.Tensor, levels: int, kernels: bool) -> UpperReading:
    if kernels:
        return accuracy_kernels.upper_reading_kernel(x, top, levels)
    codes = upper_abs_product_codes(x, top)
    return UpperReading(_upper_sums(x, top, levels), codes.sum(dim=-1), (codes * codes).sum(dim=-1))


def _lower_codes(x: torch.Tensor, window_top: torch.Tensor, padded: tuple[int, int], kernels: bool) -> torch.Tensor:
    if kernels:
        return accuracy_kernels.lower_codes_kernel(x, window_top, padded)
    return _padded(lower_abs_product_codes(x, window_top), *padded)


class CodeSums(NamedTuple):
    """Per line of A and of Bᵀ, the upper codes' sums R and sums of squares Q over the whole
    K (int64 tensors on the device): what :class:`MagnitudeBound` takes the maxima of."""

    rows_a: torch.Tensor
    rows_b: torch.Tensor
    squares_a: torch.Tensor
    squares_b: torch.Tensor


def fp64_statistics(a: torch.Tensor, bt: torch.Tensor, extents_a: Extents, extents_b: Extents,
                    agreement: Agreement = ONE_DEVICE, *,
                    kernels: bool = False) -> tuple[torch.Tensor, torch.Tensor, MagnitudeBound]:
    """:func:`fp64_reading`, its :class:`MagnitudeBound` read from the device (the maxima over
    this device's lines)."""
    level_a, level_b, sums = fp64_reading(a, bt, extents_a, extents_b, agreement, kernels=kernels)
    _, k, _ = agreement.whole_shape(a.shape[-2], a.shape[-1], bt.shape[-2])
    return level_a, level_b, MagnitudeBound.from_code_sums(*extremes("max", [[line] for line in sums], 0), k)


def row_reading(a: torch.Tensor, n: int, agreement: Agreement = ONE_DEVICE) -> accuracy_kernels.RowReading | None:
    """What :func:`fp64_reading` and the planning read of A (M, K) for a product with N
    columns, extents included, in one Triton launch (``kernels.accuracy.row_reading_kernel``)
    where that launch can make it: A's rows K-contiguous, one device (a mesh agrees the sums
    before the window tops), K ≤ MAX_K.  None elsewhere: the separate passes read it."""
    m, k = a.shape[-2:]
    if agreement is not ONE_DEVICE or k > MAX_K or (a.stride(-1) != 1 and k > 1):
        return None
    pad_m, pad_k, _ = _gemm_shape(m, k, n, a.device)
    return accuracy_kernels.row_reading_kernel(a, _sum_levels(k), (pad_m, pad_k))


def _sum_levels(k: int) -> int:
    """W of the upper sums for a product of depth K: U ≤ K·2^W stays below 2^53."""
    return min(_SUM_LEVELS, 52 - k.bit_length())


def fp64_reading(a: torch.Tensor, bt: torch.Tensor, extents_a: Extents, extents_b: Extents,
                 agreement: Agreement = ONE_DEVICE, *, kernels: bool = False,
                 tops: tuple[torch.Tensor, torch.Tensor] | None = None,
                 row_a: accuracy_kernels.RowReading | None = None) -> tuple[torch.Tensor, torch.Tensor, CodeSums]:
    """What "fp64" reads of A (M, K) and Bᵀ (N, K): the bits p_i each row of A and of Bᵀ needs
    for the bound of the module docstring with g = 0 (:data:`UNBOUNDED` where no lower bound
    of |A||B| reaches it; a row keeps min(level + g, lossless width) bits for guard g), and the
    :class:`CodeSums` whose maxima give the :class:`MagnitudeBound`, both in exact integers
    and left on the device (the planning reads them with its own maxima).  On a mesh,
    ``agreement`` makes each sum over K and each minimum over lines that of the whole
    product.  ``kernels`` runs the passes over the operands and the code product on Triton
    (``kernels.accuracy``, the same bits).  ``tops``: each row's top (torch.frexp's exponent of
    its maximum) of A and of Bᵀ where the caller has them (``kernels.scaling.exact_bits_kernel``
    makes them with the lossless widths), else computed here.  ``row_a``: A's reading made
    already by :func:`row_reading` (whose extents are ``extents_a``), the same integers as
    the passes it spares."""
    _, k, _ = agreement.whole_shape(a.shape[-2], a.shape[-1], bt.shape[-2])
    if k > UPPER_MAX_K:
        raise ValueError(f"accuracy='fp64' takes K up to {UPPER_MAX_K} (its code sums of squares are int64), got "
                         f"K = {k}: split K into products of at most that many and add them")
    m, n = a.shape[-2], bt.shape[-2]
    pad_m, pad_k, pad_n = _gemm_shape(m, a.shape[-1], n, a.device)
    levels = _sum_levels(k)
    top_a, top_b = tops or (_tops(extents_a), _tops(extents_b))
    upper_a = row_a.upper if row_a is not None else _upper_reading(a, top_a, levels, kernels)
    upper_b = _upper_reading(bt, top_b, levels, kernels)
    if k > MAX_K:
        # Past the K the derivation covers, every row keeps its lossless width.
        level_a = torch.full(a.shape[:-1], UNBOUNDED, dtype=torch.int64, device=a.device)
        level_b = torch.full(bt.shape[:-1], UNBOUNDED, dtype=torch.int64, device=bt.device)
    else:
        u_a, u_b = (agreement.sum_over_k(upper.sums, bound=k << levels) for upper in (upper_a, upper_b))
        if row_a is not None:
            r_a, offset_a = row_a.window_top, row_a.window_offset
            ((r_b, offset_b),) = accuracy_kernels.window_tops_kernel((top_b, u_b), k=k, levels=levels)
        elif kernels:
            (r_a, offset_a), (r_b, offset_b) = accuracy_kernels.window_tops_kernel((top_a, u_a), (top_b, u_b), k=k,
                                                                                   levels=levels)
        else:
            r_a, r_b = _window_tops(top_a, u_a, k, levels), _window_tops(top_b, u_b, k, levels)
            offset_a, offset_b = r_a - top_a, r_b - top_b
        # L_ij ≥ 2^(r_i + r_j − 2D)·G_ij and S^B_j ≤ 2^(top_j − W)·U_j: the first condition reads
        # 2^-p_i ≤ 2^(h − 53 − g + r_i − top_i − 2D + W)·min_j G_ij·2^(r_j − top_j)/U_j.
        codes_a = row_a.codes if row_a is not None else _lower_codes(a, r_a, (pad_m, pad_k), kernels)
        codes_b = _lower_codes(bt, r_b, (pad_n, pad_k), kernels)
        g = agreement.sum_over_k(_code_product(codes_a, codes_b, m, n, k, kernels), bound=k * CODE_MAX**2)
        if kernels:
            least_a, least_b = accuracy_kernels.least_quotients_kernel(g, u_a, offset_a, u_b, offset_b)
        else:
            least_a, least_b = _least_quotients(g, u_b, offset_b, dim=1), _least_quotients(g, u_a, offset_a, dim=0)
        base = 53 + 2 * CODE_LEVELS - levels - (k.bit_length() - 1) // 2  # h = ⌊log2 √K⌋
        least_a, least_b = agreement.min_over_columns(least_a), agreement.min_over_rows(least_b)
        if kernels:
            level_a, level_b = accuracy_kernels.levels_kernel((least_a, top_a, r_a), (least_b, top_b, r_b), base=base)
        else:
            level_a, level_b = _levels(base + top_a - r_a, least_a), _levels(base + top_b - r_b, least_b)
    # The bound's maxima over lines are those of the whole K's sums.
    sums = [agreement.sum_over_k(upper.code_sums, bound=k * UPPER_CODE_MAX) for upper in (upper_a, upper_b)]
    squares = [agreement.sum_over_k(upper.code_squares, bound=k * UPPER_CODE_MAX**2) for upper in (upper_a, upper_b)]
    return level_a, level_b, CodeSums(*sums, *squares)


def _with_carry(level: torch.Tensor) -> torch.Tensor:
    """The bits for a condition 2^(top − p − 1) ≤ X met by p = ``level``, once the rounding
    carry is allowed for: it doubles the error bound to 2^(top − p) below 53 bits only (a
    float64 maximum has at most 53 significant bits, ``ozaki.scaling.row_shifts``), where
    one more bit makes up for it."""
    return torch.where(level < SIGNIFICAND_BITS, level + 1, level).clamp_(0, UNBOUNDED)

