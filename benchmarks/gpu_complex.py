"""Complex products on one GPU: ``ozaki.matmul`` on complex128 against torch's complex128 matmul
(cuBLAS ZGEMM) in the same run, phi = 0.5 for both parts.

    PYTHONPATH=. python3 benchmarks/gpu_complex.py [N ...]

Per n: the median of 5 timed calls (after one untimed, which compiles and tunes) of each, the
ratio ZGEMM / emulation, and each part's max relative error of both against the emulation at
accuracy "exact" on a 16×16 block (correctly rounded part by part).  On the GPU the fused kernels
multiply a complex product's real embedding, four K×N blocks per plane GEMM.
"""

from __future__ import annotations

import sys

import torch

import ozaki
from ozaki.bench.common import median_seconds


def _seconds(call) -> float:
    call()  # compiles and tunes
    return median_seconds(call, 5, cuda=True)[0]


def _entries(n: int, generator: torch.Generator) -> torch.Tensor:
    shape = (n, n)
    parts = [(torch.rand(shape, generator=generator, device="cuda", dtype=torch.float64) - 0.5)
             * torch.exp(0.5 * torch.randn(shape, generator=generator, device="cuda", dtype=torch.float64))
             for _ in range(2)]
    return torch.complex(*parts)


def _error(got: torch.Tensor, exact: torch.Tensor) -> tuple[float, float]:
    return tuple(float(((g - e).abs() / e.abs()).max()) for g, e in ((got.real, exact.real), (got.imag, exact.imag)))


def main() -> None:
    sizes = [int(n) for n in sys.argv[1:]] or [4096, 8192]
    generator = torch.Generator(device="cuda").manual_seed(0)
    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    rows = []
    for n in sizes:
        a, b = _entries(n, generator), _entries(n, generator)
        zgemm = _seconds(lambda: a @ b)
        emulated = _seconds(lambda: ozaki.matmul(a, b, engine="int8"))
        block = slice(0, 16)
        exact = ozaki.matmul(a[block], b[:, block], accuracy="exact")
        errors = _error((a @ b)[block, block], exact) + _error(ozaki.matmul(a, b, engine="int8")[block, block], exact)
        rows.append((n, zgemm, emulated, zgemm / emulated, *errors))
        print(f"n = {n} done", flush=True)
    print(f"{'n':>6} {'ZGEMM s':>10} {'ozaki s':>10} {'x ZGEMM':>8} {'ZGEMM err re/im':>20} {'ozaki err re/im':>20}")
    for n, zgemm, emulated, ratio, zr, zi, er, ei in rows:
        print(f"{n:>6} {zgemm:>10.4f} {emulated:>10.4f} {ratio:>8.3f} {zr:>10.2e}{zi:>10.2e} {er:>10.2e}{ei:>10.2e}")


if __name__ == "__main__":
    main()
