"""Training-step time of a small float64 torch model inside and outside ``ozaki.emulate()``, on one GPU.

Run from the repository root on the GPU machine:

    PYTHONPATH=. python3 benchmarks/gpu_emulate_step.py [width ...]      (default widths 1024 4096)

The model: three ``nn.Linear`` layers of ``width`` with GELU between them, float64, a batch of
``width`` rows, mean squared error, SGD.  One step is forward, backward and the update: nine
products (three forward, six backward).  For each width the step is timed (median of 10 after 3
warm-ups, synchronised) natively and inside ``ozaki.emulate()`` (``engine="auto"``, which sends
each product to native DGEMM or to the emulation by the cost model) and inside
``ozaki.emulate(engine="int8")`` (every product emulated).  The table prints last.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time

import torch

import ozaki


def step_seconds(width: int, scope) -> float:
    torch.manual_seed(width)
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width), torch.nn.GELU(),
        torch.nn.Linear(width, width),
    ).to(device="cuda", dtype=torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(width, width, device="cuda", dtype=torch.float64)
    target = torch.randn(width, width, device="cuda", dtype=torch.float64)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()

    times = []
    with scope():
        for index in range(13):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            if index >= 3:
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    widths = [int(arg) for arg in sys.argv[1:]] or [1024, 4096]
    scopes = {"native": contextlib.nullcontext, "emulate()": ozaki.emulate,
              'emulate(engine="int8")': lambda: ozaki.emulate(engine="int8")}
    rows = []
    for width in widths:
        rows.append((width, {}))
        for name, scope in scopes.items():
            rows[-1][1][name] = step_seconds(width, scope)
            print(f"width {width}, {name}: {rows[-1][1][name] * 1e3:.2f} ms/step", flush=True)
    print("| width | " + " | ".join(f"{name} (ms/step)" for name in scopes) + " |")
    print("| --- |" + " --- |" * len(scopes))
    for width, seconds in rows:
        print(f"| {width} | " + " | ".join(f"{seconds[name] * 1e3:.2f}" for name in scopes) + " |")


if __name__ == "__main__":
    main()
