"""Answering a bound plan from a cube: values, their standard deviations, and notes (SPEC §4)."""

from __future__ import annotations

import math
from typing import Any

from engine.build import COUNT_KEY
from engine.cube import Cube
from engine.plan import Aggregate, QueryPlan
from storage.sources import sum_key

# AVG = SUM/COUNT is withheld when the noisy count is this small or within two of its own
# standard deviations of zero: the ratio would be dominated by noise (or divide by ~0).
MIN_AVG_COUNT = 1.0


def answer(plan: QueryPlan, cube: Cube) -> dict[str, Any]:
    values, stddevs, notes = [], [], list(plan.notes)
    for agg in plan.aggregates:
        value, var, note = _aggregate(agg, plan, cube)
        values.append(value)
        stddevs.append(None if var is None else math.sqrt(max(var, 0.0)))
        if note:
            notes.append(note)
    return {"columns": plan.columns, "rows": [values], "stddev": [stddevs], "notes": notes}


def _aggregate(agg: Aggregate, plan: QueryPlan, cube: Cube) -> tuple[float | None, float | None, str | None]:
    sel = plan.selection
    if agg.func == "count":
        return cube.total(COUNT_KEY, sel), cube.variance(COUNT_KEY, sel), None
    key = sum_key(agg.measure or "")
    s, s_var = cube.total(key, sel), cube.variance(key, sel)
    if agg.func == "sum":
        return s, s_var, None
    c, c_var = cube.total(COUNT_KEY, sel), cube.variance(COUNT_KEY, sel)
    c_sd = math.sqrt(c_var) if c_var else 0.0
    if c < max(MIN_AVG_COUNT, 2.0 * c_sd):
        return None, None, f"{agg.name}: the noisy count is too close to zero for a meaningful average"
    avg = s / c
    if s_var is None or c_var is None:
        return avg, None, None
    # Delta method for a ratio of independent noisy estimates (SUM and COUNT use separate noise):
    # Var(S/C) ≈ Var(S)/C² + S²·Var(C)/C⁴.
    return avg, s_var / c**2 + s**2 * c_var / c**4, None
