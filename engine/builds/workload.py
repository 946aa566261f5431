"""A table's declared workload as the per-axis query shapes the share optimisation reads.

`storage.schema.WorkloadEntry` is a GROUP BY set or a SQL statement; the strategy
(`privacy.strategies.workload`) needs, per query, how many cells of each axis one answer cell sums:
1 on a grouped axis (a DATE_TRUNC or CASE group: its cells), a condition's cells on a filtered
axis, the whole axis on a free one. A SQL entry is planned like any query (a statement that does not
plan is refused at registration with the planner's message). Public facts only: the declaration.
"""

from __future__ import annotations

import math

import numpy as np

from engine.answers.assemble import labelled_cells
from engine.builds.axes import measure_classes
from engine.errors import QueryError
from engine.plan import QueryPlan
from engine.sql.bind import plan_query
from engine.synopses.cube import selected_cells
from privacy.accounting.split import DEFAULT_PRESENT_SHARE
from privacy.strategies import resolve
from privacy.strategies.cuboid_selection import MAX_CELLS
from privacy.strategies.workload import WorkloadQuery, ad_hoc, aggregate_split
from storage import sources
from storage.schema import TableSpec, WorkloadEntry

# The default workload's two-column GROUP BYs together weigh this many one-column ones (a pair with
# the date dimension — a series by category — twice another): dashboards chart a few pairs, not
# every pair equally (bench/workloads.py measures what undeclared pairs keep).
DEFAULT_PAIRS_WEIGHT = 2.0
# Each date dimension's coarser grains, charted as series (DATE_TRUNC): per declared granularity.
SERIES_GRAINS = {"day": (("month", 30), ("year", 365)), "month": (("quarter", 3), ("year", 12)), "year": ()}


def workload_queries(spec: TableSpec) -> tuple[WorkloadQuery, ...] | None:
    """The workload's query shapes — the declared ones in declaration order, or without a declaration
    the default (`default_workload`) — then the ad-hoc GROUP BYs at ``cube.ad_hoc_weight`` of their
    weight (`privacy.strategies.workload.ad_hoc`). None: no workload (``cube.workload: []``, or a table
    the default does not apply to)."""
    if spec.cube.workload is None:
        declared = default_workload(spec)
    else:
        declared = tuple(_query(spec, entry) for entry in spec.cube.workload)
    if not declared:
        return None
    weight = spec.cube.ad_hoc_weight * sum(q.weight for q in declared)
    return declared + (ad_hoc(len(spec.dimensions), weight) if weight > 0 else ())


def declared_cuboids(spec: TableSpec, queries: tuple[WorkloadQuery, ...] | None) -> list[tuple[int, ...]]:
    """On a wide table (`cuboids`, measured once), the columns of each declared statement that
    constrains or groups 3 or 4 of them, as a cuboid the build measures beside its pairs (at most
    `privacy.strategies.cuboid_selection.MAX_CELLS` cells, as a pick; a condition on a measure's
    class axis is not a column of it).
    The model would fill such an answer in from the pairs, and its interval span what they allow
    (`engine.answers.model_bounds`): a dashboard's declared 3-column GROUP BY is read from its own
    measured cuboid instead, with an exact bar. ``queries``: the table's `workload_queries`, the
    declared ones first. Public facts only: the declaration."""
    if not spec.cube.workload or spec.growth is not None or resolve(spec.cube.strategy, spec.shape) != "cuboids":
        return []
    out: list[tuple[int, ...]] = []
    for query in (queries or ())[: len(spec.cube.workload)]:
        axes = query.axes
        if 3 <= len(axes) <= 4 and math.prod(spec.shape[i] for i in axes) <= MAX_CELLS and axes not in out:
            out.append(axes)
    return out


def selection_rounds(spec: TableSpec, queries: tuple[WorkloadQuery, ...] | None) -> int | None:
    """The rounds of triple selection a table's COUNTs spend (`privacy.strategies.cuboid_selection`):
    ``cube.select_rounds`` where set; else the strategy's default (None: one per dimension) — except
    where the table declares a workload none of whose statements constrains or groups 3 or more
    columns: 0. The admin has said what the dashboards ask, and a 3-way pick serves none of it
    while its 10 % comes out of the pairs those queries read (bench/workloads.py). Public facts only."""
    if spec.cube.select_rounds is not None or not spec.cube.workload:
        return spec.cube.select_rounds
    declared = (queries or ())[: len(spec.cube.workload)]
    return None if any(len(q.axes) >= 3 for q in declared) else 0


def shaped(spec: TableSpec) -> bool:
    """Whether a workload shapes this table's build: a dense cube (`auto` while dense, `pairwise`,
    `marginals`) of two or more dimensions, measured once (a growing table's periods keep theirs)."""
    return _measured_once_with(spec, ("auto", "pairwise", "marginals"))


def shapes_cuboids(spec: TableSpec) -> bool:
    """Whether a declared workload sets a wide table's cuboid shares (`privacy.strategies.cuboids.
    workload_cuboid_shares`): `cuboids` measured once, a workload declared (the default one leaves
    the fixed rule, whose 1-way share was measured for ad-hoc queries: its optimum made the default's
    COUNTs 1.26× → 1.61× a per-query engine's error, docs/strategies.md) and no
    ``cube.one_way_share`` (the admin's own split wins)."""
    wide = _measured_once_with(spec, ("auto", "cuboids")) and resolve(spec.cube.strategy, spec.shape) == "cuboids"
    return wide and bool(spec.cube.workload) and spec.cube.one_way_share is None


def splits(spec: TableSpec) -> bool:
    """Whether a workload sets the budget's split between the aggregates: where it shapes the build
    (`shaped`), and on a wide table (`cuboids`, measured once), whose cuboid shares a declared one
    sets too (`shapes_cuboids`)."""
    return _measured_once_with(spec, ("auto", "pairwise", "marginals", "cuboids"))


def _measured_once_with(spec: TableSpec, strategies: tuple[str, ...]) -> bool:
    """Whether the table resolves to one of ``strategies``, has two or more dimensions and no growth."""
    resolved = resolve(spec.cube.strategy, spec.shape)
    return resolved in strategies and spec.growth is None and len(spec.dimensions) >= 2


def default_workload(spec: TableSpec) -> tuple[WorkloadQuery, ...]:
    """What BI tools send when nobody declared anything: the total and every one-column GROUP BY
    (COUNT, SUM, AVG) at weight 1, each date dimension's coarser series (`SERIES_GRAINS`) at 1, and
    every pair at `DEFAULT_PAIRS_WEIGHT` in all; () where no workload sets the split (`splits`). (A SUM
    over a measure's class axis is shaped too, its class axis riding along: `riding`.)"""
    if not splits(spec):
        return ()
    d = len(spec.dimensions)
    out = [WorkloadQuery((None,) * d)]
    for i, dim in enumerate(spec.dimensions):
        out.append(WorkloadQuery(tuple(1 if k == i else None for k in range(d))))
        for _, cells in SERIES_GRAINS.get(getattr(dim, "granularity", ""), ()) if dim.type == "date" else ():
            out.append(WorkloadQuery(tuple(cells if k == i else None for k in range(d))))
    pairs = [(i, j) for i in range(d) for j in range(i + 1, d)]
    dated = {i for i, dim in enumerate(spec.dimensions) if dim.type == "date"}
    weights = [2.0 if {i, j} & dated else 1.0 for i, j in pairs]
    for (i, j), w in zip(pairs, weights):
        lengths = tuple(1 if k in (i, j) else None for k in range(d))
        out.append(WorkloadQuery(lengths, DEFAULT_PAIRS_WEIGHT * w / sum(weights)))
    return tuple(out)


def _query(spec: TableSpec, entry: WorkloadEntry) -> WorkloadQuery:
    if entry.sql is None:
        grouped = {name.lower() for name in entry.group_by}
        return WorkloadQuery(tuple(1 if d.name.lower() in grouped else None for d in spec.dimensions), entry.weight)
    try:
        plan = plan_query(entry.sql, lambda name, _: spec if name.lower() == spec.name.lower() else None)
    except QueryError as exc:
        raise QueryError(f"cube.workload: {entry.sql[:80]!r} does not plan: {exc.detail}") from None
    return WorkloadQuery(_lengths(spec, plan), entry.weight, _asks(plan))


def _asks(plan: QueryPlan) -> tuple[tuple[str, str | None], ...]:
    """The aggregates a statement asks: COUNT(*) and COUNT(m) read the row counts, SUM(m) and AVG(m)
    the measure's SUM, a quantile the measure's COUNT per class."""
    out: list[tuple[str, str | None]] = []
    for agg in plan.aggregates:
        ask = ("count", None) if agg.func == "count" else (agg.func, agg.measure)
        if ask not in out:
            out.append(ask)
    return tuple(out)


def workload_weights(spec: TableSpec, keys: list[str], gaussian: bool) -> dict[str, float] | None:
    """The budget's split between the aggregates for the table's workload, declared or default
    (`aggregate_split`): COUNT(*), each SUM (over a class axis at its classes' cost) and each COUNT per
    class (what quantiles read) by what the workload asks of them, each nullable measure's COUNT(m) its default share
    (`DEFAULT_PRESENT_SHARE`, split between them). None — the default split — without a workload or
    where none sets the split (`splits`). On a wide table each query counts alike (its ratio to a
    per-query engine is taken as 1: the cuboids' own shares are not the workload's)."""
    queries = workload_queries(spec)
    if not queries or not splits(spec):
        return None
    measures = tuple(m.name for m in spec.measures)
    axes = measure_classes(spec)
    cost = {name: float(np.sum(c.bounds**2) / np.max(c.bounds) ** 2) for name, c in axes.items()}
    per_class = tuple(sources.measure_of(k) for k in keys if k.startswith("count:"))
    split = aggregate_split(spec.shape if shaped(spec) else None, queries, measures, gaussian, cost, per_class)
    weights = {sources.COUNT_KEY: split[("count", None)]} | {sources.sum_key(m): split[("sum", m)] for m in measures}
    weights |= {sources.class_count_key(m): split[("quantile", m)] for m in per_class}
    present = [k for k in keys if k.startswith("present:")]
    rest = (1.0 - (DEFAULT_PRESENT_SHARE if present else 0.0)) / sum(weights.values())
    return {k: rest * w for k, w in weights.items()} | {k: DEFAULT_PRESENT_SHARE / len(present) for k in present}


def _lengths(spec: TableSpec, plan: QueryPlan) -> tuple[int | None, ...]:
    """Per axis: the cells one answer cell sums (None: the whole axis) — on a grouped axis its
    cells over its groups, as the answer labels them (`assemble.labelled_cells`: one cell each, or a
    DATE_TRUNC unit's or a CASE group's)."""
    out: list[int | None] = []
    for axis, (dim, runs) in enumerate(zip(spec.dimensions, plan.selection)):
        cells = selected_cells(runs)
        if axis in plan.group_axes:
            groups = len(labelled_cells(plan, spec, axis))
            out.append(max(1, math.ceil(cells.size / max(groups, 1))))
        else:
            out.append(None if cells.size == dim.cells else int(cells.size))
    return tuple(out)
