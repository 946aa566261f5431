"""ε shares chosen for the queries a table's dashboards ask (its *workload*: declared, or the default
of `engine.builds.workload`).

Why. ``pairwise`` spread ε over the 2-D marginals to serve "every 1- and 2-column query equally"
(`marginals.default_shares`); dashboards ask for totals, one-column GROUP BYs and a few pairs, and
on a 28k-row CPS table the one-column answers came out 2× worse than a per-query engine splitting
the same ε. HDMM (McKenna et al., VLDB 2018, §5 "OPT_M": the marginals parameterisation) chooses a
weight per marginal to minimise the workload's expected squared error under least squares; here
the same objective is minimised over the cuboids a ``pairwise`` release can hold — every 2-D
marginal, every 1-D marginal and the total — so that components of order ≥ 3 stay the log-linear
model's, and
every 1- and 2-column query, asked or not, keeps a least-squares answer with an exact bar.

Objective (HDMM Eq. 6; ResidualPlanner's, Xiao et al. 2023 §5). A workload query is a product of
per-axis indicator vectors: L_i cells on axis i (1 on a grouped axis — one group's cell —, the
range's length on a filtered one, n_i on a free one), with a weight w_q. Under least squares with
weights λ_T on the ANOVA subspaces (`privacy.estimation.lattice`) one group cell's variance is

    V_q = Σ_T λ_T⁻¹ Π_{i∈T} (L_i − L_i²/n_i) Π_{i∉T} L_i²/n_i        (`MarginalLatticeError`)

over the identified T (|T| ≤ 2 without the base: the rest is the log-linear model's), and the
shares minimise Σ_q w_q V_q / B_q, B_q what a per-query engine gives the query — its answer cells
released alone, one noisy number each, with the whole budget (`per_query_variance`): scale-free,
so a yearly series of a monthly axis does not take the budget of every cheap query, and it is the
objective the workload bench holds the build to (`privacy.strategies.optimum`: HDMM's OPT_M and
ResidualPlanner's optimum for the same sum). Until this round the reference was the shares without
a workload and no declared query could get worse than there: on Adult's 25-query dashboard that kept
every undeclared pair measured and the SUMs at 1.55× the optimum's RMSE (now ~1.1–1.5×). The
queries are the workload's and — at the table's ``cube.ad_hoc_weight`` of their weight, `ad_hoc` —
every 1- and 2-column GROUP BY, so a query nobody declared keeps a usable answer. A cuboid's
least-squares weight is 1/σ² ∝ share² for Laplace noise, ∝ share for Gaussian noise (``gaussian``),
as in `default_shares`.

The budget between the aggregates (`aggregate_split`). A dashboard asks COUNTs, SUMs and AVGs; the
default split (COUNT 20 %, `privacy.accounting.split`) left its COUNTs 3.5× a per-query engine's
error on Adult. With a workload, each aggregate's cuboids get the budget that minimises the same sum
over the queries that read them: with R_k = Σ_q w_q V_q/B_q at the whole budget (an AVG reads the
SUM at half a per-query engine's share, as that engine halves an AVG between its COUNT and its
SUM), Σ_k R_k / s_k^p (p = 2 Laplace, 1 Gaussian) is least at s_k ∝ R_k^{1/(p+1)}.

Privacy. The workload is public (the admin's declaration, or the default from the schema alone);
the shares are a function of it and the public shape: choosing them costs nothing and reads no
data. Each marginal is then released exactly as ``pairwise`` releases it (`marginals.release_marginals`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from privacy.estimation.error import MarginalLatticeError
from privacy.estimation.lattice import Axes, subsets

# With the base cuboid among the cuboids (``marginals``), it keeps at least the share that holds every
# query's stddev within this factor of measuring the cells alone (``identity``, the base with the whole
# budget): a share b gives at most identity's variance / b^p, so b = BASE_CAP^(−2/p) — 10 % of ε
# (Laplace), 1 % of ρ (Gaussian). Without it the workload's 1- and 2-column queries left the base
# `MIN_SHARE`, and 3-column GROUP BYs on the 6-D CPS cube came out 1,586× identity's stddev; with it at
# most 10×, for ~1.1× the stddev of the workload's own 1-column queries (tests/test_workload.py).
BASE_CAP = 10.0
MIN_SHARE = 0.0005  # every measured marginal keeps at least this share (22 of them at 0.002 cost a
# 6-D dashboard 6 % over the optimum)
# An aggregate no workload query asks (a second measure nobody charts) still gets this fraction of
# the most asked one's need in `aggregate_split`: its answers stay usable, not pure noise.
UNASKED = 0.1


@dataclass(frozen=True)
class WorkloadQuery:
    """One declared query: the cells it sums per axis (None: the whole axis), its weight, and the
    aggregates it asks — ("count", None), ("sum", measure), ("avg", measure); none named: all."""

    lengths: tuple[int | None, ...]
    weight: float = 1.0
    asks: tuple[tuple[str, str | None], ...] = ()

    def asked(self, measures: Sequence[str]) -> tuple[tuple[str, str | None], ...]:
        """The aggregates it asks, none named meaning COUNT(*) and every measure's SUM and AVG: each
        one query of a per-query engine."""
        return self.asks or (("count", None), *((f, m) for m in measures for f in ("sum", "avg")))

    @property
    def axes(self) -> tuple[int, ...]:
        """The declared axes it constrains or groups (those it does not sum whole)."""
        return tuple(i for i, n in enumerate(self.lengths) if n is not None)

    def on(self, shape: Sequence[int]) -> tuple[int, ...]:
        """Its lengths on a cube of ``shape`` (axes beyond the declared ones — a class axis — whole)."""
        padded = tuple(self.lengths) + (None,) * (len(shape) - len(self.lengths))
        return tuple(n if length is None else max(1, min(int(length), n)) for length, n in zip(padded, shape))


def applies(queries: tuple[WorkloadQuery, ...] | None, shape: Sequence[int]) -> bool:
    """Whether declared ``queries`` shape the release of a cuboid of ``shape``: the declared axes, or
    those and one more last axis — a measure's class axis, which rides along (`riding`)."""
    return bool(queries) and all(len(shape) - len(q.lengths) in (0, 1) for q in queries or ())


def riding(queries: tuple[WorkloadQuery, ...], shape: Sequence[int]) -> bool:
    """Whether ``shape`` has a last axis beyond the declared ones: a measure's class axis (its SUM
    holds Σ v/u_k per class k, answers weigh class k by u_k; its class COUNT per class).

    Such an axis rides along on every cuboid (`workload_cuboids`), and then the shares are the
    declared axes' own: with the class axis c in every measured cuboid, λ_T = λ_{T∪{c}} for every
    T (the same cuboids cover both, summing the same cells), so a query's variance
    Σ_T λ_T⁻¹ E_T splits as Σ_{T ∌ c} λ_T⁻¹ E'_T · (S1_c²/K + (S2_c − S1_c²/K)) = S2_c · V'_q, with
    S1_c = Σ_k q_k, S2_c = Σ_k q_k² the query's class weights (u_k, or u_k up to a truncation) and V'_q
    its variance on the declared axes. Every query is scaled by its own S2_c, whatever the shares:
    the minimiser is the declared axes' (`workload_shares`). (Treating the class axis as one more
    declared axis, its pairs with the others measured and the rest left to the base, made the CPS
    table's SUMs 499× worse; with it left out of the workload, 11.5× the per-query split.)"""
    return len(shape) == len(queries[0].lengths) + 1


def workload_cuboids(
    d: int,
    base: bool = False,
    ride: bool = False,
    total: bool = True,
    extra: tuple[Axes, ...] = (),
    top: int = 2,
) -> tuple[Axes, ...]:
    """Every 2-D and 1-D marginal of a d-axis cube and the 0-D one (the total itself: a total read
    from 2-D marginals sums hundreds of their cells' noise; ``total`` False: not that one — a wide
    table's `cuboids` release has no total of its own); with ``base``, the base cuboid first
    (``marginals``: every component least squares, none the model's), then the ``extra`` ones (a
    wide table's declared 3- or 4-way cuboids). ``ride``: each of them with a class axis, axis d,
    added (`riding`). ``top`` 1: no 2-D marginals (a wide table's cuboids holding a class axis are
    its 1-D ones with the class added)."""
    orders = tuple(k for k in range(top, -1, -1) if total or k > 0)
    low = tuple(frozenset(c) for k in orders if k <= d for c in itertools.combinations(range(d), k))
    out = ((frozenset(range(d)),) if base and d > 2 else ()) + tuple(frozenset(c) for c in extra) + low
    return tuple(c | {d} for c in out) if ride else out


def workload_plan(
    shape: tuple[int, ...], queries: tuple[WorkloadQuery, ...], gaussian: bool = False, base: bool = False
) -> tuple[tuple[Axes, ...], tuple[float, ...]]:
    """The cuboids a workload measures on a cube of ``shape`` and their shares: `workload_cuboids`
    at `workload_shares`, a class axis riding along (`riding`: the declared axes' shares)."""
    ride = riding(queries, shape)
    declared = shape[:-1] if ride else shape
    return workload_cuboids(len(declared), base, ride), workload_shares(declared, queries, gaussian, base)


def cell_variance(shape: Sequence[int], lam: dict[Axes, float], lengths: Sequence[int]) -> float:
    """V_q above for unit noise: one group cell's least-squares variance (the lattice error model's,
    `MarginalLatticeError`: components no cuboid measures — above 2 axes without the base, the
    log-linear model's, not these shares' — add nothing)."""
    return MarginalLatticeError.of(shape, lam).variance([((0, n - 1),) for n in lengths])


def per_query_variance(shape: Sequence[int], lengths: Sequence[int]) -> float:
    """B_q for unit noise: one answer cell of a query released alone, one noisy number per cell
    (whatever the cells it sums), with the whole budget — its own marginal's point cell: the unit
    noise's variance, 1, whatever the query (it was computed through that marginal's lattice error,
    which walks all 2^d subspaces: 18 s on a 16-column wide table; tests/test_workload.py checks
    the identity)."""
    return 1.0


@dataclass(frozen=True)
class _Design:
    """The objective as arrays (the lattice error model, `MarginalLatticeError`, vectorised): λ = M·θ^p
    over the identified subspaces T (Eq. 1 of `privacy.estimation.lattice`), each query's variance
    E·(1/λ), weighted by w_q/B_q. One evaluation is a few small matrix products, so L-BFGS with the
    exact gradient takes milliseconds where the per-query Python loop took ~2 s on a 6-D cube."""

    m: np.ndarray  # (identified T, cuboids): Π_{i∉S} n_i where T ⊆ S
    e: np.ndarray  # (queries, identified T): Π_{i∈T}(L_i − L_i²/n_i) Π_{i∉T} L_i²/n_i
    inverse_b: np.ndarray  # 1 / B_q
    w: np.ndarray  # w_q

    @classmethod
    @functools.lru_cache(maxsize=64)
    def of(
        cls,
        shape: tuple[int, ...],
        queries: tuple[WorkloadQuery, ...],
        base: bool = False,
        total: bool = True,
        extra: tuple[Axes, ...] = (),
        top: int = 2,
    ) -> _Design:
        """The objective of ``queries`` (those weighing > 0) over `workload_cuboids` of ``shape``;
        cached: the shares and the aggregate split read the same one."""
        d = len(shape)
        cuboids = workload_cuboids(d, base, total=total, extra=extra, top=top)
        asked = [(q.on(shape), q.weight) for q in queries if q.weight > 0]
        # the identified T: subsets of a measured cuboid, by size (never all 2^d of a wide table's axes)
        order = max(len(c) for c in cuboids)
        ts = [t for t in subsets(d, order) if any(t <= c for c in cuboids)]
        m = np.array([[_cells_outside(shape, c) if t <= c else 0.0 for c in cuboids] for t in ts])
        e = np.array([[_energy(shape, q, t) for t in ts] for q, _ in asked])
        inverse_b = np.array([1.0 / per_query_variance(shape, q) for q, _ in asked])
        return cls(m, e, inverse_b, np.array([w for _, w in asked], dtype=float))

    def ratios(self, shares: np.ndarray, power: float) -> np.ndarray:
        """V_q / B_q of each query under ``shares``."""
        return (self.e @ (1.0 / (self.m @ shares**power))) * self.inverse_b

    def objective(self, z: np.ndarray, power: float, base: float = 0.0) -> tuple[float, np.ndarray]:
        """Σ_q w_q V_q / B_q at the floored softmax of ``z``, and its gradient in z. ``base`` > 0:
        the first cuboid's share is fixed at it, ``z`` spreads the rest (1 − base)."""
        k = len(z)
        soft = _softmax(z)
        theta = (1 - base) * _floored(z)
        if base:
            theta = np.concatenate([[base], theta])
        lam = self.m @ theta**power
        weights = (self.w * self.inverse_b) @ self.e  # Σ_q w_q/B_q · E[q, T]
        value = float(weights @ (1.0 / lam))
        g_theta = (self.m.T @ (-weights / lam**2)) * power * theta ** (power - 1)
        if base:
            g_theta = (1 - base) * g_theta[1:]
        g_z = (1 - MIN_SHARE * k) * soft * (g_theta - soft @ g_theta)
        return value, g_z


def _cells_outside(shape: Sequence[int], cuboid: Axes) -> float:
    """Π_{i∉S} n_i: how many cells one marginal cell of S sums."""
    return float(math.prod(n for i, n in enumerate(shape) if i not in cuboid))


def _energy(shape: Sequence[int], lengths: Sequence[int], t: Axes) -> float:
    """A query's energy in subspace T (`MarginalLatticeError.weighted_variance`, indicators: Σq = Σq² = L)."""
    return math.prod(
        (length - length * length / n) if i in t else length * length / n
        for i, (length, n) in enumerate(zip(lengths, shape))
    )


@functools.lru_cache(maxsize=64)
def workload_shares(
    shape: tuple[int, ...],
    queries: tuple[WorkloadQuery, ...],
    gaussian: bool = False,
    base: bool = False,
    total: bool = True,
    extra: tuple[Axes, ...] = (),
    top: int = 2,
) -> tuple[float, ...]:
    """Shares of `workload_cuboids` (``base``: with the base cuboid, which keeps `base_floor`;
    ``total`` False: without the 0-D one; ``extra``: with these; ``top`` 1: without the 2-D ones)
    minimising Σ_q w_q V_q / B_q, each ≥ `MIN_SHARE`. Deterministic."""
    power = 1.0 if gaussian else 2.0
    design = _Design.of(shape, queries, base, total, extra, top)
    best = _minimised(lambda z: design.objective(z, power), design.m.shape[1])
    if not (base and len(shape) > 2) or best[0] >= base_floor(gaussian):
        return tuple(float(s) for s in best)
    floor = base_floor(gaussian)
    rest = _minimised(lambda z: design.objective(z, power, floor), design.m.shape[1] - 1)
    return (floor, *(float(s) for s in (1 - floor) * rest))


def base_floor(gaussian: bool) -> float:
    """The base cuboid's least share: `BASE_CAP`^(−2/p)."""
    return BASE_CAP ** (-2.0 / (1.0 if gaussian else 2.0))


def _minimised(objective: Callable[[np.ndarray], tuple[float, np.ndarray]], k: int) -> np.ndarray:
    """The floored softmax (`_floored`) of the z minimising ``objective`` (value and gradient) by
    L-BFGS from equal shares (kept where the search ends no better)."""
    from scipy.optimize import minimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    start = np.zeros(k)
    found = minimize(objective, start, jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return _floored(found.x if found.fun <= objective(start)[0] else start)


def aggregate_split(
    shape: tuple[int, ...] | None,
    queries: tuple[WorkloadQuery, ...],
    measures: tuple[str, ...],
    gaussian: bool = False,
    class_cost: dict[str, float] | None = None,
    class_counts: tuple[str, ...] = (),
) -> dict[tuple[str, str | None], float]:
    """Shares of the budget for ("count", None) — COUNT(*) —, each measure's ("sum", m) and, for the
    measures in ``class_counts``, its COUNT per class ("quantile", m: what a quantile reads),
    minimising the workload's Σ_q w_q V_q / B_q over the aggregates its queries ask (module
    docstring). An aggregate no query asks weighs `UNASKED` of the most asked one. ``class_cost``:
    per measure released over a class axis, Σ_k u_k² / max_k u_k² — its SUM's variance (`riding`:
    S2_c · V'_q at sensitivity 1) over a per-query engine's, which clips at the bound (sensitivity
    max u_k): an untruncated answer, the most a SUM reads. ``shape`` None: every query's V_q/B_q taken
    as 1 (a release these shares do not shape: a wide table's cuboids) — where every query asks the
    same aggregates, as the default workload's do, the split does not depend on them at all.
    Deterministic; public facts only."""
    power = 1.0 if gaussian else 2.0
    class_cost = class_cost or {}
    weighted = [q for q in queries if q.weight > 0]
    if shape is None:
        ratios = np.ones(len(weighted))
    else:
        ratios = _Design.of(shape, queries).ratios(np.asarray(workload_shares(shape, queries, gaussian)), power)
    keys: list[tuple[str, str | None]] = [("count", None), *(("sum", m) for m in measures)]
    need = dict.fromkeys(keys + [("quantile", m) for m in class_counts], 0.0)
    for q, r in zip(weighted, ratios):
        for func, measure in q.asked(measures):
            key = ("sum", measure) if func == "avg" else (func, measure)
            if key in need:  # an AVG reads the SUM at half a per-query engine's share
                cost = class_cost.get(measure, 1.0) if func in ("sum", "avg") and measure else 1.0
                need[key] += q.weight * r * cost * (0.5**power if func == "avg" else 1.0)
    floor = UNASKED * max(need.values())
    parts = {k: max(v, floor) ** (1 / (power + 1)) for k, v in need.items()}
    total = sum(parts.values())
    return {k: float(v / total) for k, v in parts.items()}


def ad_hoc(d: int, weight: float) -> tuple[WorkloadQuery, ...]:
    """Every 1- and 2-column GROUP BY of a d-axis cube, ``weight`` in all, evenly: the queries nobody
    declared, which still deserve an answer worth reading (without them an undeclared pair's counts
    on the staff table went from a stddev of 26 to 3,194, its marginal at `MIN_SHARE`)."""
    groups = [c for k in (1, 2) if k <= d for c in itertools.combinations(range(d), k)]
    return tuple(WorkloadQuery(tuple(1 if i in g else None for i in range(d)), weight / len(groups)) for g in groups)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - np.max(z))
    return e / e.sum()


def _floored(z: np.ndarray) -> np.ndarray:
    """A softmax over ``z`` with every share at least `MIN_SHARE` (and summing to 1)."""
    return MIN_SHARE + (1 - MIN_SHARE * len(z)) * _softmax(z)
