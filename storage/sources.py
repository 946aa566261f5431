"""Source tables: loading CSV/Parquet into DuckDB, and the entry points to the aggregates.

With `storage.engines` and `storage.aggregate_sql`, this is the only code that touches raw rows.
It hands out the true, clipped base cuboids (COUNT and SUM per measure, dense numpy arrays) and
measure histograms to the build orchestration, which passes them straight to a privacy
mechanism. Error messages from the engines are replaced by generic ones because a parser or cast
error can quote a row value (privacy rule 4).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from sqlglot import exp

from storage import growing_files
from storage.database import Database, StorageError
from storage.engines.duckdb_source import DuckDBEngine
from storage.engines.interface import COUNT_KEY, SourceEngine, class_count_key, measure_of, present_key, sum_key
from storage.schema import Source, TableSpec, quote_ident

log = logging.getLogger("prima.storage")

__all__ = [
    "COUNT_KEY",
    "sum_key",
    "class_count_key",
    "present_key",
    "measure_of",
    "load_source",
    "engine_for",
    "check_columns",
    "base_cuboids",
    "measure_histogram",
]


def source_table_name(table: str) -> str:
    return f"src.{quote_ident(table)}"


WINDOW_PREFIX = "window:"  # a source's rows dated within one block of periods


def growing_rows(db: Database, source: Source, import_dir: Path | None) -> str:
    """A growing table's rows stay where they are (nothing is copied: they arrive after registration).
    A CSV/Parquet source may be a directory — every ``*.csv``/``*.parquet`` below it, with hive-style
    ``column=value`` folders read as columns, so an append opens only its period's folders — or one
    file; tables are referenced as for any table.

    Files are read by `storage.growing_files`, with the layout fixed at registration."""
    if source.remote:
        return load_source(db, "", source, import_dir)
    if source.duckdb_table:
        return _existing_table(db, source.duckdb_table)
    return growing_files.reference(db, source, files_location(source, import_dir), import_dir)


def files_location(source: Source, import_dir: Path | None) -> Path:
    """A growing CSV/Parquet source's checked place (a file, or a directory of them): its id space."""
    return _checked_path(source.csv or source.parquet or "", import_dir, directory=True)


UNIT_PERIOD = "__prima_unit_period"  # a windowed source's (unit, period) id: `windowed`'s ``unit``


def windowed(source_table: str, column: str, first: dt.date, last: dt.date, unit: str | None = None) -> str:
    """A reference to the source's rows whose ``column`` falls in first..last (one period's or one
    block's): the aggregates read only them. The dates are public (the declared periods). ``unit``:
    also a column `UNIT_PERIOD` pairing that privacy-unit id with the row's period, so each unit is
    bounded per period — in a block's release as in each period's own."""
    return WINDOW_PREFIX + json.dumps(
        {"base": source_table, "column": column, "first": first.isoformat(), "last": last.isoformat(), "unit": unit}
    )


def _window(table: exp.Expression, reference: str) -> exp.Expression:
    """``(SELECT * FROM table WHERE TRY_CAST(column AS DATE) BETWEEN first AND last)``. On a directory
    of hive-style folders DuckDB prunes by it: the other periods' files are never opened."""
    w = json.loads(reference[len(WINDOW_PREFIX) :])
    date = exp.DataType.build("DATE")
    value = exp.TryCast(this=exp.column(exp.to_identifier(w["column"], quoted=True)), to=date)
    within = exp.Between(
        this=value,
        low=exp.cast(exp.Literal.string(w["first"]), date),
        high=exp.cast(exp.Literal.string(w["last"]), date),
    )
    columns: list[exp.Expression] = [exp.Star()]
    if w.get("unit"):  # NULL when the id is NULL: such a row stays its own unit (`aggregate_sql._bounded_per_unit`)
        unit = exp.column(exp.to_identifier(w["unit"], quoted=True))
        text = exp.DataType.build("VARCHAR")
        pair = exp.DPipe(
            this=exp.cast(unit.copy(), text),
            expression=exp.DPipe(this=exp.Literal.string("|"), expression=exp.cast(value.copy(), text)),
        )
        columns.append(
            exp.alias_(
                exp.Case().when(exp.Not(this=exp.Is(this=unit, expression=exp.Null())), pair), UNIT_PERIOD, quoted=True
            )
        )
    return exp.select(*columns).from_(table.copy()).where(within).subquery("period_rows")


def load_source(db: Database, table: str, source: Source, import_dir: Path | None) -> str:
    """Create ``src.<table>`` from the declared source; returns the qualified table name.

    Remote sources (PostgreSQL, Spark) load nothing: their rows stay where they are, and the
    catalog records ``postgres:<table>`` / ``spark:<table or path>`` for people reading it.
    """
    if source.postgres is not None:
        return f"postgres:{source.postgres.table}"
    if source.spark is not None:
        return f"spark:{source.spark.table or source.spark.parquet}"
    if source.duckdb_table:
        return _existing_table(db, source.duckdb_table)
    path = _checked_path(source.csv or source.parquet or "", import_dir)
    target = source_table_name(table)
    if source.csv:
        reader, params = _csv_reader(source, path)
    else:
        reader, params = "read_parquet(?)", [str(path)]
    try:
        copy = f"CREATE TABLE {target} AS SELECT {_trimmed_columns(db, reader, params)} FROM {reader}"
        db.streamed(lambda: db.run(copy, params), "the source's copy")  # (one statement: all or nothing)
    except duckdb.Error as exc:
        kind = "CSV" if source.csv else "Parquet"
        log.warning("source load failed: %s", type(exc).__name__)
        if source.csv and "Invalid unicode" in str(exc):  # (DuckDB's own words; the rest may quote rows)
            raise StorageError(
                f"could not load the CSV file {path.name!r}: it is not {source.encoding or 'utf-8'}. Declare its "
                'encoding in the source ("encoding": "latin-1" or "utf-16")'
            ) from None
        raise StorageError(
            f"could not load the {kind} file {path.name!r} ({type(exc).__name__}; details withheld "
            "because they can quote row values). Check the delimiter, header, columns and encoding options."
        ) from None
    return target


def _trimmed_columns(db: Database, reader: str, params: list[Any]) -> str:
    """``*``, with every text column trimmed of surrounding whitespace (data-independent), so the
    file is copied in one pass (trimming as a second full copy doubled registration).

    Files like UCI's adult.data separate fields by ", ": read with delimiter ",", every category
    came out as " Male", " Private", matched no declared value, and the whole budget was spent on
    an empty cube. Declared values never carry surrounding blanks that matter. The
    column types come from DESCRIBE (Parquet: its footer; CSV: the sniffer's pass)."""
    names = [r[0] for r in db.run(f"DESCRIBE SELECT * FROM {reader}", params) if str(r[1]).upper() == "VARCHAR"]
    if not names:
        return "*"
    return "* REPLACE (" + ", ".join(f"trim({quote_ident(n)}) AS {quote_ident(n)}" for n in names) + ")"


# Types DuckDB may infer for a CSV column. No BOOLEAN: "yes"/"no" columns (UCI Bank) would turn into
# true/false and match no declared category; text stays text and numbers stay numbers.
CSV_TYPES = ["BIGINT", "DOUBLE", "DATE", "TIMESTAMP", "VARCHAR"]


def _csv_reader(source: Source, path: Path) -> tuple[str, list[Any]]:
    """DuckDB's read_csv with the file's types sniffed from every row (``sample_size = -1``): sniffed
    from a sample, a numeric column with "n/a" past it failed the whole load; now such
    a column loads as text and the aggregate's TRY_CAST reads "n/a" as NULL."""
    options = ["auto_type_candidates = ?", "sample_size = -1"]
    params: list[Any] = [str(path), CSV_TYPES]
    if source.delimiter is not None:
        options.append("delim = ?")
        params.append(source.delimiter)
    if source.header is not None or source.columns:
        options.append("header = ?")
        params.append(bool(source.header) if source.header is not None else False)
    if source.columns:
        options.append("names = ?")
        params.append(list(source.columns))
    if source.encoding is not None:
        options.append("encoding = ?")
        params.append(source.encoding)
    return "read_csv(?" + "".join(", " + o for o in options) + ")", params


def file_digest(raw: str, import_dir: Path | None) -> str:
    """SHA-256 of a source file's bytes (its id space when no privacy unit names one): the same
    file under two table names is one population with one budget. Only the digest leaves here."""
    digest = hashlib.sha256()
    with _checked_path(raw, import_dir).open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:32]


def _checked_path(raw: str, import_dir: Path | None, directory: bool = False) -> Path:
    """An absolute path inside the import directory, to a file (or, with ``directory``, a folder)."""
    path = Path(raw)
    if not path.is_absolute():
        raise StorageError("source path must be absolute")
    resolved = path.resolve()
    if import_dir is not None and not resolved.is_relative_to(import_dir.resolve()):
        raise StorageError("source path is outside the configured import directory (PRIMA_IMPORT_DIR)")
    if not (resolved.is_file() or (directory and resolved.is_dir())):
        raise StorageError(f"source {'file or directory' if directory else 'file'} not found: {raw}")
    return resolved


def _existing_table(db: Database, name: str) -> str:
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or any(not p for p in parts):
        raise StorageError("duckdb_table must be 'table' or 'schema.table'")
    schema, table = parts if len(parts) == 2 else ["main", parts[0]]
    if schema.lower() in ("prima", "src"):
        raise StorageError("duckdb_table may not point into Prima's own schemas")
    found = db.run(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
        [schema, table],
    )
    if not found:
        raise StorageError(f"DuckDB table {name!r} does not exist in the Prima database")
    return f"{quote_ident(schema)}.{quote_ident(table)}"


def drop_loaded(db: Database, table: str) -> None:
    db.run(f"DROP TABLE IF EXISTS {source_table_name(table)}")


def engine_for(db: Database, source: Source, source_table: str) -> SourceEngine:
    """The engine that holds a registered table's rows (DuckDB unless the source says otherwise),
    reading only one block of periods' rows when ``source_table`` is `windowed`."""
    if source_table.startswith(WINDOW_PREFIX):
        window = json.loads(source_table[len(WINDOW_PREFIX) :])
        if window["base"].startswith(growing_files.FILES_PREFIX):  # open only the files the window's folders may hold
            return DuckDBEngine(db, _window(growing_files.files_table(window["base"], window), source_table))
        engine = engine_for(db, source, window["base"])
        engine.table = _window(engine.table, source_table)
        return engine
    if source_table.startswith(growing_files.FILES_PREFIX):
        return DuckDBEngine(db, growing_files.files_table(source_table))
    if source.postgres is not None:
        from storage.engines.postgres_source import PostgresEngine

        return PostgresEngine(source.postgres.dsn, source.postgres.table)
    if source.spark is not None:
        from storage.engines.spark_source import SparkEngine

        return SparkEngine(source.spark.master, source.spark.table, source.spark.parquet)
    return DuckDBEngine(db, source_table)


@contextlib.contextmanager
def _opened(db: Database, source: Source, source_table: str) -> Iterator[SourceEngine]:
    engine = engine_for(db, source, source_table)
    try:
        yield engine
    finally:
        engine.close()


def check_columns(db: Database, source: Source, source_table: str, spec: TableSpec) -> None:
    """Every declared column exists and binds (types are only inspected, no row is read)."""
    with _opened(db, source, source_table) as engine:
        engine.check(spec)


def fit_report(db: Database, source: Source, source_table: str, spec: TableSpec) -> dict[str, Any]:
    """Row counts of how the source fits its declared metadata (`SourceEngine.fit_report`)."""
    with _opened(db, source, source_table) as engine:
        if not engine.in_store:  # PostgreSQL's or Spark's memory is theirs; the store's lock is not held for them
            return engine.fit_report(spec)
        return db.streamed(lambda: engine.fit_report(spec), "the preflight scan")


def base_cuboids(
    db: Database, source: Source, source_table: str, spec: TableSpec, bounds: dict[str, tuple[float, float]]
) -> dict[str, np.ndarray]:
    """The true base cuboids (COUNT and clipped SUM per measure), aggregated where the rows live."""
    with _opened(db, source, source_table) as engine:
        return engine.base_cuboids(spec, bounds)


def class_cuboids(
    db: Database,
    source: Source,
    source_table: str,
    spec: TableSpec,
    bounds: dict[str, tuple[float, float]],
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
) -> tuple[np.ndarray, np.ndarray]:
    """A measure's COUNT and normalised SUM per (cell, class) (`SourceEngine.class_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.class_cuboids(spec, bounds, measure, edges, closed_above, class_bounds)


def base_and_class_cuboids(
    db: Database,
    source: Source,
    source_table: str,
    spec: TableSpec,
    bounds: dict[str, tuple[float, float]],
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """`base_cuboids` and one measure's `class_cuboids` from one read of the rows."""
    with _opened(db, source, source_table) as engine:
        return engine.base_and_class_cuboids(spec, bounds, measure, edges, closed_above, class_bounds)


def marginal_cuboids(
    db: Database,
    source: Source,
    source_table: str,
    spec: TableSpec,
    bounds: dict[str, tuple[float, float]],
    cuboids: list[tuple[int, ...]],
) -> dict[str, dict[tuple[int, ...], np.ndarray]]:
    """The true cuboids of a wide table per aggregate (`SourceEngine.marginal_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.marginal_cuboids(spec, bounds, cuboids)


def class_marginal_cuboids(
    db: Database,
    source: Source,
    source_table: str,
    spec: TableSpec,
    bounds: dict[str, tuple[float, float]],
    measure: str,
    edges: list[float],
    closed_above: list[bool],
    class_bounds: list[float],
    cuboids: list[tuple[int, ...]],
) -> tuple[dict[tuple[int, ...], np.ndarray], ...]:
    """A wide table's COUNT and Σ v/u_k cuboids over (dimensions…, class) (`SourceEngine.class_marginal_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.class_marginal_cuboids(spec, bounds, measure, edges, closed_above, class_bounds, cuboids)


def nonzero_cells(
    db: Database, source: Source, source_table: str, spec: TableSpec, bounds: dict[str, tuple[float, float]]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The base cuboid's non-empty cells (`SourceEngine.nonzero_cells`)."""
    with _opened(db, source, source_table) as engine:
        return engine.nonzero_cells(spec, bounds)


def unit_row_counts(db: Database, source: Source, source_table: str, spec: TableSpec) -> tuple[np.ndarray, np.ndarray]:
    """Rows per privacy unit, as (n, units with n rows) (`SourceEngine.unit_row_counts`)."""
    with _opened(db, source, source_table) as engine:
        return engine.unit_row_counts(spec)


def measure_histogram(
    db: Database, source: Source, source_table: str, spec: TableSpec, measure: str, edges: np.ndarray
) -> np.ndarray:
    """Bucket counts of one measure over the in-domain rows, aggregated where the rows live."""
    with _opened(db, source, source_table) as engine:
        return engine.measure_histogram(spec, measure, edges)
