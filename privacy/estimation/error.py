"""Error models: the variance of a released selection's error, stated without spending budget.

An answer sums the noisy cells of a selection (a union of boxes given per axis as disjoint cell
runs). For mechanisms with independent noise of equal variance in every cell (``identity``), the
variance of the sum is exactly that variance times the number of selected cells; for least-squares
combinations of marginals (``marginals``) it follows from the marginal lattice (see that module);
for the non-linear part of ``pairwise`` it is a parametric-bootstrap estimate, labelled as such.
Clipping bias is not part of it (see the README): only the noise is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privacy.estimation import hierarchy
from privacy.estimation.prefix import Runs, selection_sums
from privacy.estimation.shrinkage import CELLS, cell_noise, weighted_noise


def constrained_axes(selection: Sequence[Runs], shape: Sequence[int]) -> set[int]:
    """Axes whose (disjoint) runs do not cover all their cells; on every answer's path, so no arrays."""
    return {a for a, (runs, n) in enumerate(zip(selection, shape)) if sum(hi - lo + 1 for lo, hi in runs) != n}


def selected_cells(selection: Sequence[Runs]) -> int:
    return math.prod(sum(hi - lo + 1 for lo, hi in runs) for runs in selection)


def replicate_mse(replicates: np.ndarray, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> Any:
    """The mean square of a selection over K bootstrap replicates (prefix sums of mean-zero errors,
    stacked on the first axis), times K/(K−2) for K > 2 (`BootstrapModelError.predictive`); per group
    with ``group_axes``; 0 without replicates."""
    k = replicates.shape[0]
    if k == 0:
        return 0.0
    mse = np.mean(selection_sums(replicates, selection, group_axes, lead=1) ** 2, axis=0)
    return mse * (k / (k - 2) if k > 2 else 1.0)


class _SameForEveryCell:
    """Models whose variance depends on how many cells a selection covers, not which ones."""

    def variance(self, selection: Sequence[Runs]) -> float:
        raise NotImplementedError

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray:
        """Variance of every group (one cell on each grouped axis): the same for all of them."""
        one_cell = [((0, 0),) if a in group_axes else runs for a, runs in enumerate(selection)]
        return np.full([len(c) for c in cells], self.variance(one_cell))


@dataclass(frozen=True)
class UniformCellError(_SameForEveryCell):
    """Independent noise with the same variance in every base cell (exact for Laplace per cell)."""

    cell_variance: float
    kind: str = "uniform_cell"

    def variance(self, selection: Sequence[Runs]) -> float:
        return self.cell_variance * selected_cells(selection)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "cell_variance": self.cell_variance}


@dataclass(frozen=True)
class MarginalLatticeError(_SameForEveryCell):
    """Exact error variance of least-squares answers from base + marginal measurements."""

    shape: tuple[int, ...]
    inverse_lambdas: tuple[tuple[tuple[int, ...], float], ...]  # (T, 1/λ_T) for every subset T
    kind: str = "marginal_lattice"

    @classmethod
    def of(cls, shape: Sequence[int], lam: Mapping[frozenset[int], float]) -> MarginalLatticeError:
        """The model of a least-squares release whose ANOVA subspaces have weights λ_T
        (`privacy.estimation.lattice.lambdas`): identified components only — one no cuboid measures
        (λ_T = 0; above 2 axes without the base, the log-linear model's) adds nothing."""
        return cls(tuple(shape), tuple((tuple(sorted(t)), 1.0 / v) for t, v in lam.items() if v > 0))

    def variance(self, selection: Sequence[Sequence[tuple[int, int]]]) -> float:
        counts = []
        for runs in selection:
            count = 0
            for lo, hi in runs:
                count += hi - lo + 1
            counts.append(float(count))
        return self.weighted_variance(counts, counts)

    def weighted_variance(self, sums: Sequence[float], squares: Sequence[float]) -> float:
        """Variance of a product query ⊗q_i given Σq_i and Σq_i² per axis (an indicator: both L).
        Per ANOVA subspace T the query's energy is Π_{i∈T}(Σq_i² − (Σq_i)²/n_i)·Π_{i∉T}(Σq_i)²/n_i;
        the 2^d products are built axis by axis (`_lattice` orders the subsets the same way)."""
        products = [1.0]
        for q1, q2, n in zip(sums, squares, self.shape):
            outside = q1 * q1 / n
            inside = q2 - outside
            products = [p * f for p in products for f in (inside, outside)]
        return math.fsum(p * inv for p, inv in zip(products, self._lattice))

    @cached_property
    def _lattice(self) -> tuple[float, ...]:
        """1/λ_T for every subset T (0 where none is given), at index Σ_i [i ∉ T]·2^(d−1−i)."""
        d = len(self.shape)
        out = [0.0] * (1 << d)
        for axes, inv in self.inverse_lambdas:
            out[sum(1 << (d - 1 - i) for i in range(d) if i not in axes)] += inv
        return tuple(out)

    def identifies(self, axes: Iterable[int]) -> bool:
        """Whether the component over ``axes`` is estimated (some measured cuboid holds those axes): a
        selection whose constrained and grouped axes are one reads least squares alone."""
        return tuple(sorted(axes)) in self._identified

    @cached_property
    def _identified(self) -> frozenset[tuple[int, ...]]:
        return frozenset(t for t, inv in self.inverse_lambdas if inv > 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "shape": list(self.shape),
            "inverse_lambdas": [[list(t), v] for t, v in self.inverse_lambdas],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MarginalLatticeError:
        return cls(tuple(data["shape"]), tuple((tuple(t), float(v)) for t, v in data["inverse_lambdas"]))


class _PerAxisProduct:
    """Models whose box variance is σ² times a product of one term per axis; a grouped axis
    contributes one term per group cell instead (outer product over the grouped axes)."""

    cell_variance: float

    def _axis_term(self, axis: int, runs: Runs) -> float:
        raise NotImplementedError

    def _cell_terms(self, axis: int, cells: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def variance(self, selection: Sequence[Runs]) -> float:
        return self.cell_variance * math.prod(self._axis_term(a, runs) for a, runs in enumerate(selection))

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int], factor: float = 1.0
    ) -> np.ndarray:
        """Variance of every group (one cell on each grouped axis), shaped like the groups; ``factor``:
        the term of an axis the selection leaves out (a measure's weighted class axis)."""
        out = np.array(self.cell_variance * factor)
        for a, runs in enumerate(selection):
            if a not in group_axes:
                out = out * self._axis_term(a, runs)
        for a, cell in zip(group_axes, cells):
            out = np.multiply.outer(out, self._cell_terms(a, np.asarray(cell)))
        return out


@dataclass(frozen=True)
class ScaledPrefixError(_PerAxisProduct):
    """Noise variance of answers read from SCOPE prefix sums P = x · Π_k g_k (PRIMA Eq. 14).

    Every prefix cell is one noisy base cell (variance σ²) times a product of per-axis factors
    g_k = F_k/f_k (zero at the padded index 0). A selection reads the corners Σ c·P with per-axis
    coefficients ±1, so its variance is σ² · Π_k Σ_j c_kj² g_k[j]², *before* the clamp and the
    isotonic step and *without* the error of the fitted shape, which no noise model can state
    without spending budget: answers from this model carry a note saying so.
    """

    cell_variance: float
    ratios: tuple[tuple[float, ...], ...]  # per axis, g over the padded prefix index 0..n
    kind: str = "scaled_prefix"
    note: str = (
        "warning: answers of the 'prima' strategy (SCOPE fits) can be far off — on PRIMA's own Normal 30^4 "
        "table, 2-D range SUMs were off by about 109 % of the true mass on average; the error bar covers "
        "the measurement noise only, not SCOPE's distribution-fit error"
    )

    def _axis_term(self, axis: int, runs: Runs) -> float:
        g = self.ratios[axis]
        coef: dict[int, float] = {}
        for lo, hi in runs:
            coef[hi + 1] = coef.get(hi + 1, 0.0) + 1.0
            coef[lo] = coef.get(lo, 0.0) - 1.0
        return sum(c * c * g[j] * g[j] for j, c in coef.items())

    def _cell_terms(self, axis: int, cells: np.ndarray) -> np.ndarray:
        g = np.asarray(self.ratios[axis])
        return g[cells] ** 2 + g[cells + 1] ** 2

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "cell_variance": self.cell_variance, "ratios": [list(r) for r in self.ratios]}


@dataclass(frozen=True)
class KroneckerError(_PerAxisProduct):
    """Exact error of Kronecker least squares (``hierarchical``): covariance σ²·⊗_i (A_iᵀA_i)⁻¹.

    A box with per-axis indicators q_i has variance σ² Π_i q_iᵀ(A_iᵀA_i)⁻¹q_i, and q_iᵀMq_i is a sum
    of blocks of M over pairs of the axis' runs, each O(1) from M's 2-D prefix sums: O(runs²) per
    axis, O(d) for a box (the issue's "per-axis Gram matrices and their 2-D prefix sums"). An
    identity axis has M = I, so its term is the number of selected cells. Only the shape and the
    branchings are stored; the matrices are recomputed (and cached) from them.
    """

    cell_variance: float
    shape: tuple[int, ...]
    branching: tuple[int | None, ...]
    kind: str = "kronecker"

    def _axis_term(self, axis: int, runs: Runs) -> float:
        n, b = self.shape[axis], self.branching[axis]
        if b is None:
            return float(sum(hi - lo + 1 for lo, hi in runs))
        p = hierarchy.inverse_gram_prefix(n, b)
        return float(
            sum(p[r1 + 1, s1 + 1] - p[r0, s1 + 1] - p[r1 + 1, s0] + p[r0, s0] for r0, r1 in runs for s0, s1 in runs)
        )

    def _cell_terms(self, axis: int, cells: np.ndarray) -> np.ndarray:
        n, b = self.shape[axis], self.branching[axis]
        return np.ones(len(cells)) if b is None else np.diag(hierarchy.inverse_gram(n, b))[cells]

    def weighted_axis_term(self, axis: int, q: np.ndarray) -> float:
        """qᵀ(A_iᵀA_i)⁻¹q for an arbitrary weight vector on one axis (a measure's class axis)."""
        n, b = self.shape[axis], self.branching[axis]
        return float(q @ q) if b is None else float(q @ hierarchy.inverse_gram(n, b) @ q)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cell_variance": self.cell_variance,
            "shape": list(self.shape),
            "branching": list(self.branching),
        }


@dataclass(frozen=True)
class BootstrapModelError:
    """Error of ``pairwise`` answers: exact where the answer is linear, bootstrapped where not.

    A selection that constrains at most two axes (a grouped axis counts as constrained), or three a
    picked triple holds (`privacy.strategies.pairwise`: the component is measured), reads only the
    least-squares part of the cube, whose error is exactly `linear`. Any other one of three or more
    axes also reads the model's higher-order interactions, a non-linear function of the noise:
    its variance is estimated as the mean square of the same selection over ``replicates``, the
    prefix cubes of K parametric-bootstrap errors (re-running the post-processing on the model's
    own marginals plus fresh simulated noise — post-processing only, no budget).
    """

    linear: MarginalLatticeError
    replicates: np.ndarray  # (K, *prefix shape): prefix sums of each bootstrap replicate's error
    kind: str = "bootstrap_model"
    note: str = (
        "for conditions on 3 or more dimensions the value comes from the pairwise model: its stddev is a "
        "bootstrap estimate of the noise only, and its 95 % interval spans what the released 2-D marginals "
        "allow whatever the data's higher-order interactions"
    )

    def constrained(self, selection: Sequence[Runs]) -> set[int]:
        return constrained_axes(selection, self.linear.shape)

    def bootstrapped(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> bool:
        """Whether this selection's bar comes from the replicates (3 or more constrained axes that no
        measured cuboid holds)."""
        axes = self.constrained(selection) | set(group_axes)
        return len(axes) > 2 and not self.linear.identifies(axes)

    def note_for(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> str | None:
        return self.note if self.bootstrapped(selection, group_axes) else None

    @property
    def predictive(self) -> float:
        """K/(K−2). The bar's σ̂² is the mean square of K mean-zero replicate errors, so the answer's
        error over σ̂ is t-distributed with K degrees of freedom, whose variance is σ̂²·K/(K−2): the
        stated variance includes that factor, and ±1.96·stddev covers ≈ 95 % (K = 8: t₈ at ±2.26 σ̂,
        94.6 %) for anyone reading the stddev column, not only the ci95 this service computes.
        (K ≤ 2, used only where the bar is not read, e.g. the privacy audit: the plain mean square.)"""
        k = self.replicates.shape[0]
        return k / (k - 2) if k > 2 else 1.0

    def variance(self, selection: Sequence[Runs]) -> float:
        if not self.bootstrapped(selection):
            return self.linear.variance(selection)
        return float(replicate_mse(self.replicates, selection))

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray:
        if not self.bootstrapped(selection, group_axes):
            return self.linear.grouped_variance(selection, cells, group_axes)
        return replicate_mse(self.replicates, selection, group_axes)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "linear": self.linear.to_json(), "replicates": int(self.replicates.shape[0])}

    def arrays(self) -> dict[str, np.ndarray]:
        """What is persisted beside the cube (JSON holds the rest)."""
        return {"replicates": self.replicates}


@dataclass(frozen=True)
class ShrunkPairError:
    """Error of answers from a wide table's 2-way cuboid whose interaction was shrunk toward
    independence (`privacy.estimation.shrinkage`): an estimate, not exact, since the answer is non-linear in
    the noise and biased toward independence.

    variance = noise + bias², each estimated:
    * noise: the mean square of the same selection over ``replicates`` — prefix sums of K shrunk
      refits of simulated releases minus the estimate (the hyperparameters refitted each time) —
      times K/(K−2) as for `BootstrapModelError`;
    * bias²: its expectation under the prior (τ² at its upper limit, below). A coordinate shrunk by
      f is off by (1 − f)θ with E[θ²] = s = f·v/(1 − f). Over cells (Eq. 1 of `privacy.estimation.shrinkage`)
      the answer reads the residual through the centred selection C_a q ⊗ C_b r (Eq. 1 re-centres)
      and the prior was fitted with the cell noise v_c, so E[bias²] = v_c·Σ_ab (C_a q)²(C_b r)²
      f(1 − f); over DCT coefficients
      (Eq. 2) the same with the selection's coefficients and v (`privacy.estimation.shrinkage.weighted_noise`).
      With τ² at its upper confidence limit (``upper`` = τ²_u/τ̂², s scaled by it; one-sided 90 %,
      `privacy.estimation.shrinkage.posterior_fit`), not at τ̂²: the fit is an estimate too, and a pair of few
      coordinates (age × sex: 26) barely pins it down. At τ̂² a coherent interaction the fit calls
      noise (women 30 % of ages 30–49, 33 % overall) is shrunk away over every cell of a range at
      once while the bar says the bias is nil. Measured on Adult-15 (bench/wide_bars.py's "pair
      GROUP BY": GROUP BY x WHERE y BETWEEN, groups ≥ 50 rows, 300 queries × 3 builds): at τ̂² the
      bars covered 0.914 / 0.923 / 0.914 at COUNT ρ = 0.003 (the service's COUNT share of 0.015) /
      ρ = 0.015 / ε = 1, with 1.8–3.5 % of answers beyond 3 bars; at τ²_u 0.947 / 0.948 / 0.956,
      1.3–1.5 % beyond 3 bars, the bars 1.09–1.29× wider (0.40–0.52× least squares', whose answers
      have 2.1–3.5× the MAE); SUM(hours) through the service's split 0.923 → 0.961 at ρ = 0.015 and
      0.959 → 0.989 at ε = 1 (bars 1.35× / 1.69×: conservative there). Also tried: each answer's own evidence, its shift d from the pair
      before shrinking (max(E[bias²], d² − Var d), unbiased for the bias²): 0.943 alone, 0.97–0.98
      with τ²_u's 95 % limit, bars 1.5× wider again, and a stored copy of every pair.
    (noise without replicates: the linear part, least squares' exact term with the pair's
    interaction v·Σ w² replaced by v·Σ w² f² — exact in the DCT basis, an approximation over cells,
    whose centred noise is not independent; the two together are then the empirical-Bayes posterior
    variance.) Random 2-column ranges on Adult-15: bench/wide_bars.py; a synthetic table with a step
    interaction and one with a coherent one: tests/test_shrinkage.py.
    A selection that constrains fewer than two of the pair's axes reads only the 1-way margins,
    which shrinkage leaves alone: ``linear`` there, or for margins projected onto nonnegative counts
    (builds since session 21) the larger of it and the bootstrap, as `ProjectedError` states them.
    (`engine.synopses.wide` answers such a selection from the 1-way cuboid itself.)
    """

    linear: MarginalLatticeError
    replicates: np.ndarray  # (K, *prefix shape): prefix sums of each shrunk refit's error
    factors: (
        np.ndarray
    )  # f = s/(s + v_c) over the pair's cells, or its DCT coefficients a, b ≥ 1 (`privacy.estimation.shrinkage`)
    v: float  # the noise variance per coordinate of the pair's interaction component
    basis: str = CELLS  # the factors' basis (`privacy.estimation.shrinkage.CELLS` / `DCT`)
    projected: bool = False  # its margins projected onto nonnegative counts (`privacy.estimation.nonnegative`)
    upper: float = 1.0  # τ²'s upper confidence limit over the fitted τ² (`privacy.estimation.shrinkage.posterior_fit`)
    kind: str = "shrunk_pair"
    note: str = (
        "{cols}: the measured 2-way cuboid's interaction is shrunk toward independence (empirical Bayes, "
        "post-processing); the error bar is an estimate (bootstrap noise plus the shrinkage bias the "
        "data allow), not exact"
    )

    def _shrunk(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> bool:
        return len(constrained_axes(selection, self.linear.shape) | set(group_axes)) >= 2

    def note_for(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> str | None:
        """The note (a template over the pair's column names, filled by `engine.synopses.wide`) where shrunk."""
        return self.note if self._shrunk(selection, group_axes) else None

    def _estimate(self, exact: Any, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> Any:
        f, basis = self.factors, self.basis
        prior_v = cell_noise(self.v, f.shape) if basis == CELLS else self.v  # the v the prior was fitted with
        bias = self.upper * weighted_noise(f * (1 - f), prior_v, selection, group_axes, basis)  # (1 − f)²·s_u
        if self.replicates.shape[0] <= 2:  # the linear part: exact − (the pair's term) + (the pair's term shrunk by f²)
            return exact - weighted_noise(1 - f * f, self.v, selection, group_axes, basis) + bias
        return replicate_mse(self.replicates, selection, group_axes) + bias

    def _margins(self) -> MarginalLatticeError | ProjectedError:
        """The rule for a selection that reads only the 1-way margins (see above)."""
        return ProjectedError(self.linear, self.replicates) if self.projected else self.linear

    def variance(self, selection: Sequence[Runs]) -> float:
        if self._shrunk(selection):
            return float(self._estimate(self.linear.variance(selection), selection))
        return self._margins().variance(selection)

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray:
        if self._shrunk(selection, group_axes):
            return self._estimate(self.linear.grouped_variance(selection, cells, group_axes), selection, group_axes)
        return self._margins().grouped_variance(selection, cells, group_axes)


@dataclass(frozen=True)
class ProjectedError:
    """Error of answers from a wide table's 1-way margin projected onto nonnegative counts of the
    measured total (`privacy.estimation.nonnegative`): an estimate, since the projection is not linear.

    variance = max(least squares' exact variance, the bootstrap's), per answer:
    * the projection shortens the error vector as a whole, but θ moves every positive cell of a range
      the same way, so a range over many positive cells can be off by more than least squares' bar;
      the bootstrap (``replicates``: prefix sums of K projected refits of simulated releases minus
      the estimate, times K/(K−2) as for `BootstrapModelError`) sees that;
    * a bootstrap of K = 16 alone understates: on Adult-15 (4 builds, 600 1-column ranges and every
      GROUP BY group each) it covered 0.933 / 0.936 of the ranges at ε = 1 / ρ = 0.015, least
      squares' bar 0.957 / 0.964, the larger of the two 0.970 / 0.972 (groups: 0.974 / 0.977).
    So the bar never drops below the one the unprojected answer had (the registration preview's).
    """

    linear: MarginalLatticeError
    replicates: np.ndarray  # (K, *prefix shape): prefix sums of each projected refit's error
    kind: str = "projected_margin"
    note: str = (
        "{cols}: negative counts projected away, total kept (post-processing); the error bar is an "
        "estimate (the larger of least squares' and a bootstrap of the projection), not exact"
    )

    def _projected(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> bool:
        """Whether the answer reads the margin's cells (the total alone is kept by the projection)."""
        return bool(group_axes) or bool(constrained_axes(selection, self.linear.shape))

    def note_for(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> str | None:
        return self.note if self._projected(selection, group_axes) else None

    def variance(self, selection: Sequence[Runs]) -> float:
        exact = self.linear.variance(selection)
        return max(exact, float(replicate_mse(self.replicates, selection))) if self._projected(selection) else exact

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray:
        exact = self.linear.grouped_variance(selection, cells, group_axes)
        return np.maximum(exact, replicate_mse(self.replicates, selection, group_axes))


# Two-sided 95 % quantiles, in standard deviations, of a sum of n independent equal Laplace noises
#: a single Laplace has 2.118σ (ln 20·b with σ = √2·b), so "±1.96σ" covered 93.7 % of
# one-cell answers (measured: 0.939 over 312,771 cells). Computed from S = G₁ − G₂, Gᵢ ~ Gamma(n, b),
# by numerical integration; `tests/test_sampler.py` checks them by sampling. Beyond 64 terms the
# normal quantile is within 0.2 %.
Z95_NORMAL = 1.959963984540054
Z95_LAPLACE_SUM = (
    (1, 2.1183),
    (2, 2.0565),
    (3, 2.0284),
    (4, 2.0126),
    (5, 2.0026),
    (6, 1.9957),
    (8, 1.9868),
    (10, 1.9814),
    (12, 1.9778),
    (16, 1.9733),
    (20, 1.9706),
    (25, 1.9684),
    (32, 1.9665),
    (50, 1.9641),
    (64, 1.9632),
)
# The same at 97.5 % (each of a ratio's two parts, so that both hold together at ≥ 95 %: Bonferroni).
Z975_NORMAL = 2.241402727604947
Z975_LAPLACE_SUM = (
    (1, 2.6084),
    (2, 2.4659),
    (3, 2.4036),
    (4, 2.3683),
    (5, 2.3456),
    (6, 2.3297),
    (8, 2.309),
    (10, 2.2961),
    (12, 2.2874),
    (16, 2.2762),
    (20, 2.2694),
    (25, 2.2638),
    (32, 2.259),
    (50, 2.2527),
    (64, 2.2502),
)


def z975(terms: float) -> float:
    """`z95` at the 97.5 % level."""
    return _quantile(terms, Z975_LAPLACE_SUM, Z975_NORMAL)


def z95(terms: float) -> float:
    """The 95 % multiplier for an answer whose noise sums about ``terms`` cells' Laplace noises: the
    table's entry at the largest n ≤ terms (wider, never narrower, than the exact one). Answers
    from one cell get Laplace's own 2.118; sums of many, the normal 1.96. Strategies that average
    several measurements per cell (hierarchical, marginals) have lighter tails per cell than one
    Laplace, so counting cells errs wide."""
    return _quantile(terms, Z95_LAPLACE_SUM, Z95_NORMAL)


def _quantile(terms: float, table: tuple[tuple[int, float], ...], normal: float) -> float:
    z = table[0][1]
    for n, q in table:
        if terms < n:
            return z
        z = q
    return normal if terms >= 100 else z


@dataclass(frozen=True)
class WorseOf:
    """A preview error model: the larger variance of two candidates (a dense "auto" build picks one
    later, `privacy.strategies.dense_auto`)."""

    first: Any
    second: Any

    def variance(self, selection: Sequence[Runs]) -> float:
        return max(self.first.variance(selection), self.second.variance(selection))


@dataclass(frozen=True)
class ClassAxisError:
    """Error of a SUM released over a measure's class axis (`privacy.clipping.measure_axis`): the strategy's
    own model ``inner`` holds for the *normalised* release (the last axis: classes); an answer reads
    Σ_k u_k·(its box in class k), a product query whose class factor is q = u on the selected classes.
    Exact for the linear models (uniform, lattice, Kronecker): they take per-axis weights in closed
    form; ``pairwise``'s bootstrapped part reads replicates that were rescaled by u at build time.
    """

    inner: ErrorModel  # persisted (`to_json`) for a dense cube; a wide cube's cuboid models are rebuilt on load
    bounds: tuple[float, ...]  # u_k per class
    kind: str = "class_axis"

    def _weights(self, runs: Runs) -> np.ndarray:
        q = np.zeros(len(self.bounds))
        for lo, hi in runs:
            q[lo : hi + 1] = self.bounds[lo : hi + 1]
        return q

    def variance(self, selection: Sequence[Runs], normalised: bool = False) -> float:
        """Variance of the selection's answer (last entry: class runs); ``normalised``: of its
        normalised mass Σ_k (box in class k), i.e. unit class weights (what truncation tests)."""
        *dims, runs = selection
        q = self._weights(runs)
        if normalised:
            q = (q > 0).astype(float)
        model = self.inner
        if isinstance(model, BootstrapModelError):
            if not model.bootstrapped(selection):
                model = model.linear
            elif normalised:  # replicates hold rescaled errors: divide each class back by u_k
                per_class = selection_sums(model.replicates, selection, (len(dims),), lead=1)
                u = np.array([self.bounds[k] for lo, hi in runs for k in range(lo, hi + 1)])
                return float(np.mean((per_class / u).sum(axis=1) ** 2)) * model.predictive
            else:
                return model.variance(selection)
        if isinstance(model, UniformCellError):  # the dimensions' variance times the class factor Σq²
            return model.variance(dims) * float(q @ q)
        if isinstance(model, MarginalLatticeError):
            counts = [float(sum(hi - lo + 1 for lo, hi in r)) for r in dims]
            return model.weighted_variance(counts + [float(q.sum())], counts + [float(q @ q)])
        if isinstance(model, KroneckerError):  # the dimensions' terms times the class term qᵀMq
            return model.variance(dims) * model.weighted_axis_term(len(dims), q)
        if hasattr(model, "class_variance"):  # a wide table's preview (`privacy.strategies.cuboids.CuboidsPreview`)
            return model.class_variance(dims, q)
        if isinstance(model, WorseOf):  # a preview under "auto": the worse candidate's class-axis variance
            return max(
                ClassAxisError(m, self.bounds).variance(selection, normalised) for m in (model.first, model.second)
            )
        raise TypeError(f"no class-axis variance for {type(model).__name__}")

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray:
        """Variance of every group (grouped axes are dimensions, never the class axis)."""
        model = self.inner
        if isinstance(model, BootstrapModelError) and model.bootstrapped(selection, group_axes):
            return model.grouped_variance(selection, cells, group_axes)
        if isinstance(model, KroneckerError):
            *dims, runs = selection
            return model.grouped_variance(
                dims, cells, group_axes, factor=model.weighted_axis_term(len(dims), self._weights(runs))
            )
        one_cell = [((0, 0),) if a in group_axes else runs for a, runs in enumerate(selection)]
        return np.full([len(c) for c in cells], self.variance(one_cell))

    def note_for(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> str | None:
        return note_for(self.inner, selection, group_axes)

    def to_json(self) -> dict[str, Any]:
        assert isinstance(self.inner, PersistedErrorModel)  # only a dense cube's class axis is persisted
        return {"kind": self.kind, "inner": self.inner.to_json(), "bounds": list(self.bounds)}

    def arrays(self) -> dict[str, np.ndarray]:
        return getattr(self.inner, "arrays", dict)()


StoredErrorModel = (
    UniformCellError | MarginalLatticeError | ScaledPrefixError | KroneckerError | BootstrapModelError | ClassAxisError
)  # the models a built cube persists (`to_json`, `from_json`)


class VarianceModel(Protocol):
    """What every error model states: the noise variance of a selection's total."""

    def variance(self, selection: Sequence[Runs]) -> float: ...


class ErrorModel(VarianceModel, Protocol):
    """A built synopsis's error model: the variance of a selection's total, and of every group's."""

    def grouped_variance(
        self, selection: Sequence[Runs], cells: Sequence[np.ndarray], group_axes: Sequence[int]
    ) -> np.ndarray: ...


@runtime_checkable
class StatedError(VarianceModel, Protocol):
    """A release's error as a build records it in the cube's meta: its variance, and its JSON."""

    def to_json(self) -> dict[str, Any]: ...


@runtime_checkable
class PersistedErrorModel(ErrorModel, StatedError, Protocol):
    """A dense release's error model, persisted with its cube (`from_json` reads it back)."""


def note_for(model: ErrorModel | None, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> str | None:
    """What ``model``'s bar for this selection leaves out, if anything (a model's own ``note_for``
    when its bar depends on the selection, else its fixed ``note``)."""
    if isinstance(model, (BootstrapModelError, ShrunkPairError, ProjectedError, ClassAxisError)):
        return model.note_for(selection, group_axes)
    return getattr(model, "note", None)


def modelled_axes(
    model: ErrorModel | None, selection: Sequence[Runs], group_axes: Sequence[int] = ()
) -> list[int] | None:
    """The constrained and grouped axes of a selection whose answer reads ``pairwise``'s model (3 or
    more of them: `BootstrapModelError`), else None (the answer is linear in released values)."""
    inner = model.inner if isinstance(model, ClassAxisError) else model
    if not isinstance(inner, BootstrapModelError) or not inner.bootstrapped(selection, group_axes):
        return None
    return sorted(inner.constrained(selection) | set(group_axes))


def from_json(data: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> StoredErrorModel:
    """An error model from its JSON form and (for models that keep them) its persisted arrays."""
    if data.get("kind") == "uniform_cell":
        return UniformCellError(float(data["cell_variance"]))
    if data.get("kind") == "marginal_lattice":
        return MarginalLatticeError.from_json(data)
    if data.get("kind") == "scaled_prefix":
        return ScaledPrefixError(float(data["cell_variance"]), tuple(tuple(map(float, r)) for r in data["ratios"]))
    if data.get("kind") == "kronecker":
        return KroneckerError(float(data["cell_variance"]), tuple(data["shape"]), tuple(data["branching"]))
    if data.get("kind") == "bootstrap_model":
        if not arrays or "replicates" not in arrays:
            raise ValueError("the bootstrap error model's replicate arrays are missing from the stored cube")
        return BootstrapModelError(MarginalLatticeError.from_json(data["linear"]), arrays["replicates"])
    if data.get("kind") == "class_axis":
        return ClassAxisError(from_json(data["inner"], arrays), tuple(float(u) for u in data["bounds"]))
    raise ValueError(f"unknown error model {data.get('kind')!r}")
