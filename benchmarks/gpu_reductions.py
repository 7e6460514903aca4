"""tc_sum on one GPU: speed against torch.sum and the device copy bandwidth, and bit identity.

Run on the GPU machine from the repository root:  PYTHONPATH=. python3 benchmarks/gpu_reductions.py
Prints each row as it is measured, writes $OUT/gpu_reductions.json and prints a summary table last.  For every operand type it times each configuration
of TC_SUM_CONFIGS on n >= 2**28 elements (one long row, and 2**14 rows of 2**14), x.clone() (copy
bandwidth = 2 * bytes / time) and torch.sum; checks that configurations the checker puts in one class
return identical bits; and checks exactness on the largest integer sums the stated bounds allow.
"""

import itertools
import json
import os
import sys

import torch
import triton

from kernels.check.classes import classes, families
from kernels.tc_sum import TC_SUM_CONFIGS, tc_sum

_TYPES = {"int8": torch.int8, "float8_e4m3fn": torch.float8_e4m3fn, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
_SHAPES = ((1 << 28,), (1 << 14, 1 << 14))


def _ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _data(dtype, shape):
    generator = torch.Generator(device="cuda").manual_seed(1234)
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, device="cuda", dtype=torch.int8, generator=generator)
    values = torch.randn(shape, device="cuda", generator=generator) * torch.exp2(
        torch.randint(-4, 5, shape, device="cuda", generator=generator).float())
    return values.clamp(-448, 448).to(dtype)


def _torch_sum(x):
    if x.dtype == torch.float8_e4m3fn:
        return None  # torch.sum has no FP8 kernel
    return lambda: x.sum(-1, dtype=torch.int64 if x.dtype == torch.int8 else torch.float32)


def _same_bits(a, b):
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _print(row):
    if "ms" in row:
        print(f"{row['kernel']:22} {str(row['shape']):16} {row['what']:16} {row['ms']:8.4f} {row['gbs']:7.0f} "
              f"{row['copy_gbs']:9.0f} {row['pct_copy']:6.1f}", flush=True)
    else:
        print(f"{row['kernel']:22} {str(row['shape']):16} {row['what']:50} {'OK' if row['ok'] else 'FAIL'} "
              f"{row.get('detail', '')}", flush=True)


def _speed_rows(name, dtype, family_classes):
    for shape in _SHAPES:
        x = _data(dtype, shape)
        size = x.numel() * x.element_size()
        copy_gbs = 2 * size / _ms(lambda: x.clone()) / 1e6
        timed = [(f"tc_sum[{i}]", lambda c=c: tc_sum(x, **c)) for i, c in enumerate(TC_SUM_CONFIGS)]
        if _torch_sum(x) is not None:
            timed.append(("torch.sum", _torch_sum(x)))
        for what, fn in timed:
            ms = _ms(fn)
            yield {"kernel": name, "shape": list(shape), "what": what, "ms": ms, "gbs": size / ms / 1e6,
                   "copy_gbs": copy_gbs, "pct_copy": 100 * size / ms / 1e6 / copy_gbs}
        outputs = [tc_sum(x, **config) for config in TC_SUM_CONFIGS]
        for cls in family_classes:
            split = [i for i in cls if not _same_bits(outputs[i], outputs[cls[0]])]
            yield {"kernel": name, "shape": list(shape), "what": f"class {cls} identical bits", "ok": not split,
                   "detail": f"differs: {split}" if split else ""}
        del x, outputs
        torch.cuda.empty_cache()


def _exact_rows(name, dtype):
    """The largest sums the bounds allow: every configuration must return them exactly."""
    if dtype == torch.int8:
        x = torch.full((1 << 28,), -128, dtype=torch.int8, device="cuda")
        want = -128 * (1 << 28)
    else:
        # Alternating top, 1: odd partial sums up to 2**24 exercise the last bit the bound relies on.
        top = {torch.float8_e4m3fn: 448.0, torch.float16: 2048.0, torch.bfloat16: 256.0}[dtype]
        pairs = int((2**24 - 1) // (top + 1))
        x = torch.tensor([top, 1.0], device="cuda").repeat(pairs).to(dtype)
        want = (top + 1) * pairs
    for index, config in enumerate(TC_SUM_CONFIGS):
        got = float(tc_sum(x, exact=dtype != torch.int8, **config))
        yield {"kernel": name, "shape": list(x.shape), "what": f"exact[{index}] {got} vs {want}", "ok": got == want}


def main():
    if not torch.cuda.is_available():
        sys.exit("gpu_reductions.py needs a CUDA device")
    device = torch.cuda.get_device_name()
    print(f"device {device}, torch {torch.__version__}, triton {triton.__version__}")
    print(f"{'kernel':22} {'shape':16} {'what':16} {'ms':>8} {'GB/s':>7} {'copy GB/s':>9} {'% copy':>6}")
    by_name = {f.name: f for f in families("sm_90")}
    rows = []
    for type_name, dtype in _TYPES.items():
        name = f"tc_sum.{type_name}"
        for row in itertools.chain(_speed_rows(name, dtype, classes(by_name[name])), _exact_rows(name, dtype)):
            rows.append(row)
            _print(row)
    with open(os.path.join(os.environ.get("OUT", "."), "gpu_reductions.json"), "w") as handle:
        json.dump({"device": device, "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                  handle, indent=1)
    print("\nsummary: best tc_sum configuration per input against the copy bandwidth and torch.sum")
    print(f"{'kernel':22} {'shape':16} {'best':10} {'% copy':>6} {'torch.sum % copy':>16} {'bits/exact':>10}")
    for (kernel, shape) in dict.fromkeys((r["kernel"], str(r["shape"])) for r in rows if "ms" in r):
        mine = [r for r in rows if r["kernel"] == kernel and str(r["shape"]) == shape]
        best = max((r for r in mine if r["what"].startswith("tc_sum")), key=lambda r: r["pct_copy"])
        base = next((f"{r['pct_copy']:.1f}" for r in mine if r["what"] == "torch.sum"), "n/a")
        checks = [r["ok"] for r in rows if r["kernel"] == kernel and "ok" in r]
        print(f"{kernel:22} {shape:16} {best['what']:10} {best['pct_copy']:6.1f} {base:>16} "
              f"{'OK' if all(checks) else 'FAIL':>10}")
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
