"""Spark sources: a table in the Spark catalog, or Parquet files read by Spark (local or a cluster).

pyspark is an optional extra (``pip install .[spark]``, Java 17 required). ``master`` is any Spark
master URL: ``local[*]`` runs Spark inside the service's machine (what the tests use);
``spark://host:7077``, ``yarn`` or ``k8s://…`` send the aggregate to a cluster — only the
aggregate (one row per cube cell) comes back. One SparkSession per master is kept for the
process; Spark settings (memory, executors, catalog) come from the usual ``SPARK_CONF_DIR`` /
``spark-defaults.conf`` or ``PYSPARK_SUBMIT_ARGS``.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterator

from sqlglot import exp

from storage import aggregate_sql
from storage.database import StorageError
from storage.engines.base import BATCH_ROWS, Batch, SourceEngine, to_batch

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
                    builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                _sessions[master] = builder.getOrCreate()
            except Exception as exc:
                raise StorageError(f"could not start Spark ({type(exc).__name__}); is Java 17 installed?") from None
        return _sessions[master]


def stop_all() -> None:
    with _lock:
        for s in _sessions.values():
            s.stop()
        _sessions.clear()


_SEPARATORS = [chr(c) for c in range(0x1F, 0x0F, -1)]  # control characters: no regex meaning


def _lists_as_split_strings(sql: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Spark's named parameters take no arrays: a list value (a category's declared values) travels
    as one string joined by a separator none of its values contains, and `split` makes it the array
    again — constant-folded once, so ARRAY_POSITION scans a literal array per row."""
    out = dict(params)
    for name, value in params.items():
        if not isinstance(value, list):
            continue
        sep = next((s for s in _SEPARATORS if not any(s in str(v) for v in value)), None)
        if sep is None:
            raise StorageError("a category's values use every separator character U+0010..U+001F; Spark cannot "
                               "take them as one parameter")
        out[name], out[f"{name}_sep"] = sep.join(str(v) for v in value), sep
        sql = re.sub(rf":{name}\b", f"SPLIT(:{name}, :{name}_sep, -1)", sql)
    return sql, out


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
        sql, params = _lists_as_split_strings(sql, params)
        frame = session(self.master).sql(sql, args=params)
        rows: list[tuple] = []
        for row in frame.toLocalIterator():
            rows.append(tuple(row))
            if len(rows) == BATCH_ROWS:
                yield to_batch(rows, names)
                rows = []
        if rows:
            yield to_batch(rows, names)
