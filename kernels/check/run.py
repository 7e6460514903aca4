"""Dynamic check: run every configuration on probe inputs and compare the bits.

tc_sum probes are built to expose regrouping: an exponent spread (each fp32 add rounds somewhere
different), a cancellation probe (large values that cancel across segments while small ones are absorbed
or kept depending on the grouping) and an integer probe inside the exact bound (every configuration must
return the exact sum).  Plane-GEMM probes push the exact integer accumulation to its limits (all digits at
their largest magnitude, alternating signs, random digits) against the plain reference, with a modulus
of 2**31 - 1 so that almost no wrong partial sum can hide behind the reduction.  A claimed class that
splits on any probe is a soundness failure; classes the probes never tell apart are reported as not
observed to differ (the split may still be needed on other inputs).
"""

import concurrent.futures
import itertools
import multiprocessing

import torch

from kernels.autotune import target_for
from kernels.check.classes import TC_SUM_TYPES, classes, families
from kernels.digits import digit_set
from kernels.products import INTERPRETER_OPERANDS, reference_modular_matmul

__all__ = ["PROBES", "PLANE_PROBES", "check_family", "plane_gemm_probe", "run_checks", "tc_sum_probe"]

PROBES = ("exponent-spread", "cancellation", "integer")
PLANE_PROBES = ("extremes", "alternating", "random")
_PLANE_DIGITS = {"int8": "int8", "e4m3": "fp4", "e2m1": "fp4"}  # digits inside every config's windows
_PLANE_MODULUS = 2**31 - 1

# Exponent ranges (normal numbers, and room left in fp32 for a row of sums) per operand type.
_EXPONENTS = {torch.float8_e4m3fn: (-6, 8), torch.float16: (-14, 15), torch.bfloat16: (-60, 60)}


def _signed(shape, generator):
    return torch.randint(0, 2, shape, generator=generator).mul(2).sub(1).to(torch.float64)


def _powers(shape, low, high, generator):
    mantissa = 1 + torch.rand(shape, generator=generator, dtype=torch.float64)
    return _signed(shape, generator) * mantissa * torch.exp2(torch.randint(low, high + 1, shape, generator=generator))


def _cast(values, dtype):
    if dtype == torch.int8:
        return values.round().clamp(-128, 127).to(torch.int8)
    limit = torch.finfo(dtype).max
    return values.clamp(-limit, limit).to(dtype)


def tc_sum_probe(kind, dtype, shape, seed):
    """One probe of `kind` (see PROBES) for tc_sum: a CPU tensor of `dtype` and `shape`."""
    generator = torch.Generator().manual_seed(seed)
    low, high = _EXPONENTS.get(dtype, (0, 7))
    if kind == "exponent-spread":
        values = _powers(shape, low, high, generator)
    elif kind == "cancellation":
        # Small values 2**7..2**13 below the large ones: partial sums of ~1000 large values have an ulp
        # inside that range, so how many small bits survive depends on what they were added to.
        values = _powers(shape, max(low, high - 14), max(low, high - 8), generator)
        big = 2.0 ** (high - 1)
        half = shape[-1] // 2
        # As many +big in the first half as -big in the second: segment sums are large, the row's is small.
        picks = torch.rand(shape[:-1] + (half,), generator=generator) < 0.5
        values[..., :half] = torch.where(picks, big, values[..., :half])
        values[..., half:2 * half] = torch.where(picks.flip(-1), -big, values[..., half:2 * half])
    elif kind == "integer":
        values = torch.randint(-8, 9, shape, generator=generator).to(torch.float64)
    else:
        raise ValueError(f"unknown probe {kind!r}; known: {PROBES}")
    return _cast(values, dtype)


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _groups(outputs):
    """Indices of outputs, grouped by identical bits."""
    groups = []
    for index, out in enumerate(outputs):
        home = next((g for g in groups if _same_bits(outputs[g[0]], out)), None)
        if home is None:
            groups.append([index])
        else:
            home.append(index)
    return groups


def _tc_sum_exact(x):
    """The exact sum in the kernel's output type, or None where the probe is outside the exact bound."""
    if x.dtype == torch.int8:
        return x.to(torch.int64).sum(-1)
    wide = x.to(torch.float64)
    if not bool(torch.equal(wide, wide.round())) or float(wide.abs().sum(-1).max()) >= 2**24:
        return None
    return wide.sum(-1).to(torch.float32)


def plane_gemm_probe(kind, operand, shape, seed):
    """One probe of `kind` (see PLANE_PROBES) for modular_matmul with `operand`: (a_planes, b_planes,
    coefficients, modulus, digits) on the CPU, planes of shape [T, M, K] and [T, N, K] for (T, M, N, K)."""

    planes, m, n, k = shape
    digits = _PLANE_DIGITS[operand]
    values = torch.tensor(sorted(digit_set(digits)))
    generator = torch.Generator().manual_seed(seed)
    if kind == "extremes":
        top = int(values.abs().max())
        low = -top if -top in values else top
        a = torch.full((planes, m, k), low)
        b = torch.full((planes, n, k), low)
    elif kind == "alternating":
        top = int(values.max())
        signs = torch.arange(k).remainder(2).mul(-2).add(1)
        a = (top * signs).expand(planes, m, k).clone()
        b = torch.full((planes, n, k), top)
    elif kind == "random":
        a = values[torch.randint(0, len(values), (planes, m, k), generator=generator)]
        b = values[torch.randint(0, len(values), (planes, n, k), generator=generator)]
    else:
        raise ValueError(f"unknown probe {kind!r}; known: {PLANE_PROBES}")
    coefficients = torch.randint(1, _PLANE_MODULUS, (planes,), generator=generator).tolist()
    return a, b, coefficients, _PLANE_MODULUS, digits


def _probes(family, shape, seed, device):
    """(kind, probe on device, exact result on the CPU or None) for every probe of the family."""
    if family.name.startswith("tc_sum."):
        dtype = TC_SUM_TYPES[family.operand]
        for number, kind in enumerate(PROBES):
            x = tc_sum_probe(kind, dtype, shape, seed * len(PROBES) + number)
            yield kind, x.to(device), _tc_sum_exact(x)
        return

    for number, kind in enumerate(PLANE_PROBES):
        a, b, coefficients, modulus, digits = plane_gemm_probe(kind, family.operand, shape,
                                                               seed * len(PLANE_PROBES) + number)
        yield kind, (a.to(device), b.to(device), coefficients, modulus, digits), reference_modular_matmul(
            a, b, coefficients, modulus)


def _default_shape(family, device):
    if family.name.startswith("tc_sum."):
        # Two whole segments of the longest configuration and a ragged tail: every tree level is exercised.
        return (2, 5096) if device.type == "cpu" else (4, (1 << 20) + 12345)
    if device.type == "cpu":
        return (2, 24, 20, 300)
    # One plane for int8, the operand of the int8 engine's one-plane moduli: the Gluon kernel's configs
    # take no other launch (kernels.products.config_refusal); the tests multiply several int8 planes.
    return (1 if family.operand == "int8" else 3, 300, 260, 5000)


def _launch_config(name, index, seed, shape, device):
    """Outputs (on the CPU) of configuration `index` of family `name` on each of its probes.  Top level, so a
    worker process can run it: compiling is what costs, and workers compile configurations in parallel."""
    device = torch.device(device)
    family = next(f for f in families(target_for(device)) if f.name == name)
    probes = _probes(family, shape or _default_shape(family, device), seed, device)
    return [family.launch(probe, family.configs[index]).cpu() for _, probe, _ in probes]


def _judge(family, device, expected, outputs_by_config):
    """The report of check_family from the probes' (kind, exact result or None) and every configuration's
    outputs (outputs_by_config[config][probe])."""
    claimed = classes(family)
    observed, violations, differing = {}, [], set()
    for number, (kind, exact) in enumerate(expected):
        outputs = [per_config[number] for per_config in outputs_by_config]
        groups = _groups(outputs)
        observed[kind] = groups
        for cls in claimed:
            if not any(set(cls) <= set(g) for g in groups):
                violations.append(f"{kind}: class {cls} split into {[g for g in groups if set(g) & set(cls)]}")
        for (i, ci), (j, cj) in itertools.combinations(enumerate(claimed), 2):
            if not any(set(ci) | set(cj) <= set(g) for g in groups):
                differing.add((i, j))
        if exact is not None:
            wrong = [i for i, out in enumerate(outputs) if not _same_bits(out, exact.to(out.dtype))]
            violations += [f"{kind}: config {i} is not the exact result" for i in wrong]
    pairs = list(itertools.combinations(range(len(claimed)), 2))
    return {
        "sound": not violations,
        "target": target_for(device),
        "classes": claimed,
        "observed": observed,
        "violations": violations,
        "classes_seen_to_differ": [list(p) for p in pairs if p in differing],
        "classes_not_seen_to_differ": [list(p) for p in pairs if p not in differing],
    }


def launchable(family, device):
    """Whether this process can launch `family` on `device`: Triton's interpreter runs tl.dot_scaled
    (the e2m1 plane GEMM) from 3.8 on."""
    plane_gemm = family.name.startswith("modular_matmul.")
    return torch.device(device).type != "cpu" or not plane_gemm or family.operand in INTERPRETER_OPERANDS


def check_family(family, device, seed, shape=None):
    """Run every configuration of `family` on its probes drawn from `seed` on `device`."""
    device = torch.device(device)
    probes = list(_probes(family, shape or _default_shape(family, device), seed, device))
    outputs = [[family.launch(probe, config).cpu() for _, probe, _ in probes] for config in family.configs]
    return _judge(family, device, [(kind, exact) for kind, _, exact in probes], outputs)


def run_checks(names=None, seed=0, device=None, shape=None, jobs=1, report=None):
    """Check the named kernel families (all when None) on `device` (CUDA when available, else the
    interpreter on CPU) with probes drawn from `seed`; `shape` overrides every family's probe shape.
    jobs > 1 launches each configuration in one of that many worker processes, which compile in
    parallel (the same launches and comparisons, sooner).  report(name, entry) is called as each family
    is judged.  Returns {name: report}; report["sound"] is False when a claimed class split or an exact
    result was wrong."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    known = {f.name: f for f in families(target_for(device))}
    names = [n for n, f in known.items() if launchable(f, device)] if names is None else list(names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no dynamic check for {unknown}; checkable kernels: {sorted(known)}")
    results = {}

    def judged(name, entry):
        results[name] = entry
        if report is not None:
            report(name, entry)

    if jobs <= 1:
        for name in names:
            judged(name, check_family(known[name], device, seed, shape))
        return results
    # Spawned, not forked: a forked child cannot use the parent's CUDA context.
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        pending = {name: [pool.submit(_launch_config, name, i, seed, shape, str(device))
                          for i in range(len(known[name].configs))] for name in names}
        # Judged in submission order, each as soon as its last configuration is back.
        for name, futures in pending.items():
            family = known[name]
            expected = [(kind, exact) for kind, _, exact in
                        _probes(family, shape or _default_shape(family, device), seed, "cpu")]
            judged(name, _judge(family, device, expected, [f.result() for f in futures]))
    return {name: results[name] for name in names}
