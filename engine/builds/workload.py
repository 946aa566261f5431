"""A table's declared workload as the per-axis query shapes the share optimisation reads.

`storage.schema.WorkloadEntry` is a GROUP BY set or a SQL statement; the strategy
(`privacy.strategies.workload`) needs, per query, how many cells of each axis one answer cell sums:
1 on a grouped axis (a DATE_TRUNC or CASE group: its cells), a condition's cells on a filtered
axis, the whole axis on a free one. A SQL entry is planned like any query (a statement that does not
plan is refused at registration with the planner's message). Public facts only: the declaration.
"""

from __future__ import annotations

import math

from engine.answers.assemble import labelled_cells
from engine.errors import QueryError
from engine.plan import QueryPlan
from engine.sql.bind import plan_query
from engine.synopses.cube import selected_cells
from privacy.strategies.workload import WorkloadQuery
from storage.schema import TableSpec, WorkloadEntry


def workload_queries(spec: TableSpec) -> tuple[WorkloadQuery, ...] | None:
    """The declared workload's query shapes (None: nothing declared)."""
    if not spec.cube.workload:
        return None
    return tuple(_query(spec, entry) for entry in spec.cube.workload)


def _query(spec: TableSpec, entry: WorkloadEntry) -> WorkloadQuery:
    if entry.sql is None:
        grouped = {name.lower() for name in entry.group_by}
        return WorkloadQuery(tuple(1 if d.name.lower() in grouped else None for d in spec.dimensions), entry.weight)
    try:
        plan = plan_query(entry.sql, lambda name, _: spec if name.lower() == spec.name.lower() else None)
    except QueryError as exc:
        raise QueryError(f"cube.workload: {entry.sql[:80]!r} does not plan: {exc.detail}") from None
    return WorkloadQuery(_lengths(spec, plan), entry.weight)


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
