"""Arithmetic between aggregates in the SELECT list: `SUM(a) / SUM(b)`, `COUNT(*) * 100.0 / 5000`,
`AVG(x) - AVG(y)` — Superset's and Grafana's custom metrics.

A derived value is post-processing of released aggregates: no privacy cost. Its standard
deviation is a delta-method estimate from its parts' (first-order; the parts treated as
independent releases, which they are when they read different aggregates: a SUM, a COUNT), and
its interval is value ± 1.96σ; answers say the bar is estimated. A quotient whose denominator is
within two of its own standard deviations of zero is withheld (null), as AVG is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from sqlglot import exp

from engine.errors import UNSUPPORTED, QueryError
from engine.plan import Aggregate, Derived, expression_parts

_OPS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
NOTE = (
    "{name}: arithmetic of aggregates — its stddev is a delta-method estimate from its parts' (independent "
    "releases), its interval value ± 1.96·stddev"
)


def is_arithmetic(node: exp.Expr) -> bool:
    """An expression over aggregates and numbers (not an aggregate itself, not a plain column)."""
    return (
        isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Paren, exp.Cast))
        and node.find(exp.AggFunc) is not None
        and not isinstance(node.unnest(), exp.AggFunc)
    )


def bind(node: exp.Expr, aggregate: Callable[[exp.Expr], Aggregate]) -> tuple:
    """The expression as a tree: ("agg", Aggregate) | ("num", float) | (op, left, right) | ("neg", x)."""
    if isinstance(node, exp.Paren):
        return bind(node.this, aggregate)
    if isinstance(node, exp.Neg):
        return ("neg", bind(node.this, aggregate))
    for cls, op in _OPS.items():
        if isinstance(node, cls):
            return (op, bind(node.left, aggregate), bind(node.right, aggregate))
    if isinstance(node, exp.AggFunc):
        return ("agg", aggregate(node))
    if isinstance(node, exp.Cast):  # `SUM(x)::float`, `CAST(COUNT(*) AS DOUBLE)`
        return bind(node.this, aggregate)
    if (
        isinstance(node, exp.Nullif)
        and isinstance(node.expression, exp.Literal)
        and not node.expression.is_string
        and float(node.expression.this) == 0
    ):
        return bind(node.this, aggregate)  # NULLIF(COUNT(*), 0): a quotient near 0 is withheld anyway
    if isinstance(node, exp.Literal) and not node.is_string:
        return ("num", float(node.this))
    raise QueryError(f"arithmetic in SELECT combines aggregates and numbers; got {node.sql()[:60]!r}", UNSUPPORTED)


def parts(out: Derived) -> list[Aggregate]:
    """The distinct aggregates a derived output reads, in first-seen order."""
    return list(dict.fromkeys(expression_parts(out.expr)))


def evaluate(
    out: Derived, values: dict[Aggregate, Any], variances: dict[Aggregate, Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Value and delta-method variance per group (NaN where a quotient's denominator is not clear of zero)."""
    keys = parts(out)
    exact = any(variances.get(a) is None for a in keys)

    def walk(tree: tuple) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        kind = tree[0]
        if kind == "num":
            return np.asarray(tree[1], dtype=float), {}
        if kind == "agg":
            i = keys.index(tree[1])
            return np.asarray(values[tree[1]], dtype=float), {i: np.ones_like(np.asarray(values[tree[1]], dtype=float))}
        if kind == "neg":
            v, g = walk(tree[1])
            return -v, {i: -d for i, d in g.items()}
        (a, ga), (b, gb) = walk(tree[1]), walk(tree[2])
        if kind in "+-":
            sign = 1.0 if kind == "+" else -1.0
            return a + sign * b, _combine(ga, gb, 1.0, sign)
        if kind == "*":
            return a * b, _combine(ga, gb, b, a)
        sd_b = np.sqrt(_variance(gb)) if not exact else np.zeros_like(b)
        clear = (np.abs(b) > 2.0 * sd_b) & (b != 0)
        safe = np.where(clear, b, 1.0)
        return np.where(clear, a / safe, np.nan), _combine(ga, gb, 1.0 / safe, -a / safe**2)

    def _variance(grads: dict[int, np.ndarray]) -> np.ndarray:
        return np.asarray(sum((g**2 * np.asarray(variances[keys[i]], dtype=float) for i, g in grads.items()), 0.0))

    value, grads = walk(out.expr)
    return value, None if exact else _variance(grads) + np.zeros_like(value)


def _combine(ga: dict, gb: dict, ca: Any, cb: Any) -> dict:
    out = {i: ca * g for i, g in ga.items()}
    for i, g in gb.items():
        out[i] = out.get(i, 0.0) + cb * g
    return out
