"""Source tables: loading CSV/Parquet into DuckDB and the one GROUP BY that reads raw rows.

This module is the only code that touches raw rows. It hands out exactly one thing: the true,
clipped base cuboids (COUNT and SUM per measure, dense numpy arrays) to the build orchestration,
which passes them straight to a privacy mechanism. Error messages from DuckDB are replaced by
generic ones here because a parser or cast error can quote a row value (SPEC §1, privacy rule 4).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from storage.database import Database, StorageError
from storage.schema import Source, TableSpec, quote_ident

log = logging.getLogger("prima.storage")

COUNT_KEY = "count"


def sum_key(measure: str) -> str:
    return f"sum:{measure}"


def source_table_name(table: str) -> str:
    return f"src.{quote_ident(table)}"


def load_source(db: Database, table: str, source: Source, import_dir: Path | None) -> str:
    """Create ``src.<table>`` from the declared source; returns the qualified table name."""
    if source.duckdb_table:
        return _existing_table(db, source.duckdb_table)
    path = _checked_path(source.csv or source.parquet or "", import_dir)
    target = source_table_name(table)
    if source.csv:
        reader, params = _csv_reader(source, path)
    else:
        reader, params = "read_parquet(?)", [str(path)]
    try:
        db.run(f"CREATE TABLE {target} AS SELECT * FROM {reader}", params)
    except duckdb.Error as exc:
        kind = "CSV" if source.csv else "Parquet"
        log.warning("source load failed: %s", type(exc).__name__)
        raise StorageError(
            f"could not load the {kind} file {path.name!r} ({type(exc).__name__}; details withheld "
            "because they can quote row values). Check the delimiter, header and columns options."
        ) from None
    return target


def _csv_reader(source: Source, path: Path) -> tuple[str, list[Any]]:
    options = []
    params: list[Any] = [str(path)]
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


def _checked_path(raw: str, import_dir: Path | None) -> Path:
    path = Path(raw)
    if not path.is_absolute():
        raise StorageError("source path must be absolute")
    resolved = path.resolve()
    if import_dir is not None and not resolved.is_relative_to(import_dir.resolve()):
        raise StorageError("source path is outside the configured import directory (PRIMA_IMPORT_DIR)")
    if not resolved.is_file():
        raise StorageError(f"source file not found: {raw}")
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


def check_columns(db: Database, qualified: str, spec: TableSpec) -> None:
    """Every declared column exists and binds (types are only inspected, no row is read)."""
    rows = db.run(f"DESCRIBE SELECT * FROM {qualified}")
    present = {r[0].lower() for r in rows}
    missing = [c.name for c in [*spec.dimensions, *spec.measures] if c.name.lower() not in present]
    if missing:
        raise StorageError(f"source has no column(s) {missing}; it has {sorted(r[0] for r in rows)}")
    select, params = _cuboid_sql(qualified, spec, {m.name: (m.lo, m.hi) for m in spec.measures})
    try:
        db.run(f"SELECT * FROM ({select}) LIMIT 0", params)
    except duckdb.Error as exc:
        raise StorageError(f"declared columns do not bind to the source: {type(exc).__name__}") from None


def _rows_sql(
    qualified: str, spec: TableSpec, bounds: dict[str, tuple[float, float]]
) -> tuple[str, str, list[Any]]:
    """Per-row projection (cell index per dimension c_i, clipped measure m_j) and its in-domain filter."""
    params: list[Any] = []
    cols = []
    for i, d in enumerate(spec.dimensions):
        expr, p = d.cell_sql(d.name)
        cols.append(f"{expr} AS c{i}")
        params += p
    for j, m in enumerate(spec.measures):
        lo, hi = bounds[m.name]
        # Clip in SQL (SPEC §2 step 1): LEAST/GREATEST bound each row's contribution.
        # NULL (or unparseable) contributes nothing to SUM; the row still counts in COUNT(*).
        v = f"TRY_CAST({quote_ident(m.name)} AS DOUBLE)"
        cols.append(f"CASE WHEN {v} IS NOT NULL THEN LEAST(GREATEST({v}, ?), ?) END AS m{j}")
        params += [lo, hi]
    in_domain = " AND ".join(f"c{i} IS NOT NULL" for i in range(len(spec.dimensions)))
    return f"SELECT {', '.join(cols)} FROM {qualified}", in_domain, params


def _cuboid_sql(
    qualified: str, spec: TableSpec, bounds: dict[str, tuple[float, float]]
) -> tuple[str, list[Any]]:
    """One GROUP BY producing (flat cell index, COUNT, clipped SUM per measure)."""
    rows, in_domain, params = _rows_sql(qualified, spec, bounds)
    # Row-major flat index: Σ c_i · stride_i (values outside a domain give NULL and are dropped).
    strides = np.cumprod((spec.shape[1:] + (1,))[::-1])[::-1]
    flat = " + ".join(f"c{i} * {int(s)}" for i, s in enumerate(strides))
    sums = "".join(f", COALESCE(SUM(m{j}), 0) AS s{j}" for j in range(len(spec.measures)))
    select = f"SELECT {flat} AS cell, COUNT(*) AS n{sums} FROM ({rows}) WHERE {in_domain} GROUP BY cell"
    return select, params


def base_cuboids(
    db: Database, qualified: str, spec: TableSpec, bounds: dict[str, tuple[float, float]]
) -> dict[str, np.ndarray]:
    """The true base cuboids: COUNT and clipped SUM per measure, dense arrays of ``spec.shape``.

    ``bounds`` are the clipping bounds chosen by the privacy layer (declared, or DP-derived).
    """
    select, params = _cuboid_sql(qualified, spec, bounds)
    try:
        cols = db.numpy(select, params)
    except duckdb.Error as exc:
        log.warning("aggregation failed: %s", type(exc).__name__)
        raise StorageError(f"aggregating the source failed ({type(exc).__name__})") from None
    size = int(np.prod(spec.shape))
    cells = np.asarray(cols["cell"], dtype=np.int64)
    out = {COUNT_KEY: _dense(cells, cols["n"], size, spec.shape)}
    for j, m in enumerate(spec.measures):
        out[sum_key(m.name)] = _dense(cells, cols[f"s{j}"], size, spec.shape)
    return out


def _dense(cells: np.ndarray, values: Any, size: int, shape: tuple[int, ...]) -> np.ndarray:
    dense = np.zeros(size, dtype=np.float64)
    dense[cells] = np.asarray(values, dtype=np.float64)
    return dense.reshape(shape)


def measure_histogram(db: Database, qualified: str, spec: TableSpec, measure: str, edges: np.ndarray) -> np.ndarray:
    """Counts of the measure (clipped to the public bounds) in the buckets ``edges`` over the rows
    that fall in the cube's domains. Only bucket counts leave this function."""
    lo, hi, k = float(edges[0]), float(edges[-1]), len(edges) - 1
    rows, in_domain, params = _rows_sql(qualified, spec, {m.name: (m.lo, m.hi) for m in spec.measures})
    j = [m.name for m in spec.measures].index(measure)
    width = (hi - lo) / k if hi > lo else 1.0
    sql = (f"SELECT LEAST(CAST(FLOOR((m{j} - ?) / ?) AS BIGINT), ?) AS b, COUNT(*) AS n "
           f"FROM ({rows}) WHERE {in_domain} AND m{j} IS NOT NULL GROUP BY b")
    try:
        cols = db.numpy(sql, [lo, width, k - 1] + params)
    except duckdb.Error as exc:
        raise StorageError(f"histogram of {measure!r} failed ({type(exc).__name__})") from None
    counts = np.zeros(k)
    counts[np.asarray(cols["b"], dtype=np.int64)] = np.asarray(cols["n"], dtype=np.float64)
    return counts
