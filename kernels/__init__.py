from kernels.autotune import best_config, tuned_plane_config
from kernels.decode import decode_residues
from kernels.encode import encode_planes
from kernels.extents import row_extents_kernel
from kernels.modular import grouped_modular_matmul, modular_matmul, reference_modular_matmul
from kernels.tc_sum import TC_SUM_CONFIGS, tc_sum, tc_sum_reference

__all__ = [
    "TC_SUM_CONFIGS",
    "tc_sum",
    "tc_sum_reference",
    "grouped_modular_matmul",
    "modular_matmul",
    "reference_modular_matmul",
    "decode_residues",
    "encode_planes",
    "row_extents_kernel",
    "best_config",
    "tuned_plane_config",
]
