"""A build's time rollups (`privacy.strategies.time_rollups`): which date axes and grains it measures
(public: the declaration), their budget, their true totals (a one-axis aggregate from storage),
their release, and how they are persisted and loaded beside the cube (`engine.synopses.rolled`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget
from privacy.clipping import bounds as clipping
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import threads
from privacy.strategies import time_rollups
from privacy.strategies.time_rollups import RollupRelease
from storage import sources
from storage.catalog import TableRecord
from storage.database import Database
from storage.schema import DateDimension, TableSpec

GRAINS = {"day": ("month", "year"), "month": ("year",)}  # the blocks a dimension's grain is rolled up to
ARRAY_PREFIX = "rollup#"  # persisted arrays: rollup#<key>#<axis>#<grain> (values), rollup#blocks#<axis>#<grain>


def rollup_axes(spec: TableSpec) -> dict[int, tuple[str, ...]]:
    """Date axes and the grains rolled up (public: the declaration alone): by default every date
    dimension declared by day (a year is 365 cells of it; of a month dimension, 12: opt in with
    ``"time_rollups": true``); none for a growing table or with ``"time_rollups": false``."""
    if spec.cube.time_rollups is False or spec.growth is not None:
        return {}
    grains = ("day", "month") if spec.cube.time_rollups else ("day",)
    return {
        axis: GRAINS[d.granularity]
        for axis, d in enumerate(spec.dimensions)
        if isinstance(d, DateDimension) and d.granularity in grains
    }


def rollup_keys(keys: list[str]) -> list[str]:
    """The plain aggregates rolled up: COUNT(*), each SUM, each COUNT(m) (not COUNT per class)."""
    return [k for k in keys if k == sources.COUNT_KEY or k.startswith(("sum:", "present:"))]


def split_shares(
    axes: dict[int, tuple[str, ...]], shares: dict[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """(the cube's shares, the rollups' amount per aggregate): with rollup ``axes``, each rolled-up
    aggregate gives `time_rollups.ROLLUP_SHARE` of its share to its rollups (split evenly over the axes)."""
    if not axes:
        return shares, {}
    taken = {k: shares[k] * time_rollups.ROLLUP_SHARE for k in rollup_keys(list(shares))}
    return {k: v - taken.get(k, 0.0) for k, v in shares.items()}, taken


def block_ids(dim: DateDimension, grain: str) -> np.ndarray:
    """Each cell's block at ``grain`` (months or years, numbered from the first), −1 for the NULL and
    outside cells (their dates are unknown)."""
    keys = [(d.year, d.month if grain == "month" else 1) for d in (dim.date_of(c) for c in range(dim.size))]
    first = sorted(set(keys))
    index = {k: i for i, k in enumerate(first)}
    return np.array([index[k] for k in keys] + [-1] * (dim.cells - dim.size), dtype=np.int64)


def true_totals(db: Database, record: TableRecord, plan: Any) -> dict[str, dict[int, np.ndarray]]:
    """The un-noised per-date-cell totals of each rolled-up aggregate, over the whole of every other
    axis (one GROUP BY per date axis in storage). Never released: they go into `measure`."""
    axes = sorted(plan.rollup_axes)
    if not axes:
        return {}
    spec = record.spec
    cuboids = sources.marginal_cuboids(db, spec.source, record.source_table, spec, plan.bounds, [(a,) for a in axes])
    return {k: {a: np.asarray(cuboids[k][(a,)], dtype=float) for a in axes} for k in plan.rollups}


def sensitivity(key: str, plan: Any) -> float:
    """One row's effect on a plain total (times k rows of a privacy unit): 1 for a COUNT, the clipped
    bound for a SUM — its plain SUM, even where the cube releases it per magnitude class."""
    if key.startswith("sum:"):
        return clipping.sum_sensitivity(*plan.bounds[sources.measure_of(key)]) * plan.rows_per_unit
    return float(plan.sensitivities[key])


def budget(key: str, plan: Any) -> Budget:
    """One aggregate's rollup budget on one date axis (its rollups' amount, split over the axes)."""
    return Budget(plan.rollups[key] / len(plan.rollup_axes), plan.currency)


def mechanism(key: str, axis: int, plan: Any) -> Any:
    """The mechanism `measure` releases ``key``'s rollups on ``axis`` with (the preview's stddevs)."""
    return time_rollups.rollup_mechanism(
        len(plan.rollup_axes[axis]), sensitivity(key, plan), budget(key, plan), plan.rows_per_unit
    )


def axis_blocks(plan: Any, spec: TableSpec) -> dict[int, list[np.ndarray]]:
    """Each rolled-up date axis's block ids, one array per grain (in `plan.rollup_axes` order)."""
    out = {}
    for a, grains in plan.rollup_axes.items():
        dim = spec.dimensions[a]
        assert isinstance(dim, DateDimension)  # rollup_axes holds date axes only
        out[a] = [block_ids(dim, g) for g in grains]
    return out


def measure(
    true: dict[str, dict[int, np.ndarray]], plan: Any, spec: TableSpec, source: RandomSource
) -> dict[tuple[str, int], RollupRelease]:
    """Each aggregate's rollups on each date axis, released with its budget (after the charge)."""
    pieces = [(k, a) for k in sorted(true) for a in sorted(true[k])]
    blocks = axis_blocks(plan, spec)
    return {
        (k, a): time_rollups.release(
            true[k][a], blocks[a], sensitivity(k, plan), budget(k, plan), own, plan.rows_per_unit
        )
        for (k, a), own in zip(pieces, threads.children(source, len(pieces)))
    }


def stored(releases: dict[tuple[str, int], RollupRelease], plan: Any, spec: TableSpec) -> dict[str, np.ndarray]:
    """The arrays a build persists for its rollups (noisy block totals, and each grain's block ids)."""
    out: dict[str, np.ndarray] = {}
    for a, ids in axis_blocks(plan, spec).items():
        for g, one in zip(plan.rollup_axes[a], ids):
            out[f"{ARRAY_PREFIX}blocks#{a}#{g}"] = one
    for (k, a), r in releases.items():
        for g, values in zip(plan.rollup_axes[a], r.values):
            out[f"{ARRAY_PREFIX}{k}#{a}#{g}"] = values
    return out


def meta(releases: dict[tuple[str, int], RollupRelease], plan: Any, spec: TableSpec) -> dict[str, Any]:
    """Public facts of the rollups (the cube status shows them): axes, grains, budget, noise."""
    return {
        "share": time_rollups.ROLLUP_SHARE,
        "axes": {
            str(a): {"dimension": spec.dimensions[a].name, "grains": list(g)} for a, g in plan.rollup_axes.items()
        },
        "releases": {
            f"{k}#{a}": {
                plan.currency: budget(k, plan).amount,
                "sensitivity": r.mechanism.sensitivity,
                "block_variance": r.block_variance,
            }
            for (k, a), r in releases.items()
        },
    }


def split_arrays(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(the cube's arrays, the rollups') of a persisted build."""
    cube = {n: a for n, a in arrays.items() if not n.startswith(ARRAY_PREFIX)}
    return cube, {n[len(ARRAY_PREFIX) :]: a for n, a in arrays.items() if n.startswith(ARRAY_PREFIX)}
