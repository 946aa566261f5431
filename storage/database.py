"""The one DuckDB file in the data directory: source tables, catalog, ledger, cube index.

DuckDB allows one read-write process per file and one connection object is not safe to use from
several threads at once, so every statement goes through :meth:`Database.run` /
:meth:`Database.transaction` under a re-entrant lock. The query path never touches the database
(answers come from the in-memory/memory-mapped cube), so the lock is only taken by registration,
budget and build work.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import duckdb

log = logging.getLogger("prima.storage")
T = TypeVar("T")

SCHEMA_SQL = """
CREATE SCHEMA IF NOT EXISTS prima;
CREATE SCHEMA IF NOT EXISTS src;
CREATE TABLE IF NOT EXISTS prima.tables (
    name VARCHAR PRIMARY KEY,
    spec JSON NOT NULL,
    source_table VARCHAR NOT NULL,
    epsilon_total DOUBLE NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
CREATE SEQUENCE IF NOT EXISTS prima.ledger_seq;
CREATE TABLE IF NOT EXISTS prima.ledger (
    id BIGINT PRIMARY KEY DEFAULT nextval('prima.ledger_seq'),
    table_name VARCHAR NOT NULL,
    build_id VARCHAR,
    "at" TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    epsilon DOUBLE NOT NULL,
    purpose VARCHAR NOT NULL,
    status VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS prima.cubes (
    table_name VARCHAR PRIMARY KEY,
    build_id VARCHAR NOT NULL,
    meta JSON NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
-- the per-table secret that orders each privacy unit's rows (NULL: no privacy unit)
ALTER TABLE prima.tables ADD COLUMN IF NOT EXISTS salt VARCHAR;
-- budgets per population. A table belongs to one id space; the space holds the total and
-- every ledger entry names its space, so tables over the same people (or the same source) share it.
CREATE TABLE IF NOT EXISTS prima.spaces (
    name VARCHAR PRIMARY KEY,
    epsilon_total DOUBLE NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
ALTER TABLE prima.tables ADD COLUMN IF NOT EXISTS id_space VARCHAR;
ALTER TABLE prima.ledger ADD COLUMN IF NOT EXISTS id_space VARCHAR;
-- every (source, id space) pairing ever registered, never deleted. A source (a file by
-- its digest, a table by its reference) already measured in one space is not put into another
-- without the admin's explicit, logged acknowledgement: its rows would get a fresh budget.
CREATE TABLE IF NOT EXISTS prima.source_spaces (
    source VARCHAR NOT NULL,
    id_space VARCHAR NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    PRIMARY KEY (source, id_space)
);
-- two currencies. A space's budget is declared in pure ε ('epsilon', the default and every
-- space before) or in ρ-zCDP ('rho'; an (ε, δ) declaration is stored as its ρ, with its δ for display);
-- spaces.epsilon_total holds the total in the space's currency. Every ledger entry records both costs:
-- its pure ε (NULL for a Gaussian release, which has none) and its tight ρ.
ALTER TABLE prima.spaces ADD COLUMN IF NOT EXISTS currency VARCHAR DEFAULT 'epsilon';
ALTER TABLE prima.spaces ADD COLUMN IF NOT EXISTS delta DOUBLE;
ALTER TABLE prima.ledger ADD COLUMN IF NOT EXISTS rho DOUBLE;
-- a growing table's appends name the period they pay for; "parallel" entries (the "period"
-- model: disjoint rows per period) compose in parallel across periods (storage/ledger.py SPENT_SQL).
ALTER TABLE prima.ledger ADD COLUMN IF NOT EXISTS period VARCHAR;
ALTER TABLE prima.ledger ADD COLUMN IF NOT EXISTS parallel BOOLEAN;
ALTER TABLE prima.ledger ALTER COLUMN epsilon DROP NOT NULL;
-- A space named after its source (a file's digest, a server path) is shown to analysts by a random
-- id instead: the name is a membership test for anyone holding the file (privacy rule 4).
ALTER TABLE prima.spaces ADD COLUMN IF NOT EXISTS public_id VARCHAR;
-- How the space's budget composes ("sequential", or "per day" / "per month" for the period model):
-- kept after its tables are retired, so a spent space cannot change its meaning.
ALTER TABLE prima.spaces ADD COLUMN IF NOT EXISTS composition VARCHAR;
-- The source key a table was registered from (`storage.catalog.source_space`): a server of a shared
-- state that lacks the table's source copy loads it again and checks it is the same source.
ALTER TABLE prima.tables ADD COLUMN IF NOT EXISTS source VARCHAR;
-- Which registration each local source copy was loaded for (shared state: another server may have
-- retired the table and registered another source under its name since).
CREATE TABLE IF NOT EXISTS prima.local_sources (name VARCHAR PRIMARY KEY, source VARCHAR NOT NULL);
"""

# A data dir from before id spaces: every table becomes its own space with its own total, and every
# ledger entry joins its table's space (a retired table's entries keep a space of their own).
MIGRATE_SQL = """
INSERT INTO prima.spaces (name, epsilon_total)
    SELECT 'table:' || name, epsilon_total FROM prima.tables WHERE id_space IS NULL
    ON CONFLICT DO NOTHING;
UPDATE prima.tables SET id_space = 'table:' || name WHERE id_space IS NULL;
UPDATE prima.ledger SET id_space = COALESCE(
    (SELECT t.id_space FROM prima.tables t WHERE t.name = prima.ledger.table_name), 'table:' || table_name)
    WHERE id_space IS NULL;
INSERT INTO prima.spaces (name, epsilon_total)
    SELECT id_space, SUM(epsilon) FROM prima.ledger
    WHERE id_space NOT IN (SELECT name FROM prima.spaces) GROUP BY id_space
    ON CONFLICT DO NOTHING;
INSERT INTO prima.source_spaces (source, id_space)
    SELECT DISTINCT id_space, id_space FROM prima.ledger WHERE id_space LIKE 'source:%'
    UNION SELECT id_space, id_space FROM prima.tables WHERE id_space LIKE 'source:%'
    ON CONFLICT DO NOTHING;
UPDATE prima.spaces SET currency = 'epsilon' WHERE currency IS NULL;
UPDATE prima.spaces SET public_id = replace(CAST(gen_random_uuid() AS VARCHAR), '-', '')[1:16] WHERE public_id IS NULL;
-- Entries from earlier versions did not record how their ε was split into releases: they get the
-- bound every ε-DP step satisfies, ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4), never less.
UPDATE prima.ledger SET rho = epsilon * epsilon / 2 WHERE rho IS NULL AND epsilon IS NOT NULL;
"""

# Whether MIGRATE_SQL would change a row: its statements' conditions, read without writing. Opening a
# store runs this instead of the migration's eight writes when nothing is left to migrate (4 ms
# against 10 ms, and a close with nothing to checkpoint: every seeded build of the tests opens one).
NEEDS_MIGRATION_SQL = """
SELECT EXISTS (SELECT 1 FROM prima.tables WHERE id_space IS NULL)
    OR EXISTS (SELECT 1 FROM prima.ledger WHERE id_space IS NULL OR (rho IS NULL AND epsilon IS NOT NULL)
               OR id_space NOT IN (SELECT name FROM prima.spaces))
    OR EXISTS (SELECT 1 FROM prima.spaces WHERE currency IS NULL OR public_id IS NULL)
    OR EXISTS (SELECT id_space FROM prima.ledger WHERE id_space LIKE 'source:%'
               UNION SELECT id_space FROM prima.tables WHERE id_space LIKE 'source:%'
               EXCEPT SELECT source FROM prima.source_spaces WHERE source = id_space)
"""
STREAM_MEMORY = "128MB"  # DuckDB's memory limit for a pass over a whole source (`Database.streaming`)
# SCHEMA_SQL runs only on a store not stamped with this text's digest (its statements are all "IF NOT
# EXISTS"; a store stamped by this version has every one of them applied).
SCHEMA_STAMP = hashlib.sha256(SCHEMA_SQL.encode()).hexdigest()[:16]


class StorageError(Exception):
    """A storage failure whose message is safe to show (it never quotes row values)."""


class OutOfMemory(StorageError):
    """DuckDB ran out of its memory limit (`Database.streamed` retries without `STREAM_MEMORY`)."""


class StateUnavailable(StorageError):
    """The shared state's PostgreSQL cannot be reached (`storage.shared_state`): a 503 to retry."""


class Database:
    """A DuckDB connection guarded by a lock, with the Prima schema created on open."""

    shared = False

    def __init__(self, path: Path, read_only: bool = False, state: Any = None) -> None:
        """``read_only``: a serving worker's view of a published snapshot (`storage.snapshot`), which
        many processes may open at once; it is never migrated and refuses every write. ``state``:
        where the catalog, ledger and cube index live when not in this file
        (`storage.shared_state.SharedState`); this file then holds the source copies only."""
        self.path = Path(path)
        # The catalog/ledger/cube-index store: this file, or PostgreSQL shared by many servers. It
        # answers the same `run` / `transaction` calls, so storage.ledger, .catalog and .cube_store
        # address it alike.
        self.state: Any = state if state is not None else self
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.IOException as exc:  # typically: another process holds the write lock
            raise StorageError(f"cannot open the database at {self.path}: {exc}") from None
        self._lock = threading.RLock()
        limit = os.environ.get("PRIMA_DUCKDB_MEMORY", "").strip()
        self._admin_memory = bool(limit)  # the admin's limit holds for `streaming` passes too
        if not read_only:
            with self._lock:
                self._prepare()
                if limit:  # e.g. "512MB": DuckDB spills past it (registration at 10⁸ rows: +1.36 GB → +0.55 GB)
                    try:
                        self._con.execute("SET memory_limit = ?", [limit])
                    except duckdb.Error:
                        raise StorageError(
                            f"PRIMA_DUCKDB_MEMORY={limit!r} is not a memory size (write e.g. 512MB or 2GB)"
                        ) from None

    def _prepare(self) -> None:
        """Create or extend the schema (unless stamped current) and migrate rows from earlier
        versions (only when `NEEDS_MIGRATION_SQL` finds some)."""
        try:
            stamp = self._con.execute("SELECT stamp FROM prima.schema_stamp").fetchall()
        except duckdb.CatalogException:  # a new store, or one from before the stamp
            stamp = []
        if stamp != [(SCHEMA_STAMP,)]:
            self._con.execute(SCHEMA_SQL)
            self._con.execute("CREATE OR REPLACE TABLE prima.schema_stamp AS SELECT ? AS stamp", [SCHEMA_STAMP])
        if self._con.execute(NEEDS_MIGRATION_SQL).fetchone() != (False,):
            self._con.execute(MIGRATE_SQL)

    @contextlib.contextmanager
    def streaming(self) -> Iterator[None]:
        """Statements inside pass over a whole source once (registration's copy and its preflight
        scan): they run under `STREAM_MEMORY` (unless the admin set ``PRIMA_DUCKDB_MEMORY``), free
        to write rows in any order, holding the lock so that no other statement runs under these
        settings. Rows have no order in Prima (no answer reads one).

        Under DuckDB's defaults its buffer pool keeps every block such a pass writes or reads:
        registering bench/scale.py's Parquet grew peak RSS by +195 MB at 10⁷ rows and +882 MB at
        10⁸ with the copy alone streamed. Both passes under 128 MB: +127 / +162 MB."""
        with self._lock:
            limited = not self._admin_memory
            if limited:
                self._con.execute(f"SET memory_limit = '{STREAM_MEMORY}'")
            self._con.execute("SET preserve_insertion_order = false")
            try:
                yield
            finally:
                if limited:
                    self._con.execute("RESET memory_limit")
                self._con.execute("RESET preserve_insertion_order")

    def streamed(self, work: Callable[[], T], what: str) -> T:
        """``work()`` `streaming`; where DuckDB runs out of that memory (rows too wide to stream in
        it), once more under the server's own settings. ``work`` must leave nothing behind when it
        fails (one statement, or a read)."""
        try:
            with self.streaming():
                return work()
        except (duckdb.OutOfMemoryException, OutOfMemory):
            log.warning("%s ran out of its streaming memory; running it again without the limit", what)
            return work()

    def run(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        """Execute one statement and return all rows."""
        with self._lock:
            return self._con.execute(sql, params or []).fetchall()

    def numpy(self, sql: str, params: list[Any] | dict[str, Any] | None = None) -> dict[str, Any]:
        """Execute one statement and return its columns as numpy arrays (no Python loops)."""
        with self._lock:
            return self._con.execute(sql, params or []).fetchnumpy()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN … COMMIT (ROLLBACK on error), holding the lock throughout."""
        with self._lock:
            self._con.execute("BEGIN TRANSACTION")
            try:
                yield self._con
            except BaseException:
                self._con.execute("ROLLBACK")
                raise
            self._con.execute("COMMIT")

    def checkpoint(self) -> None:
        with self._lock:
            self._con.execute("CHECKPOINT")

    def close(self) -> None:
        with self._lock:
            self._con.close()
        if self.state is not self:
            self.state.close()
