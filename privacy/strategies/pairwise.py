"""``pairwise``: measure every 2-D marginal, fill in the higher-order interactions from a model.

Why. At ε ≈ 1 a 30^4 SUM cube with 10^5 rows has ~0.1 rows per cell: the base cuboid is almost
pure noise, and measuring it (``identity``, or the base share of ``marginals``) spends budget on
810,000 values whose noise every range then sums ("noise aggregation", PRIMA §5.5.3). The 2-D
marginals (900 cells each here) carry most of what range queries need, at a far better
signal-to-noise ratio. What they do not pin down — interactions among three or more axes — is
taken from the maximum-entropy log-linear model that fits them (Private-PGM's estimation step,
`privacy.estimation.loglinear`), which is positive and respects how densities combine.

Mechanism. For each pair S of axes we release y_S = M_S x + Lap(Δ/ε_S) with the grid sampler.
The shares ε_S/ε are chosen from the shape alone (`marginals.default_shares`: least-squares
variance of ranges on one and two axes), equal when the axes are. A row changes one cell of every marginal by at most Δ (1 for COUNT,
max(|lo|,|hi|) for a clipped SUM), so each release is ε_S-DP and sequential composition gives ε.

Post-processing (no privacy cost), in ANOVA terms (`privacy.estimation.lattice`):
1. the least-squares cuboid from the marginals (`reconstruct`): exact in every component with at
   most two mean-free axes, zero in the others (they are not identified);
2. the log-linear model x_m fitted to the same releases (`fit_loglinear`);
3. the estimate  x̂ = x_ls + Σ_{T unmeasured} P_T x_m  — measured structure (every T of ≤ 2 axes,
   and a picked triple's, below) from least squares, unmeasured structure from the model.
A query that constrains ≤ 2 axes, or the axes of a picked triple, therefore reads only least-squares
components (exact error); any other also reads the model (bootstrap-estimated error, `BootstrapModelError`).
The model is right when the data's higher-order interactions are those its pairs imply (e.g. a
multivariate normal) and biased otherwise; that bias is not in the error bar and answers say so.

Triples picked where the pairs are wrong (a table's default, ``select_rounds``; COUNTs only, on cubes
of 4 or more axes). The model of the pairs is blind to a 3-way interaction: on a 6-column census-
shaped table the finding "two same-sex children raise the chance of a third" (+6.75 points) came
out 0.00. So, as a wide table does (`privacy.strategies.cuboid_selection`, AIM's loop), the pairs
are released with 90 % of the aggregate's budget and fitted; every triple of ≤ 20,000 cells is
scored by how far the fitted model's table of it (AIM's M̂_S) is from the truth, less the noise a
measurement would add; one round per axis picks one by the exponential mechanism (1 %) and
measures it (9 %, split evenly); then everything is refitted. A pick is taken as measured — its
components go to least squares, and answers inside it read them with an exact bar — only where
its 3-way part beyond the model's table is mostly signal (`privacy.estimation.shrinkage.
mostly_signal`): on Adult-5, whose triples the pairs explain, picks taken regardless made 3-column
answers up to 3.1× worse; none passes there, and the build is the pairs' at 90 % of the budget. A
pick not taken is still released and charged; which were picked and taken are in the build's
details (``selected``, ``used``).

Fallbacks (public facts only): with fewer than 3 axes there is nothing to model, a SUM whose clip
range reaches below 0 is not a positive density, above `MAX_MODEL_CELLS` the fits would take
minutes, and under a workload a measure's class axis rides on every cuboid (3-D for a pair: the
fit and its order-2 split are for pairs): all four use ``marginals``, noted in the build's details.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget, release_all
from privacy.estimation.error import BootstrapModelError, MarginalLatticeError, VarianceModel
from privacy.estimation.lattice import (
    Axes,
    broadcast_sum,
    component_parts,
    identified,
    lambdas,
    least_squares_parts,
    marginal,
)
from privacy.estimation.loglinear import fit_loglinear
from privacy.estimation.prefix import prefix_sums
from privacy.estimation.shrinkage import mostly_signal
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import processes, progress, threads
from privacy.strategies import cuboid_selection
from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.cuboid_selection import SelectionPlan
from privacy.strategies.marginals import (
    MarginalsStrategy,
    default_shares,
    marginal_mechanisms,
    preview_lattice,
    release_marginals,
)
from privacy.strategies.workload import WorkloadQuery, applies, riding, workload_plan

# Bootstrap re-fits for the error bars of 3+-axis selections. 8, with the t-distribution's variance
# factor K/(K−2) in the stated variance (`BootstrapModelError.predictive`), covers like 16 without it
# did or better (bench/bootstrap_replicates.py) at half the stored replicates.
REPLICATES = 8
# L-BFGS steps. With the proportional-fitting start and the preconditioner (`privacy.estimation.loglinear`) the
# fit is at the minimiser by then (tests/test_pairwise.py: within 5 % of the noise at 144,000 cells),
# and a bootstrap refit, warm-started at the fitted potentials, needs far fewer: with 5 steps the
# bars cover as with 30 (bench/bootstrap_replicates.py, 100 builds × 60 boxes on log-linear cubes:
# 94.4 / 94.2 % against 94.7 / 94.3 %, intervals 0.5–0.7 % narrower).
FIT_ITERATIONS = 40
REFIT_ITERATIONS = 5
FIT_SHARE = (
    0.35  # of a pairwise measurement's time, for progress reports (40 fit steps + the start vs 8 × 5 refit steps)
)
MAX_MODEL_CELLS = 2_000_000  # above this the fits take minutes: such cubes are measured as marginals


def pairs(d: int) -> tuple[Axes, ...]:
    """Every 2-D marginal. (Adding the 1-D marginals, with the shares `default_shares` gives them,
    doubled the error of 4-D ranges on PRIMA's Normal and helped nowhere: they are implied.)"""
    return tuple(frozenset(c) for c in itertools.combinations(range(d), 2))


def estimate(
    shape: tuple[int, ...],
    cuboids: list[Axes],
    weights: list[float],
    measurements: list[np.ndarray],
    iterations: int,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps 1–3 of the module docstring: (x̂, the model x_m, the model's potentials)."""
    model, potentials = fit_loglinear(shape, cuboids, weights, measurements, iterations=iterations, start=start)
    return model + _low_order_correction(shape, cuboids, weights, measurements, model), model, potentials


def _low_order_correction(
    shape: tuple[int, ...], cuboids: list[Axes], weights: list[float], measurements: list[np.ndarray], model: np.ndarray
) -> np.ndarray:
    """x̂ − x_m = x_ls − Σ_{T measured} P_T x_m (step 3: x_m's measured components — every one of
    at most two axes, and a picked triple's — swapped for least squares'), as one broadcast sum of
    small arrays: no cube-sized x_ls or x_m split is formed."""
    linear = least_squares_parts(shape, cuboids, weights, measurements)
    assert linear is not None, "pairwise measures cuboids of ≤ 3 axes of a cube of ≥ 4 (`plan`, `unmodelled`)"
    return broadcast_sum(linear + [-p for p in component_parts(model, identified(cuboids))], shape)


def replica_error(
    model: np.ndarray,
    cuboids: list[Axes],
    weights: list[float],
    simulated: list[np.ndarray],
    iterations: int,
    start: np.ndarray,
) -> np.ndarray:
    """One bootstrap replicate's error x̂* − x_m as float32 prefix sums: the estimate refitted (warm,
    from the model's potentials) to the model's marginals plus simulated noise."""
    refit, _ = fit_loglinear(model.shape, cuboids, weights, simulated, iterations=iterations, start=start)
    error = _low_order_correction(model.shape, cuboids, weights, simulated, refit)  # x̂* − x_m*
    error += refit
    error -= model
    return prefix_sums(error).astype(np.float32, copy=False)


class PairwiseStrategy(MeasurementStrategy):
    name = "pairwise"

    def __init__(
        self,
        replicates: int = REPLICATES,
        refit_iterations: int = REFIT_ITERATIONS,
        workload: tuple[WorkloadQuery, ...] | None = None,
        select_rounds: int | None = 0,
        select_share: float = cuboid_selection.SHARE,
    ) -> None:
        """``workload``: the table's declared queries — the 1-D marginals are measured too, and the
        shares minimise those queries' variance (`privacy.strategies.workload`); None: every 2-D
        marginal at `default_shares`. ``select_rounds``: triples picked where the pair model is
        worst (`_select`; None: one per dimension, a table's default; 0: none, the library's
        default) with ``select_share`` of a COUNT's budget."""
        self.replicates = replicates
        self.refit_iterations = refit_iterations
        self.workload = workload
        self.select_rounds = select_rounds
        self.select_share = select_share

    def for_aggregate(self, count: bool) -> MeasurementStrategy:
        """COUNTs select triples; SUMs measure their pairs with the whole budget (as `cuboids` does:
        the COUNT's picks say where the 3-way structure is, and a SUM's pairs are what its 1- and
        2-column answers read)."""
        return cuboid_selection.counts_only(self, count)

    def selection(self, shape: tuple[int, ...], budget: float | Budget, nonnegative: bool) -> SelectionPlan | None:
        """The adaptive step's plan for an aggregate of this (public) shape, or None: no rounds, a
        cube the model does not fill (`unmodelled`), or one of 3 axes (its one triple is the cube)."""
        shape = tuple(shape)
        if self.select_rounds == 0 or len(shape) < 4 or self.unmodelled(shape, nonnegative):
            return None
        measured = [tuple(sorted(c)) for c in self.plan(shape, as_budget(budget).gaussian)[0]]
        return cuboid_selection.plan_for(budget, shape, measured, self.select_rounds, self.select_share)

    def plan(self, shape: tuple[int, ...], gaussian: bool) -> tuple[list[Axes], tuple[float, ...]]:
        """The marginals this strategy releases for ``shape`` and their ε shares (public facts only)."""
        if self.workload and applies(self.workload, shape):
            cuboids, shares = workload_plan(shape, self.workload, gaussian)
            return list(cuboids), shares
        cuboids = pairs(len(shape))
        return list(cuboids), default_shares(shape, cuboids, gaussian)

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        """Exact for queries on ≤ 2 dimensions (the least-squares part); higher-order parts come from
        the model, whose error the build bootstraps."""
        shape = tuple(shape)
        if self.unmodelled(shape, nonnegative):
            return MarginalsStrategy(self.workload).expected_error(shape, sensitivity, epsilon, coordinates=coordinates)
        cuboids, shares = self.plan(shape, as_budget(epsilon).gaussian)
        plan = self.selection(shape, epsilon, nonnegative)  # the pairs get what the selection leaves
        return preview_lattice(shape, cuboids, shares, sensitivity, epsilon if plan is None else plan.base, coordinates)

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        """The marginals' releases, then one per round's pick (which triple each measures is chosen
        during the build; its mechanism is fixed here)."""
        shape = tuple(shape)
        if self.unmodelled(shape, nonnegative):
            return MarginalsStrategy(self.workload).releases(shape, sensitivity, budget, coordinates)
        _, shares = self.plan(shape, as_budget(budget).gaussian)
        plan = self.selection(shape, budget, nonnegative)
        base = marginal_mechanisms(shares, sensitivity, budget if plan is None else plan.base, coordinates)
        return base if plan is None else base + [plan.pick_mechanism(sensitivity, coordinates)] * plan.rounds

    def stored_bytes_per_cell(self, shape: tuple[int, ...]) -> int:
        return 8 + (0 if self.unmodelled(tuple(shape), True) else 4 * self.replicates)  # float32 replicates

    def fit_seconds(self, shape: tuple[int, ...]) -> float:
        """The fit and its refits: ~0.04 s plus ~1.4 µs a cell on this machine (`bench/offload_sizes.py`:
        three aggregates of 267,696 cells took 1.1 s of CPU on threads); a selecting build fits the
        pairs once more before it picks."""
        if self.unmodelled(tuple(shape), True):
            return 0.0
        return (0.04 + 1.4e-6 * math.prod(shape)) * (1.0 if self.select_rounds == 0 else 1.5)

    def unmodelled(self, shape: tuple[int, ...], nonnegative: bool) -> str | None:
        """Why a cube of this (public) shape is measured as ``marginals`` instead (None: it is not)."""
        if len(shape) < 3:
            return "fewer than 3 dimensions"
        if math.prod(shape) > MAX_MODEL_CELLS:
            return f"more than {MAX_MODEL_CELLS:,} cells"
        if not nonnegative:
            return "signed clip range (not a positive density)"
        if self.workload and applies(self.workload, shape) and riding(self.workload, shape):
            # the workload's cuboids carry the class axis (3-D for a pair): the log-linear fit and its
            # order-2 split (`estimate`) are for 2-D marginals; least squares takes any cuboids
            return "a class axis under a workload (its cuboids carry the class axis)"
        return None

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
        shape = true.shape
        why = self.unmodelled(tuple(shape), nonnegative)
        if why:
            fallback = MarginalsStrategy(self.workload).measure(
                true, sensitivity, epsilon, source, coordinates=coordinates
            )
            return dataclasses.replace(
                fallback, details={**fallback.details, "pairwise": f"measured as marginals: {why}"}
            )
        cuboids, shares = self.plan(tuple(shape), as_budget(epsilon).gaussian)
        plan = self.selection(tuple(shape), epsilon, nonnegative)
        mechanisms, weights, measurements = release_marginals(
            true, cuboids, shares, sensitivity, epsilon if plan is None else plan.base, source, coordinates
        )
        progress.report(0.0, "log-linear fit")
        seconds = self.fit_seconds(tuple(shape))
        picks: list[tuple[int, ...]] = []
        fitted = processes.offload(estimate, shape, cuboids, weights, measurements, FIT_ITERATIONS, seconds=seconds)
        if plan is not None:  # AIM's step: pick the triples the pair model gets worst, measure them, refit
            measured = [tuple(sorted(c)) for c in cuboids]
            models = _models(fitted[0], measured)
            picks = _select(true, models, measured, plan, sensitivity, coordinates, source)
            pick = plan.pick_mechanism(sensitivity, coordinates)
            released = release_all([pick] * len(picks), [marginal(true, frozenset(s)) for s in picks], source)
            used = [
                (s, y)
                for s, y in zip(picks, released)
                if mostly_signal(y.reshape([shape[i] for i in s]), pick.variance, models[s])
            ]
            if used:  # taken as measured: fitted with the pairs (none taken: the pairs' fit is the build's)
                measurements = measurements + [y for _, y in used]
                cuboids, mechanisms = cuboids + [frozenset(s) for s, _ in used], mechanisms + [pick] * len(used)
                weights = weights + [1.0 / pick.variance] * len(used)
                fitted = processes.offload(
                    estimate, shape, cuboids, weights, measurements, FIT_ITERATIONS, seconds=seconds
                )
        noisy, model, potentials = fitted
        replicates = self._bootstrap(model, potentials, cuboids, weights, mechanisms, source)
        error = BootstrapModelError(MarginalLatticeError.of(shape, lambdas(shape, cuboids, weights)), replicates)
        details = {
            "pairwise": {
                "marginals": [sorted(c) for c in cuboids],
                "shares": [round(s, 4) for s in shares],
                "bootstrap_replicates": self.replicates,
                **({"workload_queries": len(self.workload)} if self.workload else {}),
                **(cuboid_selection.facts(plan, picks) if plan is not None else {}),
                **({"used": [sorted(c) for c in cuboids if len(c) == 3]} if plan is not None else {}),
            }
        }
        return Measurement(noisy, error, as_budget(epsilon).amount, sensitivity, mechanisms[0].scale, details=details)

    def _bootstrap(
        self,
        model: np.ndarray,
        potentials: np.ndarray,
        cuboids: list[Axes],
        weights: list[float],
        mechanisms: list[Mechanism],
        source: RandomSource,
    ) -> np.ndarray:
        """Prefix sums of K errors x̂* − x_m, each from the model's marginals plus simulated noise.

        The simulated releases are of public values (the model), so they cost no budget; they use
        the same grid sampler so that their noise has exactly the released noise's distribution.
        """
        shape = model.shape
        out = np.empty((self.replicates,) + tuple(n + 1 for n in shape), dtype=np.float32)
        truth = [marginal(model, c) for c in cuboids]
        # Every replicate's noise drawn first, in the sequential order; the refits then run on the
        # build's threads (`privacy.parallel.threads`), so a seeded build is the same at any thread count.
        simulated = [release_all(mechanisms, truth, source, public=True) for _ in range(self.replicates)]
        progress.report(FIT_SHARE, "bootstrap refits")

        seconds = self.fit_seconds(shape)

        def refit(k: int) -> None:
            out[k] = processes.offload(
                replica_error,
                model,
                cuboids,
                weights,
                simulated[k],
                self.refit_iterations,
                potentials,
                seconds=seconds,
            )

        with progress.part(FIT_SHARE, 1.0):
            threads.parallel_map(
                refit, range(self.replicates), label=lambda k: f"bootstrap refit {k + 1} of {self.replicates}"
            )
        return out


def _models(fitted: np.ndarray, measured: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
    """M̂_S of every candidate triple (`privacy.strategies.cuboid_selection.candidates`, beside the
    ``measured`` marginals): the fitted model's own table of it — the estimate from the released
    pairs, post-processing — which AIM scores against the truth and the gate (`mostly_signal`)
    against a pick's measurement."""
    return {s: _table(fitted, s) for s in cuboid_selection.candidates(fitted.shape, measured)}


def _select(
    true: np.ndarray,
    models: dict[tuple[int, ...], np.ndarray],
    measured: list[tuple[int, ...]],
    plan: SelectionPlan,
    sensitivity: float,
    coordinates: int,
    source: RandomSource,
) -> list[tuple[int, ...]]:
    """AIM's rounds on a dense cube (`privacy.strategies.cuboid_selection`, whose step 2 and 3 these
    are): each candidate triple scored by how far the fitted model's own table of it (``models``:
    AIM's M̂_S, which every pair informs) is from the truth, picked by the exponential mechanism. A
    dense table's log-linear model of its pairs is as blind to a 3-way interaction as a wide
    table's (a census table's "two same-sex children raise the chance of a third", +6.75 points,
    came out 0.00 on a 6-column table at ρ = 0.015)."""
    triples = {s: _table(true, s) for s in models}
    return cuboid_selection.select(
        triples, models.__getitem__, true.shape, measured, plan, sensitivity, coordinates, source
    )


def _table(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """M_S x over S's own axes (no length-1 ones)."""
    return np.asarray(marginal(x, frozenset(axes)), dtype=np.float64).reshape([x.shape[i] for i in axes])
