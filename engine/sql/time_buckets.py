"""Fixed-width time buckets of a date dimension: Grafana's `$__timeGroup(col, '1d')`.

Grafana's PostgreSQL data source expands `$__timeGroup(hired, '7d')` (and `$__timeGroupAlias`) on its
own server, before the statement reaches us, to

    floor(extract(epoch from hired)/604800)*604800

— each row's date as Unix seconds, rounded down to a multiple of the interval. On a date column the
SQL truth is a function of the date alone, so a dimension's cells group into buckets exactly when no
cell holds dates of two buckets: always at a day grain, never for a month cut by a 30-day interval.
The buckets then form a CASE-like grouping of the axis's cells (`Binder._case_groups`).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from sqlglot import exp

from storage.schema import DateDimension

_EPOCH = dt.date(1970, 1, 1)


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, (exp.Paren, exp.Cast)) and node.this is not None:
        node = node.this
    return node


def _seconds(node: exp.Expr) -> float | None:
    node = _unparen(node)
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            value = float(node.this)
        except ValueError:
            return None
        return value if math.isfinite(value) and value > 0 else None
    return None


def epoch_bucket(node: exp.Expr) -> tuple[exp.Column, float] | None:
    """(column, seconds) of `floor(extract(epoch from col) / N) * N` (either factor order, any
    parentheses or casts), else None."""
    node = _unparen(node)
    if not isinstance(node, exp.Mul):
        return None
    for floor, width in ((node.this, node.expression), (node.expression, node.this)):
        floor, seconds = _unparen(floor), _seconds(width)
        if not isinstance(floor, exp.Floor) or seconds is None:
            continue
        div = _unparen(floor.this)
        if not isinstance(div, exp.Div) or _seconds(div.expression) != seconds:
            continue
        extract = _unparen(div.this)
        if (
            isinstance(extract, exp.Extract)
            and extract.this.name.lower() == "epoch"
            and isinstance(_unparen(extract.expression), exp.Column)
        ):
            column = _unparen(extract.expression)
            assert isinstance(column, exp.Column)  # checked just above
            return column, seconds
    return None


def bucket_of(day: dt.date, seconds: float) -> Any:
    """`floor(extract(epoch from day) / seconds) * seconds` for a date (midnight UTC), an integer
    when the interval is whole seconds (PostgreSQL's numeric prints it so)."""
    epoch = (day - _EPOCH).days * 86400
    value = math.floor(epoch / seconds) * seconds
    return int(value) if float(seconds).is_integer() else value


def cells_by_bucket(dim: DateDimension, seconds: float) -> dict[Any, list[int]]:
    """The dimension's declared cells by the bucket their dates fall in, in date order.

    Raises ValueError naming the first cell whose dates span two buckets (a month cut by a
    30-day interval): its rows would belong to two groups the cells cannot tell apart."""
    out: dict[Any, list[int]] = {}
    for cell in range(dim.size):
        first = max(dim.date_of(cell), dim.lo)
        nxt = dim.date_of(cell + 1) if cell + 1 < dim.size else None
        last = min(nxt - dt.timedelta(days=1), dim.hi) if nxt is not None else dim.hi
        bucket = bucket_of(first, seconds)
        if bucket != bucket_of(last, seconds):
            raise ValueError(dim.label(cell))
        out.setdefault(bucket, []).append(cell)
    return out
