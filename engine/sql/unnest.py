"""Wrapped queries as BI tools and dataframe libraries send them, flattened into one SELECT.

ibis, SQLAlchemy and Superset wrap: `SELECT … FROM (SELECT * FROM t WHERE …) AS s`, `WITH q AS
(…) SELECT … FROM q`, `SELECT * FROM (SELECT g, COUNT(*) AS n FROM t GROUP BY g) AS s ORDER BY n
DESC LIMIT 5`. Each is one aggregate query over one table with some filtering, projection,
ordering or limiting around it. `flatten` rewrites such a statement into that one query —

* a CTE used once in FROM is inlined as a subquery;
* a filter/projection subquery (no aggregate, GROUP BY, DISTINCT, ORDER BY or LIMIT) merges into
  the outer query: its WHERE is ANDed with the outer one, its column aliases are resolved;
* an outer projection/filter/order/limit over an aggregate subquery is applied to that subquery:
  outer conditions on its group keys join its WHERE, those on its aggregates become HAVING
  (`engine.answers.having`: a filter on released values), and the outer ORDER BY / LIMIT / OFFSET order
  and page its groups.

Anything else (joins, a subquery in a condition, aggregates over aggregates, LIMIT both inside and
outside) stays refused, with the reason. Syntax only: no data, no privacy cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from engine.errors import UNSUPPORTED, QueryError

MAX_DEPTH = 8  # wrappers BI tools nest (ibis: 2–3)


def flatten(root: exp.Select) -> exp.Select:
    """One SELECT over one table, or ``root`` unchanged when it holds no subquery or CTE."""
    root = _inline_ctes(root)
    for _ in range(MAX_DEPTH):
        source = _from(root)
        if source is None or not isinstance(source.this, exp.Subquery):
            return root
        inner = source.this.this
        if not isinstance(inner, exp.Select):
            raise QueryError("a subquery in FROM must be a SELECT (UNION and VALUES are not supported)", UNSUPPORTED)
        inner = flatten(inner)
        root = (
            _over_aggregate(root, inner, _alias(source.this))
            if _aggregates(inner)
            else _merge_filter(root, inner, _alias(source.this))
        )
    raise QueryError(f"subqueries are nested more than {MAX_DEPTH} deep")


def _from(select: exp.Select) -> exp.From | None:
    return select.args.get("from_") or select.args.get("from")


def _set_from(select: exp.Select, source: exp.From) -> None:
    select.set("from_" if "from_" in select.args or "from" not in select.args else "from", source)


def _alias(node: exp.Expr) -> str | None:
    alias = node.args.get("alias")
    return alias.name if alias is not None else None


def _inline_ctes(root: exp.Select) -> exp.Select:
    """`WITH q AS (…) SELECT … FROM q` → `SELECT … FROM (…) AS q` (each CTE read once, in FROM)."""
    with_ = root.args.get("with_") or root.args.get("with")
    if with_ is None:
        return root
    if with_.args.get("recursive"):
        raise QueryError("WITH RECURSIVE is not supported", UNSUPPORTED)
    root = root.copy()
    root.set("with_" if "with_" in root.args else "with", None)
    for cte in reversed(with_.expressions):
        name = cte.alias_or_name
        uses = [t for t in root.find_all(exp.Table) if t.name.lower() == name.lower() and not t.args.get("db")]
        if len(uses) > 1:
            raise QueryError(
                f"the common table expression {name!r} is read more than once (a self-join): not supported", UNSUPPORTED
            )
        if uses:
            table = uses[0]
            table.replace(
                exp.Subquery(this=cte.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(table.alias or name)))
            )
    return root


def _aggregates(select: exp.Select) -> bool:
    return bool(select.args.get("group")) or any(item.find(exp.AggFunc) for item in select.expressions)


def _outputs(inner: exp.Select) -> dict[str, exp.Expr]:
    """The inner query's output names (lower case) → the expression each stands for."""
    out: dict[str, exp.Expr] = {}
    for item in inner.expressions:
        if isinstance(item, exp.Alias):
            out[item.alias.lower()] = item.this
        elif isinstance(item, exp.Column):
            out[item.name.lower()] = item
        elif not isinstance(item, exp.Star):
            out[item.sql(dialect="duckdb").lower()] = item
    return out


def _check_qualifier(column: exp.Column, alias: str | None) -> None:
    """A column qualified by anything but the subquery's own name is an error that names both."""
    if column.table and alias is not None and column.table.lower() != alias.lower():
        raise QueryError(f"unknown table {column.table!r} in {column.sql()!r}: the subquery is called {alias!r}")


def _resolve(node: exp.Expr, outputs: dict[str, exp.Expr], alias: str | None, star: bool) -> exp.Expr:
    """``node`` with its references to the subquery's outputs replaced by what they stand for."""

    def visit(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Column):
            return n
        _check_qualifier(n, alias)
        target = outputs.get(n.name.lower())
        if target is not None:
            return target.copy()
        if star:  # SELECT * inside: every column of the table passes through
            return exp.column(n.this.copy())
        raise QueryError(f"column {n.name!r} is not an output of the subquery")

    return node.transform(visit, copy=True)


def _merge_filter(outer: exp.Select, inner: exp.Select, alias: str | None) -> exp.Select:
    """Outer query over a filter/projection subquery → one query over the subquery's table."""
    for arg, what in (
        ("distinct", "DISTINCT"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("having", "HAVING"),
    ):
        if inner.args.get(arg):
            raise QueryError(
                f"a subquery with {what} and no aggregate is not supported: move it to the outer query", UNSUPPORTED
            )
    star = any(isinstance(item, exp.Star) for item in inner.expressions)
    outputs = _outputs(inner)
    merged = outer.copy()
    source = _from(inner)
    if source is None:
        raise QueryError("a subquery without FROM is not supported: name the table", UNSUPPORTED)
    _set_from(merged, source.copy())
    merged.set("expressions", [_named(e, _resolve(e, outputs, alias, star)) for e in outer.expressions])
    for arg in ("group", "order", "having"):
        if merged.args.get(arg) is not None:
            merged.set(arg, _resolve(merged.args[arg], outputs, alias, star))
    conditions = [w.this.copy() for w in (inner.args.get("where"),) if w is not None]
    if outer.args.get("where") is not None:
        conditions.append(_resolve(outer.args["where"].this, outputs, alias, star))
    merged.set("where", exp.Where(this=exp.and_(*conditions)) if conditions else None)
    return merged


def _named(item: exp.Expr, resolved: exp.Expr) -> exp.Expr:
    """An outer column that names an inner alias keeps its name (`SELECT a FROM (SELECT age AS a …)`)."""
    if isinstance(item, exp.Column) and not (isinstance(resolved, exp.Column) and resolved.name == item.name):
        return exp.alias_(resolved, item.name, quoted=True)
    return resolved


def _over_aggregate(outer: exp.Select, inner: exp.Select, alias: str | None) -> exp.Select:
    """Projection, filter, order and limit over an aggregate subquery → the subquery, so adjusted."""
    if _aggregates(outer):
        raise QueryError(
            "aggregates over an aggregate subquery are not supported: Prima answers one level of "
            "SUM/COUNT/AVG per query",
            UNSUPPORTED,
        )
    if outer.args.get("group") or outer.args.get("distinct"):
        raise QueryError("GROUP BY or DISTINCT over an aggregate subquery is not supported", UNSUPPORTED)
    named = {}  # output name → (inner item, its expression)
    for item in inner.expressions:
        bare = item.this if isinstance(item, exp.Alias) else item
        name = (
            item.alias
            if isinstance(item, exp.Alias)
            else (item.name if isinstance(item, exp.Column) else item.sql(dialect="duckdb"))
        )
        named[name.lower()] = (name, bare)
    result = inner.copy()
    result.set("expressions", _projection(outer, inner, named, alias))

    def target(column: exp.Column) -> tuple[str, exp.Expr]:
        _check_qualifier(column, alias)
        found = named.get(column.name.lower())
        if found is None:
            raise QueryError(f"column {column.name!r} is not an output of the subquery")
        return found

    where = outer.args.get("where")
    if where is not None:
        _split_conditions(result, where.this, target)
    order = outer.args.get("order")
    if order is not None:
        if inner.args.get("limit") is not None:
            raise QueryError(
                "ORDER BY over a subquery with LIMIT is not supported: order and limit in one query", UNSUPPORTED
            )
        renamed = {item.alias.lower() for item in outer.expressions if isinstance(item, exp.Alias)}

        def ordered_by(n: exp.Expr) -> exp.Expr:
            if not isinstance(n, exp.Column) or (not n.table and n.name.lower() in renamed):
                return n  # an outer alias: a name of the result's SELECT list
            name, bare = target(n)
            if isinstance(bare, (exp.Column, exp.AggFunc)):
                return bare.copy()  # the dimension or the aggregate itself (the binder matches both)
            # a computed key (DATE_TRUNC, CASE, SUM(x)/COUNT(*)): by the name it has in the result (ibis)
            shown = next((i.alias for i in result.expressions if isinstance(i, exp.Alias) and i.this == bare), name)
            return exp.column(shown, quoted=True)

        result.set("order", order.transform(ordered_by, copy=True))
    for arg in ("limit", "offset"):
        if outer.args.get(arg) is not None:
            if inner.args.get(arg) is not None:
                raise QueryError(f"{arg.upper()} both inside and outside a subquery is not supported", UNSUPPORTED)
            result.set(arg, outer.args[arg].copy())
    return result


def _projection(outer: exp.Select, inner: exp.Select, named: dict, alias: str | None) -> list[exp.Expr]:
    """The outer SELECT list, as the inner items it names (renamed by outer aliases)."""
    out = []
    for item in outer.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            out += [e.copy() for e in inner.expressions]
            continue
        bare, rename = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        if not isinstance(bare, exp.Column):
            raise QueryError(f"over an aggregate subquery the SELECT list names its columns; got {bare.sql()[:60]!r}")
        _check_qualifier(bare, alias)
        found = named.get(bare.name.lower())
        if found is None and _answer_column(bare.name, named):
            continue  # `n_stddev`: the wire's own columns after the aggregates (DuckDB's scanner selects them back)
        if found is None:
            raise QueryError(f"column {bare.name!r} is not an output of the subquery")
        name, expression = found
        out.append(
            exp.alias_(expression.copy(), rename or name, quoted=True)
            if (rename or not isinstance(expression, exp.Column) or expression.name != name)
            else expression.copy()
        )
    return out


def _answer_column(name: str, named: dict) -> bool:
    """`<aggregate>_stddev` / `_ci95_lo` / `_ci95_hi` of an aggregate output: a column every answer
    carries after the ones asked for, on the wire and in CSV."""
    lowered = name.lower()
    return any(
        lowered == f"{out}{suffix}"
        for out, (_, e) in named.items()
        if e.find(exp.AggFunc) or isinstance(e, exp.AggFunc)
        for suffix in ("_stddev", "_ci95_lo", "_ci95_hi")
    )


def _split_conditions(result: exp.Select, condition: exp.Expr, target: Any) -> None:
    """Outer conditions: on group keys into WHERE, on aggregates into HAVING (by the aggregate)."""
    for part in _conjuncts(condition):
        columns = list(part.find_all(exp.Column))
        exprs = [target(c)[1] for c in columns]
        on_aggregates = [isinstance(e, exp.AggFunc) or bool(e.find(exp.AggFunc)) for e in exprs]
        if any(on_aggregates) and not all(on_aggregates):
            raise QueryError(f"a condition mixes group keys and aggregates: {part.sql()[:80]!r}")
        rewritten = part.transform(lambda n: target(n)[1].copy() if isinstance(n, exp.Column) else n, copy=True)
        clause = "having" if any(on_aggregates) else "where"
        known = result.args.get(clause)
        combined = rewritten if known is None else exp.and_(known.this, rewritten)
        result.set(clause, exp.Having(this=combined) if clause == "having" else exp.Where(this=combined))


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest()
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


@dataclass(frozen=True)
class SeriesLimit:
    """Superset's series limit: `SELECT … FROM t JOIN (SELECT d AS d__, agg FROM t … GROUP BY d ORDER BY
    agg DESC LIMIT n) AS series_limit ON d = d__ GROUP BY …` — the outer query over the top n groups of
    the inner one. Answered as post-processing of two answers (`engine.service`): the inner ranking
    query's released top n, then the outer query restricted to those groups."""

    ranking: str  # the inner query, as Prima SQL
    key: str  # its output naming the group
    column: str  # the outer dimension joined on it
    outer: exp.Select  # the outer query without the join

    def restricted(self, condition: exp.Expr) -> str:
        query = self.outer.copy()
        query.where(condition, append=True, copy=False)
        return query.sql(dialect="duckdb")


def series_limit(sql: str) -> SeriesLimit | None:
    """The series-limit shape of ``sql`` (see `SeriesLimit`), or None for anything else."""
    if not isinstance(sql, str) or "join" not in sql.lower():
        return None
    try:
        root = sqlglot.parse_one(sql, read="duckdb")
    except sqlglot.errors.SqlglotError:
        return None
    joins = root.args.get("joins") if isinstance(root, exp.Select) else None
    if not joins or len(joins) != 1 or not isinstance(joins[0].this, exp.Subquery):
        return None
    join, inner = joins[0], joins[0].this.this
    on = join.args.get("on")
    if (
        not isinstance(inner, exp.Select)
        or inner.args.get("limit") is None
        or not inner.args.get("group")
        or not isinstance(on, exp.EQ)
        or not all(isinstance(s, exp.Column) for s in (on.left, on.right))
    ):
        return None
    keys = {item.alias.lower() for item in inner.expressions if isinstance(item, exp.Alias)}
    if on.right.name.lower() in keys:
        key, column = on.right.name, on.left.name
    elif on.left.name.lower() in keys:
        key, column = on.left.name, on.right.name
    else:
        return None
    outer = root.copy()
    assert isinstance(outer, exp.Select)  # checked above (its joins)
    outer.set("joins", None)
    return SeriesLimit(inner.sql(dialect="duckdb"), key, column, outer)
