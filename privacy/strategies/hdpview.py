"""``hdpview``: HDPView's data-aware p-view (Kato et al. VLDB'22; the mechanism is `privacy.mechanisms.hdpview_partition`).

ε per step, stated here. A build's aggregates arrive COUNT first (`engine.builds.steps`):

* COUNT, share ε_c: the partition spends ε_r = 0.9·ε_c (random converge γ·ε_r, random cuts
  (1 − γ)·ε_r, §5.4), the perturbation ε_p = 0.1·ε_c: each block's count + Lap(1/ε_p), one block
  per row (disjoint blocks, sensitivity 1, one coordinate);
* SUM(m), share ε_m: on the *same* blocks (the partition is already released: post-processing),
  each block's clipped SUM + Lap(Δ/ε_m) (disjoint blocks: one coordinate moves by ≤ Δ). A signed
  measure needs nothing special. (The measure-aware partition the paper's authors suggest — AE over
  count and sum/Δ — is not built: the partition is fixed on COUNT.)

Nothing un-noised is kept: the view holds each block's cell ranges (released) and noisy totals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, as_budget
from privacy.mechanisms import hdpview_partition as hdpview
from privacy.mechanisms.hdpview_partition import Partition, PView
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy, NonzeroCells  # noqa: F401 (re-exported)


@dataclass
class BlockRelease:
    """One aggregate's p-view: block ranges and noisy totals, and the noise variance per block."""

    lo: np.ndarray
    hi: np.ndarray
    values: np.ndarray
    block_variance: float

    def view(self, key: str) -> PView:
        return PView(self.lo, self.hi, {key: self.values}, {key: self.block_variance})

    def arrays(self) -> dict[str, np.ndarray]:
        return {"lo": self.lo, "hi": self.hi, "values": self.values}

    def to_json(self) -> dict[str, Any]:
        return {"kind": "hdpview", "block_variance": self.block_variance, "blocks": int(len(self.lo))}

    def variance(self, selection: Sequence[Any]) -> float:
        return self.view("v").variance("v", selection)


class HDPViewStrategy(MeasurementStrategy):
    name = "hdpview"
    reads = "cells"
    synopsis = "blocks"
    axis_refusal = (
        "HDPView's blocks are cut by the data on COUNT(*); a class axis would need its own partition, "
        "which the paper does not define"
    )

    laplace_only = False  # the partition uses the exponential mechanism: ρ = ε²/2 under a pure-ε budget
    independent_aggregates = False  # COUNT's measurement releases the partition every other one uses

    def ledger_parts(self, what: str, epsilon: float) -> list[tuple[float, str]]:
        """COUNT(*)'s share pays for HDPView's two steps: the partition (`hdpview.RATIO` of it) and the
        block totals; every other aggregate is measured on that partition."""
        if what != "COUNT(*)":
            return super().ledger_parts(what, epsilon)
        return [
            (epsilon * hdpview.RATIO, "cube partition (hdpview): random converge and cuts on COUNT(*)"),
            (epsilon - epsilon * hdpview.RATIO, "cube measurement (hdpview): COUNT(*) per block"),
        ]

    def __init__(self) -> None:
        self._partition: Partition | None = None  # released by the COUNT measurement of this build
        self._cells: np.ndarray | None = None  # the non-empty cells it partitioned (same object per build)

    def stored_bytes(self, shape: tuple[int, ...], aggregates: int) -> int:
        """At most `hdpview.MAX_BLOCKS` blocks: two int64 corners and one float64 total per aggregate."""
        return hdpview.MAX_BLOCKS * aggregates * (16 * len(shape) + 8)

    def measure(
        self,
        true: Any,
        sensitivity: float,
        epsilon: float | Budget,
        source: RandomSource,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> Measurement:
        """The first call on a build's cells (COUNT, Δ = 1) partitions and perturbs; later calls on the
        same cells (the SUMs: `engine.builds.steps` passes one coordinate array to all) perturb on its blocks.
        One row per unit only: the partition's quality sensitivity (Thm 3) assumes it."""
        if coordinates != 1:
            raise ValueError("hdpview is calibrated to one row per unit of privacy (no privacy_unit)")
        pure = as_budget(epsilon).pure_epsilon  # pure-ε steps only: under ρ they run at ε = √(2ρ) (accounting)
        if isinstance(true, np.ndarray):  # library use and tests: a dense base cuboid
            coords = np.argwhere(true != 0)
            true = NonzeroCells(tuple(true.shape), coords, true[tuple(coords.T)])
        details: dict[str, Any]
        if self._partition is None or true.coords is not self._cells:
            self._cells = true.coords
            params = hdpview.Parameters.of(true.shape, pure)
            self._partition = hdpview.partition(true.coords, true.values / sensitivity, true.shape, params, source)
            share = params.epsilon_p
            details = {
                "epsilon_partition": params.epsilon_r,
                "epsilon_perturbation": params.epsilon_p,
                "kappa": params.kappa,
                "theta": params.theta,
                "blocks": int(len(self._partition.lo)),
                "max_depth": int(max(self._partition.depths)),
            }
        else:
            share = pure
            details = {"blocks": int(len(self._partition.lo)), "partition": "the COUNT's (post-processing)"}
        part = self._partition
        totals = hdpview.block_totals(part, true.values)
        noisy, variance = hdpview.perturb(totals, sensitivity, share, source)
        release = BlockRelease(part.lo, part.hi, noisy, variance)
        return Measurement(
            release,
            release,
            as_budget(epsilon).amount,
            sensitivity,
            math.sqrt(variance / 2),
            details={"hdpview": details},
        )
