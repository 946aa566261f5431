"""Cube build steps (SPEC §2): bound contributions, aggregate, measure, prefix-sum.

Split out of the service so that tests can run the very same aggregation and prefix path with the
measurement step left out (`exact_cube`), which is how the answer path is checked against DuckDB.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.cube import Cube
from privacy import budget, clipping
from privacy.prefix import prefix_sums
from privacy.sampler import RandomSource
from privacy.strategies import Measurement, MeasurementStrategy
from storage import sources
from storage.catalog import TableRecord
from storage.database import Database
from storage.ledger import Charge
from storage.schema import TableSpec

COUNT_KEY = sources.COUNT_KEY


def aggregate_keys(spec: TableSpec) -> list[str]:
    return [COUNT_KEY] + [sources.sum_key(m.name) for m in spec.measures]


def label(key: str) -> str:
    """Public name of an aggregate key: 'COUNT(*)' or 'SUM(salary)'."""
    return "COUNT(*)" if key == COUNT_KEY else f"SUM({key.split(':', 1)[1]})"


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build decides before it reads data: bounds, ε per aggregate, sensitivities."""

    epsilon: float
    shares: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    sensitivities: dict[str, float]

    def charges(self, strategy: str) -> list[Charge]:
        return [Charge(eps, f"cube measurement ({strategy}): {label(k)}") for k, eps in self.shares.items()]


def plan_build(record: TableRecord, remaining: float) -> BuildPlan:
    """Decide a build from public metadata: ε is the configured cube ε, else all that remains."""
    spec = record.spec
    keys = aggregate_keys(spec)
    weights = None
    if spec.cube.weights:
        weights = {(COUNT_KEY if k == COUNT_KEY else sources.sum_key(k)): w for k, w in spec.cube.weights.items()}
    epsilon = spec.cube.epsilon or remaining
    shares = budget.split(epsilon, keys, weights)
    bounds = {m.name: clipping.fixed_bounds(m.lo, m.hi) for m in spec.measures}
    sens = {COUNT_KEY: clipping.COUNT_SENSITIVITY}
    for m in spec.measures:
        sens[sources.sum_key(m.name)] = clipping.sum_sensitivity(*bounds[m.name])
    return BuildPlan(epsilon, shares, bounds, sens)


def true_cuboids(db: Database, record: TableRecord, plan: BuildPlan) -> dict[str, np.ndarray]:
    """The un-noised base cuboids. Never released: they go straight into `measure`."""
    return sources.base_cuboids(db, record.source_table, record.spec, plan.bounds)


def measure(
    true: dict[str, np.ndarray], plan: BuildPlan, strategy: MeasurementStrategy, source: RandomSource
) -> dict[str, Measurement]:
    """Each aggregate's ε-share release; only call after the ledger charge has committed."""
    return {k: strategy.measure(true[k], plan.sensitivities[k], plan.shares[k], source) for k in true}


def cube_meta(record: TableRecord, plan: BuildPlan, strategy: str, ms: dict[str, Measurement]) -> dict[str, Any]:
    """Public facts about a build (all data-independent or already noisy)."""
    return {
        "strategy": strategy,
        "epsilon": plan.epsilon,
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "shape": list(record.spec.shape),
        "aggregates": {
            label(k): {"epsilon": m.epsilon, "sensitivity": m.sensitivity, "noise_scale": m.noise_scale}
            for k, m in ms.items()
        },
        "clipping": {name: {"strategy": "fixed", "lo": lo, "hi": hi} for name, (lo, hi) in plan.bounds.items()},
        "errors": {k: m.error.to_json() for k, m in ms.items()},
    }


def noisy_prefixes(ms: dict[str, Measurement]) -> dict[str, np.ndarray]:
    return {k: prefix_sums(m.noisy) for k, m in ms.items()}


def exact_cube(db: Database, record: TableRecord) -> Cube:
    """TEST-ONLY: the cube on the true clipped cuboids, no noise, nothing charged or stored.

    Used to check that the answer path equals DuckDB's own SUM/COUNT over the clipped data
    (the identity on the true cube). No endpoint reaches it.
    """
    plan = plan_build(record, record.epsilon_total)
    true = true_cuboids(db, record, plan)
    return Cube(record.name, "exact", {k: prefix_sums(v) for k, v in true.items()}, {}, {"strategy": "exact"})
