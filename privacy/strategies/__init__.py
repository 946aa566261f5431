"""Measurement strategies (SPEC §2 step 3): turn a true cuboid into a noisy estimate.

Each strategy states its sensitivity and ε in code and returns an error model for its answers.
"""

from __future__ import annotations

from privacy.strategies.base import Measurement, MeasurementStrategy
from privacy.strategies.hierarchical import HierarchicalStrategy
from privacy.strategies.identity import IdentityStrategy
from privacy.strategies.marginals import MarginalsStrategy
from privacy.strategies.pairwise import PairwiseStrategy
from privacy.strategies.prima import PrimaStrategy

STRATEGIES: dict[str, type[MeasurementStrategy]] = {
    IdentityStrategy.name: IdentityStrategy,
    HierarchicalStrategy.name: HierarchicalStrategy,
    MarginalsStrategy.name: MarginalsStrategy,
    PairwiseStrategy.name: PairwiseStrategy,
    PrimaStrategy.name: PrimaStrategy,
}
DEFAULT_STRATEGY = PairwiseStrategy.name  # most accurate overall in bench/crossover.py


def get_strategy(name: str) -> MeasurementStrategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        raise ValueError(f"unknown cube strategy {name!r}; available: {sorted(STRATEGIES)}") from None


__all__ = ["Measurement", "MeasurementStrategy", "STRATEGIES", "DEFAULT_STRATEGY", "get_strategy"]
