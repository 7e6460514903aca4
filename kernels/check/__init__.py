"""Bitwise checker: reduction-order descriptors, equivalence classes, PTX and dynamic checks."""

from kernels.check.classes import Family, classes, classes_report, equivalent_configs, families, proven_classes
from kernels.check.descriptor import TARGETS, Descriptor, describe_plane_gemm, describe_tc_sum

__all__ = [
    "Descriptor",
    "Family",
    "TARGETS",
    "classes",
    "classes_report",
    "describe_plane_gemm",
    "describe_tc_sum",
    "equivalent_configs",
    "families",
    "proven_classes",
]
