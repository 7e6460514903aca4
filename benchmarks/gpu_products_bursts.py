"""The products stage as a burst and as a sustained load, with the GPU's clock and power alongside.

Run from the repository root on the GPU machine:

    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active \\
        --format=csv,noheader -lms 200 > clocks.csv &
    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/gpu_products_bursts.py

``benchmarks/gpu_products.py`` times with ``triton.testing.do_bench``, which runs a launch back to
back for 300 ms; the pipeline's products stage is one burst between memory-bound stages.  This
times both for the first Gluon config of ``CONFIGS["int8"]`` on the planes of a real call (as
gpu_products.py draws them), once for all rows and once in the row blocks the pipeline streams
(``ozaki.cost.stream_rows``): three single launches each after 1 s idle (CUDA events), then the
do_bench median.  Effective TOP/s = 16 moduli * 2n^3 / time.
"""

from __future__ import annotations

import time

import torch
from triton.testing import do_bench

from gpu_products import operands
from kernels.products import CONFIGS, encoded_modular_matmul
from ozaki import cost


def burst(fn) -> float:
    """Milliseconds of one call of fn after the device has idled for a second."""
    torch.cuda.synchronize()
    time.sleep(1.0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def main() -> None:
    config = next(c for c in CONFIGS["int8"] if c.gluon)
    print(config, flush=True)
    for n in (8192, 16384):
        planes_a, planes_b, encodings = operands(n, 0.5)
        moduli = len(encodings)
        rows = cost.stream_rows(n, n, n, digits="int8", planes=planes_a.shape[0], moduli=moduli)

        def whole():
            encoded_modular_matmul(planes_a, planes_b, encodings, config=config)

        def blocked():
            for start in range(0, n, rows):
                encoded_modular_matmul(planes_a[:, start:start + rows], planes_b, encodings, config=config)

        ops = moduli * 2.0 * n**3
        for name, fn in (("one launch", whole), (f"blocks of {rows} rows", blocked)):
            fn()
            bursts = [burst(fn) for _ in range(3)]
            sustained = do_bench(fn, warmup=25, rep=300, return_mode="median")
            print(f"n={n} {name}: bursts after 1 s idle {[round(x, 2) for x in bursts]} ms "
                  f"({ops / min(bursts) / 1e9:.0f} TOP/s best), do_bench {sustained:.2f} ms "
                  f"({ops / sustained / 1e9:.0f} TOP/s)", flush=True)
        planes_a = planes_b = None  # free the planes before the next size allocates its own
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
