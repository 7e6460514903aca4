"""Stage 3, products: one exact modular matrix product per modulus.

    C'_i = A'_i · B'_i mod m_i

Two ways, both exact:

* ``direct``: the balanced residues multiplied by a float64 GEMM, exact while every partial
  sum stays below 2^53: K·⌊m/2⌋² < 2^53 (checked).
* ``planes``: an adaptive weight encoding (:class:`ozaki.formats.Encoding`) writes each
  residue as digit planes P_t(a), Q_t(b) that a low-precision tensor core holds, and

      C'_i ≡ Σ_t λ_t · P_t(A'_i) · Q_t(B'_i)   (mod m_i).

  On CUDA the pipeline runs the plane GEMMs in Triton (:mod:`kernels.products`); here a
  float64 GEMM per plane computes the very same integers (checked against 2^53).

A complex product's real embedding takes three block products per modulus instead of four
(:func:`complex_residue_products`, Karatsuba's form, exact as everything is mod m).
"""

from __future__ import annotations

from typing import Sequence

import torch

from kernels.float64 import FLOAT64_EXACT

from .formats import Encoding
from ._bits import blocks, floor_mod, round_
from .residues import balanced

# Each chunk's float64 product stays within 2^53 − 2^32, which _reduce_product needs.
_PRODUCT_LIMIT = FLOAT64_EXACT - 2**32

__all__ = ["complex_residue_products", "digit_planes", "direct_products", "plane_products", "residue_products"]


def _check_float64_exact(k: int, max_a: int, max_b: int, what: str) -> None:
    if k * max_a * max_b >= FLOAT64_EXACT:
        raise ValueError(
            f"{what}: K·max|a|·max|b| = {k}·{max_a}·{max_b} reaches 2^53, so a float64 GEMM would round; "
            "use smaller moduli or split K"
        )


def direct_products(ra: torch.Tensor, rb: torch.Tensor, moduli: Sequence[int]) -> torch.Tensor:
    """C'_i for balanced residues ra (N, ..., M, K) and rb (N, ..., K, Nc); int64 in [0, m_i).

    K is cut into chunks with K_chunk·⌊m/2⌋² ≤ 2^53 − 2^32, each an exact float64 GEMM whose
    result :func:`_reduce_product` brings to [0, m) exactly; the chunks are added mod m in
    order.  The float64 operands and the product live in buffers reused for every modulus.
    """
    k = ra.shape[-1]
    out = torch.empty((len(moduli), *ra.shape[1:-1], rb.shape[-1]), dtype=torch.int64, device=ra.device)
    a = torch.empty_like(ra[0], dtype=torch.float64)
    b = torch.empty_like(rb[0], dtype=torch.float64)
    product = torch.empty(out.shape[1:], dtype=torch.float64, device=ra.device)
    for i, m in enumerate(moduli):
        half = m // 2
        if half * half > _PRODUCT_LIMIT:
            raise ValueError(
                f"residue product mod {m}: ⌊m/2⌋² = {half * half} passes 2^53 − 2^32, so not even one float64 "
                "product of two residues can be reduced exactly; use moduli below 2^27"
            )
        chunk = _PRODUCT_LIMIT // max(1, half * half)
        a.copy_(ra[i])
        b.copy_(rb[i])
        starts = range(0, k, chunk)
        total = None if len(starts) == 1 else torch.zeros_like(product)
        for start in starts:
            torch.matmul(a[..., start : start + chunk], b[..., start : start + chunk, :], out=product)
            _reduce_product(product, m)
            if total is not None:
                floor_mod(total.add_(product), m, out=total)
        out[i].copy_(product if total is None else total)
    return out


def _reduce_product(c: torch.Tensor, m: int) -> None:
    """c mod m in [0, m), in place, for float64 integers |c| ≤ 2^53 − 2^32 and m < 2^31.

    First r = c − q·m with q = round(z), z = fl(c·fl(1/m)): |z| < 2^52 (m ≥ 2), and
    |z − c/m| ≤ |c/m|·2^-51.9, so |q·m − c| ≤ m/2 + |c|·2^-51.9 < m/2 + 3.  Hence
    |q·m| < 2^53 is exact, and so is r, an integer with |r| < m/2 + 3.  Then
    :func:`floor_mod` brings r, far inside its 2^50 range, to [0, m).
    """
    flat = c.view(-1)
    for block in blocks(flat.shape[0], 1, c.device):
        part = flat[block]
        q = round_(torch.mul(part, 1.0 / m))
        floor_mod(part.add_(q, alpha=-m), m, out=part)


def digit_planes(r: torch.Tensor, encoding: Encoding, side: str) -> torch.Tensor:
    """Digit planes of residues r mod m: shape (T, *r.shape), each value in the digit set."""
    operand = encoding.a if side == "a" else encoding.b
    m = encoding.modulus
    # The encoding lists inputs in [min, max] (at least m of them); take each residue's
    # representative at the bottom of that window.
    index = torch.remainder(r - operand.min, m)
    table = torch.tensor(encoding.plane_table(side), dtype=torch.int64, device=r.device)
    return table[:, index]


def plane_products(ra: torch.Tensor, rb: torch.Tensor, encodings: Sequence[Encoding]) -> torch.Tensor:
    """C'_i through the digit planes of each modulus' encoding; int64 in [0, m_i).

    ra is (N, ..., M, K) and rb (N, ..., K, Nc)."""
    out = []
    for i, encoding in enumerate(encodings):
        m = encoding.modulus
        pa = digit_planes(ra[i], encoding, "a")
        pb = digit_planes(rb[i], encoding, "b")
        coefficients = [plane.coefficient for plane in encoding.planes]
        k = ra.shape[-1]
        c = torch.zeros((*ra.shape[1:-1], rb.shape[-1]), dtype=torch.int64, device=ra.device)
        for t, coefficient in enumerate(coefficients):
            _check_float64_exact(k, int(pa[t].abs().max()), int(pb[t].abs().max()), f"plane {t} mod {m}")
            product = torch.matmul(pa[t].to(torch.float64), pb[t].to(torch.float64)).to(torch.int64)
            c = torch.remainder(c + coefficient * torch.remainder(product, m), m)
        out.append(torch.remainder(c, m))
    return torch.stack(out)


def residue_products(ra: torch.Tensor, rb: torch.Tensor, moduli: Sequence[int],
                     encodings: Sequence[Encoding] | None) -> torch.Tensor:
    """C'_i for every modulus: through the digit planes of each modulus' encoding, or
    direct float64 products where there are none (the reference engine)."""
    if encodings is None:
        return direct_products(ra, rb, moduli)
    return plane_products(ra, rb, encodings)


def complex_residue_products(ra: torch.Tensor, rb: torch.Tensor, moduli: Sequence[int],
                             encodings: Sequence[Encoding] | None) -> torch.Tensor:
    """C'_i of a complex product's real embedding, three block products per modulus; int64 in [0, m_i).

    ``ra`` (N, ..., M, 2K) holds the balanced residues of A' = [Ar' Ai'], ``rb`` (N, ..., 2K, 2N)
    those of B' = [[Br', Bi'], [−Bi', Br']] (columns j and N + j scaled by one shift, so that
    its bottom blocks are the top ones', read from there).  With P1 = Ar'·Br', P2 = Ai'·Bi' and
    P3 = (Ar' + Ai')·(Br' + Bi') mod m,

        A'·B' ≡ [P1 − P2 | P3 − P1 − P2]   (mod m),

    which :func:`residue_products` computes with four block products: the same residues.  The
    sums are balanced again, so that each block product meets the bounds of a residue product.
    """
    k, n = ra.shape[-1] // 2, rb.shape[-1] // 2
    a_re, a_im, b_re, b_im = ra[..., :k], ra[..., k:], rb[..., :k, :n], rb[..., :k, n:]
    m = torch.tensor(moduli, dtype=torch.int64, device=ra.device).reshape(-1, *(1,) * (ra.dim() - 1))
    p1 = residue_products(a_re, b_re, moduli, encodings)
    p2 = residue_products(a_im, b_im, moduli, encodings)
    p3 = residue_products(balanced(a_re + a_im, m), balanced(b_re + b_im, m), moduli, encodings)
    p3.sub_(p1).sub_(p2)
    return torch.remainder(torch.cat([p1.sub_(p2), p3], dim=-1), m)
