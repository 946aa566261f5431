"""What a workload's answers could cost at best, and what a per-query engine pays: the yardsticks.

A dashboard asks Q aggregate queries (a COUNT, a SUM or an AVG of one GROUP BY, a date series at a
grain). Two references answer "is the synopsis spending the budget well?" without reading data:

* **the per-query split** — an engine that answers each query alone with 1/Q of the budget (an AVG
  halves its part between its COUNT and its SUM): one noisy number per answer cell, at the query's
  sensitivity (1 for a COUNT, the measure's bound Δ for a SUM);
* **the optimum** over measurements of the workload's marginals: ResidualPlanner (Xiao et al.,
  NeurIPS 2023, §4–5) under Gaussian noise — the marginals' residual (ANOVA) components measured
  independently, the closed form of its Theorem 5.2 for a weighted sum of variances — and HDMM's
  OPT_M (McKenna et al., VLDB 2018, §6: weighted marginals, least squares) under Laplace noise.

Both are data-free: functions of the workload's shape, the domains and the currency only. The
objective is each query's variance relative to the per-query split's (scale-free, so Δ cancels
between a SUM and its reference and a COUNT weighs as much as a SUM): Σ_q V_q / B_q.

A query is a product of per-axis indicators: L_i cells on axis i (1 on a grouped axis, 3 months on a
quarterly series of a month axis, n_i on a free axis). Residual T of the data (mean-free along the
axes in T, averaged along the rest) enters one answer cell with energy

    c_{T,q} = Π_{i∈T} (L_i − L_i²/n_i) · Π_{i∉T} (L_i/n_i)²                  (RP's Eq. 4, unnormalised)

and measuring it with noise σ_T² (an orthonormal basis of its space) costs p_T/σ_T², p_T = Π_{i∈T}
(1 − 1/n_i) (its squared sensitivity: one record moves it by that much in L2). Minimising
Σ_T a_T σ_T² with a_T = Σ_q c_{T,q}/B_q under Σ_T p_T/σ_T² = C gives σ_T² ∝ √(p_T/a_T) and the
optimum (Σ_T √(a_T p_T))²/C (Cauchy–Schwarz, as in RP's Theorem 5.2). One marginal alone gives
σ² = 1/C per cell, the per-query engine's own noise: the two references agree where they must.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privacy.estimation.error import MarginalLatticeError
from privacy.estimation.lattice import Axes, identified, lambdas
from privacy.strategies.workload import per_query_variance


@dataclass(frozen=True)
class AggregateQuery:
    """One aggregate query of a dashboard: its per-axis lengths (n_i: free), whether it reads the
    SUM cuboid (a SUM, or an AVG's numerator) and its part of the per-query split's budget (1/Q;
    1/2Q for an AVG's SUM)."""

    lengths: tuple[int, ...]
    sums: bool
    share: float

    def support(self, shape: Sequence[int]) -> Axes:
        """The axes the query does not sum whole: its marginal."""
        return frozenset(i for i, (length, n) in enumerate(zip(self.lengths, shape)) if length < n)


def _energy(shape: Sequence[int], lengths: Sequence[int], t: Axes) -> float:
    """c_{T,q} above."""
    return math.prod(
        (length - length * length / n) if i in t else (length / n) ** 2
        for i, (length, n) in enumerate(zip(lengths, shape))
    )


def _closure(shape: Sequence[int], queries: Sequence[AggregateQuery]) -> list[Axes]:
    """Every subset of every query's marginal: the residuals (and sub-marginals) worth measuring."""
    return identified([q.support(shape) for q in queries])


def residual_planner_ratios(shape: Sequence[int], queries: Sequence[AggregateQuery]) -> list[float]:
    """Under Gaussian noise (ρ-zCDP): each query's optimal variance over the per-query split's, at
    ResidualPlanner's optimum for Σ_q V_q / B_q, COUNT and SUM residuals sharing one budget."""
    residuals = _closure(shape, queries)
    p = {t: math.prod(1 - 1 / shape[i] for i in t) for t in residuals}
    # a[(sums, T)]: the normalised energy of residual T of the COUNT (False) or SUM (True) vector;
    # B_q = 1/(share_q·C), so c/B = c·share (C = 1: the ratios do not depend on it).
    a: dict[tuple[bool, Axes], float] = {}
    for q in queries:
        for t in residuals:
            if t <= q.support(shape):
                a[(q.sums, t)] = a.get((q.sums, t), 0.0) + _energy(shape, q.lengths, t) * q.share
    scale = math.fsum(math.sqrt(v * p[t]) for (_, t), v in a.items())
    sigma2 = {key: math.sqrt(p[key[1]] / v) * scale for key, v in a.items() if v > 0}
    out = []
    for q in queries:
        v = math.fsum(sigma2[(q.sums, t)] * _energy(shape, q.lengths, t) for t in residuals if (q.sums, t) in sigma2)
        out.append(v * q.share)
    return out


def opt_m_ratios(shape: Sequence[int], queries: Sequence[AggregateQuery], gaussian: bool = False) -> list[float]:
    """Each query's variance over the per-query split's at HDMM's OPT_M optimum: weighted marginals
    (the workload's and their sub-marginals) of the COUNT and the SUM cuboids, one budget, least
    squares. A marginal measured with share θ has precision ∝ θ² under Laplace noise, θ under
    Gaussian (the share is of ε or of ρ)."""
    shape = tuple(shape)
    cuboids = _closure(shape, queries)
    power = 1.0 if gaussian else 2.0
    k = len(cuboids)
    boxes = [[((0, length - 1),) for length in q.lengths] for q in queries]
    # B_q: one cell of q's own marginal alone at q's share (precision ∝ share^power)
    base = [per_query_variance(shape, q.lengths) / q.share**power for q in queries]

    def ratios(z: np.ndarray) -> list[float]:
        e = np.exp(z - z.max())
        theta = e / e.sum()
        models = {
            flag: MarginalLatticeError.of(shape, lambdas(shape, cuboids, theta[j * k : (j + 1) * k] ** power))
            for j, flag in enumerate((False, True))
        }
        return [models[q.sums].variance(box) / b for q, box, b in zip(queries, boxes, base)]

    from scipy.optimize import minimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    found = minimize(lambda z: math.fsum(ratios(z)), np.zeros(2 * k), method="L-BFGS-B", options={"maxiter": 400})
    return ratios(found.x)
