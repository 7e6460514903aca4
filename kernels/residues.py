"""Fused encode: float64 rows -> scaled integers -> residues -> digit planes, one pass.

For each entry the kernel forms the integer round(x * 2**shift) (ties to even) from the
float64 bit pattern as n * 2**p with |n| < 2**53 and p >= 0 -- the only 64-bit integer
work, once per entry -- and then, per modulus m, its residue in cheap exact float
arithmetic: n mod m in float64, times the tabled 2**p mod m in float32.  Every
intermediate is an integer the float type holds exactly (see ``_encode_kernel``), so the
result does not depend on whether the compiler, or Triton's interpreter, fuses a multiply
and an add into one rounding.  It writes the value each plane of that
modulus' encoding stores for the residue: for an encoding whose one plane stores the
residue itself (every int8 plan) that value is computed, else it is looked up in the
encoding's plane table.  The output is the plane GEMM's operand layout:
``[planes, ..., rows, K]`` with K contiguous; the input may be any strided view (Bᵀ is read
in place).

The per-row shift comes from the caller (``ozaki.scaling.row_shifts``, which the pipeline
computes anyway), so the kernel reads the input once.  The bits are those of the staged
torch path (``ozaki.scaling.scale_rows`` -> ``ozaki.residues.residues`` ->
``ozaki.products.digit_planes``), which the tests check entry for entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import torch
import triton
import triton.language as tl

from kernels import ptx

__all__ = ["ENCODE_BLOCK", "MAX_MODULUS", "MAX_SHIFT", "compile_ptx", "encode_planes"]

# Rows x K per program; the kernel is elementwise, so any power-of-two tile is correct.
ENCODE_BLOCK = (16, 128)
# (m - 1)**2 + (m - 1) = m * (m - 1) < 2**24 for m <= 2**12: the float32 step below is exact.
MAX_MODULUS = 2**12
# Bounds the exponents (int32 in the kernel) and the table of 2**p mod m, whose p reach
# max(shift) + 971 (the weight of the last significand bit of the largest float64 is 2**971).
# The pipeline's shifts lie in [-1025, 3171]: a row keeps at most 2098 bits (a float64 row
# spans 2**1024 … 2**-1074) and its top lies in [-1073, 1024].
MAX_SHIFT = 2**15
_TOP_ULP_EXPONENT = 971
# The kernel splits each scaled integer n (|n| < 2**53) as high * 2**SPLIT_BITS + low.
_SPLIT_BITS = 26


@triton.jit
def _encode_kernel(
    x_ptr, shift_ptr, modulus_ptr, inverse64_ptr, split_ptr, inverse32_ptr, offset_ptr, low_ptr, identity_ptr,
    pow_ptr, plane_start_ptr, table_ptr, out_ptr,
    rows, K, stride_xr, stride_xk, n_groups, stride_table, stride_plane,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_BITS: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_r[:, None] < rows) & (offs_k[None, :] < K)
    x = tl.load(x_ptr + offs_r[:, None].to(tl.int64) * stride_xr + offs_k[None, :].to(tl.int64) * stride_xk,
                mask=mask, other=0.0)
    shift = tl.load(shift_ptr + offs_r, mask=offs_r < rows, other=0)  # int32, |shift| <= MAX_SHIFT

    # Once per entry, in int64: x = ±significand * 2**exponent from the IEEE fields
    # (subnormals: no hidden bit), then the integer round(|x| * 2**shift) = integer * 2**power.
    pattern = x.to(tl.int64, bitcast=True)
    biased = ((pattern >> 52) & 0x7FF).to(tl.int32)
    fraction = pattern & 0xFFFFFFFFFFFFF
    significand = tl.where(biased == 0, fraction, fraction | 0x10000000000000)
    exponent = tl.where(biased == 0, -1074, biased - 1075) + shift[:, None]
    # A negative exponent leaves a fraction: round to nearest, ties to even.  Shifts past
    # 54 leave a quotient of 0 and a remainder below half, which the clamp keeps.
    drop = tl.minimum(tl.maximum(-exponent, 1), 62).to(tl.int64)
    quotient = significand >> drop
    remainder = significand & ((tl.full(drop.shape, 1, tl.int64) << drop) - 1)
    half = tl.full(drop.shape, 1, tl.int64) << (drop - 1)
    up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    integer = tl.where(exponent < 0, quotient + up.to(tl.int64), significand)
    # |n| < 2**53 (a significand, or one shifted right and rounded up to at most 2**52).
    # Split it as n = high * 2**26 + low (SPLIT_BITS = 26; floor division: 0 <= low < 2**26,
    # |high| <= 2**27), both exact in float64, so the residue step works on integers under 2**40.
    n = tl.where(pattern < 0, -integer, integer)
    high = (n >> SPLIT_BITS).to(tl.float64)
    low = (n & ((1 << SPLIT_BITS) - 1)).to(tl.float64)
    # 2**power mod m sits at pow_ptr[power * n_groups + g]; power <= max(shift) + 971 indexes
    # the table (int32: the launcher checks the table has fewer than 2**31 entries).
    pow_offsets = tl.maximum(exponent, 0) * n_groups

    for g in range(n_groups):
        modulus = tl.load(modulus_ptr + g)  # float64, 2 <= m <= MAX_MODULUS
        # r = n mod m in float64.  c = high * (2**26 mod m) + low is congruent to n, and
        # |c| < 2**27 * 2**12 + 2**26 < 2**40.  inverse = fl(1/m) = (1/m)(1 + d1) and the product
        # rounds once more (u = 2**-53): |fl(c * inverse) - c/m| <= |c/m| (2u + u^2) < 1, so
        # q = floor(fl(c * inverse)) is floor(c/m) - 1, + 0 or + 1, |q*m| <= |c| + m < 2**41,
        # and c - q*m is an integer in [-m, 2m).  Each value is an integer below 2**53, so
        # every operation is exact, fused into an fma or not.
        c = high * tl.load(split_ptr + g) + low
        q = tl.floor(c * tl.load(inverse64_ptr + g))
        r = c - q * modulus
        r = tl.where(r < 0, r + modulus, r)
        r = tl.where(r >= modulus, r - modulus, r)
        # v = (r * (2**power mod m) + offset) mod m in float32, offset = (-low) mod m so that
        # v is the table index (residue - low) mod m.  Every operand is an integer below m, so
        # r * (2**power mod m) + offset <= m (m - 1) < 2**24 is exact in float32.  Then as
        # above with float32's u = 2**-24: inverse32 = fl32(fl64(1/m)) is within 2**-24 (1 + 2**-28) of 1/m, so
        # |fl32(v * inverse32) - v/m| < v/m * 2**-22.99 < 2**12 * 2**-22.99 < 1, q <= m,
        # q*m <= m**2 <= 2**24 is exact and v - q*m lies in [-m, 2m): exact, fused or not.
        modulus32 = modulus.to(tl.float32)
        power = tl.load(pow_ptr + pow_offsets + g, mask=mask, other=0.0)
        v = r.to(tl.float32) * power + tl.load(offset_ptr + g)
        v = v - tl.floor(v * tl.load(inverse32_ptr + g)) * modulus32
        v = tl.where(v < 0, v + modulus32, v)
        index = tl.where(v >= modulus32, v - modulus32, v).to(tl.int32)
        out_offsets = offs_r[:, None].to(tl.int64) * K + offs_k[None, :]
        t_start = tl.load(plane_start_ptr + g)
        if tl.load(identity_ptr + g) != 0:
            # One plane storing the input itself: the value for input low + index.
            value = index + tl.load(low_ptr + g)
            tl.store(out_ptr + tl.cast(t_start, tl.int64) * stride_plane + out_offsets,
                     value.to(out_ptr.dtype.element_ty), mask=mask)
        else:
            for t in range(t_start, tl.load(plane_start_ptr + g + 1)):
                value = tl.load(table_ptr + t * stride_table + index, mask=mask, other=0)
                tl.store(out_ptr + tl.cast(t, tl.int64) * stride_plane + out_offsets, value, mask=mask)


@lru_cache(maxsize=8)
def _power_table(moduli: tuple[int, ...], size: int, device: torch.device) -> torch.Tensor:
    """[size, moduli] float32 with 2**p mod m at [p, i], by square and multiply over p's bits
    (products below m**2 <= 2**24 in int64; values below m, exact in float32).  Laid out by
    power: the values one entry needs for all moduli share a cache line.  Sizes are powers
    of two, so a few tables serve every call."""
    m = torch.tensor(moduli, dtype=torch.int64)
    p = torch.arange(size, dtype=torch.int64)[:, None]
    table = torch.ones((size, len(moduli)), dtype=torch.int64)
    square = 2 % m
    for bit in range(size.bit_length()):
        table = torch.where((p >> bit) & 1 == 1, table * square % m, table)
        square = square * square % m
    return table.to(torch.float32).to(device)


def _is_identity(table: list[list[int]], low: int, modulus: int) -> bool:
    """One plane whose value for input low + i is low + i: the kernel computes it, no lookup.
    Only indices below m are ever read."""
    return len(table) == 1 and table[0][:modulus] == list(range(low, low + modulus))


def encode_planes(x: torch.Tensor, shift: torch.Tensor, encodings: Sequence, side: str) -> torch.Tensor:
    """Digit planes ``[sum of plane counts, ..., rows, K]`` of the integers
    round(x * 2**shift) (ties to even, one shift per row), for each residue encoding in turn
    (int8 when every plane value fits, else int16).  ``x`` is float64 ``[..., rows, K]``, any
    strides (for B pass Bᵀ: rows are B's columns); ``shift`` is int64 ``[..., rows]`` with
    |shift| <= MAX_SHIFT, normally ``ozaki.scaling.row_shifts(x, bits)``; ``side`` is "a" or "b"."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
        raise TypeError(f"x must be a float64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"x has shape {tuple(x.shape)}: expected [..., rows, K]")
    if not isinstance(shift, torch.Tensor) or shift.dtype != torch.int64 or shift.shape != x.shape[:-1]:
        raise ValueError(f"shift must be an int64 tensor of shape {tuple(x.shape[:-1])} (one entry per row)")
    if shift.numel() and int(shift.abs().max()) > MAX_SHIFT:
        raise ValueError(f"shift per row must lie in [-{MAX_SHIFT}, {MAX_SHIFT}] (int32 exponents, a bounded "
                         f"table of powers of two); got {int(shift.min())} … {int(shift.max())}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x holds inf or nan: only finite rows can be scaled to integers")
    if side not in ("a", "b"):
        raise ValueError(f"side must be 'a' or 'b', got {side!r}")
    if not encodings:
        raise ValueError("encode_planes needs at least one encoding")
    for encoding in encodings:
        if encoding.modulus is None or not 2 <= encoding.modulus <= MAX_MODULUS:
            raise ValueError(f"encoding {encoding.name} is no residue encoding with a modulus in [2, {MAX_MODULUS}] "
                             "(the float32 residue step is exact only up to there)")

    moduli = [e.modulus for e in encodings]
    lows = [(e.a if side == "a" else e.b).min for e in encodings]
    plane_tables = [e.plane_table(side) for e in encodings]
    tables = [torch.tensor(t, dtype=torch.int64) for t in plane_tables]
    width = max(table.shape[1] for table in tables)
    table = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in tables])
    fits_int8 = -128 <= int(table.min()) and int(table.max()) <= 127
    plane_start = [0]
    for t in tables:
        plane_start.append(plane_start[-1] + t.shape[0])

    rows, k = x[..., 0].numel(), x.shape[-1]
    out_dtype = torch.int8 if fits_int8 else torch.int16
    out = torch.empty((plane_start[-1], *x.shape), dtype=out_dtype, device=x.device)
    if out.numel() == 0:
        return out
    flat = x.reshape(rows, k)  # a view for any 2-D input: Bᵀ is read in place
    # Every scaled integer is integer * 2**power with power <= max(shift) + 971.
    count = max(int(shift.max()) + _TOP_ULP_EXPONENT, 0) + 1
    size = max(1024, 1 << (count - 1).bit_length())
    if size * len(moduli) >= 2**31:
        raise ValueError(f"{size} powers of two for {len(moduli)} moduli pass int32 table offsets; encode fewer "
                         "moduli per call")
    device = x.device
    powers = _power_table(tuple(moduli), size, device)

    def column(values, dtype):
        return torch.tensor(values, dtype=dtype, device=device)

    grid = (triton.cdiv(rows, ENCODE_BLOCK[0]), triton.cdiv(k, ENCODE_BLOCK[1]))
    _encode_kernel[grid](
        flat, shift.reshape(rows).to(torch.int32),
        column(moduli, torch.float64), column([1.0 / m for m in moduli], torch.float64),
        column([2**_SPLIT_BITS % m for m in moduli], torch.float64),
        column([1.0 / m for m in moduli], torch.float32), column([-low % m for low, m in zip(lows, moduli)],
                                                                  torch.float32),
        column(lows, torch.int32),
        column([_is_identity(t, low, m) for t, low, m in zip(plane_tables, lows, moduli)], torch.int32),
        powers, column(plane_start, torch.int32), table.to(device=device, dtype=out_dtype), out,
        rows, k, flat.stride(0), flat.stride(1), len(moduli), table.stride(0), rows * k,
        BLOCK_R=ENCODE_BLOCK[0], BLOCK_K=ENCODE_BLOCK[1], SPLIT_BITS=_SPLIT_BITS,
    )
    return out


def compile_ptx(capability: int = 90) -> str:
    """PTX of the encode kernel on ``sm_<capability>``, compiled without a GPU (int8 planes,
    unit K stride as for A).  Needs a process without ``TRITON_INTERPRET=1`` (see
    :func:`kernels.ptx.compile_kernel`)."""
    pointers = {"x_ptr": "*fp64", "shift_ptr": "*i32", "modulus_ptr": "*fp64", "inverse64_ptr": "*fp64",
                "split_ptr": "*fp64", "inverse32_ptr": "*fp32", "offset_ptr": "*fp32", "pow_ptr": "*fp32",
                "out_ptr": "*i8", "table_ptr": "*i8"}
    constexprs = {"BLOCK_R": ENCODE_BLOCK[0], "BLOCK_K": ENCODE_BLOCK[1], "SPLIT_BITS": _SPLIT_BITS, "stride_xk": 1}
    signature = {name: pointers.get(name, "*i32" if name.endswith("_ptr") else "i32")
                 for name in _encode_kernel.arg_names}
    signature.update({name: "constexpr" for name in constexprs})
    return ptx.compile_ptx(_encode_kernel, signature, constexprs, capability=capability)
