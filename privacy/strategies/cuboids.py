"""``cuboids``: a wide table's synopsis — measured 1-/2-way (and named) cuboids, least squares, tree models.

Release (stated here, derived in `privacy.estimation.cuboid_fit`): per aggregate, every measured cuboid S gets
Laplace noise of scale Δ/ε_S on the grid (L1 sensitivity Δ, one coordinate: a row is in one cell of
each cuboid), ε_S = ε·share_S with Σ share_S = 1 — ε-DP by sequential composition. The shares are
public: a fixed rule of the shape, or a declared workload's optimum (`workload_cuboid_shares`).
Everything after is post-processing of those releases:

* least squares makes the cuboids consistent (Eq. 2 there); a query whose constrained and grouped
  columns lie inside one measured cuboid is answered from it, with the exact variance of Eq. 3;
* for a nonnegative aggregate (the default ``shrunk`` estimator) the 1-way margins are then
  projected onto nonnegative counts of the measured total (`privacy.estimation.nonnegative`) and every pair's
  interaction is shrunk toward independence (`privacy.estimation.shrinkage`); their bars are estimates
  (`privacy.estimation.error.ProjectedError`, `ShrunkPairError`);
* other queries are answered by a tree model over their columns (`privacy.estimation.tree_model`), whose error
  bar is an *estimate*: the noise part from a parametric bootstrap (``BOOTSTRAP_REPLICATES``
  simulated releases around the consistent estimate — simulations, not releases — re-fitted and
  persisted with the build), plus the model misfit, estimated from released values only as the
  spread of the answer over the alternative spanning trees (each reproduces a different subset of
  the released 2-way tables exactly; where they disagree, the omitted interactions matter).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget
from privacy.estimation.cuboid_fit import (
    ONE_WAY_BOOST,
    ONE_WAY_SHARE,
    Axes,
    CuboidLattice,
    cells,
    default_cuboids,
    mechanisms,
    release,
    shares,
    true_marginals,
)
from privacy.estimation.error import MarginalLatticeError, ProjectedError, ShrunkPairError, VarianceModel
from privacy.estimation.prefix import Runs, prefix_sums
from privacy.estimation.shrinkage import CELLS, DCT, factor_shape
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import processes, progress, threads
from privacy.strategies import cuboid_selection
from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.cuboid_selection import SelectionPlan
from privacy.strategies.workload import WorkloadQuery, workload_cuboids, workload_shares

BOOTSTRAP_REPLICATES = 16
# Where a shrunk build's simulations are centred: this far from the shrunk estimate toward the least-
# squares one (`CuboidsStrategy.measure`). Around the shrunk estimate alone, a refit shrinks an
# interaction that is already shrunk and misses most of the shrinkage's bias, which falls on the cells
# a chart shows. Adult-15, 3 builds, every pair's 2-column GROUP BY, cells of ≥ 100 rows: ±1.96·stddev
# held the truth in 0.940 (ε = 1) / 0.932 (ρ = 0.015) around the shrunk estimate, with mean z down to
# −4.4 on the worst pair (education × education_num). Centred on least squares (1.0) the refits also
# shrink its noise, counted as bias: 0.994 / 0.984, bars 1.85× / 1.56× wider. At 0.3: 0.968 / 0.959,
# bars 1.19× / 1.11×; at 0.2: 0.959 / 0.950, 1.11× / 1.06×; at 0.5: 0.983 / 0.972, 1.37× / 1.22×
# (`bench/pair_bars.py`); random 2-column ranges' bars 1.3× (`bench/wide_bars.py`). 1-column bars and
# every answer are unchanged: only the bars move. Also tried (2 builds): 0.5 without the prior's bias
# term, 0.955 / 0.936; moving only the pair cells where least squares is > 2σ (3σ) from the shrunk
# estimate, 0.964 / 0.945 (0.950 / 0.931). The price: bars on small cells, already held 0.99 of the
# time, 1.7× wider; a synthetic table's random 2-column ranges 1.11× least squares' exact bars, where
# they were 1.0× (`tests/test_shrinkage.py`).
BOOTSTRAP_CENTRE = 0.3
LEAST_SQUARES, SHRUNK = "least_squares", "shrunk"  # `CuboidRelease.estimator`
PROJECTED = "projected"  # `CuboidRelease.projected`, persisted as "one_way"
CLASS_CUBOIDS_SHARE = 0.5  # over a class axis: ε share of the cuboids holding the class (`CuboidsStrategy.shares`)


def active_axes(shape: Sequence[int], selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> tuple[int, ...]:
    """The axes a query constrains (a selection short of the whole domain) or groups on."""
    constrained = {
        i for i, runs in enumerate(selection) if len(runs) != 1 or runs[0][0] != 0 or runs[0][1] != shape[i] - 1
    }
    return tuple(sorted(constrained | set(group_axes)))


def covering(cuboids: Sequence[Axes], shape: Sequence[int], axes: Sequence[int]) -> Axes | None:
    """The smallest measured cuboid containing ``axes`` (any 1-way one for none), else None."""
    need = set(axes)
    fits = [s for s in cuboids if need <= set(s)]
    return min(fits, key=lambda s: (cells(shape, s), s)) if fits else None


@dataclass
class CuboidRelease:
    """One aggregate's released synopsis: the consistent estimate of every measured cuboid, and the
    bootstrap replicates of the 1-/2-way ones (simulations around the estimate, for model bars)."""

    shape: tuple[int, ...]
    cuboids: list[Axes]
    variances: list[float]  # noise variance per cell of each cuboid's release
    estimates: dict[Axes, np.ndarray]
    bootstrap: list[dict[Axes, np.ndarray]] = field(default_factory=list)
    # "shrunk": the 2-way interactions shrunk toward independence (`privacy.estimation.shrinkage`), with each
    # measured pair's posterior factors in ``factors`` (for its bar) and their basis in ``priors``:
    # its cells or its DCT coefficients a, b ≥ 1 (builds of session 19 persisted no "priors": DCT)
    estimator: str = LEAST_SQUARES
    factors: dict[Axes, np.ndarray] = field(default_factory=dict)
    priors: dict[Axes, str] = field(default_factory=dict)
    # τ²'s upper confidence limit over the fitted τ² per pair, for its bar (`privacy.estimation.shrinkage.posterior_fit`;
    # builds before session 23 persisted none: 1, the fitted prior's bias alone)
    uppers: dict[Axes, float] = field(default_factory=dict)
    # the 1-way margins projected onto nonnegative counts (`privacy.estimation.nonnegative`; shrunk builds since
    # session 21 — earlier ones persisted no "one_way" and kept least squares' margins, exact bars)
    projected: bool = False
    # the triples the build picked (`privacy.strategies.cuboid_selection`; named ones are not in it)
    picked: list[Axes] = field(default_factory=list)
    _errors: CuboidsPreview | None = field(default=None, repr=False)
    _lattice: CuboidLattice | None = field(default=None, repr=False)

    def arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays to persist: the estimates, and the replicates (one row each)."""
        low = self.low_order()
        out = {"estimates": np.concatenate([self.estimates[s].ravel() for s in self.cuboids])}
        if self.bootstrap:
            out["bootstrap"] = np.stack([np.concatenate([b[s].ravel() for s in low]) for b in self.bootstrap])
        if self.factors:
            out["factors"] = np.concatenate([self.factors[s].ravel() for s in self.pairs()])
        return out

    def low_order(self) -> list[Axes]:
        """The cuboids with bootstrap replicates: the 1-/2-way ones (a picked triple's noise is not in a
        model bar's bootstrap part: keeping its replicates would multiply the picks' storage by 17)."""
        return [s for s in self.cuboids if len(s) <= 2]

    def pairs(self) -> list[Axes]:
        return [s for s in self.cuboids if len(s) == 2]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "cuboids",
            "shape": list(self.shape),
            "cuboids": [list(s) for s in self.cuboids],
            "variances": self.variances,
            "estimator": self.estimator,
            **({"priors": [self.priors[s] for s in self.pairs()]} if self.factors else {}),
            **({"uppers": [self.uppers[s] for s in self.pairs()]} if self.uppers else {}),
            **({"one_way": PROJECTED} if self.projected else {}),
            **({"picked": [list(s) for s in self.picked]} if self.picked else {}),
        }

    @classmethod
    def from_arrays(cls, data: dict[str, Any], arrays: dict[str, np.ndarray]) -> CuboidRelease:
        shape = tuple(data["shape"])
        cuboids = [tuple(s) for s in data["cuboids"]]
        release = cls(
            shape,
            cuboids,
            [float(v) for v in data["variances"]],
            {},
            estimator=data.get("estimator", LEAST_SQUARES),  # (builds by earlier versions: least squares)
            projected=data.get("one_way") == PROJECTED,
            picked=[tuple(s) for s in data.get("picked", [])],
        )
        release.estimates = _split(arrays["estimates"], _shapes(shape, cuboids))
        if "bootstrap" in arrays:
            low = _shapes(shape, release.low_order())
            release.bootstrap = [_split(row, low) for row in np.asarray(arrays["bootstrap"])]
        if "factors" in arrays:
            pairs = release.pairs()
            release.priors = dict(zip(pairs, data.get("priors", [DCT] * len(pairs))))
            release.factors = _split(
                arrays["factors"], {s: factor_shape(own, release.priors[s]) for s, own in _shapes(shape, pairs).items()}
            )
            release.uppers = dict(zip(pairs, (float(u) for u in data.get("uppers", [1.0] * len(pairs)))))
        return release

    def lattice(self) -> CuboidLattice:
        """The least-squares lattice of the measured cuboids (built once: serving reads it for every
        cuboid's error, the model's triples and the picks' routing)."""
        if self._lattice is None:
            self._lattice = CuboidLattice(self.shape, self.cuboids, self.variances)
        return self._lattice

    def variance(self, selection: Sequence[Runs]) -> float:
        """The least-squares noise variance of a selection inside a measured cuboid (NaN: a model
        answer); exact for a least-squares release, what a shrunk one's pair would have had without
        shrinking (its own bar: `error`)."""
        if self._errors is None:
            lattice = self.lattice()
            self._errors = CuboidsPreview(self.shape, tuple(self.cuboids), {s: lattice.error(s) for s in self.cuboids})
        return self._errors.variance(selection)

    def error(
        self, s: Axes, lattice: CuboidLattice | None = None
    ) -> MarginalLatticeError | ShrunkPairError | ProjectedError:
        """The error model of answers read inside measured cuboid ``s``: exact (Eq. 3) for least
        squares; a projected 1-way margin's or a shrunk pair's estimated bar otherwise."""
        lattice = lattice or self.lattice()
        linear = lattice.error(s)
        if len(s) == 1 and self.projected:
            return ProjectedError(linear, self._replicates(s))
        if s not in self.factors:
            return linear
        return ShrunkPairError(
            linear,
            self._replicates(s),
            self.factors[s],
            lattice.v[s],
            self.priors[s],
            self.projected,
            self.uppers.get(s, 1.0),
        )

    def _replicates(self, s: Axes) -> np.ndarray:
        """Prefix sums of each bootstrap refit's error around the estimate on cuboid ``s`` (K × prefix)."""
        if not self.bootstrap:
            return np.zeros((0,) + tuple(n + 1 for n in self.estimates[s].shape))
        return np.stack([prefix_sums(b[s] - self.estimates[s]) for b in self.bootstrap])


def _shapes(shape: Sequence[int], cuboids: Sequence[Axes]) -> dict[Axes, tuple[int, ...]]:
    return {s: tuple(shape[i] for i in s) for s in cuboids}


def _split(flat: np.ndarray, shapes: dict[Axes, tuple[int, ...]]) -> dict[Axes, np.ndarray]:
    """The persisted concatenation back into one array per key, in order."""
    out, at = {}, 0
    for s, own in shapes.items():
        n = math.prod(own)
        out[s] = np.asarray(flat[at : at + n]).reshape(own)
        at += n
    return out


@dataclass(frozen=True)
class CuboidsPreview:
    """The exact error of queries inside a measured cuboid, from the shape alone (previews)."""

    shape: tuple[int, ...]
    cuboids: tuple[Axes, ...]
    errors: dict[Axes, MarginalLatticeError]

    def variance(self, selection: Sequence[Runs]) -> float:
        s = covering(self.cuboids, self.shape, active_axes(self.shape, selection))
        if s is None:
            return math.nan  # a model answer: its bar is estimated at query time
        return self.errors[s].variance([selection[i] for i in s])

    def class_variance(self, dims: Sequence[Runs], q: np.ndarray) -> float:
        """A class-axis SUM's variance (`privacy.estimation.error.ClassAxisError`): the class axis (last) always
        read, with class weights q, inside the smallest measured cuboid holding it (NaN: a model)."""
        c = len(self.shape) - 1
        s = covering(self.cuboids, self.shape, tuple(sorted(set(active_axes(self.shape[:c], dims)) | {c})))
        if s is None:
            return math.nan
        counts = [float(sum(hi - lo + 1 for lo, hi in dims[i])) for i in s if i != c]
        return self.errors[s].weighted_variance(counts + [float(q.sum())], counts + [float(q @ q)])


def fitted_cuboids(
    lattice: CuboidLattice, noisy: Sequence[np.ndarray], shrink: bool
) -> tuple[dict[Axes, np.ndarray], dict[Axes, Any]]:
    """The consistent estimate of every measured cuboid (`CuboidLattice.shrunk` when ``shrink``) and
    each shrunk pair's posterior factors: post-processing of released values, run where
    `privacy.parallel.processes.offload` puts it."""
    factors: dict[Axes, Any] = {}
    return lattice.estimate(noisy, shrink, factors), factors


def refit_cuboids(
    lattice: CuboidLattice, simulated: Sequence[np.ndarray], shrink: bool, low: Sequence[Axes]
) -> dict[Axes, np.ndarray]:
    """One bootstrap replicate: the estimate refitted to simulated releases, its cuboids in ``low``."""
    refit = lattice.estimate(simulated, shrink=shrink)
    return {s: refit[s] for s in low}


class CuboidsStrategy(MeasurementStrategy):
    name = "cuboids"
    reads = "cuboids"
    synopsis = "cuboids"
    signed_axis_needs_counts = True  # the tree model fits SUM − lo·COUNT per class (`engine.synopses.wide`)

    def __init__(
        self,
        named: Sequence[Sequence[int]] = (),
        bootstrap: int = BOOTSTRAP_REPLICATES,
        dimensions: int | None = None,
        estimator: str = SHRUNK,
        one_way_share: float | None = None,
        select_rounds: int | None = 0,
        select_share: float = cuboid_selection.SHARE,
        workload: tuple[WorkloadQuery, ...] | None = None,
    ) -> None:
        if estimator not in (LEAST_SQUARES, SHRUNK):
            raise ValueError(f"unknown cuboids estimator {estimator!r}; use {SHRUNK!r} or {LEAST_SQUARES!r}")
        self.named = [tuple(sorted(s)) for s in named]
        self.replicates = bootstrap
        self.dimensions = dimensions  # the table's; an aggregate over one more axis has a class axis
        self.estimator = estimator
        self.one_way_share = ONE_WAY_SHARE if one_way_share is None else one_way_share
        # triples picked by the exponential mechanism (`privacy.strategies.cuboid_selection`): how many
        # rounds (None: one per dimension, a table's default, `storage.schema.CubeConfig`; 0: none — the
        # library's default: every 1-/2-way cuboid and the named ones only)
        self.select_rounds = select_rounds
        self.select_share = select_share
        # a declared workload (`engine.builds.workload`): the 1-/2-way cuboids' shares minimise its
        # error (`workload_shares`) instead of the fixed rule; None: the rule
        self.workload = workload

    def for_aggregate(self, count: bool) -> MeasurementStrategy:
        """COUNTs select triples; SUMs measure every 1-/2-way (and named) cuboid with their whole
        budget, as without selection. On Adult-15 a SUM(hours) that gave 10 % to triples answered 1- and
        2-column queries 9 % / 1 % worse and 3-/4-column 0 % / 7 % better; the COUNT's picks already say
        where the table's 3-way structure is, and a SUM's 1-column answers are what dashboards chart."""
        return cuboid_selection.counts_only(self, count)

    def shrinks(self, shape: Sequence[int], nonnegative: bool) -> bool:
        """Whether this aggregate's pairs are shrunk toward independence (`privacy.estimation.shrinkage`): its
        cells must be ≥ 0 (a COUNT, or a SUM clipped to lo ≥ 0 — public) for independence to be a
        model of them, and it must not carry a measure's class axis, whose SUM cuboids are read in
        the measure's units with their own error model. Public facts only."""
        return self.estimator == SHRUNK and nonnegative and not self.over_class(shape)

    def workload_shaped(self, shape: Sequence[int]) -> bool:
        """Whether the declared workload sets this aggregate's cuboid shares: one over the table's own
        axes, or over them and a class axis (within its halves, `shares`)."""
        declared = len(shape) - 1 if self.over_class(shape) else len(shape)
        return bool(self.workload) and all(len(q.lengths) == declared for q in self.workload or ())

    def over_class(self, shape: Sequence[int]) -> bool:
        """Whether an aggregate of this shape carries a measure's class axis (one axis past the table's)."""
        return self.dimensions is not None and len(shape) == self.dimensions + 1

    def cuboids(self, shape: Sequence[int]) -> list[Axes]:
        """The cuboids every build of this shape measures (public)."""
        return default_cuboids(len(shape), self.named)

    def fit_seconds(self, shape: tuple[int, ...]) -> float:
        """The estimate and its bootstrap refits: with pairs shrunk, ~1.3 ms a pair each (the 16-column
        Bank example: 5.4 s of CPU for two aggregates × 17 fits × 120 pairs); least squares alone is
        a fraction of that and is not counted."""
        if not self.shrinks(shape, True):
            return 0.0
        pairs = sum(len(s) == 2 for s in self.cuboids(shape))
        return (self.replicates + 1) * pairs * 1.3e-3

    def selection(self, shape: Sequence[int], budget: float | Budget, nonnegative: bool) -> SelectionPlan | None:
        """The adaptive step's plan for one aggregate, or None: only where the pair model is a model of
        it (nonnegative, no class axis — the same public facts as `shrinks`) and rounds are asked."""
        if self.select_rounds == 0 or not nonnegative or self.over_class(shape):
            return None
        return cuboid_selection.plan_for(budget, shape, self.cuboids(shape), self.select_rounds, self.select_share)

    def inputs(self, shape: Sequence[int]) -> list[Axes]:
        """The true cuboids a build reads (`engine.builds.steps`): the measured ones, and every
        candidate triple when this strategy selects (only the picks are released)."""
        measured = self.cuboids(shape)
        if self.select_rounds == 0 or self.over_class(shape):
            return measured
        return measured + cuboid_selection.candidates(shape, measured)

    def shares(
        self, shape: Sequence[int], cuboids: Sequence[Axes], shrunk: bool = False, gaussian: bool = False
    ) -> list[float]:
        """Budget shares by `privacy.estimation.cuboid_fit.shares` (∝ cells^(1/3), 1-way cuboids boosted, or given
        ``one_way_share`` of the budget where the pairs are ``shrunk``), in either currency — or, with
        a declared workload, by it (`workload_cuboid_shares`: Laplace or Gaussian, ``gaussian``); over a class
        axis, half goes to the cuboids that hold the class (the only ones a SUM in the measure's units,
        a quantile or a measure condition reads: the others serve the pair model) and half to the rest,
        each half by the same rule. Public shape (and declaration) only."""
        if not self.over_class(shape):
            fixed = shares(shape, cuboids, one_way_share=self.one_way_share if shrunk else None)
            if self.workload_shaped(shape):
                return workload_cuboid_shares(tuple(shape), cuboids, fixed, self.workload or (), gaussian)
            return fixed
        c = len(shape) - 1
        holding, rest = [s for s in cuboids if c in s], [s for s in cuboids if c not in s]
        within = shares(shape, holding) if holding else []
        if holding and self.workload_shaped(shape):
            within = riding_cuboid_shares(tuple(shape[:c]), holding, within, self.workload or (), gaussian)
        halves = (
            (holding, within, CLASS_CUBOIDS_SHARE),
            (rest, shares(shape, rest) if rest else [], 1 - CLASS_CUBOIDS_SHARE),
        )
        share = {s: weight * x for part, xs, weight in halves for s, x in zip(part, xs)}
        total = sum(share.values())
        return [share[s] / total for s in cuboids]

    def stored_bytes(self, shape: Sequence[int], aggregates: int) -> int:
        """float64 estimates of every cuboid plus the bootstrap replicates of the 1-/2-way ones."""
        cuboids = self.cuboids(shape)
        low = sum(cells(shape, s) for s in cuboids if len(s) <= 2)
        picks = 0  # the largest candidates the COUNT's rounds could pick (which ones is not known before)
        plan = self.selection(shape, 1.0, nonnegative=True)
        if plan is not None:
            sizes = sorted((cells(shape, s) for s in cuboid_selection.candidates(shape, cuboids)), reverse=True)
            picks = sum(sizes[: plan.rounds])
        return 8 * (aggregates * (sum(cells(shape, s) for s in cuboids) + self.replicates * low) + picks)

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        """The least-squares bars of every measured cuboid: exact for a least-squares build; for a shrunk
        one the floor of its projected 1-way bars, and for its pairs what least squares would state (a
        shrunk pair's bar is estimated at query time and is usually smaller; bench/wide_bars.py)."""
        cuboids = self.cuboids(shape)
        mechs = self.releases(shape, sensitivity, epsilon, coordinates, nonnegative)[: len(cuboids)]  # (not the picks)
        lattice = CuboidLattice(shape, cuboids, [m.variance for m in mechs])
        return CuboidsPreview(tuple(shape), tuple(cuboids), {s: lattice.error(s) for s in cuboids})

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        """The 1-/2-way (and named) cuboids' releases, then one per round's pick (which cuboid each
        measures is chosen during the build; its mechanism is fixed here)."""
        cuboids = self.cuboids(shape)
        plan = self.selection(shape, budget, nonnegative)
        base = mechanisms(
            self.shares(shape, cuboids, self.shrinks(shape, nonnegative), as_budget(budget).gaussian),
            sensitivity,
            budget if plan is None else plan.base,
            coordinates,
        )
        return base if plan is None else base + [plan.pick_mechanism(sensitivity, coordinates)] * plan.rounds

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
        """ε-DP release of ``true`` (the measured cuboids of one aggregate, Δ per row) and its fit.
        A dense base cuboid is accepted too (library use, tests): its cuboids are summed from it."""
        if isinstance(true, np.ndarray):
            true = true_marginals(true, self.inputs(true.shape))
        shape = shape_of(true)
        cuboids = self.cuboids(shape)  # (``true`` may hold more: the candidate triples a build reads)
        shrink = self.shrinks(shape, nonnegative)
        plan = self.selection(shape, epsilon, nonnegative)
        cuboid_shares = self.shares(shape, cuboids, shrink, as_budget(epsilon).gaussian)
        mechs = mechanisms(cuboid_shares, sensitivity, epsilon if plan is None else plan.base, coordinates)
        noisy = release(true, cuboids, mechs, source)
        lattice = CuboidLattice(shape, cuboids, [m.variance for m in mechs])
        seconds = self.fit_seconds(shape)
        picks: list[Axes] = []
        if plan is not None:  # AIM's step: pick the triples the pair model gets worst, measure them, refit
            fitted, _ = processes.offload(fitted_cuboids, lattice, noisy, shrink, seconds=seconds)
            model_of = cuboid_selection.pair_model(fitted)
            picks = cuboid_selection.select(true, model_of, shape, cuboids, plan, sensitivity, coordinates, source)
            pick_mechs = [plan.pick_mechanism(sensitivity, coordinates)] * len(picks)
            noisy = noisy + release(true, picks, pick_mechs, source)
            cuboids, mechs = cuboids + picks, mechs + pick_mechs
            lattice = CuboidLattice(shape, cuboids, [m.variance for m in mechs])
        estimates, factors = processes.offload(fitted_cuboids, lattice, noisy, shrink, seconds=seconds)
        result = CuboidRelease(
            shape,
            cuboids,
            [m.variance for m in mechs],
            estimates,
            estimator=SHRUNK if shrink else LEAST_SQUARES,
            projected=shrink,
            picked=picks,
        )
        if shrink:  # each pair's posterior factors: its bar's bias part (1: not shrunk)
            fits = {s: factors.get(s, (np.ones([shape[i] for i in s]), CELLS, 1.0)) for s in result.pairs()}
            result.factors = {s: f for s, (f, _, _) in fits.items()}
            result.priors = {s: basis for s, (_, basis, _) in fits.items()}
            result.uppers = {s: upper for s, (_, _, upper) in fits.items()}
        low = result.low_order()
        # Simulations around ``centre`` (public, nothing released), every draw made first and in
        # order, so a seeded build is the same wherever the refits run (`privacy.parallel`).
        centre = estimates
        if shrink and BOOTSTRAP_CENTRE:  # toward least squares (`BOOTSTRAP_CENTRE`): post-processing, no draw
            pilot = lattice.estimate(noisy, shrink=False)
            centre = {s: estimates[s] + BOOTSTRAP_CENTRE * (pilot[s] - estimates[s]) for s in estimates}
        simulated = [release(centre, cuboids, mechs, source, public=True) for _ in range(self.replicates)]
        progress.report(0.0, "bootstrap refits")
        refits = threads.parallel_map(
            lambda b: processes.offload(refit_cuboids, lattice, simulated[b], shrink, low, seconds=seconds),
            range(self.replicates),
            label=lambda b: f"bootstrap refit {b + 1} of {self.replicates}",
        )
        if centre is not estimates:  # stored as refits around the estimate: a replicate's error is refit − centre
            refits = [{s: r[s] - centre[s] + estimates[s] for s in low} for r in refits]
        result.bootstrap.extend(refits)
        scales = [m.scale for m in mechs]
        details = {
            "cuboids": {
                "measured": [list(s) for s in cuboids],
                "shares": [round(x, 5) for x in _shares_with(cuboid_shares, plan, len(picks))],
                "noise_scales": [min(scales), max(scales)],
                "rule": "every 1-way and 2-way cuboid plus the named ones; "
                + (
                    (
                        "the cuboids holding the class axis: half the budget, the class alone and each column "
                        "with it at the declared workload's optimum (HDMM's OPT_M objective); the rest ∝ "
                        "cells^(1/3)"
                        if self.over_class(shape)
                        else "the 1-/2-way cuboids' and the declared statements' shares minimise the declared "
                        "workload's error (HDMM's OPT_M objective), other named ones' ∝ cells^(1/3)"
                    )
                    if self.workload_shaped(shape)
                    else "budget share ∝ cells^(1/3), "
                    + (
                        f"{self.one_way_share:.0%} of it to the 1-way cuboids"
                        if shrink
                        else f"1-way cuboids ×{ONE_WAY_BOOST}"
                    )
                )
                + (
                    "; 1-way margins projected onto nonnegative counts, pairs shrunk toward independence"
                    if shrink
                    else ""
                ),
                "estimator": result.estimator,
                "bootstrap_replicates": self.replicates,
                **(cuboid_selection.facts(plan, picks) if plan is not None else {}),
            }
        }
        return Measurement(result, result, epsilon, sensitivity, max(scales), details=details)  # type: ignore[arg-type]


def workload_cuboid_shares(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    fixed: Sequence[float],
    workload: tuple[WorkloadQuery, ...],
    gaussian: bool,
) -> list[float]:
    """The shares of a wide table's cuboids under a declared workload: the 1- and 2-way ones and each
    3+-way one a declared statement spans (`engine.builds.workload.declared_cuboids`) at
    `workload_shares` over them (HDMM's OPT_M objective, Σ_q w_q V_q / B_q under least squares, the
    dense builds' — `privacy.strategies.workload`; no 0-D cuboid, which a wide release does not
    have), in what the other named ones leave: they keep their ``fixed`` rule's share. With the
    fixed rule a dashboard's two pairs got 1/36 of the pairs' budget each on a nine-column table, as
    much as every pair nobody charts, and a declared triple its cells' cube root. Least squares is
    the objective's model; a shrunk pair near independence errs less than it states
    (docs/strategies.md). Public: the declaration and the shape."""
    spans = {frozenset(q.axes) for q in workload}
    asked = tuple(frozenset(s) for s in cuboids if len(s) > 2 and frozenset(s) in spans)
    design = workload_cuboids(len(shape), total=False, extra=asked)
    found = dict(zip(design, workload_shares(shape, workload, gaussian, total=False, extra=asked)))
    return _reshared(cuboids, fixed, found, frozenset)


def riding_cuboid_shares(
    declared: tuple[int, ...],
    holding: Sequence[Axes],
    fixed: Sequence[float],
    workload: tuple[WorkloadQuery, ...],
    gaussian: bool,
) -> list[float]:
    """Within the half of a class-axis aggregate's budget that goes to the cuboids holding the class
    (`CuboidsStrategy.shares`: the only ones a SUM in the measure's units reads): the class alone and
    each declared axis with the class, at the declared workload's optimum over the 0- and 1-D
    marginals of the ``declared`` axes — the class axis rides along, as on a dense cube
    (`privacy.strategies.workload.riding`): a GROUP BY one column reads its (column, class) cuboid,
    the total the class alone. With the fixed rule a dashboard's SUM by one of Bank's sixteen
    columns got 1/16 of that half. Other cuboids holding the class (named ones) keep their
    ``fixed`` share. Public: the declaration and the shape."""
    c = len(declared)
    found = dict(zip(workload_cuboids(c, top=1), workload_shares(declared, workload, gaussian, top=1)))
    return _reshared(holding, fixed, found, lambda s: frozenset(s) - {c} if len(s) <= 2 else None)


def _reshared(
    cuboids: Sequence[Axes],
    fixed: Sequence[float],
    found: dict[frozenset[int], float],
    key: Callable[[Axes], frozenset[int] | None],
) -> list[float]:
    """Each cuboid whose ``key`` the optimisation covers at its ``found`` share of what the others
    leave; the others at their ``fixed`` share."""
    keys = [key(s) for s in cuboids]
    rest = 1.0 - sum(x for k, x in zip(keys, fixed) if k not in found)
    return [rest * found[k] if k in found else x for k, x in zip(keys, fixed)]


def _shares_with(base: Sequence[float], plan: SelectionPlan | None, picks: int) -> list[float]:
    """Each measured cuboid's share of the aggregate's budget, the picks' included."""
    if plan is None:
        return list(base)
    pick = plan.share * (1 - plan.select_fraction) / plan.rounds
    return [x * (1 - plan.share) for x in base] + [pick] * picks


def shape_of(true: dict[Axes, np.ndarray]) -> tuple[int, ...]:
    sizes: dict[int, int] = {}
    for s, a in true.items():
        for i, n in zip(s, np.shape(a)):
            sizes[i] = n
    return tuple(sizes[i] for i in range(len(sizes)))
