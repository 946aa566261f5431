"""Cube build steps: bound contributions, aggregate, measure, prefix-sum.

Split out of the service so that tests can run the very same aggregation and prefix path with the
measurement step left out (`exact_cube`), which is how the answer path is checked against DuckDB.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from engine.builds import rollups
from engine.builds.axes import measure_classes
from engine.builds.workload import (
    declared_cuboids,
    selection_rounds,
    shapes_cuboids,
    workload_queries,
    workload_weights,
)
from engine.synopses import kinds as synopses
from engine.synopses.cube import keyed_arrays
from engine.synopses.rolled import RolledUp
from privacy.accounting import split as budget
from privacy.accounting.currencies import Budget
from privacy.clipping import bounds as clipping
from privacy.clipping import data_driven as double_clipping
from privacy.clipping import measure_axis, units
from privacy.clipping.data_driven import ClipChoice
from privacy.clipping.measure_axis import MeasureClasses
from privacy.estimation.cuboid_fit import Axes
from privacy.estimation.error import BootstrapModelError, ClassAxisError, PersistedErrorModel
from privacy.estimation.prefix import prefix_sums
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import threads
from privacy.strategies import STRATEGIES, Measurement, MeasurementStrategy, strategy_for
from privacy.strategies.base import NonzeroCells
from privacy.strategies.cuboids import shape_of
from storage import sources
from storage.catalog import TableRecord
from storage.database import Database
from storage.ledger import Charge
from storage.schema import TableSpec

COUNT_KEY = sources.COUNT_KEY


def aggregate_keys(spec: TableSpec) -> list[str]:
    """COUNT(*), one SUM per measure, COUNT per class of each measure whose axis asks for it, and
    COUNT(m) of each nullable measure (SQL's AVG denominator)."""
    return (
        [COUNT_KEY]
        + [sources.sum_key(m.name) for m in spec.measures]
        + [sources.class_count_key(m.name) for m in spec.measures if m.axis is not None and m.axis.count]
        + [sources.present_key(m.name) for m in spec.measures if m.nullable]
    )


def is_count(key: str) -> bool:
    """A COUNT release (of rows, rows per class, or rows where a measure is present): sensitivity 1 per row."""
    return key == COUNT_KEY or key.startswith(("count:", "present:"))


def _class_axis(key: str, axes: dict[str, MeasureClasses]) -> bool:
    """Whether this aggregate is released over its measure's class axis (its SUM or class COUNT)."""
    return key.startswith(("sum:", "count:")) and sources.measure_of(key) in axes


def label(key: str) -> str:
    """Public name of an aggregate key: 'COUNT(*)', 'SUM(salary)', 'COUNT(*) per class of salary'."""
    if key == COUNT_KEY:
        return "COUNT(*)"
    if key.startswith("count:"):
        return f"COUNT(*) per class of {sources.measure_of(key)}"
    if key.startswith("present:"):
        return f"COUNT({sources.measure_of(key)})"
    return f"SUM({sources.measure_of(key)})"


def aggregate_shapes(spec: TableSpec) -> dict[str, tuple[int, ...]]:
    """The cuboid each aggregate is released over: the table's shape, plus the class axis for a
    measure's SUM (and COUNT per class) when the measure has one."""
    axes = measure_classes(spec)
    return {
        k: spec.shape + ((axes[sources.measure_of(k)].count,) if _class_axis(k, axes) else ())
        for k in aggregate_keys(spec)
    }


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build decides before it reads data: bounds, budget per aggregate, sensitivities.
    Amounts (``epsilon``, ``shares``, ``histograms``, ``unit_histogram``) are in ``currency``: pure ε,
    or ρ for a zCDP table."""

    epsilon: float
    shares: dict[str, float]
    bounds: dict[str, tuple[float, float]]
    sensitivities: dict[str, float]
    histograms: dict[str, float] = field(default_factory=dict)  # measure → ε of its clipping histogram
    clipping: dict[str, dict[str, Any]] = field(default_factory=dict)  # public facts about the bounds
    axes: dict[str, MeasureClasses] = field(default_factory=dict)  # measure → its classes
    rows_per_unit: int = 1  # k: a privacy unit's rows; every sensitivity is k× a row's
    unit_histogram: float = 0.0  # ε of the rows-per-unit histogram ("max_rows": "auto"); 0: k declared
    unit_facts: dict[str, Any] = field(default_factory=dict)  # public: the chosen k, the noisy share truncated
    currency: str = "epsilon"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # each aggregate's released shape
    rollups: dict[str, float] = field(default_factory=dict)  # aggregate → the amount its time rollups take
    rollup_axes: dict[int, tuple[str, ...]] = field(default_factory=dict)  # date axis → grains rolled up
    rollup_names: dict[int, str] = field(default_factory=dict)  # date axis → its dimension's name

    def budget(self, amount: float) -> Budget:
        return Budget(amount, self.currency)  # type: ignore[arg-type]

    def pure_epsilon(self, amount: float) -> float:
        """The ε a pure-ε-only step (the histograms) runs at from ``amount`` (`Budget.pure_epsilon`)."""
        return self.budget(amount).pure_epsilon

    def charges(self, strategy: MeasurementStrategy) -> list[Charge]:
        """The ledger entries of a build: histograms first, then each aggregate's share as the
        strategy states it (`MeasurementStrategy.ledger_parts`), each with its ε (none for a
        Gaussian release) and its ρ: the amount itself under ρ; under pure ε the tight ρ of the
        strategy's Laplace releases, or ε²/2 for the histograms and where k or Δ is chosen from data
        after the charge ("auto" rows per unit, sbs/clasp clipping: the releases' grid is not known yet)."""
        hist = [
            self._pure_charge(eps, f"clipping histogram ({self.methods[m]}): {m}") for m, eps in self.histograms.items()
        ]
        if self.unit_histogram:
            hist.insert(
                0, self._pure_charge(self.unit_histogram, "privacy unit bound (auto): histogram of rows per unit")
            )
        return (
            hist
            + [
                self._part_charge(strategy, k, amount, purpose)
                for k, eps in self.shares.items()
                for amount, purpose in strategy.ledger_parts(label(k), eps)
            ]
            + [self._rollup_charge(k, amount) for k, amount in self.rollups.items()]
        )

    def _rollup_charge(self, key: str, amount: float) -> Charge:
        """A time rollup release (`privacy.strategies.time_rollups`): one grid Laplace under ε, one
        discrete Gaussian under ρ (no pure ε)."""
        grains = "; ".join(f"{' and '.join(g)} of {self.rollup_names[a]}" for a, g in self.rollup_axes.items())
        purpose = f"time rollups: {label(key)} by {grains}"
        return Charge(None, purpose, amount) if self.currency == "rho" else Charge(amount, purpose)

    def _pure_charge(self, amount: float, purpose: str) -> Charge:
        if self.currency == "rho":
            return Charge(self.pure_epsilon(amount), purpose, amount)
        return Charge(amount, purpose)

    def _part_charge(self, strategy: MeasurementStrategy, key: str, amount: float, purpose: str) -> Charge:
        if self.currency == "rho":
            return Charge(None if strategy.laplace_only else self.pure_epsilon(amount), purpose, amount)
        if (
            self.unit_histogram
            or key not in self.shapes
            or (key.startswith("sum:") and sources.measure_of(key) in self.histograms)
        ):
            return Charge(amount, purpose)  # k or Δ is chosen after the charge: the ε²/2 bound holds whatever they are
        rho = strategy.for_aggregate(is_count(key)).part_rho(
            amount, self.shapes[key], self.sensitivities[key], self.rows_per_unit, self.nonnegative(key)
        )
        return Charge(amount, purpose, min(rho, amount * amount / 2.0))

    def nonnegative(self, key: str) -> bool:
        """Public: every contribution to this aggregate is ≥ 0 (a COUNT, or a SUM clipped to lo ≥ 0)."""
        return is_count(key) or self.bounds[sources.measure_of(key)][0] >= 0

    @property
    def methods(self) -> dict[str, str]:
        return {m: info["strategy"] for m, info in self.clipping.items()}

    def with_rows_per_unit(self, k: int, facts: dict[str, Any]) -> BuildPlan:
        """The plan once k is chosen ("max_rows": "auto"): every sensitivity k× a row's."""
        scale = k / self.rows_per_unit
        return dataclasses.replace(
            self,
            rows_per_unit=k,
            unit_facts=facts,
            sensitivities={key: v * scale for key, v in self.sensitivities.items()},
        )

    def with_bounds(self, chosen: dict[str, ClipChoice]) -> BuildPlan:
        """The plan after data-driven bounds were chosen from released histograms."""
        bounds, sens, info = dict(self.bounds), dict(self.sensitivities), dict(self.clipping)
        for name, c in chosen.items():
            bounds[name] = (c.lo, c.hi)
            sens[sources.sum_key(name)] = self.rows_per_unit * clipping.sum_sensitivity(c.lo, c.hi)
            info[name] = {
                **info[name],
                "lo": c.lo,
                "hi": c.hi,
                "phi": c.phi,
                "tau": c.tau,
                "histogram": list(c.noisy_counts),
            }
        return dataclasses.replace(self, bounds=bounds, sensitivities=sens, clipping=info)


def plan_build(record: TableRecord, remaining: float) -> BuildPlan:
    """Decide a build from public metadata: the amount (ε, or ρ for a zCDP table) is the configured
    cube share (cube.epsilon / cube.rho), else all that remains.

    Measures with data-driven clipping (``sbs``/``clasp``) get a histogram share of ε
    (``cube.clipping_share``, split evenly between them); the aggregates share the rest by the
    table's ``weights``, else by its workload (`workload_weights`), else by `budget.default_weights`
    (COUNT 20%, the SUMs the rest).
    """
    spec = record.spec
    keys = aggregate_keys(spec)
    weights = workload_weights(spec, keys, spec.currency == "rho") or budget.default_weights(
        keys, COUNT_KEY, [k for k in keys if k.startswith("present:")]
    )
    if spec.cube.weights:
        weights = {(k if is_count(k) else sources.sum_key(k)): w for k, w in spec.cube.weights.items()}
    axes = measure_classes(spec)
    if axes:
        _check_axis_strategy(spec)
    epsilon = spec.cube_amount or remaining
    driven = [m.name for m in spec.measures if m.clipping != "fixed"]
    hist_total = epsilon * spec.cube.clipping_share if driven else 0.0
    histograms = {name: hist_total / len(driven) for name in driven}
    unit_eps = epsilon * spec.privacy_unit.auto_share if spec.auto_rows_per_unit else 0.0  # type: ignore[union-attr]
    rolled = rollups.rollup_axes(spec)
    shares, rollup_amounts = rollups.split_shares(rolled, budget.split(epsilon - hist_total - unit_eps, keys, weights))
    bounds = {m.name: clipping.fixed_bounds(m.lo, m.hi) for m in spec.measures}
    sens = {COUNT_KEY: clipping.COUNT_SENSITIVITY}
    for m in spec.measures:
        sens[sources.sum_key(m.name)] = clipping.sum_sensitivity(*bounds[m.name])
        if m.nullable:  # one row adds 1 to one cell's COUNT(m)
            sens[sources.present_key(m.name)] = clipping.COUNT_SENSITIVITY
    for name in axes:  # normalised class sums: one row moves one cell by |v|/u_k ≤ 1 (privacy.clipping.measure_axis)
        sens[sources.sum_key(name)] = measure_axis.CLASS_SUM_SENSITIVITY
        if sources.class_count_key(name) in keys:  # one row adds 1 to one (cell, class) count
            sens[sources.class_count_key(name)] = clipping.COUNT_SENSITIVITY
    # A privacy unit contributes at most k rows (truncated in the source's aggregate), each moving
    # the release by at most a row's sensitivity: L1 sensitivity k× for every aggregate.
    k = spec.rows_per_unit
    sens = {key: k * v for key, v in sens.items()}
    info: dict[str, dict[str, Any]] = {m.name: {"strategy": m.clipping, "lo": m.lo, "hi": m.hi} for m in spec.measures}
    for name, classes in axes.items():
        info[name]["axis"] = classes.to_json() | {"cost_factor": round(classes.cost_factor(*bounds[name]), 4)}
    return BuildPlan(
        epsilon,
        shares,
        bounds,
        sens,
        histograms,
        info,
        axes,
        k,
        unit_eps,
        currency=record.currency,
        shapes=aggregate_shapes(spec),
        rollups=rollup_amounts,
        rollup_axes=rolled,
        rollup_names={a: spec.dimensions[a].name for a in rolled},
    )


def true_unit_counts(db: Database, record: TableRecord) -> tuple[np.ndarray, np.ndarray]:
    """Rows per privacy unit (n, units with n): only `choose_rows_per_unit` sees them."""
    spec = record.spec
    return sources.unit_row_counts(db, spec.source, record.source_table, spec)


def choose_rows_per_unit(
    counts: tuple[np.ndarray, np.ndarray], plan: BuildPlan, record: TableRecord, source: RandomSource
) -> tuple[BuildPlan, TableRecord]:
    """Release the rows-per-unit histogram (charged already), read k from it alone, and return the
    plan and record that build with k (`privacy.clipping.units`)."""
    unit = record.spec.privacy_unit
    assert unit is not None
    eps = plan.pure_epsilon(plan.unit_histogram)
    noisy = units.release(units.bucketed(*counts), eps, source)
    k = units.choose_k(noisy, unit.auto_quantile)
    facts = {
        "max_rows": k,
        "auto": True,
        "quantile": unit.auto_quantile,
        "epsilon": eps,
        "noisy_share_of_rows_truncated": round(units.truncated_share(noisy, k, eps), 4),
        "histogram_edges": units.bucket_edges().tolist(),
        "histogram": [round(float(x), 3) for x in noisy],
    }
    return plan.with_rows_per_unit(k, facts), dataclasses.replace(record, spec=record.spec.with_rows_per_unit(k))


def _check_axis_strategy(spec: TableSpec) -> None:
    """A measure axis needs a strategy that can release the class axis (`MeasurementStrategy.axis_refusal`);
    one whose model answers shift class sums by counts per class needs them on a signed measure."""
    strategy = table_strategy(spec)
    if strategy.axis_refusal is not None:
        able = sorted(name for name, cls in STRATEGIES.items() if cls.axis_refusal is None)
        raise ValueError(
            f"a measure axis needs one of the strategies {able + ['auto']}; {strategy.name!r} is refused: "
            f"{strategy.axis_refusal}"
        )
    for m in spec.measures:
        if strategy.signed_axis_needs_counts and m.axis is not None and m.lo < 0 and not m.axis.count:
            raise ValueError(
                f"measure {m.name!r}: with the {strategy.name!r} strategy an axis on a signed measure needs "
                '"count": true — answers no measured cuboid holds shift the class sums by the '
                "counts per class to fit their model"
            )


def true_histograms(db: Database, record: TableRecord, plan: BuildPlan) -> dict[str, np.ndarray]:
    """Un-noised bucket counts of each data-driven measure; only `choose_bounds` sees them."""
    out = {}
    for name in plan.histograms:
        m = record.spec.declared_measure(name)
        edges = double_clipping.histogram_edges(m.lo, m.hi)
        out[name] = sources.measure_histogram(db, record.spec.source, record.source_table, record.spec, name, edges)
    return out


def choose_bounds(true_hists: dict[str, np.ndarray], plan: BuildPlan, source: RandomSource) -> BuildPlan:
    """Release each histogram (charged already) and derive the clip range from it alone."""
    chosen = {}
    k = plan.rows_per_unit  # a unit moves k histogram counts: the histogram at ε is the 1-row one at ε/k
    for name, counts in true_hists.items():
        eps_histogram = plan.pure_epsilon(plan.histograms[name]) / k
        noisy = double_clipping.histogram_mechanism(counts, eps_histogram, source)
        lo, hi = plan.bounds[name]
        # the clip objective trades bias against the SUM's noise variance, written for Laplace at ε:
        # a ρ share enters as the ε whose Laplace has the Gaussian's variance (Budget.variance_epsilon)
        eps_sum = plan.budget(plan.shares[sources.sum_key(name)]).variance_epsilon / k
        chosen[name] = double_clipping.choose_bounds(
            noisy,
            lo,
            hi,
            eps_sum,
            plan.methods[name],
            edges=double_clipping.histogram_edges(lo, hi),
            epsilon_histogram=eps_histogram,
        )
    return plan.with_bounds(chosen)


def table_strategy(spec: TableSpec) -> MeasurementStrategy:
    """The strategy a table's cube configuration resolves to ("auto": by its public shape)."""
    declared = math.prod(d.size for d in spec.dimensions) / math.prod(spec.shape)  # without outside cells
    queries = workload_queries(spec)
    named = spec.named_cuboids()
    return strategy_for(
        spec.cube.strategy,
        spec.shape,
        named + [s for s in declared_cuboids(spec, queries) if s not in named],
        declared,
        spec.cube.estimator,
        spec.cube.one_way_share,
        queries,
        selection_rounds(spec, queries),
        spec.cube.select_share,
        shapes_cuboids(spec),
    )


def fit_seconds(spec: TableSpec) -> float:
    """About how many CPU seconds of the table's build could run on worker processes (public shapes,
    a measure's class axis included; `MeasurementStrategy.fit_seconds`)."""
    strategy = table_strategy(spec)
    return sum(
        strategy.for_aggregate(is_count(k)).fit_seconds(tuple(shape)) for k, shape in aggregate_shapes(spec).items()
    )


def true_cuboids(db: Database, record: TableRecord, plan: BuildPlan) -> dict[str, Any]:
    """The un-noised aggregates the table's strategy measures, in the form it states it reads
    (`MeasurementStrategy.reads`). Never released: they go straight into `measure`."""
    strategy = table_strategy(record.spec)
    return _READERS[strategy.reads](db, record, plan, strategy)


def _base_input(db: Database, record: TableRecord, plan: BuildPlan, strategy: MeasurementStrategy) -> dict[str, Any]:
    """The dense base cuboid per aggregate, a measure's class axis appended (`_with_class_axes`)."""
    spec = record.spec
    read_with_base: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if plan.axes:  # the first axis is read in the base cuboid's pass over the rows
        name, classes = next(iter(plan.axes.items()))
        true, read_with_base[name] = sources.base_and_class_cuboids(
            db,
            spec.source,
            record.source_table,
            spec,
            plan.bounds,
            name,
            list(classes.edges),
            list(classes.closed_above),
            classes.bounds.tolist(),
        )
    else:
        true = sources.base_cuboids(db, spec.source, record.source_table, spec, plan.bounds)
    return _with_class_axes(
        true,
        plan,
        lambda name, classes: (
            read_with_base.get(name)
            or sources.class_cuboids(
                db,
                spec.source,
                record.source_table,
                spec,
                plan.bounds,
                name,
                list(classes.edges),
                list(classes.closed_above),
                classes.bounds.tolist(),
            )
        ),
    )


def _cuboid_input(db: Database, record: TableRecord, plan: BuildPlan, strategy: MeasurementStrategy) -> dict[str, Any]:
    """The cuboids ``strategy.cuboids(shape)`` names, per aggregate; over a measure's class axis the
    class is one more attribute of the lattice."""
    spec = record.spec
    cuboids_of = strategy.inputs  # type: ignore[attr-defined]
    true = sources.marginal_cuboids(db, spec.source, record.source_table, spec, plan.bounds, cuboids_of(spec.shape))
    return _with_class_axes(
        true,
        plan,
        lambda name, classes: sources.class_marginal_cuboids(
            db,
            spec.source,
            record.source_table,
            spec,
            plan.bounds,
            name,
            list(classes.edges),
            list(classes.closed_above),
            classes.bounds.tolist(),
            cuboids_of(spec.shape + (classes.count,)),
        ),
    )


def _with_class_axes(
    true: dict[str, Any], plan: BuildPlan, read: Callable[[str, MeasureClasses], tuple[Any, ...]]
) -> dict[str, Any]:
    """The aggregates a build measures: a measure's class SUM (``read``'s second part) replaces its
    plain SUM (Σ_k u_k·s_k is that SUM), its COUNT per class (the first) is added where released."""
    for name, classes in plan.axes.items():
        counts, sums = read(name, classes)
        true[sources.sum_key(name)] = sums
        if sources.class_count_key(name) in plan.shares:
            true[sources.class_count_key(name)] = counts
    return {k: true[k] for k in plan.shares}


def _cell_input(db: Database, record: TableRecord, plan: BuildPlan, strategy: MeasurementStrategy) -> dict[str, Any]:
    """The base cuboid's non-empty cells, per aggregate (COUNT first: HDPView's partition)."""
    spec = record.spec
    coords, values = sources.nonzero_cells(db, spec.source, record.source_table, spec, plan.bounds)
    return {k: NonzeroCells(spec.shape, coords, values[k]) for k in plan.shares}


_READERS = {"base": _base_input, "cuboids": _cuboid_input, "cells": _cell_input}


BUILD_BLAS_THREADS: int | None = 1  # None: leave BLAS's own thread count (bench/build_speed.py compares)
BUILD_THREADS = threads.default_threads()  # the measure phase's threads (`privacy.parallel.threads`)


def measure(
    true: dict[str, Any], plan: BuildPlan, strategy: MeasurementStrategy, source: RandomSource
) -> dict[str, Measurement]:
    """Each aggregate's ε-share release; only call after the ledger charge has committed.

    BLAS runs single-threaded here: the fits issue many small matrix products, and OpenBLAS's own
    threads fighting the server's on 2 cores made pairwise builds 2–7× slower.
    """
    with threadpool_limits(limits=BUILD_BLAS_THREADS, user_api="blas"), threads.allowed(BUILD_THREADS):
        return _measure_all(true, plan, strategy, source)


def _measure_all(
    true: dict[str, Any], plan: BuildPlan, strategy: MeasurementStrategy, source: RandomSource
) -> dict[str, Measurement]:
    """The aggregates' releases are independent (each its own share of the budget): measured on the
    build's threads, each from its own child of ``source`` made in order (`privacy.parallel.threads`)."""
    keys = list(true)
    pieces = list(zip(keys, threads.children(source, len(keys))))

    def one(piece: tuple[str, RandomSource]) -> Measurement:
        k, own = piece
        m = strategy.for_aggregate(is_count(k)).measure(
            true[k],
            plan.sensitivities[k],
            plan.budget(plan.shares[k]),
            own,
            nonnegative=plan.nonnegative(k),
            coordinates=plan.rows_per_unit,
        )
        if k.startswith("sum:") and sources.measure_of(k) in plan.axes and strategy.synopsis == "dense":
            m = on_class_scale(m, plan.axes[sources.measure_of(k)])  # (other synopses rescale their own)
        return m

    # A strategy whose later aggregates reuse the first one's release measures them in order.
    with contextlib.nullcontext() if strategy.independent_aggregates else threads.allowed(1):
        return dict(zip(keys, threads.parallel_map(one, pieces, label=lambda i: label(keys[i]), queued=True)))


def on_class_scale(m: Measurement, classes: MeasureClasses) -> Measurement:
    """A normalised class-sum release rescaled to the measure's units (post-processing): cell values
    times u_k, the error model told the class weights, bootstrap replicates rescaled the same way."""
    u = classes.bounds
    inner = m.error
    assert isinstance(inner, PersistedErrorModel)  # a dense release's model: the class axis scales it
    if isinstance(inner, BootstrapModelError):
        inner = BootstrapModelError(inner.linear, measure_axis.rescale_prefix(inner.replicates, u))
    return dataclasses.replace(m, noisy=m.noisy * u, error=ClassAxisError(inner, tuple(u.tolist())))


def cube_meta(
    record: TableRecord, plan: BuildPlan, strategy: MeasurementStrategy, ms: dict[str, Measurement]
) -> dict[str, Any]:
    """Public facts about a build (all data-independent or already noisy)."""
    return {
        "strategy": strategy.name,
        "synopsis": strategy.synopsis,
        "epsilon": plan.epsilon,
        "currency": plan.currency,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "shape": list(record.spec.shape),
        "dimension_names": [d.name for d in record.spec.dimensions],
        "aggregates": {
            label(k): {
                plan.currency: m.epsilon,
                "sensitivity": m.sensitivity,
                "noise_scale": m.noise_scale,
                **_named_cuboids(m.details, _axis_names(record.spec, k, plan)),
            }
            for k, m in ms.items()
        },
        "clipping": plan.clipping,
        "errors": {k: m.error.to_json() for k, m in ms.items()},
        **(
            {
                "privacy_unit": {
                    "column": record.spec.privacy_unit.column,
                    "max_rows": plan.rows_per_unit,
                    **plan.unit_facts,
                }
            }
            if record.spec.privacy_unit is not None
            else {}
        ),
    }


def _axis_names(spec: TableSpec, key: str, plan: BuildPlan) -> list[str]:
    """The names of the axes an aggregate was released over (a class axis last)."""
    names = [d.name for d in spec.dimensions]
    if _class_axis(key, plan.axes):
        names.append(f"class of {sources.measure_of(key)}")
    return names


def _named_cuboids(details: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A strategy's cuboid lists by axis position, shown with the axis names."""
    out = dict(details)
    for key in ("marginals", "pairwise", "cuboids"):
        info = out.get(key)
        if isinstance(info, dict):
            info = dict(info)
            for field_name in ("measured", "marginals", "selected", "used"):
                if field_name in info:
                    info[field_name] = [[names[i] for i in c] for c in info[field_name]]
            out[key] = info
    return out


def stored_arrays(ms: dict[str, Measurement]) -> dict[str, np.ndarray]:
    """What a build persists: a release that keeps its own arrays (``arrays()``: measured cuboids,
    blocks) under ``<key>#<name>``; a dense one its noisy prefix array and its error model's arrays."""
    out: dict[str, np.ndarray] = {}
    for k, m in ms.items():
        own = getattr(m.noisy, "arrays", None)
        if own is not None:
            out |= keyed_arrays(k, own())
            continue
        out[k] = prefix_sums(m.noisy) if m.prefix is None else m.prefix
        out |= keyed_arrays(k, getattr(m.error, "arrays", dict)())  # an error model's own arrays
    return out


def loaded_cube(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Any:
    """A persisted cube back in memory (`engine.synopses.kinds`), with its time rollups where the
    build released them (`engine.synopses.rolled`)."""
    if "time_rollups" not in meta:
        return synopses.loaded(table, build_id, arrays, meta)
    own, rolled_arrays = rollups.split_arrays(arrays)
    return RolledUp(synopses.loaded(table, build_id, own, meta), rolled_arrays, meta["time_rollups"])


def _measured_only(strategy: Any, true: dict[Axes, np.ndarray]) -> dict[Axes, np.ndarray]:
    """One aggregate's true cuboids without the candidate triples a selecting strategy reads."""
    measured = set(strategy.cuboids(shape_of(true)))
    return {s: a for s, a in true.items() if s in measured}


def exact_cube(db: Database, record: TableRecord) -> Any:
    """TEST-ONLY: the cube on the true clipped aggregates, no noise, nothing charged or stored.

    Used to check that the answer path equals DuckDB's own SUM/COUNT over the clipped data
    (the identity on the true cube). No endpoint reaches it.
    """
    plan = plan_build(record, record.epsilon_total)
    meta = {"dimension_names": [d.name for d in record.spec.dimensions], "clipping": plan.clipping}
    strategy = table_strategy(record.spec)
    true = true_cuboids(db, record, plan)
    if strategy.reads == "cuboids":  # the cuboids every build measures, not the candidates it picks from
        true = {k: _measured_only(strategy, c) for k, c in true.items()}
    return synopses.exact(strategy.synopsis, record.name, record.spec.shape, true, meta, plan.axes)
