"""Adaptive selection of 3-way cuboids: measure the interactions the data has.

A wide build (`privacy.strategies.cuboids`) measures every 1- and 2-way cuboid (a dense `pairwise`
one every 2-way marginal, and selects the same way: `privacy.strategies.pairwise`); a query on three
columns is then answered by a model of their pairs, which is blind to any 3-way interaction (a
census table's "two same-sex children raise the chance of a third" came out as −0.04 points where
the truth is +6.75). AIM (McKenna et al., VLDB 2022, Algorithm 1) fixes that by measuring, round by
round, the marginal its current model gets most wrong, chosen privately. Here, per COUNT (`CuboidsStrategy.for_aggregate`: SUMs do not select):

1. the 1-/2-way cuboids are measured with ``1 − share`` of the aggregate's budget and fitted
   (least squares, pairs shrunk: `privacy.estimation.cuboid_fit`);
2. every candidate triple S (public: cells ≤ `MAX_CELLS`, not already measured) is scored by AIM's
   quality (§4, "worst-approximated"): q_S = ‖M_S(x) − M̂_S‖₁ − cells(S)·E|noise_S|, where M̂_S is
   the maximum-entropy table of S given the fitted pairs (`maxent_triple`, what the pair model
   says about S) and E|noise_S| the mean absolute noise a measurement of S in step 3 would add per
   cell (AIM's √(2/π)·σ penalty; Laplace: the scale b). ``M̂_S`` reads released values only; the
   truth M_S(x) enters only through q_S;
3. ``rounds`` times, the exponential mechanism (McSherry & Talwar 2007) picks one remaining
   candidate with probability ∝ exp(ε_r·q_S / (2Δ_q)); each pick is then measured like any cuboid
   (grid Laplace / discrete Gaussian, L1 sensitivity Δ over the unit's coordinates);
4. everything is refitted together; the picks are released in the cube's status.

Sensitivity of q (rule 3: stated for the whole vector): one neighbour (a row, or a privacy unit of
k rows) moves M_S(x) by at most Δ in each of at most k cells, hence ‖M_S(x) − M̂_S‖₁ by at most
Δ_q = k·Δ, for every S at once; M̂_S and the penalty are post-processing of earlier releases and of
public facts. Each round's draw is ε_r-DP given the earlier picks (the candidate set shrinks by the
released picks only), so by adaptive sequential composition the whole step costs rounds·ε_r.
Under ρ the exponential mechanism at ε_r is ε_r²/8-zCDP (bounded range: Cesar & Rogers 2021, as
AIM accounts it), so a round's share ρ_r buys ε_r = √(8ρ_r). The draw is the project's
`privacy.mechanisms.sampler.exponential_mechanism` (CSPRNG inversion; its float grain adds a
δ ≈ K·2⁻⁵² for K candidates, stated there: < 10⁻¹² for the ≤ 4,960 triples of 32 columns).

Deviations from AIM, on purpose: the qualities are computed once, after step 1, not after every
round's refit (a pair model's view of one triple barely moves when another triple is measured, and
each refit of a 15-column lattice costs a second); the number of rounds and the budget per round
are fixed in advance from public facts (AIM anneals them from noisy measurements); candidates are
triples only (4-way cuboids of a wide table rarely fit a measurement's budget); plain L1 quality
without AIM's workload weights. Everything the plan's shape depends on is public or a released pick.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget, mechanism
from privacy.estimation.cuboid_fit import Axes, cells
from privacy.estimation.tree_model import fit_triple_to_pairs
from privacy.mechanisms.discrete_gaussian import GridGaussian
from privacy.mechanisms.sampler import RandomSource, exponential_mechanism

MAX_CELLS = 20_000  # a candidate triple's cells at most (its release and the fit stay small)
SHARE = 0.1  # of an aggregate's budget: the selection and the measurements of the picks
SELECT_FRACTION = 0.1  # of that: the exponential mechanism's rounds (AIM spends ~10 % a round on selection)
IPF_ITERATIONS = 30


class _Selecting(Protocol):
    select_rounds: int | None


T = TypeVar("T", bound=_Selecting)


@dataclass(frozen=True)
class SelectionPlan:
    """How much of one aggregate's budget goes where: public (shape, rounds, share) only."""

    budget: Budget  # the aggregate's whole budget
    rounds: int
    share: float = SHARE
    select_fraction: float = SELECT_FRACTION

    @property
    def base(self) -> Budget:
        """What the 1-/2-way (and named) cuboids get."""
        return self.budget * (1 - self.share)

    @property
    def pick(self) -> Budget:
        """What each picked triple's measurement gets."""
        return self.budget * (self.share * (1 - self.select_fraction) / self.rounds)

    @property
    def round_epsilon(self) -> float:
        """The exponential mechanism's ε per round: its share as pure ε, or √(8ρ_r) under ρ."""
        part = self.budget * (self.share * self.select_fraction / self.rounds)
        return math.sqrt(8 * part.amount) if part.gaussian else part.amount

    def round_rho(self) -> float:
        """The zCDP cost of one round's draw (ε_r²/8, bounded range)."""
        return self.round_epsilon**2 / 8

    def pick_mechanism(self, sensitivity: float, coordinates: int) -> Mechanism:
        return mechanism(sensitivity, self.pick, coordinates)


def plan_for(
    budget: float | Budget, shape: Sequence[int], measured: Sequence[Axes], rounds: int | None, share: float = SHARE
) -> SelectionPlan | None:
    """The plan for an aggregate of this shape, or None where there is nothing to select (fewer than
    3 axes, no candidate, or no rounds asked). Default rounds: one per dimension, at most the
    candidates (MST measures d − 1 pairs; AIM's rounds grow with d the same way)."""
    found = candidates(shape, measured)
    n = len(shape) if rounds is None else rounds
    n = min(n, len(found))
    if n <= 0:
        return None
    return SelectionPlan(as_budget(budget), n, share)


def candidates(shape: Sequence[int], measured: Sequence[Axes], max_cells: int = MAX_CELLS) -> list[Axes]:
    """Every triple of axes with at most ``max_cells`` cells not already measured (public)."""
    have = set(measured)
    return [s for s in itertools.combinations(range(len(shape)), 3) if cells(shape, s) <= max_cells and s not in have]


def maxent_triple(pairs: dict[Axes, np.ndarray], s: Axes, iterations: int = IPF_ITERATIONS) -> np.ndarray:
    """The maximum-entropy table over S = (a, b, c) whose 2-way margins are the (clipped) pair tables,
    by iterative proportional fitting from independence (Deming & Stephan 1940): what a model of the
    pairs alone says about S. Post-processing of released pair tables."""
    a, b, c = s
    ab, ac, bc = (np.maximum(pairs[p], 0.0) for p in ((a, b), (a, c), (b, c)))
    total = max(float(ab.sum()), 1e-12)
    x = ab.sum(1)[:, None, None] * ab.sum(0)[None, :, None] * ac.sum(0)[None, None, :] / total**2
    x = x + 1e-9 * total / x.size  # no structural zero where a pair has mass
    return fit_triple_to_pairs(x[None], ab[None], ac[None], bc[None], iterations)[0]


def mean_abs_noise(m: Mechanism) -> float:
    """E|noise| per cell of a release: √(2/π)·σ for a Gaussian, b = σ/√2 for a Laplace."""
    sd = math.sqrt(m.variance)
    return sd * math.sqrt(2 / math.pi) if isinstance(m, GridGaussian) else sd / math.sqrt(2)


def qualities(
    true: dict[Axes, np.ndarray],
    model_of: Callable[[Axes], np.ndarray],
    shape: Sequence[int],
    found: Sequence[Axes],
    noise: float,
) -> np.ndarray:
    """q_S for every candidate (module docstring, step 2); ``noise``: E|noise| per cell of a pick.
    ``model_of(S)``: M̂_S — on a wide table the maximum-entropy triple of the fitted pairs
    (`pair_model`), on a dense one the fitted model's own table of S (`privacy.strategies.pairwise`:
    AIM's M̂_S, which the other axes' pairs inform too)."""
    return np.array([float(np.abs(true[s] - model_of(s)).sum()) - cells(shape, s) * noise for s in found])


def pair_model(pairs: dict[Axes, np.ndarray]) -> Callable[[Axes], np.ndarray]:
    """M̂_S from fitted pair tables alone: their maximum-entropy triple (`maxent_triple`)."""
    return functools.partial(maxent_triple, pairs)


def select(
    true: dict[Axes, np.ndarray],
    model_of: Callable[[Axes], np.ndarray],
    shape: Sequence[int],
    measured: Sequence[Axes],
    plan: SelectionPlan,
    sensitivity: float,
    coordinates: int,
    source: RandomSource,
) -> list[Axes]:
    """``plan.rounds`` picks by the exponential mechanism (module docstring, step 3), in order."""
    found = candidates(shape, measured)
    missing = [s for s in found if s not in true]
    if missing:
        raise ValueError(
            f"selecting triples needs every candidate's true cuboid ({len(missing)} missing, e.g. {missing[0]}): "
            "read strategy.inputs(shape), or measure without selection (select_rounds=0)"
        )
    q = qualities(true, model_of, shape, found, mean_abs_noise(plan.pick_mechanism(sensitivity, coordinates)))
    delta_q = coordinates * sensitivity  # one neighbour: ≤ k cells of M_S(x), each by ≤ Δ
    left = list(range(len(found)))
    picks = []
    for _ in range(plan.rounds):
        i = exponential_mechanism(q[left], delta_q, plan.round_epsilon, source)
        picks.append(found[left.pop(i)])
    return picks


def counts_only(strategy: T, count: bool) -> T:
    """``strategy`` for a COUNT (``count``), or a copy that selects nothing for a SUM: the COUNT's
    picks say where a table's 3-way structure is, and a SUM's budget stays with the cuboids its 1-
    and 2-column answers read (``select_rounds`` 0). Shared by `cuboids` and `pairwise`."""
    if count or strategy.select_rounds == 0:
        return strategy
    plain = copy.copy(strategy)
    plain.select_rounds = 0
    return plain


def draws_rho(plan: SelectionPlan | None) -> float:
    """The zCDP the rounds' draws add to a pure-ε build's releases (under ρ they are inside its amount)."""
    return 0.0 if plan is None or plan.budget.gaussian else plan.rounds * plan.round_rho()


def facts(plan: SelectionPlan, picks: Sequence[Axes]) -> dict[str, object]:
    """A build's account of the adaptive step (its details, the cube status): the picks, which are
    released, and what the step spent."""
    return {
        "selected": [list(s) for s in picks],
        "selection": f"{plan.rounds} triples picked by the exponential mechanism (AIM's worst-approximated rule) "
        f"with {plan.share * plan.select_fraction:.0%} of this aggregate's budget, measured with "
        f"{plan.share * (1 - plan.select_fraction):.0%}",
    }
