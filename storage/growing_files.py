"""A growing table's files, read where they lie at every append (the append side of
`storage.sources`).

The files' layout is fixed once, by the admin's registration (`reference`): the CSV delimiter and
header (declared, else sniffed from the first file then) and the column names. Appends read with
that layout, every column as text, leniently, and only the files the period's hive folders may
hold: no row of a later file can fail an append after its charge (privacy rule 6), change how
other files are read, or move more than one row (docs/privacy-model.md, "Tables that grow")."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from storage.database import Database, StorageError
from storage.schema import Source, quote_ident

log = logging.getLogger("prima.storage")

FILES_PREFIX = "files:"  # a growing table's file source, read where it lies at every append


def reference(db: Database, source: Source, path: Path, import_dir: Path | None) -> str:
    """The catalog's reference to a growing CSV/Parquet source at ``path`` (checked): its place, the
    import directory it must stay under, its hive keys and its layout."""
    root = import_dir.resolve() if import_dir is not None else Path(path.anchor)
    files = _growing_files(path, bool(source.csv), root)
    if not files:
        suffix = "*.csv" if source.csv else "*.parquet"
        raise StorageError(
            f"no {suffix} file under {path} yet: register the growing table once the first period's "
            "files are there (its columns are read from them)"
        )
    layout = _csv_layout(db, source, files[0]) if source.csv else _parquet_layout(db, files)
    return FILES_PREFIX + json.dumps(
        {"csv": bool(source.csv), "path": str(path), "root": str(root), "hive": _hive_keys(path, files)} | layout
    )


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
            raise StorageError(
                f"a file under {path} links outside the configured import directory (PRIMA_IMPORT_DIR); remove the link"
            )
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
    sniffed = db.run(
        "SELECT Delimiter, HasHeader, Columns FROM sniff_csv(?, sample_size = -1"
        + (", delim = ?" if source.delimiter is not None else "")
        + ")",
        [_literal_path(first)] + ([source.delimiter] if source.delimiter is not None else []),
    )[0]
    delimiter, has_header, columns = sniffed
    header = source.header if source.header is not None else (False if source.columns else bool(has_header))
    names = list(source.columns) if source.columns else [c["name"] for c in columns]
    return {
        "delimiter": source.delimiter if source.delimiter is not None else delimiter,
        "header": header,
        "names": names,
    }


def _parquet_layout(db: Database, files: list[Path]) -> dict[str, Any]:
    """The column names of every file now (their union), read from the footers at registration."""
    rows = db.run(
        "DESCRIBE SELECT * FROM read_parquet(?, union_by_name = true, hive_partitioning = false)",
        [[_literal_path(f) for f in files]],
    )
    return {"names": [r[0] for r in rows]}


def _literal_path(f: Path) -> str:
    """A path as DuckDB's file readers take it literally: they expand glob patterns even in a list
    of files, so ``*``, ``?`` and ``[`` in a folder's name are escaped as one-character classes."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in str(f))


def check(reference: str) -> None:
    """Refuses (`StorageError`, naming paths, never rows) a growing source whose files no longer
    lie under the import directory: called before an append charges anything."""
    if reference.startswith(FILES_PREFIX):
        spec = json.loads(reference[len(FILES_PREFIX) :])
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


def files_table(reference: str, window: dict[str, Any] | None = None) -> exp.Expression:
    """The DuckDB table function reading a growing table's files (`growing_rows`' reference): only
    the files the window's hive folders may hold, every column text, rows that do not parse read
    leniently (missing fields NULL, extra fields dropped, lines that cannot be read skipped) so that
    no one row decides whether the read succeeds. The aggregates TRY_CAST every value."""
    spec = json.loads(reference[len(FILES_PREFIX) :])
    path = Path(spec["path"])
    if "names" not in spec:  # registered before the layout was recorded: read as then
        return _legacy_files_table(spec)
    files = _growing_files(path, spec["csv"], Path(spec["root"]))
    if window is not None and path.resolve().is_dir():
        files = [f for f in files if _in_window(f, path.resolve(), window["column"], window["first"], window["last"])]
    names = spec["names"] + [k for k in spec["hive"] if k not in spec["names"]]
    if not files:  # nothing dated in the window yet: no rows, the same columns
        nulls = ", ".join(f"CAST(NULL AS VARCHAR) AS {quote_ident(n)}" for n in names)
        return (
            sqlglot.parse_one(f"SELECT * FROM (SELECT {nulls} WHERE FALSE) AS no_files", dialect="duckdb")
            .find(exp.From)
            .this
        )
    listed = "[" + ", ".join(exp.Literal.string(_literal_path(f)).sql() for f in files) + "]"
    hive = "hive_partitioning = true, hive_types_autocast = false" if spec["hive"] else "hive_partitioning = false"
    if spec["csv"]:
        columns = "{" + ", ".join(f"{exp.Literal.string(n).sql()}: 'VARCHAR'" for n in spec["names"]) + "}"
        reader = (
            f"read_csv({listed}, {hive}, auto_detect = false, columns = {columns}, "
            f"header = {'true' if spec['header'] else 'false'}, delim = {exp.Literal.string(spec['delimiter']).sql()}, "
            "quote = '', escape = '', ignore_errors = true, null_padding = true, strict_mode = false)"
        )
        unquoted = [_unquoted(n) for n in spec["names"]] + [
            quote_ident(k) for k in spec["hive"] if k not in spec["names"]
        ]
        return (
            sqlglot.parse_one(
                f"SELECT * FROM (SELECT {', '.join(unquoted)} FROM {reader}) AS period_files", dialect="duckdb"
            )
            .find(exp.From)
            .this
        )
    # Union by name with the recorded columns as text: a column some file lacks is NULL, one a file
    # types otherwise (a text "n/a" in a numeric column) is read as text, never a failed cast.
    reader = f"read_parquet({listed}, {hive}, union_by_name = true)"
    nulls = ", ".join(f"CAST(NULL AS VARCHAR) AS {quote_ident(n)}" for n in names)
    return (
        sqlglot.parse_one(
            f"SELECT * FROM (SELECT {nulls} WHERE FALSE UNION ALL BY NAME SELECT * FROM {reader}) AS period_files",
            dialect="duckdb",
        )
        .find(exp.From)
        .this
    )


def _unquoted(name: str) -> str:
    """A CSV field read with quoting off, trimmed, its one pair of surrounding double quotes removed
    (and doubled quotes inside undone): `` "web" `` is ``web``. Quoting is off so that a line is a row
    whatever it holds: an unterminated quote would otherwise swallow the lines after it, and one
    row could move many (the per-row bound every release states)."""
    c = f"trim({quote_ident(name)})"  # surrounding blanks dropped, as a registered file's text is
    return (
        f"CASE WHEN length({c}) >= 2 AND starts_with({c}, '\"') AND ends_with({c}, '\"') "
        f"THEN replace({c}[2:-1], '\"\"', '\"') ELSE {c} END AS {quote_ident(name)}"
    )


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
