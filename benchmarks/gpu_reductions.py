"""tc_sum on one GPU: speed against torch.sum and the device copy bandwidth, and bit identity.

Run on the GPU machine from the repository root:
  PYTHONPATH=. python3 benchmarks/gpu_reductions.py [--quick] [--out DIR]
Prints each row as it is measured (and appends it to DIR/gpu_reductions.log), writes DIR/gpu_reductions.json
and prints a summary table last.  For every operand type it times each configuration of TC_SUM_CONFIGS
(--quick: the likeliest winners, with shorter timing) on n >= 2**28 elements (one long row, and 2**14 rows
of 2**14), x.clone() (copy bandwidth = 2 * bytes / time) and torch.sum; checks that configurations the
checker puts in one class return identical bits; and checks exactness on the largest integer sums the
stated bounds allow.
"""

import argparse
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
# --quick times these: 6 (segment 2048, 32 KiB fp16 stages) won fp16 and bf16 on the H200; 5 (mma.sync)
# won FP8 and int8's many-row shape; 3 has the largest stages for 1-byte types (32 KiB, like 6's for
# fp16); 2 is the 1024-segment wgmma configuration with the most stages per byte.  Each costs a compile.
_QUICK_CONFIGS = (2, 3, 5, 6)
_TIMING = {"full": {"warmup": 25, "rep": 200}, "quick": {"warmup": 5, "rep": 25}}


def _ms(fn, timing):
    return triton.testing.do_bench(fn, **timing, return_mode="median")


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


def _row_text(row):
    if "ms" in row:
        return (f"{row['kernel']:22} {str(row['shape']):16} {row['what']:16} {row['ms']:8.4f} {row['gbs']:7.0f} "
                f"{row['copy_gbs']:9.0f} {row['pct_copy']:6.1f}")
    return (f"{row['kernel']:22} {str(row['shape']):16} {row['what']:50} {'OK' if row['ok'] else 'FAIL'} "
            f"{row.get('detail', '')}")


def _speed_rows(name, dtype, family_classes, indices, timing):
    for shape in _SHAPES:
        x = _data(dtype, shape)
        size = x.numel() * x.element_size()
        copy_gbs = 2 * size / _ms(lambda: x.clone(), timing) / 1e6
        timed = [(f"tc_sum[{i}]", lambda c=TC_SUM_CONFIGS[i]: tc_sum(x, **c)) for i in indices]
        if _torch_sum(x) is not None:
            timed.append(("torch.sum", _torch_sum(x)))
        for what, fn in timed:
            ms = _ms(fn, timing)
            yield {"kernel": name, "shape": list(shape), "what": what, "ms": ms, "gbs": size / ms / 1e6,
                   "copy_gbs": copy_gbs, "pct_copy": 100 * size / ms / 1e6 / copy_gbs}
        outputs = {i: tc_sum(x, **TC_SUM_CONFIGS[i]) for i in indices}
        for cls in family_classes:
            members = [i for i in cls if i in outputs]
            split = [i for i in members if not _same_bits(outputs[i], outputs[members[0]])]
            if len(members) > 1:
                yield {"kernel": name, "shape": list(shape), "what": f"class {members} identical bits",
                       "ok": not split, "detail": f"differs: {split}" if split else ""}
        del x, outputs
        torch.cuda.empty_cache()


def _exact_rows(name, dtype, indices):
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
    for index in indices:
        got = float(tc_sum(x, exact=dtype != torch.int8, **TC_SUM_CONFIGS[index]))
        yield {"kernel": name, "shape": list(x.shape), "what": f"exact[{index}] {got} vs {want}", "ok": got == want}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"time only TC_SUM_CONFIGS{list(_QUICK_CONFIGS)}, with shorter do_bench runs")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="directory for the log and JSON")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gpu_reductions.py needs a CUDA device")
    indices = _QUICK_CONFIGS if args.quick else tuple(range(len(TC_SUM_CONFIGS)))
    timing = _TIMING["quick" if args.quick else "full"]
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "gpu_reductions.log"), "w")

    def emit(line):
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    device = torch.cuda.get_device_name()
    emit(f"device {device}, torch {torch.__version__}, triton {triton.__version__}, configs {list(indices)}")
    emit(f"{'kernel':22} {'shape':16} {'what':16} {'ms':>8} {'GB/s':>7} {'copy GB/s':>9} {'% copy':>6}")
    by_name = {f.name: f for f in families("sm_90")}
    rows = []
    for type_name, dtype in _TYPES.items():
        name = f"tc_sum.{type_name}"
        for row in itertools.chain(_speed_rows(name, dtype, classes(by_name[name]), indices, timing),
                                   _exact_rows(name, dtype, indices)):
            rows.append(row)
            emit(_row_text(row))
    with open(os.path.join(args.out, "gpu_reductions.json"), "w") as handle:
        json.dump({"device": device, "torch": torch.__version__, "triton": triton.__version__,
                   "configs": {i: TC_SUM_CONFIGS[i] for i in indices}, "rows": rows}, handle, indent=1)
    emit("\nsummary: best tc_sum configuration per input against the copy bandwidth and torch.sum")
    emit(f"{'kernel':22} {'shape':16} {'best':10} {'% copy':>6} {'torch.sum % copy':>16} {'bits/exact':>10}")
    for (kernel, shape) in dict.fromkeys((r["kernel"], str(r["shape"])) for r in rows if "ms" in r):
        mine = [r for r in rows if r["kernel"] == kernel and str(r["shape"]) == shape]
        best = max((r for r in mine if r["what"].startswith("tc_sum")), key=lambda r: r["pct_copy"])
        base = next((f"{r['pct_copy']:.1f}" for r in mine if r["what"] == "torch.sum"), "n/a")
        checks = [r["ok"] for r in rows if r["kernel"] == kernel and "ok" in r]
        emit(f"{kernel:22} {shape:16} {best['what']:10} {best['pct_copy']:6.1f} {base:>16} "
             f"{'OK' if all(checks) else 'FAIL':>10}")
    log.close()
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
