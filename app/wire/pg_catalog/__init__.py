"""`pg_catalog` and `information_schema` for the wire listener, from declared metadata only.

BI drivers learn what a database holds by querying PostgreSQL's catalogs with SQL of their own:
SQLAlchemy's inspector, pgjdbc's `DatabaseMetaData`, psqlODBC's `SQLTables`/`SQLColumns`,
Npgsql's type loading, psql's `\\d`. Those statements use correlated subqueries, `ANY(ARRAY[…])`,
`::regclass` casts, `unnest`, window functions — more than a pattern table or pg-mimic's small
executor can answer. So they run on a real SQL engine: a **separate, empty, sealed, in-memory
DuckDB** that holds nothing but

* PostgreSQL 15's own catalog structure (`snapshot.json`, read off a real server by
  `regenerate.py`: every catalog table's columns, the built-in types, namespaces, access methods);
* one row per registered table and per declared column (names and types — public metadata).

It never sees a row of data: it is not the storage DuckDB, holds no source, and is sealed before
the first client statement (no file system, no extensions, configuration locked, one thread, a
memory cap, a time limit); only read-only queries over catalog relations reach it.

Parts: `build` (relations, rows, PostgreSQL's catalog functions as macros), `translate` (a driver's
PostgreSQL SQL into the engine's, with the read-only check), `common` (what both share), `regenerate`
(the developer tool that reads the structure off a real PostgreSQL).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

import duckdb

from app.wire.pg_catalog.build import create, settings
from app.wire.pg_catalog.common import (
    SCHEMAS,
    TIME_LIMIT_S,
    CatalogError,
    Column,
    Result,
    Table,
    is_catalog_table,
    server_version,
    snapshot,
)
from app.wire.pg_catalog.translate import preprocess, translate

__all__ = [
    "Catalog",
    "CatalogError",
    "Column",
    "Table",
    "Result",
    "SCHEMAS",
    "is_catalog_table",
    "parameter_count",
    "preprocess",
    "render",
    "server_version",
    "settings",
    "snapshot",
    "translate",
]


MAX_ROWS = 100_000  # a catalog of a few hundred relations never needs more; a cross join is refused


class Catalog:
    """The sealed catalog engine for one set of registered tables (rebuilt when they change)."""

    def __init__(self, tables: Iterable[Table], database: str = "prima", version: str = "") -> None:
        self.tables = tuple(tables)
        self._lock = threading.Lock()
        self._con = duckdb.connect(
            ":memory:",
            config={
                "threads": 1,
                "memory_limit": "256MB",
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            },
        )
        create(self._con, self.tables, database, version)
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def run(self, sql: str, params: list[str | None] | None = None) -> Result:
        """Run one read-only catalog statement; `params` are the extended protocol's text values."""
        return self._execute(translate(sql), params)

    def describe(self, sql: str) -> Result:
        """The statement's columns before its parameters are known: it runs with NULLs under
        `LIMIT 0`, so nothing is evaluated that a NULL could break (a json key, say)."""
        return self._execute(f"SELECT * FROM ({translate(sql)}) AS described LIMIT 0", None)

    def _execute(self, duck_sql: str, params: list[str | None] | None) -> Result:
        n = parameter_count(duck_sql)
        values = list(params or [])[:n] + [None] * max(0, n - len(params or []))
        with self._lock:  # only to open a cursor: statements run side by side, none waits behind another
            cur = self._con.cursor()
        timer = threading.Timer(TIME_LIMIT_S, cur.interrupt)
        timer.start()
        try:
            cur.execute(duck_sql, values if n else None)
            names = [d[0] for d in cur.description]
            types = [str(d[1]) for d in cur.description]
            rows = cur.fetchmany(MAX_ROWS + 1)
        except duckdb.InterruptException:
            raise CatalogError("57014", f"catalog query cancelled after {TIME_LIMIT_S:g} s") from None
        except duckdb.Error as exc:
            raise CatalogError("42601", f"catalog query not supported here: {str(exc).splitlines()[0]}") from None
        finally:
            timer.cancel()
            cur.close()
        if len(rows) > MAX_ROWS:
            raise CatalogError("54000", f"catalog query returns more than {MAX_ROWS:,} rows; narrow it")
        return Result(names, types, rows)


def parameter_count(sql: str) -> int:
    """How many parameters a statement takes: its highest $n."""
    return max((int(m) for m in re.findall(r"\$(\d+)", sql)), default=0)


def render(value: Any) -> Any:
    """A catalog value as the wire layer sends it: arrays in PostgreSQL's `{a,b}` text form."""
    if isinstance(value, list):
        return "{" + ",".join("NULL" if v is None else str(v) for v in value) + "}"
    return value
