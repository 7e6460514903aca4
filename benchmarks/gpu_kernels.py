"""Plane-GEMM engines on one GPU: bit equality with the torch reference, exactness windows,
and throughput at 8192^3 against cuBLAS (torch._int_mm, torch._scaled_mm).

Run from the repository root:  PYTHONPATH=. python3 benchmarks/gpu_kernels.py
Writes a log and JSON results under $OUT (or ./gpu_kernels_out) and prints a table last.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback

import torch
import triton
from triton.testing import do_bench

from kernels.crt import decode_residues
from kernels.residues import encode_planes
from kernels.products import (CONFIGS, PlaneGemmConfig, _launch, _to_operand, modular_matmul, plan_chunk,
                              reference_modular_matmul, residue_dtype)
from ozaki import products
from ozaki.crt import garner, round_to_float64
from kernels.digits import digit_set
from ozaki.formats import encoding_from_dict
from ozaki.residues import residues
from ozaki.scaling import exact_bits, row_shifts, scale_rows

OUT = os.environ.get("OUT", "gpu_kernels_out")
os.makedirs(OUT, exist_ok=True)
LOG = open(os.path.join(OUT, "log.txt"), "w")
RESULTS: list[dict] = []


def log(*parts) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def random_planes(digits: str, planes: int, rows: int, k: int, *, magnitude: int | None = None) -> torch.Tensor:
    values = sorted(v for v in digit_set(digits) if magnitude is None or abs(v) <= magnitude)
    table = torch.tensor(values, dtype=torch.int16, device="cuda")
    return table[torch.randint(len(values), (planes, rows, k), device="cuda")]


def check_equal(name: str, digits: str, planes: int, rows: int, cols: int, k: int, modulus: int, **kw) -> None:
    a = random_planes(digits, planes, rows, k)
    b = random_planes(digits, planes, cols, k)
    coeffs = [random.randrange(-10**6, 10**6) for _ in range(planes)]
    t0 = time.time()
    try:
        got = modular_matmul(a, b, coeffs, modulus, digits=digits, **kw)
        want = reference_modular_matmul(a, b, coeffs, modulus)
        ok = bool(torch.equal(got, want))
        status = "equal" if ok else f"DIFFER ({int((got != want).sum())} entries)"
    except Exception as exc:  # one failing engine must not hide the others' figures
        status = f"ERROR {type(exc).__name__}: {exc}"[:300]
        traceback.print_exc(file=LOG)
    log(f"bits  {name:<34} T={planes} {rows}x{cols}x{k} m={modulus}: {status} ({time.time() - t0:.1f}s)")
    RESULTS.append({"kind": "bits", "name": name, "planes": planes, "shape": [rows, cols, k], "modulus": modulus,
                    "status": status})


def window_probe(window: int, k: int) -> None:
    """All-positive maximal fp4 digits (12 x 12) through the e4m3 kernel with a given
    promotion window, bypassing validation: shows where the wgmma window stops being exact."""
    rows = 256
    a = torch.full((1, 1, rows, k), 12, dtype=torch.int16, device="cuda")
    b = torch.full((1, 1, rows, k), 12, dtype=torch.int16, device="cuda")
    a[..., ::7] = 11  # break the symmetry so partial sums are not all powers-of-two friendly
    cfg = PlaneGemmConfig(128, 128, 128, num_warps=8, num_stages=3, imprecise_window=window)
    modulus = 2**31 - 1  # large modulus: the residue is the exact sum itself
    out = torch.empty((1, 1, rows, rows), dtype=torch.int64, device="cuda")
    _launch(_to_operand(a, "e4m3", 128), _to_operand(b, "e4m3", 128), (1,), (0, 1),
            (modulus,), out, "e4m3", cfg, k)
    want = reference_modular_matmul(a[:, 0], b[:, 0], [1], modulus)
    status = "exact" if torch.equal(out[0, 0], want) else f"WRONG max|diff| {int((out[0, 0] - want).abs().max())}"
    log(f"window e4m3 W={window:<4} K={k} digits 11/12 (W*144={window * 144}): {status}")
    RESULTS.append({"kind": "window", "window": window, "k": k, "status": status})


def tops(ms: float, n: int) -> float:
    return 2 * n**3 / (ms * 1e-3) / 1e12


def bench(name: str, fn, n: int, matmul: bool = True) -> float:
    """Median ms of fn; TOP/s only for n^3 matrix products."""
    try:
        fn()
        torch.cuda.synchronize()
        ms = do_bench(fn, warmup=25, rep=150, return_mode="median")
    except Exception as exc:
        log(f"perf  {name:<50} ERROR {type(exc).__name__}: {str(exc)[:200]}")
        traceback.print_exc(file=LOG)
        RESULTS.append({"kind": "perf", "name": name, "error": str(exc)[:300]})
        return float("nan")
    rate = f"{tops(ms, n):8.1f} TOP/s" if matmul else ""
    log(f"perf  {name:<50} {ms:8.3f} ms {rate}")
    RESULTS.append({"kind": "perf", "name": name, "n": n, "ms": ms, "tops": tops(ms, n) if matmul else None})
    return ms


def plane_gemm(a_op, b_op, operand: str, cfg: PlaneGemmConfig, planes: int, n: int):
    out = torch.empty((1, 1, n, n), dtype=residue_dtype([251]), device="cuda")
    coeffs = tuple(range(1, planes + 1))
    chunk = plan_chunk(operand, cfg, 144 if operand != "int8" else 128 * 128)
    return lambda: _launch(a_op, b_op, coeffs, (0, planes), (251,), out, operand, cfg, chunk)


def int8_residue_encoding(m: int):
    lo = -(m // 2)
    side = {"min": lo, "max": lo + m - 1, "weights": [1], "limbs": [[x] for x in range(lo, lo + m)]}
    return encoding_from_dict({"format": "ozaki-encoding/1", "name": f"res{m}-int8-1", "digits": "int8",
                               "modulus": m, "a": side, "b": side,
                               "planes": [{"a": [1], "b": [1], "coefficient": 1}], "products": 1})


def fused_stages(n: int) -> None:
    """Fused encode / decode against the staged torch path: bits, then time."""
    moduli = [256, 255, 253, 251, 247, 241, 239, 233]
    encodings = [int8_residue_encoding(m) for m in moduli]
    x = (torch.rand(n, n, dtype=torch.float64, device="cuda") - 0.5) * torch.exp(
        torch.randn(n, n, dtype=torch.float64, device="cuda"))
    bits = exact_bits(x)
    shift = row_shifts(x, bits)

    def staged_encode():
        r = residues(scale_rows(x, bits), moduli)
        return torch.cat([products.digit_planes(r[i], e, "a") for i, e in enumerate(encodings)])

    same = torch.equal(encode_planes(x, shift, encodings, "a").long(), staged_encode())
    log(f"bits  fused encode {n}x{n}, {len(moduli)} int8 moduli: {'equal' if same else 'DIFFER'}")
    bench(f"encode fused {n}x{n} x {len(moduli)} moduli", lambda: encode_planes(x, shift, encodings, "a"), n,
          matmul=False)
    bench(f"encode staged {n}x{n} x {len(moduli)} moduli", staged_encode, n, matmul=False)

    y = torch.randint(-(2**60), 2**60, (n, n), device="cuda")
    c = torch.stack([torch.remainder(y, m) for m in moduli]).to(torch.int32)
    row = torch.randint(-100, 100, (n,), device="cuda")
    col = torch.randint(-100, 100, (n,), device="cuda")
    exponent = row[:, None] + col[None, :]
    fused = decode_residues(c, moduli, row, col)
    same = torch.equal(fused.view(torch.int64), round_to_float64(garner(c.long(), moduli), moduli, exponent).view(
        torch.int64))
    log(f"bits  fused decode {n}x{n}, {len(moduli)} moduli: {'equal' if same else 'DIFFER'}")
    bench(f"decode fused {n}x{n} x {len(moduli)} moduli", lambda: decode_residues(c, moduli, row, col), n,
          matmul=False)
    bench(f"decode staged {n}x{n} x {len(moduli)} moduli",
          lambda: round_to_float64(garner(c.long(), moduli), moduli, exponent), n, matmul=False)


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    log(f"device {props.name} sm_{props.major}{props.minor}, torch {torch.__version__}, triton {triton.__version__}, "
        f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    random.seed(1)
    torch.manual_seed(1)

    # 1. Bits at n = 4096 (a 512-row slice of A against all of B), every engine.
    n = 4096
    pointer_int8 = next(c for c in CONFIGS["int8"] if not c.tma)
    pointer_e4m3 = next(c for c in CONFIGS["e4m3"] if not c.tma)
    for m in (251, 256, 89):
        check_equal("int8 / int8", "int8", 1, 512, n, n, m)
    check_equal("int8 / int8 pointer loads", "int8", 1, 512, n, n, 251, config=pointer_int8)
    check_equal("fp4 / e4m3 pointer loads", "fp4", 6, 512, n, n, 89, operand="e4m3", config=pointer_e4m3)
    check_equal("int8 / int8 ragged 500x300x4000", "int8", 1, 500, 300, 4000, 241)
    for m in (89, 169, 13):
        check_equal("fp4 / e4m3 (Hopper exact path)", "fp4", 6, 512, n, n, m, operand="e4m3")
        check_equal("fp4 / int8", "fp4", 6, 512, n, n, m, operand="int8")
    check_equal("fp4 / auto (select_operand)", "fp4", 6, 512, n, n, 139)
    check_equal("fp4 / e2m1 (dot_scaled)", "fp4", 3, 512, n, n, 89, operand="e2m1")
    check_equal("fp8 / e4m3 (auto config, large digits)", "fp8", 3, 512, n, n, 251)
    check_equal("fp4 / e4m3 chunked (k_chunk 1024)", "fp4", 3, 512, n, n, 157, operand="e4m3", k_chunk=1024)
    check_equal("int8 / int8 chunked (k_chunk 512)", "int8", 1, 512, n, n, 255, k_chunk=512)

    # Fused encode / decode (added after the recorded run 2: not yet run on a GPU).
    try:
        fused_stages(n)
    except Exception as exc:
        log(f"fused stages: ERROR {type(exc).__name__}: {str(exc)[:300]}")
        traceback.print_exc(file=LOG)

    # 2. The FP8 wgmma promotion window (model: exact while W * max|PQ| < 2**14).
    for window in (32, 64, 128):
        try:
            window_probe(window, 65536)
        except Exception as exc:
            log(f"window e4m3 W={window}: ERROR {type(exc).__name__}: {str(exc)[:200]}")

    # 3. Throughput at 8192^3.
    n = 8192
    a8 = random_planes("int8", 1, n, n).to(torch.int8)
    b8 = random_planes("int8", 1, n, n).to(torch.int8)
    int_mm = bench("cuBLAS torch._int_mm (B column-major)", lambda: torch._int_mm(a8[0], b8[0].t()), n)
    best_int8 = (float("inf"), None)
    for cfg in CONFIGS["int8"]:
        ms = bench(f"int8 {_cfg(cfg)}", plane_gemm(a8[:, None], b8[:, None], "int8", cfg, 1, n), n)
        best_int8 = min(best_int8, (ms, cfg), key=lambda x: x[0] if x[0] == x[0] else float("inf"))
    for out_dtype in (torch.int32, torch.int64):
        bench(f"int8 full modular_matmul call ({out_dtype})",
              lambda: modular_matmul(a8, b8, [1], 251, digits="int8", config=best_int8[1], out_dtype=out_dtype), n)

    f4 = random_planes("fp4", 1, n, n)
    g4 = random_planes("fp4", 1, n, n)
    a_e4 = f4.to(torch.float16).to(torch.float8_e4m3fn)
    b_e4 = g4.to(torch.float16).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device="cuda")
    scaled = bench("cuBLAS torch._scaled_mm fast_accum=False",
                   lambda: torch._scaled_mm(a_e4[0], b_e4[0].t(), scale_a=one, scale_b=one,
                                            out_dtype=torch.bfloat16, use_fast_accum=False), n)
    bench("cuBLAS torch._scaled_mm fast_accum=True",
          lambda: torch._scaled_mm(a_e4[0], b_e4[0].t(), scale_a=one, scale_b=one,
                                   out_dtype=torch.bfloat16, use_fast_accum=True), n)
    best_e4 = (float("inf"), None)
    for cfg in CONFIGS["e4m3"]:
        ms = bench(f"e4m3 fp4-digits {_cfg(cfg)}", plane_gemm(a_e4[:, None], b_e4[:, None], "e4m3", cfg, 1, n), n)
        best_e4 = min(best_e4, (ms, cfg), key=lambda x: x[0] if x[0] == x[0] else float("inf"))
    a_fp4 = _to_operand(f4[:, None], "e2m1", 128)
    b_fp4 = _to_operand(g4[:, None], "e2m1", 128)
    for cfg in CONFIGS["e2m1"][:1]:  # sm_90 upcasts to bf16: informational only
        bench(f"e2m1 dot_scaled {_cfg(cfg)}", plane_gemm(a_fp4, b_fp4, "e2m1", cfg, 1, n), n)
    six_a = random_planes("fp4", 6, n, n)[:, None]
    six_b = random_planes("fp4", 6, n, n)[:, None]
    for operand, best in (("int8", best_int8[1]), ("e4m3", best_e4[1])):
        if best is None:
            continue
        ms6 = bench(f"fp4 {operand} 6 planes one modulus {_cfg(best)}",
                    plane_gemm(_to_operand(six_a, operand, best.block_k),
                               _to_operand(six_b, operand, best.block_k), operand, best, 6, n), n)
        log(f"      per plane: {tops(ms6 / 6, n):.1f} TOP/s")

    log("")
    log("| engine | best config | TOP/s | vs cuBLAS |")
    log("| --- | --- | --- | --- |")
    if best_int8[1] is not None:
        log(f"| int8 | {_cfg(best_int8[1])} | {tops(best_int8[0], n):.0f} | "
            f"{int_mm / best_int8[0]:.2f}x torch._int_mm ({tops(int_mm, n):.0f}) |")
    if best_e4[1] is not None:
        log(f"| fp8/fp4-on-Hopper (e4m3) | {_cfg(best_e4[1])} | {tops(best_e4[0], n):.0f} | "
            f"{scaled / best_e4[0]:.2f}x torch._scaled_mm exact ({tops(scaled, n):.0f}) |")
    with open(os.path.join(OUT, "results.json"), "w") as fh:
        json.dump(RESULTS, fh, indent=1)


def _cfg(cfg: PlaneGemmConfig) -> str:
    return (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages}"
            f" W{cfg.imprecise_window} {'tma' if cfg.tma else 'ptr'}")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA device")
    main()
