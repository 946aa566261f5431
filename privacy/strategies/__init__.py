"""Measurement strategies: turn a true cuboid into a noisy estimate.

Each strategy states its sensitivity and ε in code and returns an error model for its answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.cuboid_selection import SHARE as SELECT_SHARE
from privacy.strategies.cuboids import CuboidsStrategy
from privacy.strategies.dense_auto import DenseAutoStrategy
from privacy.strategies.hdpview import HDPViewStrategy
from privacy.strategies.hierarchical import HierarchicalStrategy
from privacy.strategies.identity import IdentityStrategy
from privacy.strategies.marginals import MarginalsStrategy
from privacy.strategies.pairwise import PairwiseStrategy
from privacy.strategies.prima import PrimaStrategy
from privacy.strategies.workload import WorkloadQuery

STRATEGIES: dict[str, type[MeasurementStrategy]] = {
    IdentityStrategy.name: IdentityStrategy,
    HierarchicalStrategy.name: HierarchicalStrategy,
    MarginalsStrategy.name: MarginalsStrategy,
    PairwiseStrategy.name: PairwiseStrategy,
    PrimaStrategy.name: PrimaStrategy,
    CuboidsStrategy.name: CuboidsStrategy,
    HDPViewStrategy.name: HDPViewStrategy,
}
DEFAULT_STRATEGY = "auto"
# pairwise or marginals, chosen at build time from a charged noisy total (privacy/strategies/dense_auto.py)
DENSE_STRATEGY = DenseAutoStrategy.name
# Beyond these "auto" measures cuboids instead of a dense cube (bench/wide_tables.py): the dense
# cube's size, and its fit's cost (pairwise's share optimisation walks all 2^d ANOVA subspaces).
DENSE_MAX_CELLS = 1 << 20
DENSE_MAX_DIMENSIONS = 6


def resolve(name: str, shape: Sequence[int]) -> str:
    """The strategy ``name`` means for this shape: "auto" stays "auto" (`DenseAutoStrategy`: pairwise or
    marginals) on a dense cube of at most `DENSE_MAX_DIMENSIONS` dimensions and `DENSE_MAX_CELLS`
    cells, else `cuboids` (public shape only)."""
    if name != DEFAULT_STRATEGY:
        return name
    dense = len(shape) <= DENSE_MAX_DIMENSIONS and math.prod(shape) <= DENSE_MAX_CELLS
    return DENSE_STRATEGY if dense else CuboidsStrategy.name


def strategy_for(
    name: str,
    shape: Sequence[int],
    named: Sequence[Sequence[int]] = (),
    declared_share: float = 1.0,
    estimator: str = "shrunk",
    one_way_share: float | None = None,
    workload: tuple[WorkloadQuery, ...] | None = None,
    select_rounds: int | None = None,
    select_share: float = SELECT_SHARE,
    shapes_cuboids: bool = False,
) -> MeasurementStrategy:
    """The strategy object a table's configuration resolves to (named cuboids, the pairs'
    ``estimator`` and the ``one_way_share`` go to `cuboids`; ``declared_share``: the share of cells
    that are declared values, for `DenseAutoStrategy`; the ``workload`` to `pairwise` and
    `marginals`, `auto`'s two candidates included, and to `cuboids` where ``shapes_cuboids`` (a
    declared one); the selection's rounds and share to `cuboids` and `pairwise`, whose models pick
    triples)."""
    resolved = resolve(name, shape)
    if resolved == CuboidsStrategy.name:
        return CuboidsStrategy(
            named,
            dimensions=len(shape),
            estimator=estimator,
            one_way_share=one_way_share,
            select_rounds=select_rounds,
            select_share=select_share,
            workload=workload if shapes_cuboids else None,
        )
    pairwise = PairwiseStrategy(workload=workload, select_rounds=select_rounds, select_share=select_share)
    if resolved == DenseAutoStrategy.name:
        return DenseAutoStrategy(pairwise, declared_share=declared_share, marginals=MarginalsStrategy(workload))
    if resolved == PairwiseStrategy.name:
        return pairwise
    if resolved == MarginalsStrategy.name:
        return MarginalsStrategy(workload)
    return get_strategy(resolved)


def get_strategy(name: str) -> MeasurementStrategy:
    if name == DenseAutoStrategy.name:
        return DenseAutoStrategy()
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown cube strategy {name!r}; available: {sorted(STRATEGIES) + [DEFAULT_STRATEGY]}"
        ) from None


__all__ = [
    "Measurement",
    "MeasurementStrategy",
    "STRATEGIES",
    "DEFAULT_STRATEGY",
    "get_strategy",
    "resolve",
    "strategy_for",
]
