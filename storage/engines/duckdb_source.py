"""The embedded default: source tables inside Prima's own DuckDB file."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import sqlglot
from sqlglot import exp

from storage import aggregate_sql
from storage.database import Database
from storage.engines.interface import Batch, SourceEngine


class DuckDBEngine(SourceEngine):
    dialect = "duckdb"
    kind = "DuckDB"
    in_store = True

    def __init__(self, db: Database, qualified: str | exp.Expression) -> None:
        """``qualified``: a ``[schema.]table`` name, or a table expression (a growing table's file
        reader, `storage.sources.growing_rows`)."""
        table = (
            qualified
            if isinstance(qualified, exp.Expression)
            else sqlglot.parse_one(qualified, into=exp.Table, dialect="duckdb")
        )
        super().__init__(table)
        self.db = db
        self._described: tuple[tuple[str, str], ...] | None = None

    def columns(self) -> list[str]:
        return [name for name, _ in self.schema_key()]

    def schema_key(self) -> tuple[tuple[str, str], ...]:
        """(name, type) of every column, read once per engine (a growing table's DESCRIBE reads its files' headers)."""
        if self._described is None:
            rows = self.db.run(f"DESCRIBE SELECT * FROM {self.table.sql(dialect='duckdb')}")
            self._described = tuple((str(r[0]), str(r[1])) for r in rows)
        return self._described

    def prepared(self, query: exp.Expression, values: dict[str, Any]) -> tuple[exp.Expression, dict[str, Any]]:
        """Categories looked up through an ENUM, not a list scan per row (`aggregate_sql.duckdb_enums`)."""
        return aggregate_sql.duckdb_enums(query, values)

    def batches(self, sql: str, params: dict[str, Any], names: list[str]) -> Iterator[Batch]:
        # One fetch: the result has at most one row per cube cell, so it is the cube's size already.
        cols = self.db.numpy(sql, params)
        yield {name: np.asarray(cols[name], dtype=np.float64) for name in names}
