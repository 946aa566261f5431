"""Cube build steps (SPEC §2): bound contributions, aggregate, measure, prefix-sum.

Split out of the service so that tests can run the very same aggregation and prefix path with the
measurement step left out (`exact_cube`), which is how the answer path is checked against DuckDB.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from engine import pview, wide
from engine.cube import ARRAY_SEPARATOR, Cube, arrays_by_key, keyed_arrays
from privacy import budget, clipping, double_clipping, progress
from privacy.double_clipping import ClipChoice
from privacy.error import from_json as error_from_json
from privacy.prefix import prefix_sums
from privacy.sampler import RandomSource
from privacy.strategies import Measurement, MeasurementStrategy, strategy_for
from privacy import hdpview
from privacy.strategies.cuboids import CuboidRelease, CuboidsStrategy
from privacy.strategies.hdpview import BlockRelease, HDPViewStrategy, NonzeroCells
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
    return "COUNT(*)" if key == COUNT_KEY else f"SUM({sources.measure_of(key)})"


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build decides before it reads data: bounds, ε per aggregate, sensitivities."""

    epsilon: float
    shares: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    sensitivities: dict[str, float]
    histograms: dict[str, float] = field(default_factory=dict)  # measure → ε of its clipping histogram
    clipping: dict[str, dict[str, Any]] = field(default_factory=dict)  # public facts about the bounds

    def charges(self, strategy: str) -> list[Charge]:
        hist = [Charge(eps, f"clipping histogram ({self.methods[m]}): {m}") for m, eps in self.histograms.items()]
        out = []
        for k, eps in self.shares.items():
            if strategy == HDPViewStrategy.name and k == COUNT_KEY:  # HDPView's two steps on COUNT's share
                out += [Charge(eps * hdpview.RATIO, "cube partition (hdpview): random converge and cuts on COUNT(*)"),
                        Charge(eps - eps * hdpview.RATIO, "cube measurement (hdpview): COUNT(*) per block")]
            else:
                out.append(Charge(eps, f"cube measurement ({strategy}): {label(k)}"))
        return hist + out

    def nonnegative(self, key: str) -> bool:
        """Public: every contribution to this aggregate is ≥ 0 (a COUNT, or a SUM clipped to lo ≥ 0)."""
        return key == COUNT_KEY or self.bounds[sources.measure_of(key)][0] >= 0

    @property
    def methods(self) -> dict[str, str]:
        return {m: info["strategy"] for m, info in self.clipping.items()}

    def with_bounds(self, chosen: dict[str, ClipChoice]) -> BuildPlan:
        """The plan after data-driven bounds were chosen from released histograms."""
        bounds, sens, info = dict(self.bounds), dict(self.sensitivities), dict(self.clipping)
        for name, c in chosen.items():
            bounds[name] = (c.lo, c.hi)
            sens[sources.sum_key(name)] = clipping.sum_sensitivity(c.lo, c.hi)
            info[name] = {**info[name], "lo": c.lo, "hi": c.hi, "phi": c.phi, "tau": c.tau,
                          "histogram": list(c.noisy_counts)}
        return dataclasses.replace(self, bounds=bounds, sensitivities=sens, clipping=info)


def plan_build(record: TableRecord, remaining: float) -> BuildPlan:
    """Decide a build from public metadata: ε is the configured cube ε, else all that remains.

    Measures with data-driven clipping (``sbs``/``clasp``) get a histogram share of ε
    (``cube.clipping_share``, split evenly between them); the aggregates share the rest by the
    table's ``weights``, else by `budget.default_weights` (COUNT 20%, the SUMs the rest).
    """
    spec = record.spec
    keys = aggregate_keys(spec)
    weights = budget.default_weights(keys, COUNT_KEY)
    if spec.cube.weights:
        weights = {(COUNT_KEY if k == COUNT_KEY else sources.sum_key(k)): w for k, w in spec.cube.weights.items()}
    epsilon = spec.cube.epsilon or remaining
    driven = [m.name for m in spec.measures if m.clipping != "fixed"]
    hist_total = epsilon * spec.cube.clipping_share if driven else 0.0
    histograms = {name: hist_total / len(driven) for name in driven}
    shares = budget.split(epsilon - hist_total, keys, weights)
    bounds = {m.name: clipping.fixed_bounds(m.lo, m.hi) for m in spec.measures}
    sens = {COUNT_KEY: clipping.COUNT_SENSITIVITY}
    for m in spec.measures:
        sens[sources.sum_key(m.name)] = clipping.sum_sensitivity(*bounds[m.name])
    info = {m.name: {"strategy": m.clipping, "lo": m.lo, "hi": m.hi} for m in spec.measures}
    return BuildPlan(epsilon, shares, bounds, sens, histograms, info)


def true_histograms(db: Database, record: TableRecord, plan: BuildPlan) -> dict[str, np.ndarray]:
    """Un-noised bucket counts of each data-driven measure; only `choose_bounds` sees them."""
    out = {}
    for name in plan.histograms:
        m = record.spec.measure(name)
        edges = double_clipping.histogram_edges(m.lo, m.hi)
        out[name] = sources.measure_histogram(db, record.spec.source, record.source_table, record.spec, name, edges)
    return out


def choose_bounds(true_hists: dict[str, np.ndarray], plan: BuildPlan, source: RandomSource) -> BuildPlan:
    """Release each histogram (charged already) and derive the clip range from it alone."""
    chosen = {}
    for name, counts in true_hists.items():
        noisy = double_clipping.histogram_mechanism(counts, plan.histograms[name], source)
        lo, hi = plan.bounds[name]
        chosen[name] = double_clipping.choose_bounds(noisy, lo, hi, plan.shares[sources.sum_key(name)],
                                                     plan.methods[name], edges=double_clipping.histogram_edges(lo, hi),
                                                     epsilon_histogram=plan.histograms[name])
    return plan.with_bounds(chosen)


def table_strategy(spec: TableSpec) -> MeasurementStrategy:
    """The strategy a table's cube configuration resolves to ("auto": by its public shape)."""
    return strategy_for(spec.cube.strategy, spec.shape, spec.named_cuboids())


def true_cuboids(db: Database, record: TableRecord, plan: BuildPlan) -> dict[str, Any]:
    """The un-noised cuboids — the dense base cuboid per aggregate, or a wide table's measured
    cuboids. Never released: they go straight into `measure`."""
    spec = record.spec
    strategy = table_strategy(spec)
    if isinstance(strategy, CuboidsStrategy):
        return sources.marginal_cuboids(db, spec.source, record.source_table, spec, plan.bounds,
                                        strategy.cuboids(spec.shape))
    if isinstance(strategy, HDPViewStrategy):  # COUNT first: its measurement fixes the partition
        coords, values = sources.nonzero_cells(db, spec.source, record.source_table, spec, plan.bounds)
        return {k: NonzeroCells(spec.shape, coords, v) for k, v in values.items()}
    return sources.base_cuboids(db, spec.source, record.source_table, spec, plan.bounds)


BUILD_BLAS_THREADS: int | None = 1  # None: leave BLAS's own thread count (bench/build_speed.py compares)


def measure(
    true: dict[str, Any], plan: BuildPlan, strategy: MeasurementStrategy, source: RandomSource
) -> dict[str, Measurement]:
    """Each aggregate's ε-share release; only call after the ledger charge has committed.

    BLAS runs single-threaded here: the fits issue many small matrix products, and OpenBLAS's own
    threads fighting the server's on 2 cores made pairwise builds 2–7× slower (issue #16).
    """
    with threadpool_limits(limits=BUILD_BLAS_THREADS, user_api="blas"):
        return _measure_all(true, plan, strategy, source)


def _measure_all(true: dict[str, Any], plan: BuildPlan, strategy: MeasurementStrategy,
                 source: RandomSource) -> dict[str, Measurement]:
    out = {}
    for i, k in enumerate(true):
        with progress.part(i / len(true), (i + 1) / len(true), label(k)):
            out[k] = strategy.measure(true[k], plan.sensitivities[k], plan.shares[k], source,
                                      nonnegative=plan.nonnegative(k))
    return out


def cube_meta(record: TableRecord, plan: BuildPlan, strategy: str, ms: dict[str, Measurement]) -> dict[str, Any]:
    """Public facts about a build (all data-independent or already noisy)."""
    return {
        "strategy": strategy,
        "epsilon": plan.epsilon,
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "shape": list(record.spec.shape),
        "dimension_names": [d.name for d in record.spec.dimensions],
        "aggregates": {
            label(k): {"epsilon": m.epsilon, "sensitivity": m.sensitivity, "noise_scale": m.noise_scale,
                       **_named_cuboids(m.details, record.spec)}
            for k, m in ms.items()
        },
        "clipping": plan.clipping,
        "errors": {k: m.error.to_json() for k, m in ms.items()},
    }


def _named_cuboids(details: dict[str, Any], spec: TableSpec) -> dict[str, Any]:
    """A strategy's cuboid lists by axis position, shown with the dimension names."""
    names = [d.name for d in spec.dimensions]
    out = dict(details)
    for key in ("marginals", "pairwise", "cuboids"):
        info = out.get(key)
        if isinstance(info, dict):
            info = dict(info)
            for field_name in ("measured", "marginals"):
                if field_name in info:
                    info[field_name] = [[names[i] for i in c] for c in info[field_name]]
            out[key] = info
    return out


def stored_arrays(ms: dict[str, Measurement]) -> dict[str, np.ndarray]:
    """What a build persists: each aggregate's noisy prefix array, and its error model's arrays."""
    out: dict[str, np.ndarray] = {}
    for k, m in ms.items():
        if isinstance(m.noisy, CuboidRelease):
            out |= wide.stored_arrays(k, m.noisy)
        elif isinstance(m.noisy, BlockRelease):
            out |= pview.stored_arrays(k, m.noisy)
        else:
            out[k] = prefix_sums(m.noisy) if m.prefix is None else m.prefix
    for k, m in ms.items():
        if isinstance(m.noisy, (CuboidRelease, BlockRelease)):
            continue
        out |= keyed_arrays(k, getattr(m.error, "arrays", dict)())  # an error model's own arrays
    return out


def loaded_cube(table: str, build_id: str, arrays: dict[str, np.ndarray],
                meta: dict[str, Any]) -> Cube | wide.WideCube | pview.PViewCube:
    """A persisted cube back in memory: prefix arrays by aggregate, error models with their arrays."""
    if wide.is_wide(meta):
        return wide.loaded(table, build_id, arrays, meta)
    if pview.is_pview(meta):
        return pview.loaded(table, build_id, arrays, meta)
    prefixes = {k: a for k, a in arrays.items() if ARRAY_SEPARATOR not in k}
    kept = arrays_by_key(arrays)
    errors = {k: error_from_json(v, kept.get(k)) for k, v in meta["errors"].items()}
    return Cube(table, build_id, prefixes, errors, meta)


def exact_cube(db: Database, record: TableRecord) -> Cube | wide.WideCube | pview.PViewCube:
    """TEST-ONLY: the cube on the true clipped cuboids, no noise, nothing charged or stored.

    Used to check that the answer path equals DuckDB's own SUM/COUNT over the clipped data
    (the identity on the true cube). No endpoint reaches it.
    """
    plan = plan_build(record, record.epsilon_total)
    true = true_cuboids(db, record, plan)
    if isinstance(table_strategy(record.spec), HDPViewStrategy):
        cells = next(iter(true.values())).coords
        return pview.exact_view(record.name, record.spec.shape, cells, {k: v.values for k, v in true.items()},
                                {"clipping": plan.clipping})
    if isinstance(table_strategy(record.spec), CuboidsStrategy):
        meta = {"dimension_names": [d.name for d in record.spec.dimensions], "clipping": plan.clipping}
        return wide.exact(record.name, record.spec.shape, true, meta)
    return Cube(record.name, "exact", {k: prefix_sums(v) for k, v in true.items()}, {}, {"strategy": "exact"})
