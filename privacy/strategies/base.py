"""The interface every measurement strategy implements."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, as_budget, mechanism
from privacy.accounting.zcdp import pure_rho
from privacy.estimation.error import StatedError, VarianceModel
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.cuboid_selection import SelectionPlan, draws_rho


@dataclass(frozen=True)
class Measurement:
    """A noisy estimate of one base cuboid, with what it cost and how wrong it may be."""

    noisy: Any  # the noisy cuboid, or a strategy's own release (measured cuboids, HDPView blocks)
    error: StatedError  # a `PersistedErrorModel` for dense releases; an own release states its variance itself
    epsilon: float  # the aggregate's share, in its budget's currency (a Budget given is stored as its amount)
    sensitivity: float
    noise_scale: float
    prefix: np.ndarray | None = None  # a strategy's own prefix cube (SCOPE); None: prefix sums of `noisy`
    details: dict[str, Any] = field(default_factory=dict)  # public facts derived from the noisy release

    def __post_init__(self) -> None:
        if isinstance(self.epsilon, Budget):
            object.__setattr__(self, "epsilon", self.epsilon.amount)


@dataclass(frozen=True)
class NonzeroCells:
    """One aggregate's non-empty base cells: coordinates (m, d) and values (m,) (the "cells" input)."""

    shape: tuple[int, ...]
    coords: np.ndarray
    values: np.ndarray


class MeasurementStrategy(ABC):
    """A way to release a table's aggregates. Besides `measure`, a strategy states what the build
    feeds it and what serves its release, so that a new one plugs in with one registry line
    (`privacy.strategies.STRATEGIES`) and nothing in the engine:

    * ``reads`` — the true aggregates it measures, per aggregate: ``"base"`` (the dense base cuboid
      over the table's shape, plus a measure's class axis), ``"cuboids"`` (the cuboids
      `cuboids(shape)` names, as a dict) or ``"cells"`` (the base cuboid's non-empty cells,
      `NonzeroCells`);
    * ``synopsis`` — what answers from its releases: ``"dense"`` (prefix sums of a dense array and
      an error model), or a release with its own ``arrays()`` served by ``"cuboids"``
      (measured cuboids and tree models) or ``"blocks"`` (HDPView's p-view);
    * `ledger_parts` — the ledger entries one aggregate's share is charged as, and `releases` — the
      mechanisms a share buys, from which the ledger's tight ρ of a pure-ε build is summed
      (``laplace_only = False``: some step is not a Laplace release, so ρ = ε²/2);
    * ``axis_refusal`` / ``signed_axis_needs_counts`` — whether it releases a measure's class axis;
    * ``independent_aggregates`` — whether its aggregates may be measured side by side, in any order
      (`engine.builds.steps`); False where a later aggregate reuses what the first released (HDPView's
      partition on COUNT).
    """

    name: ClassVar[str]
    reads: ClassVar[str] = "base"
    synopsis: ClassVar[str] = "dense"
    axis_refusal: ClassVar[str | None] = None  # why a measure's class axis cannot be released (None: it can)
    signed_axis_needs_counts: ClassVar[bool] = False  # model answers shift class sums by the counts per class
    laplace_only: ClassVar[bool] = True  # under a pure-ε budget, every release is one grid Laplace
    independent_aggregates: ClassVar[bool] = True

    def for_aggregate(self, count: bool) -> MeasurementStrategy:
        """The strategy that measures one aggregate, a COUNT (``count``) or a SUM: this one, except
        where a strategy spends differently on SUMs (`cuboids` selects triples for COUNTs only)."""
        return self

    def ledger_parts(self, what: str, epsilon: float) -> list[tuple[float, str]]:
        """(amount, purpose) entries for the release of aggregate ``what`` (e.g. "SUM(salary)"), the
        amount in the build's currency."""
        return [(epsilon, f"cube measurement ({self.name}): {what}")]

    def releases(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        budget: float | Budget,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> list[Mechanism]:
        """The noisy releases ``budget`` buys for one aggregate of this shape (public plan only).
        Default: one release of the whole share — for Laplace releases an upper bound on the ρ of
        any split of it (ρ(ε) is convex through 0, so Σρ(ε_i) ≤ ρ(Σε_i)); strategies that split
        their share state their releases to be charged their tighter ρ."""
        return [mechanism(sensitivity, budget, coordinates)]

    def part_rho(
        self,
        part: float | Budget,
        shape: tuple[int, ...],
        sensitivity: float,
        coordinates: int = 1,
        nonnegative: bool = False,
    ) -> float:
        """The zCDP cost of one ledger part: its amount under a ρ budget; under pure ε the tight ρ of
        its Laplace releases (`privacy.accounting.zcdp.laplace_rho`) and of its selection's draws, or
        ε²/2 when not every step is one of those."""
        b = as_budget(part)
        if b.gaussian:
            return b.amount
        if not self.laplace_only:
            return pure_rho(b.amount)
        rho = sum(m.rho for m in self.releases(shape, sensitivity, b, coordinates, nonnegative))
        return rho + draws_rho(self.selection(shape, b, nonnegative))

    def selection(self, shape: tuple[int, ...], budget: float | Budget, nonnegative: bool) -> SelectionPlan | None:
        """The adaptive step's plan for an aggregate of this (public) shape — the rounds of private
        selection of triples, their budget (`privacy.strategies.cuboid_selection`) — or None: this
        strategy picks nothing (the strategies with a model of the pairs, `cuboids` and `pairwise`, do)."""
        return None

    def fit_seconds(self, shape: tuple[int, ...]) -> float:
        """About how many CPU seconds of one aggregate's post-processing this strategy hands to worker
        processes (`privacy.parallel.processes.offload`; 0: none), from the public shape alone: a
        build starts the workers only when its aggregates' sum is worth their start-up (`processes.warm`)."""
        return 0.0

    def stored_bytes_per_cell(self, shape: tuple[int, ...]) -> int:
        """Bytes a built cube keeps per prefix cell and aggregate (the float64 prefix array, plus
        whatever the error model persists): what the cube-size limit is checked against."""
        return 8

    def stored_bytes(self, shape: tuple[int, ...], aggregates: int) -> int:
        """Bytes a build of this shape stores for ``aggregates`` aggregates (the size-limit check)."""
        return math.prod(n + 1 for n in shape) * aggregates * self.stored_bytes_per_cell(shape)

    def expected_error(
        self,
        shape: tuple[int, ...],
        sensitivity: float,
        epsilon: float,
        *,
        nonnegative: bool = False,
        coordinates: int = 1,
    ) -> VarianceModel:
        """The error model of the noise a build of this shape would have — from public facts only
        (registration previews). Exact for linear strategies; for model-based ones, the part the
        measured marginals determine (queries on ≤ 2 dimensions)."""
        raise NotImplementedError(f"{self.name} has no error preview")

    @abstractmethod
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
        """Release of ``true`` whose L1 sensitivity (add/remove one unit of privacy) is ``sensitivity``:
        ε-DP for a float or pure-ε `Budget` ``epsilon``, ρ-zCDP (discrete Gaussian) for a ρ budget.

        ``coordinates``: how many cells of each measured cuboid one neighbour can move — 1 for a row
        (it lands in one cell), k for a privacy unit of at most k rows; the sampler's
        grid accounting needs it (`privacy.mechanisms.sampler.GridLaplace`).

        ``nonnegative`` is public knowledge (a COUNT, or a SUM whose clip range is ≥ 0) that
        post-processing may use; it never comes from the data.
        """
