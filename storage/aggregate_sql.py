"""The only two queries that read raw rows, written once as sqlglot expressions for every engine.

* the base cuboid: one GROUP BY producing (flat cell index, COUNT(*), clipped SUM per measure);
* the cuboids of a wide table: the same aggregates under ``GROUPING SETS`` (one set per cuboid);
* a measure histogram: bucket counts of one measure (for PRIMA's data-driven clipping).

Each is built as a sqlglot expression tree and rendered in the engine's dialect (DuckDB,
PostgreSQL, Spark SQL). Identifiers are quoted by sqlglot; every declared value (bounds, category
names, dates) is a *named placeholder* bound by the driver (``$p0`` / ``%(p0)s`` / ``:p0``), never
pasted into the text. Only integers computed here (strides, bucket counts) appear as literals.

Per row: each dimension maps to its cell index — a declared cell, or one of the outside cells its
axis keeps (NULL value, below/above the range, an undeclared category), or NULL where the
dimension excludes outside rows; each measure is cast to DOUBLE (NULL if not numeric) and clipped
with LEAST/GREATEST. Rows with any NULL cell are in no cell; a NULL measure adds
nothing to SUM and is not counted by COUNT(m), but the row counts in COUNT(*).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from storage.schema import CategoryDimension, DateDimension, IntDimension, TableSpec

Bounds = dict[str, tuple[float, float]]


@dataclass
class Params:
    """Named placeholders and their values, in the order they were made."""

    values: dict[str, Any] = field(default_factory=dict)

    def bind(self, value: Any) -> exp.Placeholder:
        name = f"p{len(self.values)}"
        self.values[name] = value
        return exp.Placeholder(this=name)


def table_ref(name: str) -> exp.Table:
    """A quoted ``[schema.]table`` reference (dots split parts; each part quoted)."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 3 or any(not p for p in parts):
        raise ValueError("table must be 'table', 'schema.table' or 'catalog.schema.table'")
    return exp.to_table(".".join(exp.to_identifier(p, quoted=True).sql() for p in parts))


def _col(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _as_bigint(e: exp.Expression) -> exp.Cast:
    return exp.cast(e, exp.DataType.build("BIGINT"))


def _least(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    """LEAST(a, b) as written (same name in DuckDB, PostgreSQL and Spark, each skipping a NULL
    operand). sqlglot's exp.Least would wrap it in NULL checks for DuckDB; callers guard NULLs."""
    return exp.Anonymous(this="LEAST", expressions=[a, b])


def _greatest(a: exp.Expression, b: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="GREATEST", expressions=[a, b])


def _within(v: exp.Expression, lo: exp.Expression, hi: exp.Expression, then: exp.Expression) -> exp.Case:
    return exp.Case().when(exp.Between(this=v, low=lo, high=hi), then)


def _value(d: Any) -> exp.Expression:
    """A row's value of a dimension as its cells compare it: a number floored, a date, text; NULL when
    missing or not of that kind."""
    if isinstance(d, IntDimension):
        return exp.Floor(this=exp.TryCast(this=_col(d.name), to=exp.DataType.build("DOUBLE")))
    if isinstance(d, CategoryDimension):
        return exp.TryCast(this=_col(d.name), to=exp.DataType.build("VARCHAR"))
    return exp.TryCast(this=_col(d.name), to=exp.DataType.build("DATE"))


def _int_cell(d: IntDimension, p: Params) -> exp.Expression:
    v = _value(d)
    offset = exp.Div(this=exp.Paren(this=exp.Sub(this=v, expression=p.bind(d.lo))), expression=p.bind(d.bin))
    return _within(v, p.bind(d.lo), p.bind(d.hi), _as_bigint(exp.Floor(this=offset)))


def _category_cell(d: CategoryDimension, p: Params) -> exp.Expression:
    """The value's position in the declared list, 0-based, NULL when absent: one ARRAY_POSITION over
    the declared values, bound as one list parameter (Spark says 0 for absent, the others NULL,
    hence NULLIF; PostgreSQL's engine and rendering turn it into a JSONB lookup, Spark's engine
    into a split string: `_postgres_safe`, `spark_source`). Linear in the values to build — a CASE
    with a branch per value was quadratic to build (1,458 codes: 111 s at registration)."""
    text = _value(d)
    values = p.bind(list(d.values))
    position = exp.Nullif(this=exp.ArrayPosition(this=values, expression=text), expression=exp.Literal.number(0))
    return _as_bigint(exp.Sub(this=position, expression=exp.Literal.number(1)))


def _date_cell(d: DateDimension, p: Params) -> exp.Expression:
    v = _value(d)
    year = exp.Extract(this=exp.var("YEAR"), expression=v.copy())
    if d.granularity == "day":
        start = exp.cast(p.bind(d.lo), exp.DataType.build("DATE"))
        cell: exp.Expression = exp.DateDiff(this=v.copy(), expression=start, unit=exp.var("DAY"))
    elif d.granularity == "month":
        month = exp.Extract(this=exp.var("MONTH"), expression=v.copy())
        years = exp.Mul(
            this=exp.Paren(this=exp.Sub(this=year, expression=p.bind(d.lo.year))), expression=exp.Literal.number(12)
        )
        cell = exp.Sub(this=exp.Add(this=years, expression=month), expression=p.bind(d.lo.month))
    else:
        cell = exp.Sub(this=year, expression=p.bind(d.lo.year))
    lo = exp.cast(p.bind(d.lo), exp.DataType.build("DATE"))
    hi = exp.cast(p.bind(d.hi), exp.DataType.build("DATE"))
    return _within(v, lo, hi, _as_bigint(cell))


def _declared_cell(d: Any, p: Params) -> exp.Expression:
    """The row's declared cell on a dimension, NULL when its value is outside the domain or NULL."""
    if isinstance(d, IntDimension):
        return _int_cell(d, p)
    if isinstance(d, CategoryDimension):
        return _category_cell(d, p)
    return _date_cell(d, p)


def _cell(d: Any, p: Params) -> exp.Expression:
    """The row's cell on a dimension's axis: its declared cell, else — when the dimension keeps
    outside rows (`storage.schema._Axis`) — its NULL, below/above or other cell, else NULL
    (left out of every aggregate). The outside cells' indices are computed integers."""
    declared = _declared_cell(d, p)
    if d.outside == "exclude":
        return declared
    v = _value(d)

    def cell(name: str) -> exp.Expression:
        return exp.Literal.number(d.extra_cell(name))

    case = exp.Case().when(exp.Is(this=v.copy(), expression=exp.Null()), cell("null"))
    if isinstance(d, CategoryDimension):
        return case.else_(exp.Coalesce(this=declared, expressions=[cell("other")]))
    lo, hi = (
        (p.bind(d.lo), p.bind(d.hi))
        if isinstance(d, IntDimension)
        else (exp.cast(p.bind(d.lo), exp.DataType.build("DATE")), exp.cast(p.bind(d.hi), exp.DataType.build("DATE")))
    )
    return (
        case.when(exp.LT(this=v.copy(), expression=lo), cell("below"))
        .when(exp.GT(this=v.copy(), expression=hi), cell("above"))
        .else_(declared)
    )


def _rows(
    table: exp.Table, spec: TableSpec, bounds: Bounds, p: Params, bounded: bool = True
) -> tuple[exp.Select, exp.Expression]:
    """Per-row projection c0.., m0.. and the in-domain condition (every c_i known); with a privacy
    unit, only the rows `_bounded_per_unit` keeps (``bounded=False``: all of them, with the unit as u)."""
    cols = [exp.alias_(_cell(d, p), f"c{i}") for i, d in enumerate(spec.dimensions)]
    for j, m in enumerate(spec.measures):
        lo, hi = bounds[m.name]
        v = exp.TryCast(this=_col(m.name), to=exp.DataType.build("DOUBLE"))
        clipped = _least(_greatest(v.copy(), p.bind(float(lo))), p.bind(float(hi)))
        cols.append(exp.alias_(exp.Case().when(exp.Not(this=exp.Is(this=v, expression=exp.Null())), clipped), f"m{j}"))
    known = exp.and_(
        *[exp.Not(this=exp.Is(this=exp.column(f"c{i}"), expression=exp.Null())) for i in range(len(spec.dimensions))]
    )
    if spec.privacy_unit is not None:
        cols.append(exp.alias_(_col(spec.privacy_unit.column), "u"))
        rows = exp.select(*cols).from_(table.copy())
        return (_bounded_per_unit(table, rows, spec, known, p) if bounded else rows), known
    return exp.select(*cols).from_(table.copy()), known


def _bounded_per_unit(
    table: exp.Table, rows: exp.Select, spec: TableSpec, known: exp.Expression, p: Params
) -> exp.Select:
    """At most k in-domain rows per unit: ROW_NUMBER() over each unit's rows, ordered by md5 of a
    per-table secret salt, the unit's id, the row's cells and clipped values (as integers, so every
    engine hashes the same text and keeps the same rows) and the row's occurrence among the unit's
    identical rows. The id and the occurrence make each unit's order its own uniform shuffle, so
    the k kept rows are a uniform sample of the unit's rows: without the id every unit ranked equal
    rows alike (all persons dropped rows from the same cells: one cell kept 124 of 250 rows, another
    222 of 222), and without the occurrence a unit's identical rows moved as one block (a cell of 30
    equal rows beside one of 3 kept 8.5 of k = 10 on average, not 10·30/33 = 9.1). A row with a NULL id is its own unit (gathered into one "person", 2,512
    rows without a tail number chose k = 269 and protected each real person's NULL-id rows at 2ε);
    it is always kept. The salt is bound as a parameter like every other value.

    Only units with more than k rows need the ranking: any other keeps all its rows whatever the
    order (md5 of every row was the cost, 3.1 s of 10⁷ rows). So the heavy units are
    found first from the raw id column (more than k rows in all: a superset of those with more than
    k in-domain rows, and ranking a unit with fewer keeps all of them, the same rows), and the rows
    are read twice — the others' through an anti-join, the heavy ones' hashed and ranked — rather
    than materialised once (660 MB at 10⁷ rows)."""
    d, n_measures = len(spec.dimensions), len(spec.measures)
    names = [f"c{i}" for i in range(d)] + [f"m{j}" for j in range(n_measures)]
    unit = _col(spec.privacy_unit.column)
    heavy = (
        exp.select(exp.alias_(unit.copy(), "hu"))
        .from_(table.copy(), copy=False)
        .where(exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())), copy=False)
        .group_by(unit.copy(), copy=False)
        .having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(spec.rows_per_unit)), copy=False)
    )

    def against_heavy(alias: str, join_type: str, *extra: str) -> exp.Select:
        return (
            exp.select(*[exp.column(c) for c in [*names, *extra]])
            .from_(exp.Subquery(this=rows.copy(), alias=exp.TableAlias(this=exp.to_identifier(alias))), copy=False)
            .join(
                exp.Subquery(this=heavy.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"h{alias}"))),
                on=exp.EQ(this=exp.column("u"), expression=exp.column("hu")),
                join_type=join_type,
                copy=False,
            )
            .where(known.copy(), copy=False)
        )

    light = against_heavy("a", "left").where(
        exp.Is(this=exp.column("hu"), expression=exp.Null()), copy=False
    )  # u not heavy
    occurrence = exp.Window(  # equal rows are interchangeable: any numbering of them will do
        this=exp.RowNumber(),
        partition_by=[exp.column(c) for c in ["u", *names]],
        order=exp.Order(expressions=[exp.Ordered(this=exp.column("u"))]),  # Spark wants an order
    )
    numbered = exp.select(*[exp.column(c) for c in [*names, "u"]], exp.alias_(occurrence, "dup")).from_(
        exp.Subquery(this=against_heavy("b", "inner", "u"), alias=exp.TableAlias(this=exp.to_identifier("hb_rows"))),
        copy=False,
    )
    window = exp.Window(
        this=exp.RowNumber(),
        partition_by=[exp.column("u")],
        order=exp.Order(expressions=[exp.Ordered(this=exp.MD5(this=_row_key(spec, p)))]),
    )
    ranked = exp.select(*[exp.column(c) for c in names], exp.alias_(window, "rn")).from_(
        exp.Subquery(this=numbered, alias=exp.TableAlias(this=exp.to_identifier("hb_numbered"))), copy=False
    )
    capped = (
        exp.select(*[exp.column(c) for c in names])
        .from_(exp.Subquery(this=ranked, alias=exp.TableAlias(this=exp.to_identifier("ranked"))), copy=False)
        .where(exp.LTE(this=exp.column("rn"), expression=exp.Literal.number(spec.rows_per_unit)), copy=False)
    )
    return exp.select(*[exp.column(c) for c in names]).from_(
        exp.Subquery(
            this=exp.union(light, capped, distinct=False, copy=False), alias=exp.TableAlias(this=exp.to_identifier("k"))
        ),
        copy=False,
    )


def _row_key(spec: TableSpec, p: Params) -> exp.Expression:
    """salt|u|c0|…|round(1000·m0)|…|dup: the text each unit's rows are ranked by (md5 of it)."""
    parts: list[exp.Expression] = [
        p.bind(spec.privacy_unit.salt or ""),
        exp.cast(exp.column("u"), exp.DataType.build("VARCHAR")),
    ]
    for i in range(len(spec.dimensions)):
        parts.append(exp.cast(exp.column(f"c{i}"), exp.DataType.build("VARCHAR")))
    for j in range(len(spec.measures)):
        scaled = _as_bigint(
            exp.Round(this=_key_range(exp.Mul(this=exp.column(f"m{j}"), expression=exp.Literal.number(1000))))
        )
        parts.append(
            exp.Coalesce(this=exp.cast(scaled, exp.DataType.build("VARCHAR")), expressions=[exp.Literal.string("")])
        )
    parts.append(exp.cast(exp.column("dup"), exp.DataType.build("VARCHAR")))
    key = parts[0]
    for part in parts[1:]:
        key = exp.DPipe(this=key, expression=exp.DPipe(this=exp.Literal.string("|"), expression=part))
    return key


KEY_LIMIT = 9e18  # inside BIGINT's ±9.22e18: a scaled key clamped here always casts


def _key_range(v: exp.Expression) -> exp.Expression:
    """A row key's scaled value clamped into BIGINT's range before the cast: a cast that
    overflowed on one extreme row made every build of the table fail, a free yes/no about that row.
    Declared bounds (≤ 1e15, `storage.schema.MAX_MEASURE_BOUND`) keep clipped values far inside, so
    the clamp only ever meets values no declaration allows (NaN compares above every number in
    DuckDB, PostgreSQL and Spark, so it lands on +KEY_LIMIT); the key cannot fail on any value."""
    clamped = _least(_greatest(v.copy(), exp.Literal.number(-KEY_LIMIT)), exp.Literal.number(KEY_LIMIT))
    return exp.Case().when(exp.Not(this=exp.Is(this=v, expression=exp.Null())), clamped)  # LEAST skips NULLs


def cuboid_columns(spec: TableSpec) -> list[str]:
    """The result columns of `cuboid_query`: flat cell index, COUNT(*), then per measure its clipped
    SUM (s_j) and its COUNT (q_j: rows where it is present, the denominator of SQL's AVG)."""
    return ["cell", "n"] + [f"s{j}" for j in range(len(spec.measures))] + [f"q{j}" for j in range(len(spec.measures))]


def _measure_values(spec: TableSpec) -> list[exp.Expression]:
    """Per measure: COALESCE(SUM(m_j), 0) AS s_j, then COUNT(m_j) AS q_j (`cuboid_columns`)."""
    n = len(spec.measures)
    sums = [
        exp.alias_(exp.Coalesce(this=exp.Sum(this=exp.column(f"m{j}")), expressions=[exp.Literal.number(0)]), f"s{j}")
        for j in range(n)
    ]
    return sums + [exp.alias_(exp.Count(this=exp.column(f"m{j}")), f"q{j}") for j in range(n)]


def _flat_index(coords: list[exp.Expression], shape: tuple[int, ...]) -> exp.Expression:
    """Σ coordinate·stride: the row-major flat index over ``shape`` (strides are computed integers)."""
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    flat: exp.Expression = exp.Mul(this=coords[0], expression=exp.Literal.number(int(strides[0])))
    for c, stride in zip(coords[1:], strides[1:]):
        flat = exp.Add(this=flat, expression=exp.Mul(this=c, expression=exp.Literal.number(int(stride))))
    return flat


def _searched_case(
    value: exp.Expression,
    uppers: list[float],
    closed: list[bool],
    results: list[exp.Expression],
    default: exp.Expression,
    p: Params,
) -> exp.Expression:
    """CASE WHEN value < u_0 (or <= u_0 where ``closed``) THEN results_0 … ELSE default END: the first
    bucket whose upper edge (a bound parameter) is above the value. Exact comparisons, so every engine
    puts a value in the same bucket."""
    ifs = [
        exp.If(this=(exp.LTE if c else exp.LT)(this=value.copy(), expression=p.bind(float(u))), true=r)
        for u, c, r in zip(uppers, closed, results)
    ]
    return exp.Case(ifs=ifs, default=default) if ifs else default


def cuboid_query(table: exp.Table, spec: TableSpec, bounds: Bounds) -> tuple[exp.Select, Params]:
    """SELECT cell, n, s0.. FROM (rows) WHERE in-domain GROUP BY cell — row-major flat cell index."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    flat = _flat_index([exp.column(f"c{i}") for i in range(len(spec.dimensions))], spec.shape)
    sums = _measure_values(spec)
    query = (
        exp.select(exp.alias_(flat, "cell"), exp.alias_(exp.Count(this=exp.Star()), "n"), *sums)
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(known, copy=False)
        .group_by(flat.copy(), copy=False)
    )
    return query, p


def class_cuboid_columns() -> list[str]:
    """The result columns of `class_cuboid_query`: flat cell index over (dimensions…, class), COUNT, Σ v/u_k."""
    return ["cell", "n", "s"]


def class_cuboid_query(
    table: exp.Table,
    spec: TableSpec,
    bounds: Bounds,
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
) -> tuple[exp.Select, Params]:
    """SELECT cell, n, s FROM (rows) WHERE in-domain AND the measure is known GROUP BY cell: a measure's
    class axis (`privacy.clipping.measure_axis`) appended to the base cuboid. Per row the class k of the
    clipped value is one searched CASE over the edges (the first class whose upper edge is above v,
    or equal to it where the class is closed above: `MeasureClasses.classify`), and s sums v/u_k — each row adds at
    most 1 in absolute value, the release's sensitivity. Edges and bounds are bound parameters."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    m, klass, normalised = _class_of_row(spec, measure, edges, closed_above, class_bounds, p)
    k = len(edges) - 1
    flat = _flat_index([exp.column(f"c{i}") for i in range(len(spec.dimensions))] + [klass], spec.shape + (k,))
    total = exp.Coalesce(this=exp.Sum(this=normalised), expressions=[exp.Literal.number(0)])
    query = (
        exp.select(exp.alias_(flat, "cell"), exp.alias_(exp.Count(this=exp.Star()), "n"), exp.alias_(total, "s"))
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(exp.and_(known, exp.Not(this=exp.Is(this=m.copy(), expression=exp.Null()))), copy=False)
        .group_by(flat.copy(), copy=False)
    )
    return query, p


def base_class_cuboid_columns(spec: TableSpec) -> list[str]:
    """The result columns of `base_class_cuboid_query`: `cuboid_columns`, then w (Σ v/u_k)."""
    return cuboid_columns(spec) + ["w"]


def base_class_cuboid_query(
    table: exp.Table,
    spec: TableSpec,
    bounds: Bounds,
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
) -> tuple[exp.Select, Params]:
    """`cuboid_query` and `class_cuboid_query` in one pass over the rows (reading them
    twice made a measure axis build 1.6× the engine's own GROUP BY). Cells are flat over
    (dimensions…, slot) with K + 1 slots: the measure's class k where it is known, slot K where it is
    NULL. Summing the slots gives the base cuboid; slots 0..K−1 are the class cuboid (n, w)."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    m, klass, normalised = _class_of_row(spec, measure, edges, closed_above, class_bounds, p)
    k = len(edges) - 1
    slot = exp.Case().when(exp.Is(this=m.copy(), expression=exp.Null()), exp.Literal.number(k)).else_(klass)
    flat = _flat_index([exp.column(f"c{i}") for i in range(len(spec.dimensions))] + [slot], spec.shape + (k + 1,))
    total = exp.Coalesce(this=exp.Sum(this=normalised), expressions=[exp.Literal.number(0)])
    query = (
        exp.select(
            exp.alias_(flat, "cell"),
            exp.alias_(exp.Count(this=exp.Star()), "n"),
            *_measure_values(spec),
            exp.alias_(total, "w"),
        )
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(known, copy=False)
        .group_by(flat.copy(), copy=False)
    )
    return query, p


def _class_of_row(
    spec: TableSpec, measure: str, edges: list[float], closed_above: list[bool], class_bounds: list[float], p: Params
) -> tuple[exp.Column, exp.Expression, exp.Expression]:
    """The measure's row column m_j, its class k (the first class whose upper edge is above v, or
    equal to it where the class is closed above: `MeasureClasses.classify`) and v/u_k, each one
    searched CASE over bound edges (a CASE on the class CASE would evaluate it per branch)."""
    m = exp.column(f"m{[x.name for x in spec.measures].index(measure)}")
    k = len(edges) - 1
    uppers, closed = list(edges[1:-1]), list(closed_above[:-1])
    klass = _searched_case(
        m, uppers, closed, [exp.Literal.number(i) for i in range(k - 1)], exp.Literal.number(k - 1), p
    )
    scaled = [exp.Div(this=m.copy(), expression=p.bind(float(u))) for u in class_bounds]
    return m, klass, _searched_case(m, uppers, closed, scaled[:-1], scaled[-1], p)


def class_cuboids_columns(spec: TableSpec) -> list[str]:
    """The result columns of `class_cuboids_query`: every coordinate, the class k (−1: not grouped), COUNT, Σ v/u_k."""
    return [f"c{i}" for i in range(len(spec.dimensions))] + ["k", "n", "s"]


def class_cuboids_query(
    table: exp.Table,
    spec: TableSpec,
    bounds: Bounds,
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
    sets: list[tuple[int, ...]],
) -> tuple[exp.Select, Params]:
    """A wide table's class axis: `cuboids_query`'s GROUPING SETS over the dimensions and
    the measure's class k (axis number d), with COUNT and Σ v/u_k of the rows where it is known."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    m, klass, normalised = _class_of_row(spec, measure, edges, closed_above, class_bounds, p)
    d = len(spec.dimensions)
    inner = (
        exp.select(*[exp.column(f"c{i}") for i in range(d)], exp.alias_(klass, "k"), exp.alias_(normalised, "w"))
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(exp.and_(known, exp.Not(this=exp.Is(this=m.copy(), expression=exp.Null()))), copy=False)
    )
    axis = [exp.column(f"c{i}") for i in range(d)] + [exp.column("k")]
    grouped = {i for s in sets for i in s}  # an axis in no set is never grouped: −1 throughout
    coords = [
        exp.alias_(
            exp.Coalesce(this=c.copy(), expressions=[exp.Literal.number(-1)])
            if i in grouped
            else exp.Literal.number(-1),
            c.name,
        )
        for i, c in enumerate(axis)
    ]
    total = exp.Coalesce(this=exp.Sum(this=exp.column("w")), expressions=[exp.Literal.number(0)])
    grouping = exp.GroupingSets(expressions=[exp.Tuple(expressions=[axis[i].copy() for i in s]) for s in sets])
    query = exp.select(*coords, exp.alias_(exp.Count(this=exp.Star()), "n"), exp.alias_(total, "s")).from_(
        exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("q")))
    )
    query.set("group", exp.Group(grouping_sets=[grouping]))
    return query, p


def unit_rows_query(table: exp.Table, spec: TableSpec) -> tuple[exp.Select, Params]:
    """SELECT n, units FROM (in-domain rows per unit) GROUP BY n: how many units have n rows — the
    input of the rows-per-unit histogram ("max_rows": "auto"); only counts of units leave. Rows
    with a NULL id are units of one row each (`_bounded_per_unit`), always kept: k ignores them."""
    p = Params()
    rows, known = _rows(table, spec, {m.name: (m.lo, m.hi) for m in spec.measures}, p, bounded=False)
    identified = exp.and_(known, exp.Not(this=exp.Is(this=exp.column("u"), expression=exp.Null())))
    per_unit = (
        exp.select(exp.alias_(exp.Count(this=exp.Star()), "n"))
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(identified, copy=False)
        .group_by(exp.column("u"), copy=False)
    )
    query = (
        exp.select(exp.column("n"), exp.alias_(exp.Count(this=exp.Star()), "units"))
        .from_(exp.Subquery(this=per_unit, alias=exp.TableAlias(this=exp.to_identifier("c"))), copy=False)
        .group_by(exp.column("n"), copy=False)
    )
    return query, p


def cuboids_columns(spec: TableSpec) -> list[str]:
    """The result columns of `cuboids_query`: every cell coordinate (−1: not grouped), COUNT, SUMs."""
    return [f"c{i}" for i in range(len(spec.dimensions))] + cuboid_columns(spec)[1:]


def cuboids_query(
    table: exp.Table, spec: TableSpec, bounds: Bounds, sets: list[tuple[int, ...]]
) -> tuple[exp.Select, Params]:
    """SELECT c0.., n, s0.. FROM (rows) WHERE in-domain GROUP BY GROUPING SETS ((c_i, c_j), …).

    In-domain rows have every c_i known, so a coordinate is NULL (returned as −1) exactly when its
    axis is not in the row's grouping set: the pattern of −1s says which set a row belongs to."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    grouped = {i for s in sets for i in s}  # an axis in no set is −1 itself (one set is a plain GROUP BY)
    coords = [
        exp.alias_(
            exp.Coalesce(this=exp.column(f"c{i}"), expressions=[exp.Literal.number(-1)])
            if i in grouped
            else exp.Literal.number(-1),
            f"c{i}",
        )
        for i in range(len(spec.dimensions))
    ]
    sums = _measure_values(spec)
    grouping = exp.GroupingSets(expressions=[exp.Tuple(expressions=[exp.column(f"c{i}") for i in s]) for s in sets])
    query = (
        exp.select(*coords, exp.alias_(exp.Count(this=exp.Star()), "n"), *sums)
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(known, copy=False)
    )
    query.set("group", exp.Group(grouping_sets=[grouping]))
    return query, p


def cells_columns(spec: TableSpec) -> list[str]:
    """The result columns of `cells_query`: every cell coordinate, COUNT, one clipped SUM per measure."""
    return [f"c{i}" for i in range(len(spec.dimensions))] + cuboid_columns(spec)[1:]


def cells_query(table: exp.Table, spec: TableSpec, bounds: Bounds) -> tuple[exp.Select, Params]:
    """SELECT c0.., n, s0.. FROM (rows) WHERE in-domain GROUP BY c0.. — the non-empty cells of the base
    cuboid by coordinates (no flat index: it would overflow on wide tables)."""
    p = Params()
    rows, known = _rows(table, spec, bounds, p)
    coords = [exp.column(f"c{i}") for i in range(len(spec.dimensions))]
    sums = _measure_values(spec)
    query = (
        exp.select(*coords, exp.alias_(exp.Count(this=exp.Star()), "n"), *sums)
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(known, copy=False)
        .group_by(*[c.copy() for c in coords], copy=False)
    )
    return query, p


def fit_columns(spec: TableSpec) -> list[str]:
    """The result columns of `fit_query`."""
    return (
        ["n", "inside"]
        + [f"out{i}" for i in range(len(spec.dimensions))]
        + [f"null{j}" for j in range(len(spec.measures))]
        + [f"clip{j}" for j in range(len(spec.measures))]
    )


def fit_query(table: exp.Table, spec: TableSpec) -> tuple[exp.Select, Params]:
    """How the source fits its declared metadata, one row: all rows, rows outside each dimension's
    domain (or NULL), rows whose measure is NULL/non-numeric, rows whose measure the bounds clip.
    Each row's flags are computed once in a subquery (o_i: dimension i's cell is unknown; v_j: the
    measure as a number) and counted outside: repeating the cell expressions in the "inside" count
    made this scan 1.6× longer at registration."""
    p = Params()

    def count_if(cond: exp.Expression, name: str) -> exp.Expression:
        return exp.alias_(
            exp.Coalesce(
                this=exp.Sum(this=exp.Case().when(cond, exp.Literal.number(1)).else_(exp.Literal.number(0))),
                expressions=[exp.Literal.number(0)],
            ),
            name,
        )

    flags = [
        exp.alias_(exp.Is(this=exp.Paren(this=_declared_cell(d, p)), expression=exp.Null()), f"o{i}")
        for i, d in enumerate(spec.dimensions)
    ]
    flags += [
        exp.alias_(exp.TryCast(this=_col(m.name), to=exp.DataType.build("DOUBLE")), f"v{j}")
        for j, m in enumerate(spec.measures)
    ]
    outside = [exp.column(f"o{i}") for i in range(len(spec.dimensions))]
    cols = [count_if(exp.Not(this=exp.Paren(this=exp.or_(*outside))) if outside else exp.true(), "inside")]
    cols += [count_if(o.copy(), f"out{i}") for i, o in enumerate(outside)]
    cols += [
        count_if(exp.Is(this=exp.column(f"v{j}"), expression=exp.Null()), f"null{j}") for j in range(len(spec.measures))
    ]
    for j, m in enumerate(spec.measures):
        v = exp.column(f"v{j}")
        clipped = exp.or_(
            exp.LT(this=v.copy(), expression=p.bind(float(m.lo))), exp.GT(this=v.copy(), expression=p.bind(float(m.hi)))
        )
        cols.append(count_if(clipped, f"clip{j}"))
    rows = exp.select(*flags).from_(table.copy())
    return (
        exp.select(exp.alias_(exp.Count(this=exp.Star()), "n"), *cols).from_(
            exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("f")))
        ),
        p,
    )


def histogram_query(table: exp.Table, spec: TableSpec, measure: str, edges: np.ndarray) -> tuple[exp.Select, Params]:
    """Counts of one measure (clipped to its public bounds) per bucket of ``edges``, in-domain rows.

    Buckets are [e_k, e_{k+1}) (the last one closed), found by one searched CASE over the bound
    edges — exact comparisons, so every engine puts a value in the same bucket, whatever the
    bucket widths (equal, or geometric as `privacy.clipping.data_driven.histogram_edges` lays them out).
    """
    p = Params()
    rows, known = _rows(table, spec, {m.name: (m.lo, m.hi) for m in spec.measures}, p)
    j = [m.name for m in spec.measures].index(measure)
    k = len(edges) - 1
    m = exp.column(f"m{j}")
    bucket = _searched_case(
        m,
        list(edges[1:-1]),
        [False] * (k - 1),
        [exp.Literal.number(i) for i in range(k - 1)],
        exp.Literal.number(k - 1),
        p,
    )
    query = (
        exp.select(exp.alias_(bucket, "b"), exp.alias_(exp.Count(this=exp.Star()), "n"))
        .from_(exp.Subquery(this=rows, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False)
        .where(exp.and_(known, exp.Not(this=exp.Is(this=m.copy(), expression=exp.Null()))), copy=False)
        .group_by(bucket.copy(), copy=False)
    )
    return query, p


def render(query: exp.Expression, dialect: str) -> str:
    """The query text in one engine's dialect (placeholders stay placeholders). The query is
    consumed: rendered without a copy (a build's queries are made for one run; copying them was
    ~10 ms of a small build), so it must not be used again.

    Every cast of a source value must yield NULL, never an error, on any value a row can hold
    (a build that fails on one row's value tells whether that row exists). DuckDB has
    TRY_CAST; Spark's TRY_CAST is written by sqlglot's Databricks dialect (its Spark dialect writes
    CAST, which raises under ANSI mode); PostgreSQL has none, so `_postgres_safe` rewrites them."""
    if dialect == "spark":  # Spark SQL with TRY_CAST kept (otherwise identical)
        return _spark_lists(query).sql(dialect="databricks", copy=False)
    if dialect == "postgres":
        return _postgres_safe(query).sql(dialect=dialect, copy=False)
    return query.sql(dialect=dialect, copy=False)


_SEPARATORS = [chr(c) for c in range(0x1F, 0x0F, -1)]  # control characters: no regex meaning


def _spark_lists(query: exp.Expression) -> exp.Expression:
    """Spark's named parameters take no arrays: a category's list parameter :p arrives as one string
    and a separator (`split_lists`), and SPLIT(:p, :p_sep, -1) makes it the array again —
    constant-folded once, so ARRAY_POSITION scans a literal array per row."""

    def split(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.ArrayPosition) and isinstance(node.this, exp.Placeholder):
            name = node.this.name
            node.set(
                "this",
                exp.Anonymous(
                    this="SPLIT",
                    expressions=[
                        exp.Placeholder(this=name),
                        exp.Placeholder(this=f"{name}_sep"),
                        exp.Literal.number(-1),
                    ],
                ),
            )
        return node

    return query.transform(split)


def split_lists(params: dict[str, Any]) -> dict[str, Any]:
    """Spark's parameters for `_spark_lists`: each list joined by a separator none of its values
    contains, and that separator as ``<name>_sep``."""
    out = dict(params)
    for name, values in params.items():
        if not isinstance(values, list):
            continue
        sep = next((s for s in _SEPARATORS if not any(s in str(v) for v in values)), None)
        if sep is None:
            raise ValueError(
                "a category's values use every separator character U+0010..U+001F; Spark cannot "
                "take them as one parameter"
            )
        out[name], out[f"{name}_sep"] = sep.join(str(v) for v in values), sep
    return out


def positions_json(values: list[str]) -> str:
    """A category's declared values as the JSON object PostgreSQL looks a row's value up in:
    value → 1-based position, as ARRAY_POSITION answers (`_postgres_safe`)."""
    return json.dumps({v: i + 1 for i, v in enumerate(values)})


FLOAT_LIMIT = 1e300  # PostgreSQL numeric → float8 overflows past ~1.8e308: clamp first


def _postgres_safe(query: exp.Expression) -> exp.Expression:
    """PostgreSQL casts that cannot raise on a row's value. Casts that could (text to a number or a
    date) are made to fail when the statement is *bound*, from the column's type alone — before any
    row is read, in the pre-charge probe (`SourceEngine.check`):
    * to DOUBLE: CASE WHEN v IS NULL THEN NULL ELSE CAST(LEAST(GREATEST(v, −1e300), 1e300) AS
      DOUBLE PRECISION) END — numeric types clamp first (a numeric may exceed float8's range; NaN
      compares above every number), a text column has no GREATEST with a number (bind error);
    * to DATE: CAST(v + INTERVAL '0 days' AS DATE) — dates and timestamps move by nothing, a text
      column has no ``+ interval`` (bind error);
    * to VARCHAR: a plain CAST (every type has a text form).
    And a category's ARRAY_POSITION (a linear scan per row: 21 s for 10,000 codes over 10^5 rows)
    becomes a lookup in a JSONB object from value to position (0.15 s; bench/categories.py), whose
    parameter `PostgresEngine` binds as that object (`positions_json`)."""

    def safe(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.ArrayPosition) and isinstance(node.this, exp.Placeholder):
            lookup = exp.Anonymous(
                this="JSONB_EXTRACT_PATH_TEXT",
                expressions=[exp.cast(node.this.copy(), exp.DataType.build("JSONB")), node.expression.transform(safe)],
            )
            return exp.cast(lookup, exp.DataType.build("BIGINT"))
        if not isinstance(node, exp.TryCast):
            return node
        value, to = node.this, node.to
        if to.is_type(exp.DataType.Type.DOUBLE):
            clamped = _least(_greatest(value.copy(), exp.Literal.number(-FLOAT_LIMIT)), exp.Literal.number(FLOAT_LIMIT))
            return exp.Paren(
                this=exp.Case()
                .when(exp.Is(this=value.copy(), expression=exp.Null()), exp.Null())
                .else_(exp.cast(clamped, to))
            )
        if to.is_type(exp.DataType.Type.DATE):
            moved = exp.Add(
                this=value.copy(), expression=exp.Interval(this=exp.Literal.string("0"), unit=exp.var("DAY"))
            )
            return exp.cast(moved, to)
        return exp.cast(value.copy(), to)

    return query.transform(safe)


def duckdb_enums(query: exp.Expression, values: dict[str, Any]) -> tuple[exp.Expression, dict[str, Any]]:
    """DuckDB: a category's ARRAY_POSITION over its list parameter scans the list for every row
    (a 10^7-row build with 10 regions and 50 products: 2.6 s for the aggregate where a hand GROUP BY
    of the same cells takes 1.1 s). Here it becomes a TRY_CAST to an ENUM of the declared values
    (DuckDB looks the value up in a hash: 1.8 s) and ``enum_code + 1`` — the same 1-based position,
    NULL where the value is not declared, as ARRAY_POSITION. The declared values are public and
    unique (`CategoryDimension`), written as quoted literals; the list parameters the query no
    longer reads are dropped (DuckDB refuses unused ones)."""

    def enum(node: exp.Expression) -> exp.Expression:
        if not (isinstance(node, exp.ArrayPosition) and isinstance(node.this, exp.Placeholder)):
            return node
        declared = [exp.Literal.string(str(v)) for v in values[node.this.name]]
        to = exp.DataType(this=exp.DataType.Type.ENUM, expressions=declared, nested=False)
        code = exp.Anonymous(this="enum_code", expressions=[exp.TryCast(this=node.expression.copy(), to=to)])
        return exp.Paren(this=exp.Add(this=code, expression=exp.Literal.number(1)))

    out = query.transform(enum, copy=False)  # in place: the query is made for this one run (`render`)
    used = {p.name for p in out.find_all(exp.Placeholder)}
    return out, {k: v for k, v in values.items() if k in used}


def probe_query(table: exp.Table) -> exp.Select:
    """SELECT * FROM table LIMIT 0: column names without reading a row."""
    return exp.select("*").from_(table.copy()).limit(0)


__all__ = [
    "Params",
    "cuboid_query",
    "fit_query",
    "fit_columns",
    "histogram_query",
    "render",
    "probe_query",
    "table_ref",
]
