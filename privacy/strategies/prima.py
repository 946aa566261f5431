"""``prima``: one noisy d-D base cuboid, read through a SCOPE prefix cube (PRIMA §5, Fig. 4 phases 3–4).

Mechanism (phase 3, "answering linear sum queries"): Laplace noise on every base cell, exactly as
``identity`` — sensitivity: the caller's L1 sensitivity of the cuboid (1 for COUNT, max(|lo|,|hi|)
of the released clip range for a SUM; a row touches one cell); ε: this aggregate's share. The
clipping (phases 1–2, CLASP) happens before, from its own charged histogram (`double_clipping`).

Post-processing (phase 4): `privacy.estimation.scope.scope_prefix` — per-axis distribution fits of the noisy
marginals, Eq. 14 with their product, consistency. No further privacy cost. SCOPE's consistency
(non-negative, non-decreasing prefix sums) is only true of non-negative aggregates, so for a SUM
whose clip range reaches below 0 the strategy keeps the plain prefix sums of the noisy cuboid
(= ``identity``) and says so in the build's details.

Error: `ScaledPrefixError` (measurement noise through Eq. 14, exact before the consistency step);
the error of the fitted shape is not in it and answers say so in their notes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from privacy.accounting.currencies import Budget
from privacy.estimation.error import ScaledPrefixError, UniformCellError, VarianceModel
from privacy.estimation.scope import scope_prefix
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.identity import IdentityStrategy


class PrimaStrategy(MeasurementStrategy):
    name = "prima"
    axis_refusal = (
        "SCOPE's fitted prefix shape is not a linear release of the class sums, so their bars and "
        "truncation would not hold"
    )

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        """The base cuboid's noise (SCOPE rescales it per answer, and its fit error is extra)."""
        return IdentityStrategy().expected_error(shape, sensitivity, epsilon, coordinates=coordinates)

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
        base = IdentityStrategy().measure(
            true, sensitivity, epsilon, source, coordinates=coordinates
        )  # the base cuboid
        if not nonnegative:
            return dataclasses.replace(base, details={"scope": "skipped: signed clip range, plain prefix sums"})
        prefix, fits = scope_prefix(base.noisy)
        ratios = tuple((0.0, *map(float, fit.ratio)) for fit in fits)  # index 0: the exact zero slice
        details = {
            "scope": [
                {"family": f.family, "params": [round(p, 6) for p in f.params], "ks": round(f.ks, 6)} for f in fits
            ]
        }
        assert isinstance(base.error, UniformCellError)  # identity's: one variance for every cell
        error = ScaledPrefixError(base.error.cell_variance, ratios)
        return dataclasses.replace(base, error=error, prefix=prefix, details=details)
