"""The wire listener's catalog statements: drivers' introspection SQL on the sealed catalog engine.

`app.wire.pg_catalog` is the engine (PostgreSQL's catalog structure, one row per registered table and
declared column, in a sealed in-memory DuckDB); this module is its pg-mimic face: a Statement whose
describe/execute run there, parameters as drivers bind them (arrays included), the registered
tables' declared metadata as catalog rows, and one engine per set of tables.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

import sqlglot
from pg_mimic import FLOAT8, INT4, TEXT, PgError, ResultColumn
from pg_mimic import types as pgtypes
from pg_mimic.arrays import ARRAY_OID
from pg_mimic.session import Portal, Statement, drain_rows
from sqlglot import exp

from app.wire import pg_catalog
from app.wire.cursors import iterate
from app.wire.pg_catalog.common import OWNER
from engine.service import Prima
from engine.sql import constants
from storage.schema import CategoryDimension, DateDimension


class CatalogStatement(Statement):
    """A driver's catalog query, run on the sealed catalog engine (app/wire/pg_catalog)."""

    def __init__(self, session: Any, sql: str, param_oids: list[int | None]) -> None:
        sql = _with_login(sql, getattr(getattr(session, "_connection", None), "username", "") or OWNER)
        self.session, self.sql, self.declared = session, sql, list(param_oids)
        self.param_oids = parameter_types(sql, param_oids)
        self._columns: list[ResultColumn] | None = None

    async def describe(self) -> list[ResultColumn] | None:
        if self._columns is None:  # the shape does not depend on the parameters' values
            self._columns = (await self._run(None))[0]
        return self._columns

    def bind(self, params: list[str | None]) -> Portal:
        return CatalogPortal(self, params)

    async def _run(self, params: list[str | None] | None) -> tuple[list[ResultColumn], list[tuple]]:
        """Run with the bound parameters, or describe (params None)."""
        catalog = await self.session.catalog()
        try:
            if params is None:
                result = await asyncio.to_thread(catalog.describe, self.sql)
            else:
                self.session.count_request()
                declared = self.declared + [None] * (len(params) - len(self.declared))
                values = [_array_param(v, oid) if _is_array(v, oid) else v for v, oid in zip(params, declared)]
                result = await asyncio.to_thread(catalog.run, self.sql, values)
        except pg_catalog.CatalogError as exc:
            raise PgError(exc.code, str(exc)) from None
        constant = not FROM_WORD.search(self.sql)  # `SELECT current_schemas(false)`: a name[] (harlequin reads a list)
        columns = [
            ResultColumn(n, NAME_ARRAY if constant and t == "VARCHAR[]" else _CATALOG_OIDS.get(t, TEXT))
            for n, t in zip(result.names, result.types)
        ]
        rows = [
            tuple(pg_catalog.render(v) if c.oid == TEXT else v for v, c in zip(row, columns)) for row in result.rows
        ]
        return columns, rows


class CatalogPortal(Portal):
    def __init__(self, statement: CatalogStatement, params: list[str | None]) -> None:
        self.statement, self.params = statement, params
        self._rows: Any = None

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        if self._rows is None:
            self._rows = iterate((await self.statement._run(self.params))[1])  # noqa: SLF001
        return await drain_rows(self._rows, max_rows)


# The catalog engine's column types as PostgreSQL type oids; anything else travels as text.
_CATALOG_OIDS = {
    "BIGINT": pgtypes.INT8,
    "INTEGER": INT4,
    "SMALLINT": pgtypes.INT2,
    "BOOLEAN": pgtypes.BOOL,
    "DOUBLE": FLOAT8,
    "FLOAT": pgtypes.FLOAT4,
    "DATE": pgtypes.DATE,
    "TIMESTAMP WITH TIME ZONE": pgtypes.TIMESTAMPTZ,
}


def _with_login(sql: str, login: str) -> str:
    """current_user / session_user as the login name (the catalog engine's own would say "duckdb"),
    keeping PostgreSQL's column names where they are selected."""
    if not _SESSION_USER.search(sql):
        return sql
    try:
        tree = sqlglot.parse_one(pg_catalog.preprocess(sql), read="postgres")
    except sqlglot.errors.SqlglotError:
        return _SESSION_USER.sub("'" + login.replace("'", "''") + "'", sql)

    def swap(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, (exp.CurrentUser, exp.SessionUser)):
            return node
        name = "current_user" if isinstance(node, exp.CurrentUser) else "session_user"
        value = exp.Literal.string(login)
        return (
            exp.alias_(value, name) if isinstance(node.parent, exp.Select) and node.arg_key == "expressions" else value
        )

    return tree.transform(swap).sql(dialect="postgres")


_SESSION_USER = re.compile(r"\b(?:current_user|session_user)\b(?!\s*\()", re.IGNORECASE)
FROM_WORD = re.compile(r"\bfrom\b", re.IGNORECASE)  # a statement that reads a relation (wire routing too)
NAME_ARRAY = 1003
_OID_COLUMN = re.compile(r"(oid|relid|typid|namespace|num|relnatts|typmod|len)$", re.IGNORECASE)


def undeclared(sql: str, declared: list[int | None]) -> bool:
    """Whether some $n of the statement has no type from the client."""
    return pg_catalog.parameter_count(sql) > len(declared) or any(o is None for o in declared)


def infer_parameter_types(
    sql: str,
    declared: list[int | None],
    tree: exp.Expression | None,
    column_type: Callable[[str], int],
    default: int | None = TEXT,
    array_of: dict[int, int] = ARRAY_OID,
) -> list[int | None]:
    """Every $n's type for ParameterDescription, as PostgreSQL infers it for clients that declare none
    (asyncpg encodes each argument by it): what the client declared, else ``column_type`` of the column
    the parameter meets in its comparison (``array_of`` that type inside `= ANY($n)`), else
    ``default``; no ``tree`` (unparsed): ``default``.
    Callers check `undeclared` first, before any parsing or planning."""
    count = pg_catalog.parameter_count(sql)
    inferred: dict[int, int] = {}
    for node in tree.find_all(exp.Parameter, exp.Placeholder) if tree is not None else ():
        name = str(node.name if isinstance(node, exp.Placeholder) else node.this.name).lstrip("$")
        column = _met_column(node)
        if name.isdigit() and column is not None:
            scalar = column_type(column.name)
            inferred[int(name)] = array_of.get(scalar, scalar) if _in_any(node) else scalar
    return [
        declared[i] if i < len(declared) and declared[i] is not None else inferred.get(i + 1, default)
        for i in range(max(count, len(declared)))
    ]


# `col = ANY($1)` / `col <> ALL($1)`: the parameter is the column type's array (`text[]`, `int4[]`,
# `float8[]`, `date[]`): asyncpg and postgres.js encode a list only for an array type. asyncpg codes
# text[] itself and looks the others up with its type-introspection query (`::oid[]`, answered by the
# catalog engine); drivers that declare their own array type are bound as such.
TEXT_ARRAY = ARRAY_OID[TEXT]  # text[]
# A catalog column that holds oids is `oid` in PostgreSQL, so `oid = ANY($1)` is `oid[]` there (one of
# the two arrays asyncpg codes without introspecting: its own introspection query binds one).
_CATALOG_ARRAY_OF = {**ARRAY_OID, pgtypes.INT8: ARRAY_OID[pgtypes.OID]}
_QUANTIFIERS = (exp.Any, exp.All)


def _in_any(parameter: exp.Expression) -> bool:
    node = parameter.parent
    while isinstance(node, (exp.Cast, exp.Paren)):
        node = node.parent
    return isinstance(node, _QUANTIFIERS) or (isinstance(node, exp.Anonymous) and node.name.upper() in ("ANY", "ALL"))


def _met_column(parameter: exp.Expression) -> exp.Column | None:
    """The column a parameter is compared with (``col = $1``, ``col IN ($1, $2)``, ``col BETWEEN
    $1 AND $2``, through a cast), read from the comparison's own operands only: searching the
    parent's whole subtree made a SELECT of n parameters cost n² (5,000 took 18 s)."""
    node = parameter.parent
    while isinstance(node, (exp.Cast, exp.Paren, exp.Tuple, *_QUANTIFIERS)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in ("ANY", "ALL")
    ):
        node = node.parent
    if not isinstance(node, (exp.Binary, exp.Predicate, exp.In, exp.Between)):
        return None
    for operand in node.iter_expressions():
        while isinstance(operand, (exp.Cast, exp.Paren)):
            operand = operand.this
        if isinstance(operand, exp.Column):
            return operand
    return None


def parameter_types(sql: str, declared: list[int | None]) -> list[int | None]:
    """A catalog statement's parameter types: int8 where a parameter meets an oid-like catalog column
    (`oid`, `attrelid`, `attnum`, …), text otherwise."""
    if not undeclared(sql, declared):
        return declared
    try:
        tree = sqlglot.parse_one(pg_catalog.preprocess(sql), read="postgres")
    except sqlglot.errors.SqlglotError:
        tree = None
    return infer_parameter_types(
        sql,
        declared,
        tree,
        lambda column: pgtypes.INT8 if _OID_COLUMN.search(column) else TEXT,
        TEXT,
        _CATALOG_ARRAY_OF,
    )


# text[], name[], varchar[], int2[], int4[], int8[], oid[], char[]: array parameters drivers bind
_ARRAY_OIDS = {TEXT_ARRAY, 1003, 1015, 1005, 1007, 1016, 1028, 1002}
_INT_ARRAY_OIDS = {1005, 1007, 1016, 1028}


def _is_array(value: str | None, oid: int | None) -> bool:
    """An array parameter: declared as one, or untyped and written as one (psycopg sends a list of
    strings untyped, as '{a,b}'; no catalog query compares a name with a brace-wrapped string)."""
    return oid in _ARRAY_OIDS or (oid is None and isinstance(value, str) and value[:1] == "{" and value[-1:] == "}")


def _array_param(value: str | list | None, oid: int | None) -> list | None:
    """An array parameter as a list for the catalog engine: a PostgreSQL array literal ('{int4,text}',
    '{"a b",c}') or an already decoded (binary) one; integer arrays as integers."""
    if value is None:
        return None
    if isinstance(value, list):
        items = value
    else:
        items = [text for text, _ in constants.array_literal(value) or []]
    if oid in _INT_ARRAY_OIDS:
        return [None if i in (None, "NULL") else int(i) for i in items]
    return items


def reads_catalog(sql: str) -> bool:
    """Does the statement read a pg_catalog / information_schema relation?"""
    try:
        tree = sqlglot.parse_one(pg_catalog.preprocess(sql), read="postgres")
    except sqlglot.errors.SqlglotError:
        return False
    return any(pg_catalog.is_catalog_table(t) for t in tree.find_all(exp.Table))


_catalogs: dict[tuple, pg_catalog.Catalog] = {}
_catalogs_lock = threading.Lock()


def catalog_for(prima: Prima, database: str, version: str) -> pg_catalog.Catalog:
    """The registered tables as catalog rows: names, declared types and what each column is for."""
    tables = tuple(_catalog_table(prima.spec(name)) for name in prima.table_names())
    key = (tables, database)
    with _catalogs_lock:
        if key not in _catalogs:
            if len(_catalogs) >= 4:
                _catalogs.pop(next(iter(_catalogs)))
            _catalogs[key] = pg_catalog.Catalog(tables, database=database, version=version)
        return _catalogs[key]


def _catalog_table(spec: Any) -> pg_catalog.Table:
    cols = []
    for d in spec.dimensions:
        kind = "date" if isinstance(d, DateDimension) else "text" if isinstance(d, CategoryDimension) else "integer"
        cols.append(pg_catalog.Column(d.name, kind, "dimension: filter with WHERE, group with GROUP BY"))
    for m in spec.measures:
        cols.append(
            pg_catalog.Column(
                m.name,
                "double precision",
                f"measure in [{m.lo:g}, {m.hi:g}]: use inside SUM/AVG (answers carry _stddev)",
            )
        )
    note = "Prima: differentially private answers (aggregates with _stddev columns; no raw rows)"
    return pg_catalog.Table(spec.name, tuple(cols), f"{spec.description} — {note}" if spec.description else note)
