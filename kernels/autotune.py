"""Autotuning that cannot change an answer: time only configurations proven bit-equivalent.

A kernel's default configuration fixes its bits.  The checker (``kernels.check``) partitions every
kernel's configurations into classes that return the same bits on every input; the tuner times the
members of the default's class alone, so whichever wins, the result is bit for bit the default's.
The tuner reads those classes as data, ``kernels/classes.json``, which the checker writes
(``ozaki-check classes --write``) and a test keeps equal to what it computes: a product never
loads the checker.
Timing happens once per workload key on CUDA (``triton.testing.do_bench``, median).  The winner is
cached in-process and on disk (:func:`cache_file`), so a later process on the same device and
software finds it without timing; a stored winner is used only while it is still a member of the
class the tuner would time.  On the CPU the kernels run in Triton's interpreter, whose timings say nothing
about a GPU, so the default is returned untimed; so it is on GPUs the descriptors do not model,
where no class has been proven.  Every choice is logged on ``logging.getLogger("ozaki.kernels")``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

import torch
import triton
import triton.testing
from triton.runtime.errors import OutOfResources

from kernels import products

__all__ = ["CACHE_DIR_VARIABLE", "CLASSES_FILE", "best_config", "cache_file", "candidates", "clear_cache", "target_for",
           "tuned_plane_config"]

# {target: {kernel: {"configs": [...], "classes": [[index, ...], ...]}}}, written by the checker.
CLASSES_FILE = Path(__file__).with_name("classes.json")

_log = logging.getLogger("ozaki.kernels")

# One lock for every tuning, held while timing: two tunings timed at once on one GPU would measure
# each other's contention, and a second thread asking for a key being tuned waits for its winner
# instead of timing it again.  Reentrant so that a run() may itself ask for a tuned config.
_lock = threading.RLock()
# The winners by kernel and workload, and tuned_plane_config's answers by request.
_winners: dict[Hashable, object] = {}

# Where tuned winners persist across processes: this variable's folder, else $XDG_CACHE_HOME/ozaki
# (~/.cache/ozaki); set it to an empty string to keep winners in-process only.
CACHE_DIR_VARIABLE = "OZAKI_CACHE_DIR"

# Timing planes hold only -1, 0 and 1 (members of every digit set); the chunking the real digits
# need is passed explicitly as k_chunk, so the launch does the same work as the real one.
_TIMING_DIGITS = (-1, 0, 1)


def _freeze(config: dict) -> tuple:
    return tuple(sorted(config.items()))


@functools.cache
def _proven_classes() -> dict:
    return json.loads(CLASSES_FILE.read_text())


def target_for(device) -> str:
    """The checker target whose classes apply to kernels running on `device`."""
    device = torch.device(device)
    if device.type == "cpu":
        return "interpreter"
    capability = torch.cuda.get_device_capability(device)
    if capability != (9, 0):
        raise ValueError(f"descriptors model sm_90 only; {device} is sm_{capability[0]}{capability[1]}")
    return "sm_90"


@functools.lru_cache(maxsize=None)
def _class_of(name: str, default: tuple | None, target: str) -> tuple[tuple, tuple[tuple, ...]]:
    """(default, its class) for kernel `name` on `target`, configurations frozen; default None means
    the kernel's first configuration."""
    proven = _proven_classes()
    if target not in proven:
        raise ValueError(f"unknown target {target!r}; known: {sorted(proven)}")
    entry = proven[target].get(name)
    if entry is None:
        raise ValueError(f"unknown kernel {name!r}; known: {sorted(proven[target])}")
    configs = [_freeze(c) for c in entry["configs"]]
    default = configs[0] if default is None else default
    if default not in configs:
        raise ValueError(f"{dict(default)!r} is not a configuration of {name} in {CLASSES_FILE.name}: pick one from "
                         f"its configs list (after changing a kernel's configurations, `ozaki-check classes --write`)")
    index = configs.index(default)
    return default, tuple(configs[i] for i in next(c for c in entry["classes"] if index in c))


def candidates(name: str, default: dict | None = None, *, target: str = "sm_90") -> list[dict]:
    """The configurations of kernel `name` (a kernel of ``kernels/classes.json`` such as
    ``"tc_sum.float16"``) proven to give the bits of `default` (its family's first configuration
    when None) on `target`: exactly the set the tuner may choose from."""
    _, members = _class_of(name, None if default is None else _freeze(default), target)
    return [dict(c) for c in members]


def _tuning_target(device: torch.device) -> str | None:
    """The checker target whose classes license timing on `device`; None where timing is meaningless
    (the interpreter) or no class is proven (a GPU the descriptors do not model)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return None
    try:
        return target_for(device)
    except ValueError as error:
        _log.warning("autotune: %s; using default configurations untimed", error)
        return None


def _device(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def cache_file(device) -> Path | None:
    """The file holding the tuned winners for CUDA `device` with the installed torch and Triton (a
    new release may compile the same config into a faster or slower kernel), or None when
    ``OZAKI_CACHE_DIR`` is set empty."""
    folder = os.environ.get(CACHE_DIR_VARIABLE)
    if folder is None:
        folder = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ozaki")
    if not folder:
        return None
    device = torch.device(device)
    model = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    device_name = re.sub(r"[^A-Za-z0-9.]+", "-", model)
    return Path(folder) / f"autotune-{device_name}-torch{torch.__version__}-triton{triton.__version__}.json"


def _stored(path: Path | None) -> dict[str, list]:
    if path is None or not path.exists():
        return {}
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        _log.warning("autotune: ignoring unreadable cache %s (%s)", path, error)
        return {}
    return stored if isinstance(stored, dict) else {}


def _store(path: Path | None, entry: str, winner: tuple) -> None:
    """Adds one winner to the file, replacing it whole (a reader never sees half a file; of two
    processes writing at once, one's new entry may be lost and is timed again later)."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stored = _stored(path)
        stored[entry] = [list(pair) for pair in winner]
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as f:
            json.dump(stored, f, indent=1, sort_keys=True)
        os.replace(f.name, path)
    except OSError as error:
        _log.warning("autotune: cannot write the cache %s (%s); winners stay in this process", path, error)


def _time(name: str, run: Callable[[dict], object], default: tuple, members: list[tuple]) -> tuple:
    """The fastest of `members` by median do_bench time; ties go to the earlier, the default first."""
    timings = []
    for config in [default] + [c for c in members if c != default]:
        try:
            ms = triton.testing.do_bench(lambda config=config: run(dict(config)), return_mode="median")
        except OutOfResources as error:
            # The default is what an untuned launch would run: its failure is the caller's to see.
            if config == default:
                raise
            _log.info("autotune %s: skipping %s, which does not fit the device (%s)", name, dict(config), error)
            continue
        timings.append((ms, len(timings), config))
    ms, _, best = min(timings)
    _log.info("autotune %s: %s in %.4f ms (default %.4f ms; %d timed of %d admitted in its class)", name,
              dict(best), ms, timings[0][0], len(timings), len(members))
    return best


def best_config(
    name: str,
    run: Callable[[dict], object],
    *,
    key: Hashable,
    device: torch.device | str,
    default: dict | None = None,
    admits: Callable[[dict], bool] | None = None,
) -> dict:
    """The fastest configuration of kernel `name` that gives the bits of `default` on `device`.

    name: a kernel of ``kernels/classes.json`` (``"tc_sum.bfloat16"``, ``"modular_matmul.e4m3"``).
    run(config): launches the kernel once with config (a dict, as the checker lists them) on
    representative data of the workload.  key: hashable; with name, device and default it must
    identify the workload, so include every shape, dtype and operand that run's cost or admits'
    verdict depends on.  default: one of the family's configurations (its first when None).
    admits(config): launcher limits, such as exactness windows, a candidate must also meet; the
    default must meet them.  Returns a fresh dict; on CPU (interpreter) the default, untimed.
    """
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"autotune key {key!r} is not hashable: pass a tuple of the workload's shape, "
                        f"dtype and operand") from None
    device = _device(device)
    target = _tuning_target(device)
    # Resolved on every device, so a wrong name or config fails in CI as it would on a GPU.
    frozen, members = _class_of(name, None if default is None else _freeze(default), target or "interpreter")
    if admits is not None and not admits(dict(frozen)):
        raise ValueError(f"{name}: default {dict(frozen)} is not admitted for workload {key!r}; pass a default "
                         f"the launcher accepts (its first admitted configuration)")
    if target is None:
        _log.debug("autotune %s on %s: default %s, untimed", name, device, dict(frozen))
        return dict(frozen)
    cache_key = (name, target, str(device), frozen, key)
    with _lock:
        best = _winners.get(cache_key)
        if best is None:
            admitted = [c for c in members if admits is None or admits(dict(c))]
            path, entry = cache_file(device), repr((name, target, frozen, key))
            stored = _stored(path).get(entry)
            best = stored and tuple(tuple(pair) for pair in stored)
            if best in admitted:
                _log.debug("autotune %s: %s from %s", name, dict(best), path)
            else:
                best = _time(name, run, frozen, admitted)
                _store(path, entry, best)
            _winners[cache_key] = best
    return dict(best)


def clear_cache() -> None:
    """Forget every tuned winner (the next request for each key times its class again)."""
    with _lock:
        _winners.clear()


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"tuned_plane_config: {name} = {value!r} must be an int")
    if value < 1:
        raise ValueError(f"tuned_plane_config: {name} = {value} must be at least 1")
    return value


def tuned_plane_config(
    operand: str,
    m: int,
    n: int,
    k: int,
    planes: int | Sequence[int],
    max_product: int,
    device: torch.device | str,
    *,
    moduli: Sequence[int] | None = None,
    exact_sums: bool = False,
):
    """``config=`` for ``kernels.products.grouped_modular_matmul``: the fastest ``PlaneGemmConfig``
    of `operand` whose exactness windows admit planes with largest ``|P_t| * |Q_t|`` = `max_product`
    (every such config returns the exact residues).  planes: the plane count of each group (an int:
    one group) in a launch of [T, M, K] x [T, N, K] planes; moduli: each group's modulus (None: all
    at most 2**8, as in the catalog), whose ``residue_dtype`` selects the kernel's residue arithmetic;
    exact_sums: for ``kernels.products.exact_int8_matmul`` (one int8 plane whose entries are at most
    √max_product), timed as it launches, with its sums stored unreduced.  On CPU the
    launcher's own default: the first of ``CONFIGS[operand]`` that admits max_product.

    A repeated request is a dictionary lookup: the admission checks cost the host some 0.2 ms a
    product, which the device would wait out before the product's first launch (benchmarks/RESULTS.md,
    "2026-12-02 20:22 UTC, one H200: 1.35× DGEMM at 16384, 1.00× at 8192")."""
    # The request's answer is kept beside the winners it came from, so that clear_cache (or
    # another table of winners) decides it again.
    request = ("tuned_plane_config", operand, m, n, k, planes if isinstance(planes, int) else tuple(planes),
               max_product, str(device), None if moduli is None else tuple(moduli), exact_sums)
    with _lock:
        known = _winners.get(request)
    if known is None:
        known = _tuned_plane_config(operand, m, n, k, planes, max_product, device, moduli, exact_sums)
        with _lock:
            _winners[request] = known
    return known


def _tuned_plane_config(operand, m, n, k, planes, max_product, device, moduli, exact_sums):
    if operand not in products.CONFIGS:
        raise ValueError(f"unknown operand {operand!r}; known: {', '.join(products.CONFIGS)}")
    m, n, k = _positive("m", m), _positive("n", n), _positive("k", k)
    max_product = _positive("max_product", max_product)
    counts = (planes,) if isinstance(planes, int) and not isinstance(planes, bool) else tuple(planes)
    if not counts:
        raise ValueError("tuned_plane_config: planes is empty: give the plane count of at least one group")
    counts = tuple(_positive("planes", c) for c in counts)
    if moduli is not None and len(moduli) != len(counts):
        raise ValueError(f"tuned_plane_config: {len(moduli)} moduli for {len(counts)} groups: one per group")
    if exact_sums and (operand != "int8" or counts != (1,) or math.isqrt(max_product) ** 2 != max_product):
        raise ValueError(f"tuned_plane_config: exact sums are one int8 plane of entries up to √max_product "
                         f"(exact_int8_matmul); got {operand}, planes {list(counts)}, max_product {max_product}")
    # Time with the largest modulus of the residue type the real moduli take: the same arithmetic.
    residues = products.residue_dtype(moduli or [2**8])
    timing_modulus = {torch.uint8: 2**8, torch.int16: 2**15 - 1}.get(residues, 2**31 - 1)

    def refusal(config) -> str | None:
        return products.config_refusal(operand, config, max_product, planes=counts, k=k, device=device)

    def admits(config: dict) -> bool:
        return refusal(products.PlaneGemmConfig(**config)) is None

    default = next((c for c in products.CONFIGS[operand] if refusal(c) is None), None)
    if default is None:
        raise ValueError(f"no {operand} plane-GEMM config admits max|P*Q| = {max_product}; the default's "
                         f"limit: {refusal(products.CONFIGS[operand][0])}")

    @functools.cache
    def groups() -> list:
        generator = torch.Generator(device=device).manual_seed(0)
        values = torch.tensor(_TIMING_DIGITS, dtype=torch.int8, device=device)

        def draw(rows, count):
            return values[torch.randint(0, len(values), (count, rows, k), generator=generator, device=device)]

        return [(draw(m, c), draw(n, c), [1] * c, timing_modulus) for c in counts]

    def run(config: dict) -> None:
        plane_config = products.PlaneGemmConfig(**config)
        if exact_sums:
            (a, b, _, _), = groups()
            products.exact_int8_matmul(a[0], b[0], math.isqrt(max_product), config=plane_config)
            return
        chunk = products.plan_chunk(operand, plane_config, max_product)
        products.grouped_modular_matmul(groups(), digits=products.OPERANDS[operand], operand=operand,
                                        config=plane_config, k_chunk=chunk, out_dtype=residues)

    # Shapes within one power of two share a winner: a new shape costs no timing, and the best
    # tiling moves with the shape's scale, not with its exact size.
    buckets = tuple(1 << (size - 1).bit_length() for size in (m, n, k))
    workload = (*buckets, counts, max_product, str(residues), *(("exact sums",) if exact_sums else ()))
    chosen = best_config(f"modular_matmul.{operand}", run, key=workload, device=device,
                         default=dataclasses.asdict(default), admits=admits)
    return products.PlaneGemmConfig(**chosen)
