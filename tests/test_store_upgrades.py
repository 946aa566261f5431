"""A data directory written by an earlier version opens with its rows migrated (`storage.database`):
each of MIGRATE_SQL's fixes, and the check that decides whether a store needs it at all
(`NEEDS_MIGRATION_SQL`, which spares a current store the migration's writes on every open)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from engine.service import Prima
from storage.database import NEEDS_MIGRATION_SQL, SCHEMA_STAMP, Database
from storage.schema import TableSpec
from tests.conftest import sales_spec, write_sales_csv

# One earlier version's leftover each, as raw SQL on the store, and what the migration must make of it.
LEFTOVERS: dict[str, tuple[str, str, object]] = {
    "a table without an id space": (
        "UPDATE prima.tables SET id_space = NULL",
        "SELECT id_space FROM prima.tables",
        [("table:sales",)],
    ),
    "ledger entries without an id space": (
        "UPDATE prima.ledger SET id_space = NULL",
        "SELECT bool_and(l.id_space = t.id_space) FROM prima.ledger l JOIN prima.tables t ON t.name = l.table_name",
        [(True,)],  # their table's space
    ),
    "ledger entries without their rho": (
        "UPDATE prima.ledger SET rho = NULL",
        "SELECT bool_and(abs(rho - epsilon * epsilon / 2) < 1e-12) FROM prima.ledger",
        [(True,)],
    ),
    "a ledger space with no budget row": (
        "INSERT INTO prima.ledger (table_name, epsilon, purpose, status, id_space, rho) "
        "VALUES ('gone', 0.25, 'build', 'charged', 'table:gone', 0.03125)",
        "SELECT epsilon_total FROM prima.spaces WHERE name = 'table:gone'",
        [(0.25,)],
    ),
    "a source space without its pairing": (
        "UPDATE prima.tables SET id_space = 'source:abc'",
        "SELECT source, id_space FROM prima.source_spaces WHERE source = 'source:abc'",
        [("source:abc", "source:abc")],
    ),
    "a space without a currency": (
        "UPDATE prima.spaces SET currency = NULL",
        "SELECT DISTINCT currency FROM prima.spaces",
        [("epsilon",)],
    ),
    "a space without a public id": (
        "UPDATE prima.spaces SET public_id = NULL",
        "SELECT count(*) FROM prima.spaces WHERE public_id IS NULL OR length(public_id) <> 16",
        [(0,)],
    ),
}


@pytest.fixture(scope="module")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A current store with a registered, built table (a ledger entry), made once; tests change copies."""
    tmp = tmp_path_factory.mktemp("built")
    prima = Prima(tmp / "data", seed=1)
    try:
        prima.register(TableSpec.model_validate(sales_spec(write_sales_csv(tmp / "sales.csv", rows=300))))
        prima.query("SELECT COUNT(*) FROM sales")  # a build: a ledger entry
    finally:
        prima.close()
    return tmp / "data" / "store.duckdb"


def _copy(built: Path, tmp_path: Path) -> Path:
    return Path(shutil.copyfile(built, tmp_path / "store.duckdb"))


def _raw(path: Path, work: Callable[[duckdb.DuckDBPyConnection], object]) -> object:
    con = duckdb.connect(str(path))
    try:
        return work(con)
    finally:
        con.close()


@pytest.mark.parametrize("stamped", [False, True], ids=["from before the stamp", "stamped current"])
@pytest.mark.parametrize("leftover", list(LEFTOVERS))
def test_each_earlier_versions_leftover_is_migrated_on_open(
    built_store: Path, tmp_path: Path, leftover: str, stamped: bool
) -> None:
    store = _copy(built_store, tmp_path)
    change, read, want = LEFTOVERS[leftover]
    assert _raw(store, lambda con: con.execute(NEEDS_MIGRATION_SQL).fetchone()) == (False,)  # a current store
    _raw(store, lambda con: con.execute(change if stamped else f"{change}; DROP TABLE prima.schema_stamp"))
    assert _raw(store, lambda con: con.execute(NEEDS_MIGRATION_SQL).fetchone()) == (True,), leftover
    Database(store).close()
    assert _raw(store, lambda con: con.execute(read).fetchall()) == want
    assert _raw(store, lambda con: con.execute(NEEDS_MIGRATION_SQL).fetchone()) == (False,)
    assert _raw(store, lambda con: con.execute("SELECT stamp FROM prima.schema_stamp").fetchall()) == [(SCHEMA_STAMP,)]


def test_a_store_without_the_schemas_newer_columns_gets_them(built_store: Path, tmp_path: Path) -> None:
    """A stamp from another schema text (an earlier version's) runs the schema again: its tables come back."""
    store = _copy(built_store, tmp_path)
    _raw(
        store,
        lambda con: con.execute("UPDATE prima.schema_stamp SET stamp = 'earlier'; DROP TABLE prima.local_sources"),
    )
    Database(store).close()
    assert _raw(store, lambda con: con.execute("SELECT count(*) FROM prima.local_sources").fetchone()) == (0,)
    assert _raw(store, lambda con: con.execute("SELECT stamp FROM prima.schema_stamp").fetchall()) == [(SCHEMA_STAMP,)]


def test_a_system_error_parsing_a_cube_header_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's header parse raised SystemError under concurrent first queries (a 500 in
    `tests/test_workers.py` on a busy machine): a stored cube whose first parse fails that way loads
    on the second, with the same values; a file that fails every time still raises."""
    import numpy as np

    from storage import cube_store

    prima = Prima(tmp_path / "data", seed=3)
    prima.register(TableSpec.model_validate(sales_spec(write_sales_csv(tmp_path / "s.csv"))))
    prima.build("sales")
    want = prima.query("SELECT region, COUNT(*) FROM sales GROUP BY region")["rows"]
    real, calls = np.load, {"n": 0}

    def flaky(path: Path, *args: object, **kwargs: object) -> np.ndarray:
        calls["n"] += 1
        if calls["n"] == 1:
            raise SystemError("error return without exception set")
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cube_store.np, "load", flaky)
    stored = cube_store.load(prima.db, prima.cube_root, "sales")
    assert stored is not None and calls["n"] == len(stored.arrays) + 1
    fresh = Prima(tmp_path / "data")  # a new process's view: the cube read from the store
    prima.close()
    assert fresh.query("SELECT region, COUNT(*) FROM sales GROUP BY region")["rows"] == want

    def broken(*_: object, **__: object) -> np.ndarray:
        raise SystemError("error return without exception set")

    monkeypatch.setattr(cube_store.np, "load", broken)
    with pytest.raises(SystemError):
        cube_store.load(fresh.db, fresh.cube_root, "sales")
    fresh.close()


def test_an_unexpected_errors_log_line_names_where_not_what() -> None:
    """A 500's log line (`app.http.app`) names the innermost frames' files, lines and functions, so
    an operator can find a fault such as the one above, and never the exception's message, which a
    lower layer may have filled with data."""
    from app.http.app import _where

    def inner(secret: float) -> None:
        raise SystemError(f"value {secret}")

    try:
        inner(123456.789)
    except SystemError as exc:
        where = _where(exc)
    assert where.startswith("test_store_upgrades.py:") and " inner < " in where, where
    assert "123456" not in where and "value" not in where
