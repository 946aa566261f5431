"""``identity``: Laplace noise on every base cell — the PRIMA paper's BASE (§6.1).

Sensitivity: the caller's L1 sensitivity of the whole cuboid (1 for COUNT, max(|lo|,|hi|) for a
clipped SUM; a row touches one cell). ε: the share of the build's budget given to this aggregate.
Noise: discrete Laplace on the grid of `privacy.mechanisms.sampler.GridLaplace`, scale ≈ sensitivity/ε; under a ρ budget
the discrete Gaussian of `privacy.mechanisms.discrete_gaussian.GridGaussian`, σ ≈ sensitivity/√(2ρ) (L2 = L1: one cell).
Error: independent, equal variance per cell — exact (`UniformCellError`).
"""

from __future__ import annotations

from typing import Any

from privacy.accounting.currencies import Budget, as_budget, mechanism
from privacy.estimation.error import UniformCellError, VarianceModel
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy


class IdentityStrategy(MeasurementStrategy):
    name = "identity"

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        return UniformCellError(mechanism(sensitivity, epsilon, coordinates).variance)

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
        release = mechanism(sensitivity, epsilon, coordinates)
        noisy = release.release(true, source)
        return Measurement(
            noisy=noisy,
            error=UniformCellError(release.variance),
            epsilon=as_budget(epsilon).amount,
            sensitivity=sensitivity,
            noise_scale=release.scale,
        )
