"""`HAVING` on aggregates: a filter on released values, applied to the answer's groups.

`SELECT dept, COUNT(*) AS n FROM staff GROUP BY dept HAVING COUNT(*) > 100` keeps the groups whose
*noisy* count exceeds 100: post-processing of the answer, no privacy cost. A group near the
threshold can fall on either side by noise, and the answer says so. Conditions compare an output
of the SELECT list — by alias, position-free, or by repeating its aggregate — with a constant, and
combine with AND, OR, NOT, BETWEEN and IS [NOT] NULL (a withheld AVG is NULL), with SQL's
three-valued logic: a comparison with NULL is unknown and drops the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlglot import exp

from engine.errors import QueryError
from engine.plan import Aggregate, Derived, Output
from engine.sql import constants

Predicate = tuple  # ("and"|"or", p, q) | ("not", p) | ("cmp", output, op, value) | ("null", output, is_null)

NOTE = (
    "HAVING filters the released (noisy) values: a group near the threshold may be kept or dropped by noise; "
    "widen the threshold by its stddev for a conservative cut"
)


def bind(having: exp.Having | None, items: Sequence[exp.Expr], outputs: Sequence[Output]) -> Predicate | None:
    """The HAVING clause as a predicate over output indices; None without one."""
    if having is None:
        return None
    return _predicate(having.this, items, outputs)


def _predicate(node: exp.Expr, items: Sequence[exp.Expr], outputs: Sequence[Output]) -> Predicate:
    if isinstance(node, exp.Paren):
        return _predicate(node.this, items, outputs)
    if isinstance(node, (exp.And, exp.Or)):
        return (
            "and" if isinstance(node, exp.And) else "or",
            _predicate(node.left, items, outputs),
            _predicate(node.right, items, outputs),
        )
    if isinstance(node, exp.Not):
        return ("not", _predicate(node.this, items, outputs))
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return ("null", _output(node.this, items, outputs), True)
    if isinstance(node, exp.Between):
        index = _output(node.this, items, outputs)
        return (
            "and",
            ("cmp", index, ">=", _constant(node.args["low"])),
            ("cmp", index, "<=", _constant(node.args["high"])),
        )
    for cls, op in constants.COMPARISONS.items():
        if isinstance(node, cls):
            left, right = node.left, node.right
            if _is_constant(left) and not _is_constant(right):
                left, right, op = right, left, constants.FLIPPED[op]
            return ("cmp", _output(left, items, outputs), op, _constant(right))
    raise QueryError(
        f"HAVING supports comparisons of the SELECT list's aggregates with constants (AND, OR, NOT, "
        f"BETWEEN, IS NULL); got {node.sql()[:80]!r}"
    )


def _is_constant(node: exp.Expr) -> bool:
    try:
        constants.evaluate(node)
    except Exception:
        return False
    return True


def _constant(node: exp.Expr) -> float:
    value = constants.number(node)
    if value is None:
        raise QueryError(f"HAVING compares aggregates with numbers; got {node.sql()[:60]!r}")
    return value


def _output(node: exp.Expr, items: Sequence[exp.Expr], outputs: Sequence[Output]) -> int:
    """The SELECT-list aggregate a HAVING operand names: its alias, or the same aggregate written again."""
    node = node.unnest()
    if isinstance(node, exp.Column) and not node.table:
        for i, (item, out) in enumerate(zip(items, outputs)):
            if (
                isinstance(out, (Aggregate, Derived))
                and isinstance(item, exp.Alias)
                and item.alias.lower() == node.name.lower()
            ):
                return i
    if isinstance(node, exp.AggFunc):
        text = node.sql(dialect="duckdb").lower()
        for i, (item, out) in enumerate(zip(items, outputs)):
            bare = item.this if isinstance(item, exp.Alias) else item
            if isinstance(out, Aggregate) and bare.sql(dialect="duckdb").lower() == text:
                return i
        raise QueryError(
            f"HAVING {node.sql()[:60]}: add that aggregate to the SELECT list (HAVING filters the "
            "answer's released values)"
        )
    raise QueryError(f"HAVING compares aggregates of the SELECT list (by alias or repeated); got {node.sql()[:60]!r}")


def holds(predicate: Predicate, row: Sequence[Any]) -> bool | None:
    """SQL's three-valued truth of the predicate on one answer row (None: unknown)."""
    kind = predicate[0]
    if kind in ("and", "or"):
        a, b = holds(predicate[1], row), holds(predicate[2], row)
        if kind == "and":
            return False if a is False or b is False else (None if a is None or b is None else True)
        return True if a is True or b is True else (None if a is None or b is None else False)
    if kind == "not":
        a = holds(predicate[1], row)
        return None if a is None else not a
    if kind == "null":
        return (row[predicate[1]] is None) == predicate[2]
    _, index, op, value = predicate
    return None if row[index] is None else constants.OPERATORS[op](row[index], value)


def keep(predicate: Predicate | None, rows: list, *parallel: list) -> tuple[list, ...]:
    """Rows (and their parallel lists: stddevs, intervals) for which the predicate is true."""
    if predicate is None:
        return (rows, *parallel)
    kept = [i for i, row in enumerate(rows) if holds(predicate, row) is True]
    return ([rows[i] for i in kept], *([p[i] for i in kept] for p in parallel))
