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
    """Load the source (if a file), check the declared columns bind, and record the metadata."""
    if get(db, spec.name) is not None:
        raise TableExists(spec.name)
    qualified = sources.load_source(db, spec.name, spec.source, import_dir)
    salt = secrets.token_hex(16) if spec.privacy_unit is not None else None
    spec = with_salt(spec, salt)
    try:
        sources.check_columns(db, spec.source, qualified, spec)
        db.run(
            "INSERT INTO prima.tables (name, spec, source_table, epsilon_total, salt) VALUES (?, ?, ?, ?, ?)",
            [spec.name, spec.model_dump_json(), qualified, spec.epsilon, salt],
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


def get(db: Database, name: str) -> TableRecord | None:
    rows = db.run(
        "SELECT spec, source_table, epsilon_total, salt FROM prima.tables WHERE name = ?", [name]
    )
    if not rows:
        return None
    spec_json, source_table, total, salt = rows[0]
    return TableRecord(with_salt(TableSpec.model_validate(json.loads(spec_json)), salt), source_table, total)


def names(db: Database) -> list[str]:
    return [r[0] for r in db.run("SELECT name FROM prima.tables ORDER BY name")]


def set_total(db: Database, name: str, epsilon: float) -> float:
    """Set the total budget in one transaction with the spent check; returns what is spent."""
    with db.transaction() as con:
        spent = float(con.execute(ledger.SPENT_SQL, [name]).fetchone()[0])
        if epsilon + 1e-12 < spent:
            raise BudgetBelowSpent(spent)
        con.execute("UPDATE prima.tables SET epsilon_total = ? WHERE name = ?", [epsilon, name])
    return spent


def retire(db: Database, name: str, cube_root: Path) -> None:
    """Remove a table: its catalog row, its cube (index row and files) and, for a file source,
    the copy loaded into Prima's DuckDB. The ledger stays: what was spent on these rows stays
    spent, and a table registered again under this name starts with it (`ledger.spent` is keyed
    by name)."""
    record = get(db, name)
    with db.transaction() as con:
        con.execute("DELETE FROM prima.cubes WHERE table_name = ?", [name])
        con.execute("DELETE FROM prima.tables WHERE name = ?", [name])
    if record is not None and not (record.spec.source.duckdb_table or record.spec.source.remote):
        sources.drop_loaded(db, name)
    shutil.rmtree(cube_root / name, ignore_errors=True)
