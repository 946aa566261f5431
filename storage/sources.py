"""Source tables: loading CSV/Parquet into DuckDB, and the entry points to the aggregates.

With `storage.engines` and `storage.aggregate_sql`, this is the only code that touches raw rows.
It hands out the true, clipped base cuboids (COUNT and SUM per measure, dense numpy arrays) and
measure histograms to the build orchestration, which passes them straight to a privacy
mechanism. Error messages from the engines are replaced by generic ones because a parser or cast
error can quote a row value (SPEC §1, privacy rule 4).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterator

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp

from storage.database import Database, StorageError
from storage.engines.base import COUNT_KEY, SourceEngine, class_count_key, measure_of, present_key, sum_key
from storage.engines.duckdb_source import DuckDBEngine
from storage.schema import Source, TableSpec, quote_ident

log = logging.getLogger("prima.storage")

__all__ = ["COUNT_KEY", "sum_key", "class_count_key", "present_key", "measure_of", "load_source", "engine_for", "check_columns", "base_cuboids", "measure_histogram"]


def source_table_name(table: str) -> str:
    return f"src.{quote_ident(table)}"


FILES_PREFIX = "files:"  # a growing table's file source, read where it lies at every append (issue #32)
WINDOW_PREFIX = "window:"  # a source's rows dated within one block of periods


def growing_rows(db: Database, source: Source, import_dir: Path | None) -> str:
    """A growing table's rows stay where they are (nothing is copied: they arrive after registration).
    A CSV/Parquet source may be a directory — every ``*.csv``/``*.parquet`` below it, with hive-style
    ``column=value`` folders read as columns, so an append opens only its period's folders — or one
    file; tables are referenced as for any table.

    The files' layout is fixed here, once, by the admin's registration: the CSV dialect (declared,
    else sniffed from the first file now) and the column names. Appends read with that layout,
    every column as text, leniently: no row of a later file can fail an append after its charge
    (privacy rule 6) or change how other files are read (`_files_table`)."""
    if source.remote:
        return load_source(db, "", source, import_dir)
    if source.duckdb_table:
        return _existing_table(db, source.duckdb_table)
    path, suffix = files_location(source, import_dir), "*.csv" if source.csv else "*.parquet"
    root = import_dir.resolve() if import_dir is not None else Path(path.anchor)
    files = _growing_files(path, bool(source.csv), root)
    if not files:
        raise StorageError(f"no {suffix} file under {path} yet: register the growing table once the first period's "
                           "files are there (its columns are read from them)")
    layout = _csv_layout(db, source, files[0]) if source.csv else _parquet_layout(db, files)
    return FILES_PREFIX + json.dumps({"csv": bool(source.csv), "path": str(path), "root": str(root),
                                      "hive": _hive_keys(path, files)} | layout)


def files_location(source: Source, import_dir: Path | None) -> Path:
    """A growing CSV/Parquet source's checked place (a file, or a directory of them): its id space."""
    return _checked_path(source.csv or source.parquet or "", import_dir, directory=True)


def _growing_files(path: Path, csv: bool, root: Path) -> list[Path]:
    """The source's files as they are now, each resolved and checked to lie under ``root`` (the
    import directory): a symlinked file or folder pointing elsewhere is refused, and so is the
    registered folder if it was swapped for a link out. Listed by Python, never by a glob pattern,
    so a folder named ``e*`` is a name, not a pattern."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise StorageError("the growing source now lies outside the configured import directory (PRIMA_IMPORT_DIR)")
    if resolved.is_file():
        return [resolved]
    files = []
    for f in sorted(resolved.rglob("*.csv" if csv else "*.parquet")):
        real = f.resolve()
        if not real.is_relative_to(root):
            log.warning("growing source: a file links outside the import directory; refused")
            raise StorageError(f"a file under {path} links outside the configured import directory "
                               "(PRIMA_IMPORT_DIR); remove the link")
        if real.is_file():
            files.append(f)
    return files


def _hive_keys(path: Path, files: list[Path]) -> list[str]:
    """The ``column=value`` folder names under ``path`` (hive partitioning), in order of depth."""
    keys: list[str] = []
    for f in files if path.is_dir() else ():
        for part in f.relative_to(path.resolve()).parts[:-1]:
            key = part.split("=", 1)[0] if "=" in part else None
            if key and key not in keys:
                keys.append(key)
    return keys


def _csv_layout(db: Database, source: Source, first: Path) -> dict[str, Any]:
    """The CSV dialect and column names, declared or sniffed from ``first`` at registration."""
    sniffed = db.run("SELECT Delimiter, HasHeader, Columns FROM sniff_csv(?, sample_size = -1"
                     + (", delim = ?" if source.delimiter is not None else "") + ")",
                     [_literal_path(first)] + ([source.delimiter] if source.delimiter is not None else []))[0]
    delimiter, has_header, columns = sniffed
    header = source.header if source.header is not None else (False if source.columns else bool(has_header))
    names = list(source.columns) if source.columns else [c["name"] for c in columns]
    return {"delimiter": source.delimiter if source.delimiter is not None else delimiter,
            "header": header, "names": names}


def _parquet_layout(db: Database, files: list[Path]) -> dict[str, Any]:
    """The column names of every file now (their union), read from the footers at registration."""
    rows = db.run("DESCRIBE SELECT * FROM read_parquet(?, union_by_name = true, hive_partitioning = false)",
                  [[_literal_path(f) for f in files]])
    return {"names": [r[0] for r in rows]}


def _literal_path(f: Path) -> str:
    """A path as DuckDB's file readers take it literally: they expand glob patterns even in a list
    of files, so ``*``, ``?`` and ``[`` in a folder's name are escaped as one-character classes."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in str(f))


def check_growing(reference: str) -> None:
    """Refuses (`StorageError`, naming paths, never rows) a growing source whose files no longer
    lie under the import directory: called before an append charges anything."""
    if reference.startswith(FILES_PREFIX):
        spec = json.loads(reference[len(FILES_PREFIX):])
        if "root" in spec:
            _growing_files(Path(spec["path"]), spec["csv"], Path(spec["root"]))


def _in_window(f: Path, path: Path, column: str, first: str, last: str) -> bool:
    """Whether file ``f`` may hold rows of first..last: false only when a ``column=value`` folder
    on its way dates it outside (the rows' own dates are still filtered, `_window`)."""
    for part in f.relative_to(path).parts[:-1]:
        key, _, value = part.partition("=")
        if key == column and value:
            try:
                day = dt.date.fromisoformat(value[:10])
            except ValueError:
                return True
            return first <= day.isoformat() <= last
    return True


def _files_table(reference: str, window: dict[str, Any] | None = None) -> exp.Expression:
    """The DuckDB table function reading a growing table's files (`growing_rows`' reference): only
    the files the window's hive folders may hold, every column text, rows that do not parse read
    leniently (missing fields NULL, extra fields dropped, lines that cannot be read skipped) so that
    no one row decides whether the read succeeds. The aggregates TRY_CAST every value."""
    spec = json.loads(reference[len(FILES_PREFIX):])
    path = Path(spec["path"])
    if "names" not in spec:  # registered before the layout was recorded: read as then
        return _legacy_files_table(spec)
    files = _growing_files(path, spec["csv"], Path(spec["root"]))
    if window is not None and path.resolve().is_dir():
        files = [f for f in files if _in_window(f, path.resolve(), window["column"], window["first"], window["last"])]
    names = spec["names"] + [k for k in spec["hive"] if k not in spec["names"]]
    if not files:  # nothing dated in the window yet: no rows, the same columns
        nulls = ", ".join(f"CAST(NULL AS VARCHAR) AS {quote_ident(n)}" for n in names)
        return sqlglot.parse_one(f"SELECT * FROM (SELECT {nulls} WHERE FALSE) AS no_files",
                                 dialect="duckdb").find(exp.From).this
    listed = "[" + ", ".join(exp.Literal.string(_literal_path(f)).sql() for f in files) + "]"
    hive = "hive_partitioning = true, hive_types_autocast = false" if spec["hive"] else "hive_partitioning = false"
    if spec["csv"]:
        columns = "{" + ", ".join(f"{exp.Literal.string(n).sql()}: 'VARCHAR'" for n in spec["names"]) + "}"
        reader = (f"read_csv({listed}, {hive}, auto_detect = false, columns = {columns}, "
                  f"header = {'true' if spec['header'] else 'false'}, delim = {exp.Literal.string(spec['delimiter']).sql()}, "
                  "quote = '', escape = '', ignore_errors = true, null_padding = true, strict_mode = false)")
        unquoted = [_unquoted(n) for n in spec["names"]] + [quote_ident(k) for k in spec["hive"] if k not in spec["names"]]
        return sqlglot.parse_one(f"SELECT * FROM (SELECT {', '.join(unquoted)} FROM {reader}) AS period_files",
                                 dialect="duckdb").find(exp.From).this
    # Union by name with the recorded columns as text: a column some file lacks is NULL, one a file
    # types otherwise (a text "n/a" in a numeric column) is read as text, never a failed cast.
    reader = f"read_parquet({listed}, {hive}, union_by_name = true)"
    nulls = ", ".join(f"CAST(NULL AS VARCHAR) AS {quote_ident(n)}" for n in names)
    return sqlglot.parse_one(f"SELECT * FROM (SELECT {nulls} WHERE FALSE UNION ALL BY NAME SELECT * FROM {reader}) "
                             "AS period_files", dialect="duckdb").find(exp.From).this


def _unquoted(name: str) -> str:
    """A CSV field read with quoting off, its one pair of surrounding double quotes removed (and
    doubled quotes inside undone): ``"web"`` is ``web``. Quoting is off so that a line is a row
    whatever it holds: an unterminated quote would otherwise swallow the lines after it, and one
    row could move many (the per-row bound every release states)."""
    c = quote_ident(name)
    return (f"CASE WHEN length({c}) >= 2 AND starts_with({c}, '\"') AND ends_with({c}, '\"') "
            f"THEN replace({c}[2:-1], '\"\"', '\"') ELSE {c} END AS {c}")


def _legacy_files_table(spec: dict[str, Any]) -> exp.Expression:
    """A growing reference recorded before layouts were: one pattern over every file, sniffed."""
    path = Path(spec["path"])
    pattern = str(path / "**" / ("*.csv" if spec["csv"] else "*.parquet")) if path.is_dir() else str(path)
    args = [exp.Literal.string(pattern).sql(), "hive_partitioning = true"]
    if spec["csv"]:
        args.append("auto_type_candidates = ['BIGINT', 'DOUBLE', 'DATE', 'TIMESTAMP', 'VARCHAR']")
        if spec["delimiter"] is not None:
            args.append(f"delim = {exp.Literal.string(spec['delimiter']).sql()}")
        if spec["header"] is not None or spec["columns"]:
            args.append(f"header = {'true' if spec['header'] else 'false'}")
        if spec["columns"]:
            args.append("names = [" + ", ".join(exp.Literal.string(c).sql() for c in spec["columns"]) + "]")
    reader = ("read_csv" if spec["csv"] else "read_parquet") + "(" + ", ".join(args) + ")"
    return sqlglot.parse_one(f"SELECT * FROM {reader}", dialect="duckdb").find(exp.From).this


UNIT_PERIOD = "__prima_unit_period"  # a windowed source's (unit, period) id: `windowed`'s ``unit``


def windowed(source_table: str, column: str, first: dt.date, last: dt.date, unit: str | None = None) -> str:
    """A reference to the source's rows whose ``column`` falls in first..last (one period's or one
    block's): the aggregates read only them. The dates are public (the declared periods). ``unit``:
    also a column `UNIT_PERIOD` pairing that privacy-unit id with the row's period, so each unit is
    bounded per period — in a block's release as in each period's own."""
    return WINDOW_PREFIX + json.dumps({"base": source_table, "column": column, "first": first.isoformat(),
                                       "last": last.isoformat(), "unit": unit})


def _window(table: exp.Expression, reference: str) -> exp.Expression:
    """``(SELECT * FROM table WHERE TRY_CAST(column AS DATE) BETWEEN first AND last)``. On a directory
    of hive-style folders DuckDB prunes by it: the other periods' files are never opened."""
    w = json.loads(reference[len(WINDOW_PREFIX):])
    date = exp.DataType.build("DATE")
    value = exp.TryCast(this=exp.column(exp.to_identifier(w["column"], quoted=True)), to=date)
    within = exp.Between(this=value, low=exp.cast(exp.Literal.string(w["first"]), date),
                         high=exp.cast(exp.Literal.string(w["last"]), date))
    columns: list[exp.Expression] = [exp.Star()]
    if w.get("unit"):  # NULL when the id is NULL: such a row stays its own unit (`aggregate_sql._bounded_per_unit`)
        unit = exp.column(exp.to_identifier(w["unit"], quoted=True))
        text = exp.DataType.build("VARCHAR")
        pair = exp.DPipe(this=exp.cast(unit.copy(), text), expression=exp.DPipe(
            this=exp.Literal.string("|"), expression=exp.cast(value.copy(), text)))
        columns.append(exp.alias_(exp.Case().when(exp.Not(this=exp.Is(this=unit, expression=exp.Null())), pair),
                                  UNIT_PERIOD, quoted=True))
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
        db.run(f"CREATE TABLE {target} AS SELECT {_trimmed_columns(db, reader, params)} FROM {reader}", params)
    except duckdb.Error as exc:
        kind = "CSV" if source.csv else "Parquet"
        log.warning("source load failed: %s", type(exc).__name__)
        raise StorageError(
            f"could not load the {kind} file {path.name!r} ({type(exc).__name__}; details withheld "
            "because they can quote row values). Check the delimiter, header and columns options."
        ) from None
    return target


def _trimmed_columns(db: Database, reader: str, params: list[Any]) -> str:
    """``*``, with every text column trimmed of surrounding whitespace (data-independent), so the
    file is copied in one pass (issue #36: trimming as a second full copy doubled registration).

    Files like UCI's adult.data separate fields by ", ": read with delimiter ",", every category
    came out as " Male", " Private", matched no declared value, and the whole budget was spent on
    an empty cube (issue #16). Declared values never carry surrounding blanks that matter. The
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
    from a sample, a numeric column with "n/a" past it failed the whole load (issue #30); now such
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
    schema, table = (parts if len(parts) == 2 else ["main", parts[0]])
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
        window = json.loads(source_table[len(WINDOW_PREFIX):])
        if window["base"].startswith(FILES_PREFIX):  # open only the files the window's folders may hold
            return DuckDBEngine(db, _window(_files_table(window["base"], window), source_table))
        engine = engine_for(db, source, window["base"])
        engine.table = _window(engine.table, source_table)
        return engine
    if source_table.startswith(FILES_PREFIX):
        return DuckDBEngine(db, _files_table(source_table))
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
        return engine.fit_report(spec)


def base_cuboids(db: Database, source: Source, source_table: str, spec: TableSpec,
                 bounds: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    """The true base cuboids (COUNT and clipped SUM per measure), aggregated where the rows live."""
    with _opened(db, source, source_table) as engine:
        return engine.base_cuboids(spec, bounds)


def class_cuboids(db: Database, source: Source, source_table: str, spec: TableSpec,
                  bounds: dict[str, tuple[float, float]], measure: str, edges: list[float],
                  closed_above: list[bool], class_bounds: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """A measure's COUNT and normalised SUM per (cell, class) (`SourceEngine.class_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.class_cuboids(spec, bounds, measure, edges, closed_above, class_bounds)


def base_and_class_cuboids(db: Database, source: Source, source_table: str, spec: TableSpec,
                           bounds: dict[str, tuple[float, float]], measure: str, edges: list[float],
                           closed_above: list[bool],
                           class_bounds: list[float]) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """`base_cuboids` and one measure's `class_cuboids` from one read of the rows."""
    with _opened(db, source, source_table) as engine:
        return engine.base_and_class_cuboids(spec, bounds, measure, edges, closed_above, class_bounds)


def marginal_cuboids(db: Database, source: Source, source_table: str, spec: TableSpec,
                     bounds: dict[str, tuple[float, float]],
                     cuboids: list[tuple[int, ...]]) -> dict[str, dict[tuple[int, ...], np.ndarray]]:
    """The true cuboids of a wide table per aggregate (`SourceEngine.marginal_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.marginal_cuboids(spec, bounds, cuboids)


def class_marginal_cuboids(db: Database, source: Source, source_table: str, spec: TableSpec,
                           bounds: dict[str, tuple[float, float]], measure: str, edges: list[float],
                           closed_above: list[bool], class_bounds: list[float],
                           cuboids: list[tuple[int, ...]]) -> tuple[dict[tuple[int, ...], np.ndarray], ...]:
    """A wide table's COUNT and Σ v/u_k cuboids over (dimensions…, class) (`SourceEngine.class_marginal_cuboids`)."""
    with _opened(db, source, source_table) as engine:
        return engine.class_marginal_cuboids(spec, bounds, measure, edges, closed_above, class_bounds, cuboids)


def nonzero_cells(db: Database, source: Source, source_table: str, spec: TableSpec,
                  bounds: dict[str, tuple[float, float]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The base cuboid's non-empty cells (`SourceEngine.nonzero_cells`)."""
    with _opened(db, source, source_table) as engine:
        return engine.nonzero_cells(spec, bounds)


def unit_row_counts(db: Database, source: Source, source_table: str, spec: TableSpec) -> tuple[np.ndarray, np.ndarray]:
    """Rows per privacy unit, as (n, units with n rows) (`SourceEngine.unit_row_counts`)."""
    with _opened(db, source, source_table) as engine:
        return engine.unit_row_counts(spec)


def measure_histogram(db: Database, source: Source, source_table: str, spec: TableSpec, measure: str,
                      edges: np.ndarray) -> np.ndarray:
    """Bucket counts of one measure over the in-domain rows, aggregated where the rows live."""
    with _opened(db, source, source_table) as engine:
        return engine.measure_histogram(spec, measure, edges)
