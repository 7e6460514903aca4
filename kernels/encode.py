"""Fused encode: float64 rows -> scaled integers -> residues -> digit planes, one pass.

For each entry the kernel forms the integer round(x * 2**shift) (ties to even) from the
float64 bit pattern, takes it modulo every modulus without forming it (it is
``significand * 2**e``: the significand's residue times a table of 2**e mod m), and writes
the value each plane of that modulus' encoding stores for it.  The output is the plane
GEMM's operand layout: ``[planes, ..., rows, K]`` with K contiguous.

The bits are those of the staged torch path (``ozaki.scaling.scale_rows`` ->
``ozaki.residues.residues`` -> ``ozaki.products.encode_planes``), which the tests check
entry for entry.  Only the row maximum (for the shift) is a separate reduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import torch
import triton
import triton.language as tl

from kernels.modular import _reduce

__all__ = ["ENCODE_BLOCK", "encode_planes"]

# Rows x K per program; the kernel is elementwise, so any power-of-two tile is correct.
ENCODE_BLOCK = (16, 128)
_SPLIT = 27  # significand = high * 2**27 + low keeps both halves inside _reduce's range


@triton.jit
def _encode_kernel(
    x_ptr, shift_ptr, moduli_ptr, minimum_ptr, plane_start_ptr, pow_ptr, table_ptr, out_ptr,
    rows, K, n_groups, stride_pow, stride_table, stride_plane,
    SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (offs_r[:, None] < rows) & (offs_k[None, :] < K)
    offsets = offs_r[:, None].to(tl.int64) * K + offs_k[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    shift = tl.load(shift_ptr + offs_r, mask=offs_r < rows, other=0)

    # x = ±significand * 2**exponent from the IEEE fields (subnormals: no hidden bit).
    pattern = x.to(tl.int64, bitcast=True)
    negative = pattern < 0
    biased = (pattern >> 52) & 0x7FF
    fraction = pattern & 0xFFFFFFFFFFFFF
    significand = tl.where(biased == 0, fraction, fraction | 0x10000000000000)
    exponent = tl.where(biased == 0, -1074, biased - 1075) + shift[:, None]
    # A negative exponent leaves a fraction: round to nearest, ties to even.  Shifts past
    # 54 leave a quotient of 0 and a remainder below half, which the clamp keeps.
    drop = tl.minimum(tl.maximum(-exponent, 1), 62)
    quotient = significand >> drop
    remainder = significand & ((tl.full(drop.shape, 1, tl.int64) << drop) - 1)
    half = tl.full(drop.shape, 1, tl.int64) << (drop - 1)
    up = (remainder > half) | ((remainder == half) & ((quotient & 1) == 1))
    integer = tl.where(exponent < 0, quotient + up.to(tl.int64), significand)
    power = tl.maximum(exponent, 0)
    high = integer >> SPLIT
    low = integer & ((1 << SPLIT) - 1)

    for g in range(n_groups):
        modulus = tl.load(moduli_ptr + g)
        inverse = 1.0 / modulus.to(tl.float64)
        pow_row = pow_ptr + g * stride_pow
        split_power = tl.load(pow_row + SPLIT)
        residue = _reduce(_reduce(high, modulus, inverse) * split_power + _reduce(low, modulus, inverse),
                          modulus, inverse)
        residue = _reduce(residue * tl.load(pow_row + power, mask=mask, other=1), modulus, inverse)
        residue = tl.where(negative & (residue != 0), modulus - residue, residue)
        # The encoding's table starts at its smallest input; any input ≡ x (mod m) maps alike.
        index = _reduce(residue - tl.load(minimum_ptr + g), modulus, inverse)
        for t in range(tl.load(plane_start_ptr + g), tl.load(plane_start_ptr + g + 1)):
            value = tl.load(table_ptr + t * stride_table + index, mask=mask, other=0)
            tl.store(out_ptr + tl.cast(t, tl.int64) * stride_plane + offsets, value, mask=mask)


@cache
def _powers(modulus: int, count: int) -> tuple[int, ...]:
    return tuple(pow(2, e, modulus) for e in range(count))


def encode_planes(x: torch.Tensor, bits: torch.Tensor, encodings: Sequence, side: str) -> torch.Tensor:
    """Digit planes ``[sum of plane counts, ..., rows, K]`` of the rows of ``x`` scaled to
    ``bits`` bits, for each residue encoding in turn (int8 when every plane value fits, else
    int16).  ``x`` is float64 ``[..., rows, K]`` (for B pass Bᵀ: rows are B's columns);
    ``bits`` is int64 ``[..., rows]``; ``side`` is "a" or "b"."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
        raise TypeError(f"x must be a float64 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() < 2:
        raise ValueError(f"x has shape {tuple(x.shape)}: expected [..., rows, K]")
    if not isinstance(bits, torch.Tensor) or bits.dtype != torch.int64 or bits.shape != x.shape[:-1]:
        raise ValueError(f"bits must be an int64 tensor of shape {tuple(x.shape[:-1])} (one entry per row)")
    if bits.numel() and int(bits.min()) < 0:
        raise ValueError("bits per row must be non-negative")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x holds inf or nan: only finite rows can be scaled to integers")
    if side not in ("a", "b"):
        raise ValueError(f"side must be 'a' or 'b', got {side!r}")
    if not encodings:
        raise ValueError("encode_planes needs at least one encoding")
    for encoding in encodings:
        if encoding.modulus is None or not 2 <= encoding.modulus < 2**31:
            raise ValueError(f"encoding {encoding.name} is no residue encoding with a modulus in [2, 2**31)")

    tables = [torch.tensor(e.plane_table(side), dtype=torch.int64) for e in encodings]
    width = max(table.shape[1] for table in tables)
    table = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in tables])
    fits_int8 = -128 <= int(table.min()) and int(table.max()) <= 127
    plane_start = [0]
    for t in tables:
        plane_start.append(plane_start[-1] + t.shape[0])

    rows, k = x[..., 0].numel(), x.shape[-1]
    out = torch.empty((plane_start[-1], *x.shape), dtype=torch.int8 if fits_int8 else torch.int16, device=x.device)
    if out.numel() == 0:
        return out
    flat = x.reshape(rows, k).contiguous()
    row_max = flat.abs().amax(dim=-1)
    top = torch.frexp(row_max)[1].to(torch.int64)  # the smallest top with every |x| < 2**top
    shift = torch.where(row_max > 0, bits.reshape(rows) - top, 0)
    # Every scaled integer is below 2**bits, so its power of two never exceeds max(bits).
    count = max(int(bits.max()), _SPLIT) + 1
    device = x.device
    moduli = [e.modulus for e in encodings]
    powers = torch.tensor([_powers(m, count) for m in moduli], dtype=torch.int64, device=device)
    grid = (triton.cdiv(rows, ENCODE_BLOCK[0]), triton.cdiv(k, ENCODE_BLOCK[1]))
    _encode_kernel[grid](
        flat, shift,
        torch.tensor(moduli, dtype=torch.int64, device=device),
        torch.tensor([(e.a if side == "a" else e.b).min for e in encodings], dtype=torch.int64, device=device),
        torch.tensor(plane_start, dtype=torch.int64, device=device),
        powers, table.to(device), out,
        rows, k, len(encodings), powers.stride(0), table.stride(0), rows * k,
        SPLIT=_SPLIT, BLOCK_R=ENCODE_BLOCK[0], BLOCK_K=ENCODE_BLOCK[1],
    )
    return out

