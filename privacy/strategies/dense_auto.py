"""``auto`` on a dense cube: ``pairwise`` or ``marginals``, chosen from a charged noisy total.

Why not always one of them (bench/dense_bars.py, UCI Adult as a 5-column table, 38,400 cells,
48,842 rows, COUNT with all of ε; MAE on random ranges constraining k columns; results
bench/results/dense_bars*.md, measured after the log-linear fit was made to converge):

* ``pairwise`` (1- and 2-way marginals, a log-linear model for the rest) is the most accurate on
  ranges over two columns at every ε (k = 2: 27.3 at ε = 1, marginals 90.9, identity 150.0) and on
  more columns while the noise dominates (k = 5: 24.8 at ε = 1, marginals 35.7). Its answers on more
  columns carry the model's *bias* — the data's 3- to 5-way interactions are not a pairwise
  model's — which grows with the rows and which no budget removes (k = 5: 17.5 at ε = 10), and its
  bars there span the Fréchet bounds (wide: 2,298 at k = 5, ε = 1, against marginals' 174).
* ``marginals`` (the base cuboid with the 1-/2-way marginals, least squares) is unbiased, with exact
  bars: k = 5 at identity's error (3.6 at ε = 10).

Which one wins depends on how much signal each cell holds for its noise: the model's bias is a
fixed fraction of the rows, the base cuboid's noise a fixed multiple of Δ/ε per cell. Measured on
Adult-5 (≈ 1.27 rows per declared cell, so signal ≈ 1.25·ε), marginals wins 5-column ranges from a
signal of ≈ 2.3 per cell (ε ≈ 1.8), 3-column ones from ≈ 9 (ε ≈ 7), 2-column ones never; the mean
over 2, 3 and 5 columns crosses at ≈ 7.7. `SIGNAL_PER_CELL` = 4 lies between: below it pairwise is
at most 1.5× worse on five columns while 2–3× better on two and three. On PRIMA's Normal 30^4
(100,000 rows over 810,000 cells: ≈ 0.1 per cell at ε = 1), where the model fits, pairwise wins
everywhere (bench/crossover.py). (Before the fit converged, its 3–5-column answers carried the
optimiser's error too, and the threshold was 0.75.)

So the build first releases the aggregate's total with `PILOT_SHARE` of its ε (Laplace; one
neighbour moves the total by at most the cuboid's L1 sensitivity Δ, one coordinate), computes the
signal per cell from that noisy total and the rest of ε, and measures the cuboid with
``marginals`` at or above `SIGNAL_PER_CELL`, ``pairwise`` below, with the rest of ε. The choice is
a function of a charged DP release and public facts only; the noisy total and the choice are
public (the build's details). Total ε spent: exactly the aggregate's share.

Where ``pairwise`` would measure the cube as ``marginals`` anyway (`PairwiseStrategy.unmodelled`:
fewer than 3 axes, past the model's size, a signed SUM, a class axis under a workload — public facts
of the shape and the declaration), there is nothing to choose: ``marginals`` gets the whole share and
no pilot is spent (it was 2 % of such a release's budget).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget, mechanism
from privacy.estimation.error import VarianceModel, WorseOf
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.cuboid_selection import SelectionPlan
from privacy.strategies.marginals import MarginalsStrategy
from privacy.strategies.pairwise import PairwiseStrategy

PILOT_SHARE = 0.02  # of the aggregate's ε, spent on its noisy total
SIGNAL_PER_CELL = 4.0  # ε·|total|/(Δ·cells) at which the base cuboid is measured (bench/dense_bars.py --sweep)


class DenseAutoStrategy(MeasurementStrategy):
    name = "auto"

    def __init__(
        self,
        pairwise: PairwiseStrategy | None = None,
        declared_share: float = 1.0,
        marginals: MarginalsStrategy | None = None,
    ) -> None:
        """``declared_share``: the share of the cube's cells that are declared values (public). The
        outside cells every axis holds (below/above/NULL/other) hold few rows, and
        `SIGNAL_PER_CELL` is measured without them (Adult-5 has 4.9× as many cells with them)."""
        self.candidates = (pairwise or PairwiseStrategy(), marginals or MarginalsStrategy())
        self.declared_share = declared_share

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        """Before the build the choice is unknown: the larger of the two candidates' stddevs (none to
        make where pairwise falls back: `marginals`' own)."""
        if self.candidates[0].unmodelled(tuple(shape), nonnegative):
            return self.candidates[1].expected_error(shape, sensitivity, epsilon, coordinates=coordinates)
        rest = epsilon * (1 - PILOT_SHARE)
        first, second = (
            s.expected_error(shape, sensitivity, rest, nonnegative=nonnegative, coordinates=coordinates)
            for s in self.candidates
        )
        return WorseOf(first, second)

    def for_aggregate(self, count: bool) -> MeasurementStrategy:
        """Its pairwise candidate's choice: COUNTs pick triples, SUMs do not (`PairwiseStrategy.for_aggregate`)."""
        pairwise = self.candidates[0].for_aggregate(count)
        if pairwise is self.candidates[0]:
            return self
        assert isinstance(pairwise, PairwiseStrategy)
        return DenseAutoStrategy(pairwise, self.declared_share, self.candidates[1])

    def selection(self, shape: tuple[int, ...], budget: float | Budget, nonnegative: bool) -> SelectionPlan | None:
        """What the adaptive step spends if the pilot chooses ``pairwise`` (the rest of the budget's
        plan; nothing where pairwise falls back to marginals)."""
        if self.candidates[0].unmodelled(tuple(shape), nonnegative):
            return None
        return self.candidates[0].selection(shape, as_budget(budget) * (1 - PILOT_SHARE), nonnegative)

    def part_rho(
        self,
        part: float | Budget,
        shape: tuple[int, ...],
        sensitivity: float,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> float:
        """Under pure ε the pilot's tight ρ plus the costlier candidate's (the choice is made after the
        charge), the pairwise candidate's draws included; under ρ the amount."""
        b = as_budget(part)
        if b.gaussian:
            return b.amount
        if self.candidates[0].unmodelled(tuple(shape), nonnegative):
            return self.candidates[1].part_rho(b, shape, sensitivity, coordinates, nonnegative)
        pilot = mechanism(sensitivity, b * PILOT_SHARE, 1).rho
        rest = b * (1 - PILOT_SHARE)
        return pilot + max(c.part_rho(rest, shape, sensitivity, coordinates, nonnegative) for c in self.candidates)

    def stored_bytes_per_cell(self, shape: tuple[int, ...]) -> int:
        return max(s.stored_bytes_per_cell(shape) for s in self.candidates)

    def fit_seconds(self, shape: tuple[int, ...]) -> float:
        return max(s.fit_seconds(shape) for s in self.candidates)  # (the choice is made after the charge)

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        """The pilot, then whichever candidate's releases cost more ρ (the choice is made from the
        pilot's noisy total, after the charge, so the charge covers either); no pilot where pairwise
        falls back to marginals."""
        if self.candidates[0].unmodelled(tuple(shape), nonnegative):
            return self.candidates[1].releases(shape, sensitivity, budget, coordinates, nonnegative)
        rest = budget * (1 - PILOT_SHARE)
        options = [s.releases(shape, sensitivity, rest, coordinates, nonnegative) for s in self.candidates]
        costly = max(options, key=lambda ms: sum(m.rho for m in ms))
        return [mechanism(sensitivity, budget * PILOT_SHARE, 1)] + costly

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
        share = as_budget(epsilon)
        why = self.candidates[0].unmodelled(tuple(true.shape), nonnegative)
        if why:  # nothing to choose: marginals with the whole share, no pilot
            m = self.candidates[1].measure(
                true, sensitivity, epsilon, source, nonnegative=nonnegative, coordinates=coordinates
            )
            chose = {"chose": self.candidates[1].name, "rule": f"pairwise would measure it as marginals: {why}"}
            return dataclasses.replace(m, details={**m.details, "auto": chose})
        pilot = mechanism(sensitivity, share * PILOT_SHARE, 1)
        total = float(pilot.release(np.array([float(true.sum())]), source)[0])
        rest = share * (1 - PILOT_SHARE)
        # ε·|total|/(Δ·cells) for Laplace; in general √2·|total|/(cells·sd), sd the noise of one release of
        # the rest at Δ (Laplace: sd = √2·Δ/ε, the same number), so a ρ budget is judged by its own noise
        whole = mechanism(sensitivity, rest, 1)
        signal = math.sqrt(2.0) * abs(total) / (math.prod(true.shape) * self.declared_share * math.sqrt(whole.variance))
        chosen = self.candidates[1] if signal >= SIGNAL_PER_CELL else self.candidates[0]
        m = chosen.measure(true, sensitivity, rest, source, nonnegative=nonnegative, coordinates=coordinates)
        facts = {
            "chose": chosen.name,
            "noisy_total": round(total, 3),
            f"pilot_{share.currency}": (share * PILOT_SHARE).amount,
            "signal_per_cell": round(signal, 4),
            "threshold": SIGNAL_PER_CELL,
            "rule": f"marginals when √2·|noisy total|/(declared cells·noise sd) ≥ {SIGNAL_PER_CELL} (under ε: "
            "ε·|noisy total|/(Δ·declared cells)), else pairwise",
        }
        return dataclasses.replace(m, epsilon=share.amount, details={**m.details, "auto": facts})
