"""Stage 3, products: one exact modular matrix product per modulus.

    C'_i = A'_i · B'_i mod m_i

Two ways, both exact:

* ``direct``: the balanced residues multiplied by a float64 GEMM, exact while every partial
  sum stays below 2^53: K·⌊m/2⌋² < 2^53 (checked).
* ``planes``: an adaptive weight encoding (:class:`ozaki.formats.Encoding`) writes each
  residue as digit planes P_t(a), Q_t(b) that a low-precision tensor core holds, and

      C'_i ≡ Σ_t λ_t · P_t(A'_i) · Q_t(B'_i)   (mod m_i).

  On CUDA the plane GEMMs run in the Triton kernels (:func:`kernels.modular_matmul`); on
  the CPU a float64 GEMM per plane computes the very same integers (checked against 2^53).
"""

from __future__ import annotations

from typing import Sequence

import torch

from .formats import Encoding
from .residues import FLOAT64_EXACT

__all__ = ["direct_products", "encode_planes", "plane_products"]


def _check_float64_exact(k: int, max_a: int, max_b: int, what: str) -> None:
    if k * max_a * max_b >= FLOAT64_EXACT:
        raise ValueError(
            f"{what}: K·max|a|·max|b| = {k}·{max_a}·{max_b} reaches 2^53, so a float64 GEMM would round; "
            "use smaller moduli or split K"
        )


def direct_products(ra: torch.Tensor, rb: torch.Tensor, moduli: Sequence[int]) -> torch.Tensor:
    """C'_i for balanced residues ra (N, ..., M, K) and rb (N, ..., K, Nc); int64 in [0, m_i).

    K is cut into chunks with K_chunk·⌊m/2⌋² < 2^53, each an exact float64 GEMM; the chunks
    are added mod m in order.
    """
    k = ra.shape[-1]
    out = []
    for i, m in enumerate(moduli):
        chunk = max(1, (FLOAT64_EXACT - 1) // max(1, (m // 2) ** 2))
        _check_float64_exact(min(k, chunk), m // 2, m // 2, f"residue product mod {m}")
        a, b = ra[i].to(torch.float64), rb[i].to(torch.float64)
        c = None
        for start in range(0, k, chunk):
            part = torch.matmul(a[..., start : start + chunk], b[..., start : start + chunk, :]).to(torch.int64)
            c = part if c is None else c + torch.remainder(part, m)
        out.append(torch.remainder(c, m))
    return torch.stack(out)


def encode_planes(r: torch.Tensor, encoding: Encoding, side: str) -> torch.Tensor:
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

    ra is (N, M, K) and rb (N, K, Nc): one matrix pair, as the kernels take them."""
    out = []
    for i, encoding in enumerate(encodings):
        m = encoding.modulus
        pa = encode_planes(ra[i], encoding, "a")
        pb = encode_planes(rb[i], encoding, "b")
        coefficients = [plane.coefficient for plane in encoding.planes]
        if ra.is_cuda:
            import kernels  # noqa: PLC0415  (Triton is only needed on the GPU path)

            c = kernels.modular_matmul(pa, pb.transpose(-1, -2), coefficients, m, digits=encoding.digits)
        else:
            k = ra.shape[-1]
            c = torch.zeros((*ra.shape[1:-1], rb.shape[-1]), dtype=torch.int64, device=ra.device)
            for t, coefficient in enumerate(coefficients):
                _check_float64_exact(k, int(pa[t].abs().max()), int(pb[t].abs().max()), f"plane {t} mod {m}")
                product = torch.matmul(pa[t].to(torch.float64), pb[t].to(torch.float64)).to(torch.int64)
                c = torch.remainder(c + coefficient * torch.remainder(product, m), m)
        out.append(torch.remainder(c, m))
    return torch.stack(out)
