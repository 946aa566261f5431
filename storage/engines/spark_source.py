"""Spark sources: a table in the Spark catalog, or Parquet files read by Spark (local or a cluster).

pyspark is an optional extra (``pip install .[spark]``, Java 17 required). ``master`` is any Spark
master URL: ``local[*]`` runs Spark inside the service's machine (what the tests use);
``spark://host:7077``, ``yarn`` or ``k8s://…`` send the aggregate to a cluster — only the
aggregate (one row per cube cell) comes back. One SparkSession per master is kept for the
process; Spark settings (memory, executors, catalog) come from the usual ``SPARK_CONF_DIR`` /
``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from sqlglot import exp

from storage import aggregate_sql
from storage.database import StorageError
from storage.engines.interface import BATCH_ROWS, Batch, SourceEngine, to_batch

_sessions: dict[str, Any] = {}
_lock = threading.Lock()


def session(master: str) -> Any:
    """The process's SparkSession for ``master`` (created on first use)."""
    with _lock:
        if master not in _sessions:
            try:
                from pyspark.sql import SparkSession
            except ImportError:
                raise StorageError("Spark sources need the optional extra: pip install 'prima[spark]'") from None
            try:
                builder = SparkSession.builder.master(master).appName("prima").config("spark.ui.enabled", "false")
                if master.startswith("local"):  # stay on loopback: no dependence on the hostname resolving
                    builder = builder.config("spark.driver.host", "127.0.0.1").config(
                        "spark.driver.bindAddress", "127.0.0.1"
                    )
                _sessions[master] = builder.getOrCreate()
            except Exception as exc:
                raise StorageError(f"could not start Spark ({type(exc).__name__}); is Java 17 installed?") from None
        return _sessions[master]


def stop_all() -> None:
    with _lock:
        for s in _sessions.values():
            s.stop()
        _sessions.clear()


class SparkEngine(SourceEngine):
    dialect = "spark"
    kind = "Spark"

    def __init__(self, master: str, table: str | None = None, parquet: str | None = None) -> None:
        if parquet:  # Spark SQL's file source: parquet.`/path`
            ref = exp.Table(this=exp.to_identifier(parquet, quoted=True), db=exp.to_identifier("parquet"))
        else:
            ref = aggregate_sql.table_ref(table or "")
        super().__init__(ref)
        self.master = master

    def columns(self) -> list[str]:
        sql = aggregate_sql.render(aggregate_sql.probe_query(self.table), self.dialect)
        return list(session(self.master).sql(sql).columns)

    def batches(self, sql: str, params: dict[str, Any], names: list[str]) -> Iterator[Batch]:
        try:  # the rendering wrote SPLIT(:p, :p_sep, -1) for each list (aggregate_sql._spark_lists)
            params = aggregate_sql.split_lists(params)
        except ValueError as exc:
            raise StorageError(str(exc)) from None
        frame = session(self.master).sql(sql, args=params)
        rows: list[tuple] = []
        for row in frame.toLocalIterator():
            rows.append(tuple(row))
            if len(rows) == BATCH_ROWS:
                yield to_batch(rows, names)
                rows = []
        if rows:
            yield to_batch(rows, names)
