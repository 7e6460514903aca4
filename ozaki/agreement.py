"""Where a plan's statistics become those of the whole product.

A plan decides from statistics of its operands (stage 1's read, :mod:`ozaki.reading`): per row of A
and column of B, reductions over K (extents, sums, code products); over all rows or all
columns, minima and maxima (the "fp64" levels, p and q, the guard).  On one device every
operand is whole and each statistic already is the whole product's.  When the operands are
shards of a product spread over a device mesh (:mod:`ozaki.distributed`), each reduction
over a split axis becomes a collective, and every rank then makes the plan one device would
make of the gathered matrices.

:class:`Agreement` is the one-device case: every method returns what it is given, so the
one-device plan is computed exactly as without an agreement, at no cost.  Each method names the reduction
the caller applies; every one of them is exact (integer sums, minima and maxima), so the
agreed statistic is the whole product's bit for bit, whatever order the ranks combine in.
"""

from __future__ import annotations

from typing import Sequence

import torch

from kernels.scaling import Extents

__all__ = ["ONE_DEVICE", "Agreement", "extremes"]


class Agreement:
    """The reductions a plan's statistics go through; on one device (this class) none."""

    def whole_shape(self, m: int, k: int, n: int) -> tuple[int, int, int]:
        """(M, K, N) of the whole product, from those of this device's operands."""
        return m, k, n

    def extents(self, extents_a: Extents, extents_b: Extents) -> tuple[Extents, Extents]:
        """The extents of whole rows of A and of Bᵀ from those of this device's part of their
        K entries: the maximum of the row maxima, the minimum of the lowest set bits."""
        return extents_a, extents_b

    def sum_over_k(self, partial: torch.Tensor, bound: int) -> torch.Tensor:
        """Σ over K of non-negative integers from this device's partial sums; ``bound`` is the
        largest the whole sum can be (it picks the exact integer type the sums travel in)."""
        return partial

    def min_over_rows(self, values: torch.Tensor) -> torch.Tensor:
        """Per column of B, the minimum over every row of A from that over this device's rows."""
        return values

    def min_over_columns(self, values: torch.Tensor) -> torch.Tensor:
        """Per row of A, the minimum over every column of B from that over this device's columns."""
        return values

    def agree(self, op: str, values: torch.Tensor) -> torch.Tensor:
        """Integers (int64, on the host) reduced by ``op`` ("max" or "min") over every device:
        the whole product's value of a maximum or minimum over lines (the same on devices that
        hold the same lines)."""
        return values


ONE_DEVICE = Agreement()


def extremes(op: str, groups: Sequence[Sequence[torch.Tensor]], empty: int) -> list[int]:
    """For each group of integer tensors, the largest (``op="max"``) or smallest (``"min"``)
    of all their entries, ``empty`` for a group without any (a device may hold no line of a
    side; ``empty`` is the identity: 0 below non-negative maxima, a bound above every minimum).
    The values come back to the host in one transfer: one synchronisation for all of them,
    where one per value would stall the device once each."""
    if op not in ("max", "min"):
        raise ValueError(f"op must be 'max' or 'min', got {op!r}")
    reduce, pick = (torch.amax, max) if op == "max" else (torch.amin, min)
    parts, owners = [], []
    for index, group in enumerate(groups):
        for x in group:
            if x.numel():
                extreme = reduce(x)
                # A launch per cast costs the host more than the reduction: only where needed.
                parts.append(extreme if extreme.dtype == torch.int64 else extreme.to(torch.int64))
                owners.append(index)
    result = [empty] * len(groups)
    for owner, value in zip(owners, torch.stack(parts).tolist() if parts else []):
        result[owner] = pick(result[owner], value)
    return result
