"""ε shares chosen for the queries a table's dashboards ask (a declared *workload*).

Why. ``pairwise`` spreads ε over the 2-D marginals to serve "every 1- and 2-column query equally"
(`marginals.default_shares`); dashboards ask for totals, one-column GROUP BYs and a few pairs, and
on a 28k-row CPS table the one-column answers came out 2× worse than a per-query engine splitting
the same ε. HDMM (McKenna et al., VLDB 2018, §5 "OPT_M": the marginals parameterisation) chooses a
weight per marginal to minimise the workload's expected squared error under least squares; here
the same objective is minimised over the cuboids a ``pairwise`` release can hold — every 2-D
marginal, every 1-D marginal and the total — so that components of order ≥ 3 stay the log-linear
model's, and
every 1- and 2-column query, asked or not, keeps a least-squares answer with an exact bar.

Objective (HDMM Eq. 6, per-query normalised). A workload query is a product of per-axis indicator
vectors: L_i cells on axis i (1 on a grouped axis — one group's cell —, the range's length on a
filtered one, n_i on a free one), with a weight w_q. Under least squares with weights λ_T on the
ANOVA subspaces (`privacy.estimation.lattice`) one group cell's variance is

    V_q = Σ_T λ_T⁻¹ Π_{i∈T} (L_i − L_i²/n_i) Π_{i∉T} L_i²/n_i        (`MarginalLatticeError`)

over the identified T (|T| ≤ 2 without the base: the rest is the log-linear model's), and the shares minimise Σ_q w_q V_q / V_q⁰, each query's variance relative to what ``pairwise``'s
default shares give it: scale-free (absolute error let the expensive queries — a range over 72
months, a yearly series of a monthly axis — take the budget of every cheap one; error relative to
the answer's size let GROUP BYs of thousands of tiny cells take everything; relative to equal
shares a declared range came out worse than without a workload), and aimed at what a declaration
promises: the declared queries better than without it. The declared queries count, and — at
`AD_HOC_WEIGHT` of their weight — every 1- and 2-column GROUP BY's, so a query nobody declared keeps a usable answer. A cuboid's least-squares weight is 1/σ² ∝ share² for Laplace noise, ∝ share for
Gaussian noise (``gaussian``), as in `default_shares`.

Privacy. The workload is public (the admin's declaration, or the default from the schema alone);
the shares are a function of it and the public shape: choosing them costs nothing and reads no
data. Each marginal is then released exactly as ``pairwise`` releases it (`marginals.release_marginals`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from privacy.estimation.error import MarginalLatticeError
from privacy.estimation.lattice import Axes, lambdas

MIN_SHARE = 0.002  # every measured marginal keeps at least this share
# The queries nobody declared still deserve an answer worth reading: every 1- and 2-column GROUP BY
# joins the objective with this share of the declared weight, spread evenly. Without it an undeclared
# pair's counts on the staff table went from a stddev of 26 to 3,194 (its marginal at `MIN_SHARE`).
AD_HOC_WEIGHT = 0.2
# A declared query whose variance would exceed today's is penalised (quadratically in the excess, this
# times the workload's weight): a sum of ratios alone traded Adult's GROUP BY sex to 1.22× today's stddev
# for gains elsewhere, and a declaration must not make what it declares worse.
WORSE_PENALTY = 100.0


@dataclass(frozen=True)
class WorkloadQuery:
    """One declared query: the cells it sums per axis (None: the whole axis) and its weight."""

    lengths: tuple[int | None, ...]
    weight: float = 1.0

    def on(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Its lengths on a cube of ``shape`` (axes beyond the declared ones — a class axis — whole)."""
        padded = tuple(self.lengths) + (None,) * (len(shape) - len(self.lengths))
        return tuple(n if length is None else max(1, min(int(length), n)) for length, n in zip(padded, shape))


def applies(queries: tuple[WorkloadQuery, ...] | None, shape: Sequence[int]) -> bool:
    """Whether declared ``queries`` shape the release of a cuboid of ``shape``: not one with axes
    beyond the declared ones — a SUM over a measure's class axis, whose classes weigh as their bounds
    squared, not alike as this objective counts them (on the CPS table its SUMs came out 1.34× the
    default's stddev): those keep the strategy's default shares."""
    return bool(queries) and all(len(q.lengths) == len(shape) for q in queries or ())


def workload_cuboids(d: int, base: bool = False) -> tuple[Axes, ...]:
    """Every 2-D and 1-D marginal of a d-axis cube and the 0-D one (the total itself: a total read
    from 2-D marginals sums hundreds of their cells' noise); with ``base``, the base cuboid first
    (``marginals``: every component least squares, none the model's)."""
    low = tuple(frozenset(c) for k in (2, 1, 0) if k <= d for c in itertools.combinations(range(d), k))
    return ((frozenset(range(d)),) if base and d > 2 else ()) + low


def cell_variance(shape: Sequence[int], lam: dict[Axes, float], lengths: Sequence[int]) -> float:
    """V_q above for unit noise: one group cell's least-squares variance (the lattice error model's,
    `MarginalLatticeError`: components no cuboid measures — above 2 axes without the base, the
    log-linear model's, not these shares' — add nothing)."""
    return MarginalLatticeError.of(shape, lam).variance([((0, n - 1),) for n in lengths])


@functools.lru_cache(maxsize=64)
def workload_shares(
    shape: tuple[int, ...],
    queries: tuple[WorkloadQuery, ...],
    today: tuple[tuple[Axes, ...], tuple[float, ...]],
    gaussian: bool = False,
    base: bool = False,
) -> tuple[float, ...]:
    """Shares of `workload_cuboids` (``base``: with the base cuboid) minimising Σ_q w_q V_q / V_q⁰,
    each ≥ `MIN_SHARE`, V_q⁰ a query's variance under ``today``'s cuboids and shares (the strategy's
    own default: `marginals.default_shares`). Deterministic."""
    d = len(shape)
    cuboids = workload_cuboids(d, base)
    power = 1.0 if gaussian else 2.0
    asked = [(q.on(shape), q.weight) for q in queries if q.weight > 0]
    declared = len(asked)
    asked += [(q.on(shape), q.weight) for q in ad_hoc(d, AD_HOC_WEIGHT * sum(w for _, w in asked))]
    reference_lambdas = lambdas(shape, today[0], np.asarray(today[1]) ** power)
    reference = [cell_variance(shape, reference_lambdas, lengths) for lengths, _ in asked]

    total = sum(w for _, w in asked)

    def objective(z: np.ndarray) -> float:
        model = MarginalLatticeError.of(shape, lambdas(shape, cuboids, _floored(z) ** power))
        ratios = [model.variance([((0, n - 1),) for n in q]) / ref for (q, _), ref in zip(asked, reference)]
        worse = sum(max(0.0, r - 1.0) ** 2 for r in ratios[:declared])  # a declared query above today's
        return math.fsum(w * r for (_, w), r in zip(asked, ratios)) + WORSE_PENALTY * total * worse

    start = np.zeros(len(cuboids))
    found = minimize(objective, start, method="L-BFGS-B", options={"maxiter": 500})
    best = found.x if found.fun <= objective(start) else start
    return tuple(float(s) for s in _floored(best))


def ad_hoc(d: int, weight: float) -> tuple[WorkloadQuery, ...]:
    """Every 1- and 2-column GROUP BY of a d-axis cube, ``weight`` in all, evenly."""
    groups = [c for k in (1, 2) if k <= d for c in itertools.combinations(range(d), k)]
    return tuple(WorkloadQuery(tuple(1 if i in g else None for i in range(d)), weight / len(groups)) for g in groups)


def _floored(z: np.ndarray) -> np.ndarray:
    """A softmax over ``z`` with every share at least `MIN_SHARE` (and summing to 1)."""
    e = np.exp(z - np.max(z))
    return MIN_SHARE + (1 - MIN_SHARE * len(z)) * e / e.sum()
