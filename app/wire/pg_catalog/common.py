"""What the catalog engine's parts share: the snapshot of PostgreSQL's catalogs, the schema names
they live under in the engine, the registered tables' shape, and the engine's error."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sqlglot import exp

SNAPSHOT = Path(__file__).with_name("snapshot.json")
SCHEMAS = {"pg_catalog": "pgc", "information_schema": "pgis"}  # PostgreSQL schema -> DuckDB schema
FIRST_OID = 16384  # PostgreSQL numbers user objects from here
OWNER = "prima"
TIME_LIMIT_S = 2.0


class CatalogError(Exception):
    """A catalog statement this engine does not run (SQLSTATE in `code`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # "integer" | "text" | "date" | "double precision"
    comment: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    comment: str | None = None


@dataclass
class Result:
    names: list[str]
    types: list[str]  # DuckDB type names, mapped to PostgreSQL oids by the wire layer
    rows: list[tuple]


@lru_cache(maxsize=1)
def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def server_version() -> str:
    """The snapshot server's `major.minor` ("15.18")."""
    return snapshot()["server_version"].split()[0]


def is_catalog_table(table: exp.Table) -> bool:
    """A reference to a PostgreSQL catalog relation (qualified, or a bare `pg_…` name)."""
    db = table.db.lower()
    if db in SCHEMAS:
        return True
    return not db and f"pg_catalog.{table.name.lower()}" in snapshot()["columns"]
