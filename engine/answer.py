"""Answering a bound plan from a cube: values, their standard deviations, and notes (SPEC §4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.build import COUNT_KEY
from engine.cube import Cube, selected_cells
from engine.errors import TooLarge
from engine.plan import Aggregate, GroupKey, QueryPlan
from storage.schema import TableSpec
from storage.sources import sum_key

# AVG = SUM/COUNT is withheld when the noisy count is below 1 or within two of its own standard
# deviations of zero: the ratio would be dominated by noise (or divide by ~0).
MIN_AVG_COUNT = 1.0
MAX_GROUP_ROWS = 1_000_000


def answer(plan: QueryPlan, cube: Cube, spec: TableSpec) -> dict[str, Any]:
    """Rows (one, or one per group) with a stddev for every aggregate value."""
    shape = [selected_cells(plan.selection[a]).size for a in plan.group_axes]
    n_rows = int(np.prod(shape)) if shape else 1
    if n_rows > MAX_GROUP_ROWS:
        raise TooLarge(f"GROUP BY would return {n_rows} rows; the limit is {MAX_GROUP_ROWS}")
    notes = list(plan.notes)
    columns_values: list[list[Any]] = []
    columns_sd: list[list[Any]] = []
    for out in plan.outputs:
        if isinstance(out, GroupKey):
            columns_values.append(_labels(plan, spec, out.axis, shape))
            columns_sd.append([None] * n_rows)
            continue
        value, var, withheld = _aggregate(out, plan, cube)
        columns_values.append(_as_list(value))
        columns_sd.append([None] * n_rows if var is None else _as_list(np.sqrt(np.maximum(var, 0.0))))
        if withheld:
            notes.append(f"{out.name}: {withheld} value(s) withheld (null): the noisy count is too close to zero")
    rows = [list(r) for r in zip(*columns_values)]
    sds = [list(r) for r in zip(*columns_sd)]
    rows, sds = _order_and_page(plan, rows, sds)
    return {"columns": plan.columns, "rows": rows, "stddev": sds, "notes": notes}


def _aggregate(agg: Aggregate, plan: QueryPlan, cube: Cube) -> tuple[np.ndarray, np.ndarray | None, int]:
    def totals(key: str) -> tuple[np.ndarray, np.ndarray | None]:
        if plan.group_axes:
            return (cube.grouped_totals(key, plan.selection, plan.group_axes),
                    cube.grouped_variances(key, plan.selection, plan.group_axes))
        var = cube.variance(key, plan.selection)
        return np.array(cube.total(key, plan.selection)), None if var is None else np.array(var)

    if agg.func == "count":
        return (*totals(COUNT_KEY), 0)
    s, s_var = totals(sum_key(agg.measure or ""))
    if agg.func == "sum":
        return s, s_var, 0
    c, c_var = totals(COUNT_KEY)
    c_sd = np.sqrt(c_var) if c_var is not None else np.zeros_like(c)
    ok = c >= np.maximum(MIN_AVG_COUNT, 2.0 * c_sd)
    safe_c = np.where(ok, c, 1.0)
    avg = np.where(ok, s / safe_c, np.nan)
    var = None
    if s_var is not None and c_var is not None:
        # Delta method for a ratio of independent noisy estimates (SUM and COUNT use separate
        # noise): Var(S/C) ≈ Var(S)/C² + S²·Var(C)/C⁴.
        var = np.where(ok, s_var / safe_c**2 + s**2 * c_var / safe_c**4, np.nan)
    return avg, var, int(np.size(ok) - np.count_nonzero(ok))


def _as_list(values: np.ndarray) -> list[Any]:
    flat = np.asarray(values, dtype=np.float64).ravel()
    return [None if np.isnan(v) else float(v) for v in flat.tolist()]


def _labels(plan: QueryPlan, spec: TableSpec, axis: int, shape: list[int]) -> list[Any]:
    """The group key column: each row's cell label on ``axis`` (row-major over the groups)."""
    dim = spec.dimensions[axis]
    cells = selected_cells(plan.selection[axis])
    position = plan.group_axes.index(axis)
    index = np.indices(shape).reshape(len(shape), -1)[position] if shape else np.zeros(1, dtype=int)
    return [dim.label(int(cells[i])) for i in index]


def _order_and_page(plan: QueryPlan, rows: list[list[Any]], sds: list[list[Any]]) -> tuple[list, list]:
    order = list(range(len(rows)))
    for key in reversed(plan.order_by):  # stable sorts, last key first
        present = [i for i in order if rows[i][key.output] is not None]
        missing = [i for i in order if rows[i][key.output] is None]  # nulls last, either direction
        present.sort(key=lambda i: rows[i][key.output], reverse=key.descending)
        order = present + missing
    end = None if plan.limit is None else plan.offset + plan.limit
    order = order[plan.offset : end]
    return [rows[i] for i in order], [sds[i] for i in order]
