"""Bit-equivalence classes of kernel configurations.

A class is sound when its configurations return the same bits on every input.  Integer kernels whose
every partial sum is bounded inside its exact range return the exact result under every configuration:
one class, the bound being the proof.  Float kernels are split wherever their descriptors differ.
"""

import dataclasses
from collections.abc import Callable

import torch

from kernels import products
from kernels.check.descriptor import TARGETS, Descriptor, describe_plane_gemm, describe_tc_sum
from kernels.tc_sum import TC_SUM_CONFIGS, segment_length, tc_sum

__all__ = ["TC_SUM_TYPES", "Family", "families", "classes", "classes_report", "equivalent_configs", "proven_classes"]

TC_SUM_TYPES = {
    "int8": torch.int8,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_INT64_ROW_LIMIT = 2**63 // 128  # int8 values per row before the int64 tree could overflow


@dataclasses.dataclass(frozen=True)
class Family:
    """One kernel launcher on one operand type: its configurations and how each reduces."""

    name: str
    configs: tuple[dict, ...]
    descriptors: tuple[Descriptor, ...]
    exact_reason: str | None  # the partial-sum bound that makes every configuration exact, if any
    float_reason: str | None  # why float configurations were split as they were
    operand: str  # input type: a torch dtype name for tc_sum, a plane-GEMM operand name for modular_matmul
    launch: Callable  # launch(probe, config) -> tensor, where probe comes from kernels.check.run


def _tc_sum_family(type_name, target):

    dtype = TC_SUM_TYPES[type_name]
    descriptors = tuple(describe_tc_sum(c, dtype, target) for c in TC_SUM_CONFIGS)
    longest = max(segment_length(c) for c in TC_SUM_CONFIGS)
    exact_reason = float_reason = None
    if dtype == torch.int8:
        exact_reason = (
            f"integer kernel: a segment holds at most {longest} int8 values, so every int32 partial sum lies "
            f"within +-{longest * 128} < 2**31; the int64 tree over a row of n values stays within +-128*n < 2**63 "
            f"for n < {_INT64_ROW_LIMIT}: every configuration returns the exact integer sum"
        )
    else:
        moves = (
            "BLOCK_M, num_warps and num_stages only move whole segments between programs" if target == "sm_90" else
            "the interpreter folds each segment one element at a time, so only the segment length matters"
        )
        float_reason = (
            "fp32 rounding depends on the order: configurations are split by descriptor (MMA instruction and k, "
            f"operand conversion, promotion window, segment length); {moves}.  Integer-valued input with every "
            "row's sum(|x|) < 2**24 (tc_sum(exact=True)) is summed exactly by every configuration"
        )
    return Family(
        name=f"tc_sum.{type_name}",
        configs=tuple(dict(c) for c in TC_SUM_CONFIGS),
        descriptors=descriptors,
        exact_reason=exact_reason,
        float_reason=float_reason,
        operand=type_name,
        launch=lambda x, config: tc_sum(x, **config),
    )


def _plane_gemm_families(target):
    """The plane-GEMM kernels, one family per operand type of kernels.products.CONFIGS."""
    found = []
    for operand, listed in products.CONFIGS.items():
        # The Gluon kernel compiles for sm_90 alone; the interpreter cannot run it.
        entries = [c for c in listed if target == "sm_90" or not c.gluon]

        def launch(probe, config, operand=operand):
            a, b, coefficients, modulus, digits = probe
            return products.modular_matmul(a, b, coefficients, modulus, digits=digits, operand=operand,
                                           config=products.PlaneGemmConfig(**config))

        found.append(Family(
            name=f"modular_matmul.{operand}",
            configs=tuple(dataclasses.asdict(c) for c in entries),
            descriptors=tuple(describe_plane_gemm(operand, c, target) for c in entries),
            exact_reason=(
                "integer kernel: the launcher (plan_chunk) cuts K into chunks with K_chunk*max|P*Q| <= 2**31-1 "
                "(int32) or <= 2**24 (fp32) and, for FP8 wgmma, window*max|P*Q| < 2**14, raising ValueError "
                "otherwise; each exact chunk is folded mod m in int64 (|r + part*c| < 2**63), so every "
                "configuration returns the exact residue.  Configs are PlaneGemmConfig fields: launch with "
                "config=PlaneGemmConfig(**configs[i])"
            ),
            float_reason=None,
            operand=operand,
            launch=launch,
        ))
    return found


def families(target="sm_90"):
    """Every kernel family the checker knows, described for `target`."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {TARGETS}")
    return [_tc_sum_family(t, target) for t in TC_SUM_TYPES] + _plane_gemm_families(target)


def classes(family):
    """Partition of the family's configuration indices into bit-equivalence classes."""
    if family.exact_reason is not None:
        return [list(range(len(family.configs)))]
    groups = {}
    for index, descriptor in enumerate(family.descriptors):
        groups.setdefault(descriptor, []).append(index)
    return list(groups.values())


def classes_report(target="sm_90"):
    """The `ozaki-check classes --json` document."""
    return {
        "kernels": {
            f.name: {
                "exact": f.exact_reason is not None,
                "configs": [dict(c) for c in f.configs],
                "classes": classes(f),
                "reason": f.exact_reason or f.float_reason,
            }
            for f in families(target)
        }
    }


def equivalent_configs(name, config, target="sm_90"):
    """The configurations of kernel `name` proven to give the same bits as `config` (itself included):
    the only ones an autotuner may choose between without changing an answer."""
    family = next((f for f in families(target) if f.name == name), None)
    if family is None:
        raise ValueError(f"unknown kernel {name!r}; known: {[f.name for f in families(target)]}")
    if config not in family.configs:
        raise ValueError(f"{config!r} is not a configuration of {name}: pick one from its configs list")
    index = family.configs.index(config)
    return [family.configs[i] for i in next(c for c in classes(family) if index in c)]


def proven_classes():
    """What the autotuner reads (``kernels/classes.json``, written by ``ozaki-check classes --write``):
    per target and kernel, its configurations and their classes as lists of indices."""
    return {
        target: {f.name: {"configs": [dict(c) for c in f.configs], "classes": classes(f)} for f in families(target)}
        for target in TARGETS
    }
