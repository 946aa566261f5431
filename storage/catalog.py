"""The catalog of registered tables: declared public metadata and each table's total budget."""

from __future__ import annotations

import json
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from storage import ledger, sources
from storage.database import Database
from storage.schema import TableSpec


class TableExists(Exception):
    pass


class BudgetBelowSpent(Exception):
    def __init__(self, spent: float) -> None:
        super().__init__(f"the new total is below the epsilon already spent ({spent:g})")
        self.spent = spent


@dataclass(frozen=True)
class TableRecord:
    spec: TableSpec
    source_table: str
    epsilon_total: float

    @property
    def name(self) -> str:
        return self.spec.name


def register(db: Database, spec: TableSpec, import_dir: Path | None = None) -> TableRecord:
    """Load the source (if a file), check the declared columns bind, and record the metadata. The
    table joins its id space (`id_space_for`): a space with live tables keeps its total (they share
    it); a new space, or one whose tables were all retired, takes the spec's ε (never below what it
    has spent)."""
    if get(db, spec.name) is not None:
        raise TableExists(spec.name)
    space = id_space_for(spec, import_dir)
    qualified = sources.load_source(db, spec.name, spec.source, import_dir)
    salt = secrets.token_hex(16) if spec.privacy_unit is not None else None
    spec = with_salt(spec, salt)
    try:
        sources.check_columns(db, spec.source, qualified, spec)
        with db.transaction() as con:
            live = con.execute("SELECT COUNT(*) FROM prima.tables WHERE id_space = ?", [space]).fetchone()[0]
            if live == 0:  # a new space, or one whose tables were all retired: this spec sets its total
                spent = float(con.execute(ledger.SPENT_SQL, [space]).fetchone()[0])
                con.execute("INSERT INTO prima.spaces (name, epsilon_total) VALUES (?, ?) ON CONFLICT (name) "
                            "DO UPDATE SET epsilon_total = excluded.epsilon_total", [space, max(spec.epsilon, spent)])
            con.execute(
                "INSERT INTO prima.tables (name, spec, source_table, epsilon_total, salt, id_space) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [spec.name, spec.model_dump_json(), qualified, spec.epsilon, salt, space],
            )
    except Exception:
        if not (spec.source.duckdb_table or spec.source.remote):
            sources.drop_loaded(db, spec.name)
        raise
    return TableRecord(spec, qualified, spec.epsilon)


def with_salt(spec: TableSpec, salt: str | None) -> TableSpec:
    """The spec with its privacy unit's secret salt attached (never serialised with the spec)."""
    if spec.privacy_unit is None:
        return spec
    return spec.model_copy(update={"privacy_unit": spec.privacy_unit.model_copy(update={"salt": salt})})


def id_space_for(spec: TableSpec, import_dir: Path | None = None) -> str:
    """The population a table's budget belongs to: its declared ``privacy_unit.id_space``, else its
    source — a file by the SHA-256 of its content (so one file registered under two names shares
    one budget), a DuckDB/PostgreSQL/Spark table by its reference."""
    if spec.privacy_unit is not None and spec.privacy_unit.id_space:
        return spec.privacy_unit.id_space
    src = spec.source
    if src.csv or src.parquet:
        return "source:file:" + sources.file_digest(src.csv or src.parquet or "", import_dir)
    if src.postgres is not None:
        return f"source:postgres:{src.postgres.dsn}:{src.postgres.table}"
    if src.spark is not None:
        return f"source:spark:{src.spark.table or src.spark.parquet}"
    return f"source:duckdb:{src.duckdb_table}"


def get(db: Database, name: str) -> TableRecord | None:
    rows = db.run(
        "SELECT spec, source_table, salt, s.epsilon_total FROM prima.tables t JOIN prima.spaces s "
        "ON s.name = t.id_space WHERE t.name = ?", [name]
    )
    if not rows:
        return None
    spec_json, source_table, salt, total = rows[0]
    return TableRecord(with_salt(TableSpec.model_validate(json.loads(spec_json)), salt), source_table, total)


def space_tables(db: Database, space: str) -> list[str]:
    return [r[0] for r in db.run("SELECT name FROM prima.tables WHERE id_space = ? ORDER BY name", [space])]


def names(db: Database) -> list[str]:
    return [r[0] for r in db.run("SELECT name FROM prima.tables ORDER BY name")]


def set_total(db: Database, name: str, epsilon: float) -> float:
    """Set the total budget of the table's id space in one transaction with the spent check;
    returns what the space has spent."""
    with db.transaction() as con:
        space = con.execute(ledger.SPACE_OF_SQL, [name]).fetchone()[0]
        spent = float(con.execute(ledger.SPENT_SQL, [space]).fetchone()[0])
        if epsilon + 1e-12 < spent:
            raise BudgetBelowSpent(spent)
        con.execute("UPDATE prima.spaces SET epsilon_total = ? WHERE name = ?", [epsilon, space])
        con.execute("UPDATE prima.tables SET epsilon_total = ? WHERE id_space = ?", [epsilon, space])
    return spent


def retire(db: Database, name: str, cube_root: Path) -> None:
    """Remove a table: its catalog row, its cube (index row and files) and, for a file source,
    the copy loaded into Prima's DuckDB. The ledger and the id space stay: what was spent on these
    rows stays spent, and the same source (or id space) registered again starts from it."""
    record = get(db, name)
    with db.transaction() as con:
        con.execute("DELETE FROM prima.cubes WHERE table_name = ?", [name])
        con.execute("DELETE FROM prima.tables WHERE name = ?", [name])
    if record is not None and not (record.spec.source.duckdb_table or record.spec.source.remote):
        sources.drop_loaded(db, name)
    shutil.rmtree(cube_root / name, ignore_errors=True)
