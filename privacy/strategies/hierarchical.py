"""``hierarchical``: a b-ary tree of range sums on every long axis, Kronecker least squares.

For tables with long dimensions (a day of the year, a postcode prefix, an age in years over a
wide range) a range on that axis sums hundreds of noisy identity cells; a tree answers it from
O(b·log_b n) block sums instead (Hay et al., VLDB 2010). Branching is chosen per axis from its
length alone (`privacy.estimation.hierarchy.choose_branching`); an axis shorter than about 200 values stays
identity, so on short-axis cubes this strategy *is* ``identity``.

Mechanism. Release Y = (A_1 ⊗ … ⊗ A_d) x + noise, every entry of Y with discrete Laplace noise of
scale Δ·Π L_i/ε (grid sampler). Sensitivity: one row changes one base cell by at most Δ (the
caller's L1 sensitivity), and that cell is in exactly L_i blocks on each axis i, so Y's L1
sensitivity is Δ·Π L_i, spread over Π L_i coordinates (the sampler's rounding adds one grid unit per
moved coordinate, so the release states both); ε is this aggregate's share of the build. Post-processing only from here:
x̂ = (A_1⁺ ⊗ … ⊗ A_d⁺) Y, applied axis by axis (`hierarchy.apply_per_axis`), exact on noise-free Y.

Error, exactly: covariance σ²·⊗(A_iᵀA_i)⁻¹ with σ² the per-entry variance (`KroneckerError`,
O(d) per box). No non-negativity step, so answers stay unbiased and the bars exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from privacy.accounting.currencies import Budget, Mechanism, as_budget, mechanism
from privacy.estimation import hierarchy
from privacy.estimation.error import KroneckerError, VarianceModel
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy


class HierarchicalStrategy(MeasurementStrategy):
    name = "hierarchical"

    def __init__(self, branching: Sequence[hierarchy.Branching] | None = None) -> None:
        """``branching`` overrides the per-axis choice (tests, experiments); None: chosen per axis."""
        self.branching = None if branching is None else tuple(branching)

    def branchings(self, shape: tuple[int, ...]) -> tuple[hierarchy.Branching, ...]:
        if self.branching is not None:
            if len(self.branching) != len(shape):
                raise ValueError(f"branching {self.branching} does not match a cube of {len(shape)} axes")
            return self.branching
        return tuple(hierarchy.choose_branching(n) for n in shape)

    def mechanism(
        self, shape: tuple[int, ...], sensitivity: float, epsilon: float | Budget, coordinates: int = 1
    ) -> tuple[tuple[hierarchy.Branching, ...], list[int], Mechanism]:
        """(branching, levels per axis, the release's mechanism): one row moves Π L_i entries of Y
        (one tree block per level per axis), each by ≤ Δ — L1 sensitivity Δ·Π L_i over Π L_i
        coordinates (times ``coordinates`` base cells for a privacy unit of several rows). In L2:
        a unit's rows may all share one base cell, moving each of its Π L_i blocks by the whole Δ,
        so ‖·‖₂ ≤ Δ·√(Π L_i) (the Gaussian's calibration)."""
        branching = self.branchings(shape)
        levels = [hierarchy.levels(n, b) for n, b in zip(shape, branching)]
        k = math.prod(levels)
        return (
            branching,
            levels,
            mechanism(sensitivity * k, epsilon, k * coordinates, l2_sensitivity=sensitivity * math.sqrt(k)),
        )

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        return [self.mechanism(tuple(shape), sensitivity, budget, coordinates)[2]]

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        branching, _, mechanism = self.mechanism(tuple(shape), sensitivity, epsilon, coordinates)
        return KroneckerError(mechanism.variance, tuple(shape), branching)

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
        shape = tuple(true.shape)
        branching, levels, mechanism = self.mechanism(shape, sensitivity, epsilon, coordinates)
        released = mechanism.release(
            hierarchy.apply_per_axis(true, hierarchy.measure_matrices(shape, branching)), source
        )
        estimate = hierarchy.apply_per_axis(released, hierarchy.least_squares_matrices(shape, branching))
        return Measurement(
            noisy=estimate,
            error=KroneckerError(mechanism.variance, shape, branching),
            epsilon=as_budget(epsilon).amount,
            sensitivity=sensitivity,
            noise_scale=mechanism.scale,
            details={
                "hierarchical": {
                    "branching": list(branching),
                    "levels": levels,
                    "release_sensitivity": mechanism.sensitivity,
                }
            },
        )
