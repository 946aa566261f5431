"""The embedded default: source tables inside Prima's own DuckDB file."""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import sqlglot
from sqlglot import exp

from storage.database import Database
from storage.engines.base import Batch, SourceEngine


class DuckDBEngine(SourceEngine):
    dialect = "duckdb"
    kind = "DuckDB"

    def __init__(self, db: Database, qualified: str) -> None:
        super().__init__(sqlglot.parse_one(qualified, into=exp.Table, dialect="duckdb"))
        self.db = db
        self.qualified = qualified

    def columns(self) -> list[str]:
        return [r[0] for r in self.db.run(f"DESCRIBE SELECT * FROM {self.qualified}")]

    def batches(self, sql: str, params: dict[str, Any], names: list[str]) -> Iterator[Batch]:
        # One fetch: the result has at most one row per cube cell, so it is the cube's size already.
        cols = self.db.numpy(sql, params)
        yield {name: np.asarray(cols[name], dtype=np.float64) for name in names}
