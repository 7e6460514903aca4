"""The GPU benchmarks' operands: the record's phi family, (rand − 0.5)·exp(phi·randn) in float64.

The scripts beside this one import it (they run as ``python3 benchmarks/<script>.py``, which puts
this folder on the path); the same seed gives the same matrices as the record's earlier runs."""

from __future__ import annotations

import torch


def phi_matrix(shape: tuple[int, ...], generator: torch.Generator, phi: float = 0.5) -> torch.Tensor:
    """One float64 matrix on the generator's device, drawn uniform then normal, in that order."""
    uniform = torch.rand(shape, generator=generator, device=generator.device, dtype=torch.float64)
    normal = torch.randn(shape, generator=generator, device=generator.device, dtype=torch.float64)
    return (uniform - 0.5) * torch.exp(phi * normal)
