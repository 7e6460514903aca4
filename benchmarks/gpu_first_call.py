"""What the first calls of a process cost on one GPU, with cold and with warm on-disk caches.

Run from the repository root on the GPU machine:

    PYTHONUNBUFFERED=1 PYTHONPATH=. python3 benchmarks/gpu_first_call.py

It starts the same measurement three times in fresh processes that share one empty cache folder (Triton's
compiled kernels and ozaki's tuned configs, ``OZAKI_CACHE_DIR``): the first process finds it cold, the
second and third warm.  Each times, in order: the first ``ozaki.matmul(a, b, engine="int8")`` at n = 4096 (compile,
tune, run), the same call again, a call of a new shape in the same power-of-two bucket (n = 4000), and one
in a new bucket (n = 2048).  The third process, warm too, prints where its first call spent its host
time (``cProfile``, by cumulative time); the table, last, gives the plainly timed ones.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

SHAPES = (("first call, n = 4096", 4096), ("again, n = 4096", 4096), ("new shape, same bucket, n = 4000", 4000),
          ("new bucket, n = 2048", 2048))


def measure(profiled: bool) -> list[float]:
    import torch

    import ozaki

    seconds = []
    for index, (_, n) in enumerate(SHAPES):
        generator = torch.Generator(device="cuda").manual_seed(n)
        a, b = (torch.rand((n, n), generator=generator, device="cuda", dtype=torch.float64) - 0.5 for _ in range(2))
        torch.cuda.synchronize()
        profiler = cProfile.Profile() if profiled and index == 0 else None
        start = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        ozaki.matmul(a, b, engine="int8")
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        if profiler is not None:
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(30)
            print(text.getvalue())
    return seconds


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(measure(profiled=sys.argv[2:] == ["--profile"])))
        return
    rows = {}
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(cache, "triton"), OZAKI_CACHE_DIR=cache)
        # The warm process runs twice: timed plainly, then under cProfile for where its first
        # call spends the host's time (the profiler slows that call down).
        for state in ("cold", "warm", "warm, profiled"):
            flags = ["--profile"] if state == "warm, profiled" else []
            done = subprocess.run([sys.executable, __file__, "--child", *flags], env=env, capture_output=True,
                                  text=True, check=True)
            *profile_lines, last = done.stdout.strip().splitlines()
            print("\n".join(profile_lines))
            rows[state] = json.loads(last)
            print(state, rows[state], flush=True)
    print("| call | cold caches (s) | warm caches (s) |\n| --- | --- | --- |")
    for (name, _), cold, warm in zip(SHAPES, rows["cold"], rows["warm"]):
        print(f"| {name} | {cold:.3f} | {warm:.3f} |")


if __name__ == "__main__":
    main()
