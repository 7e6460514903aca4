"""accuracy="fp64" against DGEMM on the same inputs: moduli, guard and max elementwise error.

For each family an 8×K·K×8 product: the int8 plan's moduli and the guard g of the documented
bound (ozaki.accuracy), the max relative error of ``ozaki.matmul`` (default accuracy; the
reference engine on the CPU, int8 on a GPU) and of the native float64 product (numpy's BLAS,
or cuBLAS DGEMM through torch on a GPU) against the exact product (ozaki.exact), and whether
ours stays inside DGEMM's worst-case bound u|C| + K·u·(|A||B|).

    python benchmarks/fp64_accuracy.py            # markdown table on stdout
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

import ozaki
from ozaki.exact import abs_product_dyadic, exact_matmul, to_fraction

U = 2.0**-53


def _phi(rng, shape, phi):
    return (rng.random(shape) - 0.5) * np.exp(phi * rng.standard_normal(shape))


def families(rng):
    for phi in (0.0, 0.5, 1.0, 2.0, 4.0):
        for k in (1, 256, 4096, 16384, 65536):
            yield f"phi={phi:g}", k, _phi(rng, (8, k), phi), _phi(rng, (k, 8), phi)
    for k in (256, 16384):
        x, y = _phi(rng, (8, k), 1.0), _phi(rng, (k, 8), 1.0)
        t, s = 1e-12 * _phi(rng, (8, 8), 1.0), _phi(rng, (8, 8), 1.0)
        yield "cancellation", 2 * k + 8, np.hstack([x, -x, t]), np.vstack([y, y, s])
        a, b = _phi(rng, (8, k), 0.5), _phi(rng, (k, 8), 0.5)
        a *= np.ldexp(1.0, rng.integers(-1000, 900, size=(8, 1)))
        b *= np.ldexp(1.0, rng.integers(-60, 40, size=(1, 8)))
        a[0, : k // 2] = np.ldexp(np.round(a[0, : k // 2] * 2**20), -1074)  # subnormal entries
        yield "rows/cols 2^±1000, subnormals", k, a, b


def max_relative(got, exact):
    nonzero = exact != 0
    return float(np.max(np.abs(got[nonzero] - exact[nonzero]) / np.abs(exact[nonzero])))


def main() -> int:
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    engine = "int8" if cuda else "auto"
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}, torch {torch.__version__}, numpy {np.__version__}")
    print("| family | K | int8 moduli (exact's) | guard g | ours max rel. err. | DGEMM max rel. err. | ours ≤ DGEMM | inside DGEMM's bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(2026)
    for name, k, a, b in families(rng):
        plan = ozaki.explain(a, b, engine="int8")
        exact_plan = ozaki.explain(a, b, engine="int8", accuracy="exact")
        ta, tb = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
        ours = ozaki.matmul(ta, tb, engine=engine).cpu().numpy()
        native = torch.matmul(ta, tb).cpu().numpy() if cuda else a @ b
        exact = exact_matmul(a, b)
        scale = abs_product_dyadic(a, b)
        inside = all(
            abs(float(ours[i, j]) - float(exact[i, j])) <= U * abs(exact[i, j]) + k * U * float(to_fraction(*scale[i][j])) + 2.0**-1074
            for i in range(8) for j in range(8))
        e_ours, e_native = max_relative(ours, exact), max_relative(native, exact)
        guard = "exact" if plan.guard is None else plan.guard
        print(f"| {name} | {k} | {len(plan.moduli.moduli)} ({len(exact_plan.moduli.moduli)}) | {guard} | {e_ours:.2e} | "
              f"{e_native:.2e} | {'yes' if e_ours <= e_native else 'NO'} | {'yes' if inside else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    started = time.time()
    code = main()
    print(f"({time.time() - started:.0f} s)", file=sys.stderr)
    sys.exit(code)
