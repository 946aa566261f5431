"""``marginals``: measure the base cuboid and its low-dimensional marginals, combine by least squares.

Why: with per-cell noise (``identity``) a query that leaves k axes free sums the noise of every
cell along them — "noise aggregation" (PRIMA §5.5.3). A 2-D marginal measured on its own answers
such a query with one noisy value per marginal cell. Measuring both and combining them by
weighted least squares gives one consistent cube that is good at both kinds of query.

Mechanism. For each measured cuboid S (candidates: the base, every 2-D and every 1-D marginal
when d ≥ 3; measured: those whose share below is ≥ `MIN_SHARE` — on small cubes that is few: a
6×6×6 cube measures only the base, 10×10×10 the base and one 1-D marginal, 30⁴ all of them; the
build's details list what was measured) we release y_S = M_S x + Lap(Δ/ε_S) per cell with the grid sampler, where M_S sums the base cuboid
x over the axes outside S. A row changes one cell of every cuboid by at most Δ, so each release
has L1 sensitivity Δ and is ε_S-DP; sequential composition gives Σ ε_S = ε (shares below).

Least squares, in closed form: `privacy.estimation.lattice` (the normal matrix is diagonal on the 2^d ANOVA
subspaces E_T with eigenvalues λ_T = Σ_{S ⊇ T} w_S Π_{i ∉ S} n_i; no iterative solver, no big
matrix).

Error, exactly. x̂ − x = A⁻¹ Σ_S w_S M_Sᵀ noise_S has covariance A⁻¹, so a selection with per-axis
indicator vectors q_i (|q_i| = L_i selected cells) has variance
    Σ_T λ_T⁻¹ Π_{i ∈ T} (L_i − L_i²/n_i) · Π_{i ∉ T} (L_i²/n_i),
an O(2^d) formula (`MarginalLatticeError`). With only the base measured this is L_1···L_d times
the cell variance: ``identity`` is the special case.

Shares. ε_S is chosen once per cube shape, from public information only, by minimising the
expected variance of a default dashboard workload (random ranges on every axis, and random
ranges on one or two axes with the others free, equally weighted, each relative to identity),
keeping ranges on every axis within `ALL_AXES_CAP` of identity's stddev — see `default_shares`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget, mechanism, release_all
from privacy.estimation.error import MarginalLatticeError, VarianceModel
from privacy.estimation.lattice import Axes, lambdas, marginal, reconstruct
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.workload import WorkloadQuery, applies, workload_plan

MIN_SHARE = 0.005  # below this share of ε a cuboid is left out (its information is negligible)
# With the base measured, ranges on every axis keep a stddev within 5 % of identity's: the
# equally weighted workload alone let a 10×10×10 cube drift to 1.11× (the dense `auto` default
# promises "never badly worse than measuring the cells directly"). A constraint in
# `_capped`.
ALL_AXES_CAP = 1.05


def measured_cuboids(d: int) -> list[Axes]:
    """The base cuboid, every 2-D marginal and every 1-D marginal (as far as d allows)."""
    every = range(d)
    out = [frozenset(every)]
    for k in (2, 1):
        if k < d:
            out += [frozenset(c) for c in itertools.combinations(every, k)]
    return out


@functools.lru_cache(maxsize=256)
def _range_moments(n: int) -> tuple[float, float]:
    """E[L − L²/n] and E[L²/n] for a uniformly random range [l, r] ⊆ [0, n)."""
    lengths = np.array([hi - lo + 1 for lo in range(n) for hi in range(lo, n)], dtype=np.float64)
    return float(np.mean(lengths - lengths**2 / n)), float(np.mean(lengths**2 / n))


def _group_ratios(shape: tuple[int, ...], lam: dict[Axes, float], all_axes: bool) -> dict[int, float]:
    """Expected variance (unit noise) of the default workload's query groups — ranges on one axis,
    on two, and (``all_axes``) on every axis — each relative to what ``identity`` gives it."""
    d = len(shape)
    moments = [_range_moments(n) for n in shape]
    patterns = [frozenset(range(d))] if all_axes else []
    patterns += [frozenset(c) for k in (1, 2) if k < d for c in itertools.combinations(range(d), k)]
    per_group: dict[int, list[float]] = {k: [] for k in {len(p) for p in patterns}}
    for ranged in patterns:
        total = 0.0
        for t, value in lam.items():
            term = 1.0
            for i in range(d):
                if i in ranged:
                    term *= moments[i][0] if i in t else moments[i][1]
                else:  # a free axis: L = n, so L − L²/n = 0 and L²/n = n
                    term *= 0.0 if i in t else shape[i]
            if term:
                total += term / value if value else math.inf  # a component no cuboid measures
        per_group[len(ranged)].append(total)
    identity = {k: np.mean([_identity_variance(shape, p, moments) for p in patterns if len(p) == k]) for k in per_group}
    return {k: float(np.mean(v) / identity[k]) for k, v in per_group.items()}


def _identity_variance(shape: tuple[int, ...], ranged: Axes, moments: list[tuple[float, float]]) -> float:
    return math.prod(sum(moments[i]) if i in ranged else shape[i] for i in range(len(shape)))


@functools.lru_cache(maxsize=64)
def default_shares(
    shape: tuple[int, ...], cuboids: tuple[Axes, ...] | None = None, gaussian: bool = False
) -> tuple[float, ...]:
    """ε shares of ``cuboids`` (default: `measured_cuboids`), minimising the expected variance of
    the default workload's least-squares answers (with the base: ranges on every axis at most
    `ALL_AXES_CAP` × identity's stddev).

    Without the base cuboid among them, ranges on every axis have no least-squares answer (the
    ``pairwise`` model gives it), so only ranges on one and two axes are weighed. With the base, a
    marginal whose share comes out below `MIN_SHARE` is not measured. Depends on the shape only (public),
    so choosing it costs no budget. Deterministic.

    A cuboid's least-squares weight is 1/variance: ∝ share² for Laplace noise (variance 2Δ²/ε²), ∝
    share for Gaussian noise under ρ (variance Δ²/2ρ) — ``gaussian`` picks which.
    """
    cuboids = tuple(measured_cuboids(len(shape))) if cuboids is None else cuboids
    if len(cuboids) == 1:
        return (1.0,)
    with_base = frozenset(range(len(shape))) in cuboids
    power = 1.0 if gaussian else 2.0

    def mean_ratio(shares: np.ndarray) -> float:  # each group counts equally, relative to identity
        return float(np.mean(list(_group_ratios(shape, lambdas(shape, cuboids, shares**power), with_base).values())))

    from scipy.optimize import minimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    start = np.array([2.0 if len(c) == len(shape) else 0.0 for c in cuboids])
    shares = _softmax(minimize(lambda z: mean_ratio(_softmax(z)), start, method="L-BFGS-B").x)
    if with_base:  # (without it every 2-D marginal is needed: none may drop out)
        shares = _capped(shape, cuboids, shares, mean_ratio, power)
        shares[shares < MIN_SHARE] = 0.0  # a marginal that gets almost nothing is not measured at all
    return tuple(float(s) for s in shares / shares.sum())


def _capped(
    shape: tuple[int, ...],
    cuboids: tuple[Axes, ...],
    unconstrained: np.ndarray,
    mean_ratio: Callable[[np.ndarray], float],
    power: float = 2.0,
) -> np.ndarray:
    """The best shares (by ``mean_ratio``) whose ranges on every axis stay within `ALL_AXES_CAP` of
    identity's stddev: the unconstrained optimum if it complies, else SLSQP with the cap as a
    constraint from it and from a base-heavy start (the problem is not convex); identity (the
    base alone) always complies. Deterministic."""
    from scipy.optimize import minimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    d = len(shape)

    def all_axes(shares: np.ndarray) -> float:
        return _group_ratios(shape, lambdas(shape, cuboids, np.maximum(shares, 0.0) ** power), True)[d]

    base_alone = np.array([1.0 if len(c) == d else 0.0 for c in cuboids])
    candidates = [unconstrained, base_alone]
    if all_axes(unconstrained) > ALL_AXES_CAP**2:
        constraints = [
            {"type": "eq", "fun": lambda s: np.sum(s) - 1.0},
            {"type": "ineq", "fun": lambda s: ALL_AXES_CAP**2 - all_axes(s)},
        ]
        heavy = np.array([0.7 if len(c) == d else 0.3 / (len(cuboids) - 1) for c in cuboids])
        for x0 in (unconstrained, heavy):
            found = minimize(
                lambda s: mean_ratio(np.maximum(s, 0.0)),
                x0,
                method="SLSQP",
                bounds=[(0.0, 1.0)] * len(cuboids),
                constraints=constraints,
                options={"maxiter": 300, "ftol": 1e-9},
            ).x
            found = np.maximum(found, 0.0) / np.maximum(found, 0.0).sum()
            candidates += [found, _symmetric(shape, cuboids, found)]
    feasible = [c for c in candidates if all_axes(c) <= ALL_AXES_CAP**2 * (1 + 1e-6)]
    return min(feasible, key=mean_ratio)


def _symmetric(shape: tuple[int, ...], cuboids: tuple[Axes, ...], shares: np.ndarray) -> np.ndarray:
    """Shares averaged over cuboids alike under the shape's symmetries (same axis sizes): equal
    axes get equal shares, as the unconstrained optimum gives them."""
    signature = [tuple(sorted(shape[i] for i in c)) for c in cuboids]
    return np.array([np.mean([x for x, t in zip(shares, signature) if t == sig]) for sig in signature])


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - np.max(z))
    return e / e.sum()


def marginal_mechanisms(
    shares: tuple[float, ...], sensitivity: float, epsilon: float | Budget, coordinates: int = 1
) -> list[Mechanism]:
    """One budget·share mechanism per marginal: sensitivity Δ (L1 and L2), one coordinate (a row
    touches one cell of every marginal; a privacy unit of k rows, k)."""
    return [mechanism(sensitivity, epsilon * share, coordinates) for share in shares]


def release_marginals(
    true: np.ndarray,
    cuboids: list[Axes],
    shares: tuple[float, ...],
    sensitivity: float,
    epsilon: float | Budget,
    source: RandomSource,
    coordinates: int = 1,
) -> tuple[list[Mechanism], list[float], list[np.ndarray]]:
    """ε·share-DP Laplace release of every marginal M_S x (sensitivity Δ each: a row touches one
    cell of every marginal); sequential composition: Σ shares = 1 gives ε. Returns the mechanisms,
    the least-squares weights 1/σ_S² and the noisy marginals."""
    mechanisms = marginal_mechanisms(shares, sensitivity, epsilon, coordinates)
    measurements = release_all(mechanisms, [marginal(true, axes) for axes in cuboids], source)
    return mechanisms, [1.0 / m.variance for m in mechanisms], measurements


def preview_lattice(
    shape: tuple[int, ...],
    cuboids: list[Axes] | tuple[Axes, ...],
    shares: tuple[float, ...],
    sensitivity: float,
    epsilon: float | Budget,
    coordinates: int = 1,
) -> MarginalLatticeError:
    """The exact error model of a least-squares release of ``cuboids`` at these shares, no data."""
    weights = [1.0 / m.variance for m in marginal_mechanisms(shares, sensitivity, epsilon, coordinates)]
    return MarginalLatticeError.of(shape, lambdas(shape, list(cuboids), weights))


class MarginalsStrategy(MeasurementStrategy):
    name = "marginals"

    def __init__(self, workload: tuple[WorkloadQuery, ...] | None = None) -> None:
        """``workload``: a table's declared queries (`privacy.strategies.workload.WorkloadQuery`): the
        base, every 2-, 1- and 0-D marginal at shares chosen for them; None: `default_shares`."""
        self.workload = workload

    def measured(self, shape: tuple[int, ...], gaussian: bool = False) -> tuple[list[Axes], tuple[float, ...]]:
        """The cuboids this shape measures and their budget shares (those whose share is > 0)."""
        shape = tuple(shape)
        if self.workload and applies(self.workload, shape) and len(shape) > 2:
            cuboids, shares = workload_plan(shape, self.workload, gaussian, base=True)
        else:
            cuboids, shares = tuple(measured_cuboids(len(shape))), default_shares(shape, None, gaussian)
        kept = [(c, share) for c, share in zip(cuboids, shares) if share > 0]
        return [c for c, _ in kept], tuple(share for _, share in kept)

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        cuboids, shares = self.measured(tuple(shape), as_budget(epsilon).gaussian)
        return preview_lattice(tuple(shape), cuboids, shares, sensitivity, epsilon, coordinates)

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        _, shares = self.measured(tuple(shape), as_budget(budget).gaussian)
        return marginal_mechanisms(shares, sensitivity, budget, coordinates)

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
        cuboids, shares = self.measured(shape, as_budget(epsilon).gaussian)
        mechanisms, weights, measurements = release_marginals(
            true, cuboids, shares, sensitivity, epsilon, source, coordinates
        )
        estimate = reconstruct(shape, cuboids, weights, measurements)
        error = MarginalLatticeError.of(shape, lambdas(shape, cuboids, weights))
        details = {
            "marginals": {
                "measured": [sorted(c) for c in cuboids],
                "shares": [round(x, 4) for x in shares],
                "rule": f"cuboids whose variance-minimising budget share is ≥ {MIN_SHARE:.1%}",
            }
        }
        return Measurement(
            estimate, error, as_budget(epsilon).amount, sensitivity, mechanisms[0].scale, details=details
        )
