"""Shared state in PostgreSQL: the catalog, ledger, id spaces and cube index of many servers.

The embedded default keeps the ``prima`` schema in the data dir's DuckDB file, which one process
owns. ``prima serve --state postgresql://…`` keeps it here instead, so N stateless servers (each
with a data dir of its own for its source copies) share one catalog, one ledger and one cube index,
and read the cubes from one shared directory. Everything stays as the embedded store has it, with
three rules that make many writers safe:

* **One writer at a time.** Every `transaction` first takes one transaction-scoped advisory lock,
  so the charge-first rule (read what a space has spent, refuse or insert, commit) runs serially
  across all servers, as DuckDB's single writer runs it in one process. Writes are rare
  (registrations, charges, a build's commit): the query path never writes.
* **One build per table.** `build_lock` holds a session-level advisory lock on a connection of its
  own for the build's whole run. PostgreSQL releases it when that connection dies, so a server
  killed mid-build frees the table at once, and `build_held` tells the others whether a ``charged``
  entry without a cube is still being built or was left by a dead server.
* **Changes are announced.** `bump` increments one counter after every change; servers poll it
  (`changes`, one indexed read) and drop what they cached when it moves.

The URL may carry a password: it is never logged or put in an error message.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg

from storage.database import StateUnavailable

SCHEMA_SQL = """
CREATE SCHEMA IF NOT EXISTS prima;
CREATE TABLE IF NOT EXISTS prima.spaces (
    name TEXT PRIMARY KEY,
    epsilon_total DOUBLE PRECISION NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    currency TEXT DEFAULT 'epsilon',
    delta DOUBLE PRECISION,
    public_id TEXT,
    composition TEXT
);
CREATE TABLE IF NOT EXISTS prima.tables (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    source_table TEXT NOT NULL,
    epsilon_total DOUBLE PRECISION NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'),
    salt TEXT,
    id_space TEXT,
    source TEXT
);
CREATE TABLE IF NOT EXISTS prima.ledger (
    id BIGSERIAL PRIMARY KEY,
    table_name TEXT NOT NULL,
    build_id TEXT,
    "at" TIMESTAMP NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'),
    epsilon DOUBLE PRECISION,
    purpose TEXT NOT NULL,
    status TEXT NOT NULL,
    id_space TEXT,
    rho DOUBLE PRECISION,
    period TEXT,
    parallel BOOLEAN
);
CREATE INDEX IF NOT EXISTS ledger_space ON prima.ledger (id_space);
CREATE INDEX IF NOT EXISTS ledger_table ON prima.ledger (table_name);
CREATE TABLE IF NOT EXISTS prima.cubes (
    table_name TEXT PRIMARY KEY,
    build_id TEXT NOT NULL,
    meta TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);
CREATE TABLE IF NOT EXISTS prima.source_spaces (
    source TEXT NOT NULL,
    id_space TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (clock_timestamp() AT TIME ZONE 'UTC'),
    PRIMARY KEY (source, id_space)
);
CREATE TABLE IF NOT EXISTS prima.changes (id INT PRIMARY KEY, n BIGINT NOT NULL);
INSERT INTO prima.changes VALUES (1, 0) ON CONFLICT DO NOTHING;
-- rate-limit buckets (app/guard.py): a key is a SHA-256 digest, never a token or an address
CREATE TABLE IF NOT EXISTS prima.buckets (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (kind, key)
);
"""

_WRITER_LOCK = 0x5052494D41  # "PRIMA": the one-writer-at-a-time lock every transaction takes first
_SCHEMA_LOCK = _WRITER_LOCK + 1  # servers starting together create the schema one at a time
PRUNE_EVERY = 1024  # takes between sweeps of refilled buckets
T = TypeVar("T")


def _key(kind: str, name: str) -> int:
    """A signed 64-bit advisory-lock key for (kind, name): 8 bytes of SHA-256."""
    return int.from_bytes(hashlib.sha256(f"{kind}\0{name}".encode()).digest()[:8], "big", signed=True)


def _pg(sql: str) -> str:
    """The project's DuckDB-style ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


@contextlib.contextmanager
def _reachable() -> Iterator[None]:
    """A lost connection as a `StateUnavailable` (503) that names the driver's error type, never the URL."""
    try:
        yield
    except psycopg.OperationalError as exc:
        raise StateUnavailable(
            f"the shared state database is unreachable ({type(exc).__name__}); the request changed nothing, retry later"
        ) from None


class _Transaction:
    """What `transaction` yields: ``execute(sql, params)`` returning a cursor, as DuckDB's connection."""

    def __init__(self, con: psycopg.Connection) -> None:
        self._con = con

    def execute(self, sql: str, params: list[Any] | None = None) -> psycopg.Cursor:
        return self._con.execute(_pg(sql), params or [])


class SharedState:
    """The ``prima`` schema in PostgreSQL, with `Database.run` / `Database.transaction`'s interface."""

    shared = True

    def __init__(self, url: str) -> None:
        self._url = url  # may carry a password: kept here only, never logged or shown
        self._lock = threading.RLock()
        self._takes = 0
        self._con = self._connect()
        with self._lock, self._con.transaction():
            self._con.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
            self._con.execute(SCHEMA_SQL)

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self._url, autocommit=True, connect_timeout=10, application_name="prima")
        except psycopg.Error as exc:  # the message may quote the URL's host, never its password
            raise StateUnavailable(
                f"cannot reach the shared state database ({type(exc).__name__}): check --state / PRIMA_STATE"
            ) from None

    def _connection(self) -> psycopg.Connection:
        """The connection, opened again when PostgreSQL dropped it (a restart, a failover)."""
        if self._con.closed or self._con.broken:
            self._con = self._connect()
        return self._con

    def run(self, sql: str, params: list[Any] | None = None) -> list[tuple]:
        """Execute one statement (autocommit) and return all rows. A connection PostgreSQL dropped
        since the last call (a restart, a failover) is replaced once, and the statement sent again."""

        def once(con: psycopg.Connection) -> list[tuple]:
            cur = con.execute(_pg(sql), params or [])
            return cur.fetchall() if cur.description else []

        return self._retried(once)

    def _retried(self, work: Callable[[psycopg.Connection], T]) -> T:
        """``work`` on the connection, once more on a new one if PostgreSQL had dropped it (a restart,
        a failover: nothing of the first attempt reached it). Only for work that is safe to repeat."""
        with self._lock, _reachable():
            try:
                return work(self._connection())
            except psycopg.OperationalError:
                if not self._con.broken:
                    raise
                return work(self._connection())

    @contextlib.contextmanager
    def transaction(self) -> Iterator[_Transaction]:
        """BEGIN … COMMIT (ROLLBACK on error) as the only writer of the shared state."""
        with self._lock, _reachable():
            con = self._connection()
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(%s)", [_WRITER_LOCK])
                yield _Transaction(con)

    def bump(self) -> None:
        """Announce a change (a registration, a charge, a stored cube) to every server."""
        self.run("UPDATE prima.changes SET n = n + 1 WHERE id = 1")

    def changes(self) -> int:
        """The change counter: a server whose copy is older drops what it cached."""
        return int(self.run("SELECT n FROM prima.changes WHERE id = 1")[0][0])

    @contextlib.contextmanager
    def build_lock(self, table: str) -> Iterator[None]:
        """Hold ``table``'s build lock across all servers, on a connection of this build's own:
        waits while another server builds it; released at the end, or by PostgreSQL when this
        process dies."""
        con = self._connect()
        try:
            con.execute("SELECT pg_advisory_lock(%s)", [_key("build", table)])
            yield
        finally:
            con.close()  # closing the session releases its advisory locks

    def build_held(self, table: str) -> bool:
        """Whether some server holds ``table``'s build lock now (a build in progress there)."""
        key = _key("build", table)
        rows = self.run(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = ? AND objid = ? "
            "AND objsubid = 1",
            [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
        )
        return bool(rows)

    def take_token(self, kind: str, key: str, rate: float, burst: float, debt: float) -> float:
        """One take from a token bucket every server shares; returns the tokens held before it
        (< 1: refused). The clock is PostgreSQL's, one for all servers. A refused take drives the
        bucket into debt down to ``-debt`` (`app.guard.Buckets._after`)."""
        digest = hashlib.sha256(key.encode()).hexdigest()

        def take(con: psycopg.Connection) -> float:
            with con.transaction():
                row = con.execute(
                    "INSERT INTO prima.buckets AS b (kind, key, tokens, at) VALUES "
                    "(%s, %s, %s, extract(epoch FROM clock_timestamp())) "
                    "ON CONFLICT (kind, key) DO UPDATE SET tokens = least(%s, b.tokens + "
                    "(extract(epoch FROM clock_timestamp()) - b.at) * %s), at = excluded.at RETURNING tokens",
                    [kind, digest, burst, burst, rate],
                ).fetchone()
                tokens = float(row[0]) if row else burst
                after = tokens - 1.0 if tokens >= 1.0 else (min(tokens, max(-debt, tokens - 1.0)) if debt else tokens)
                con.execute("UPDATE prima.buckets SET tokens = %s WHERE kind = %s AND key = %s", [after, kind, digest])
                self._takes += 1
                if self._takes % PRUNE_EVERY == 0:  # bounded state: a refilled bucket is as good as none
                    con.execute(
                        "DELETE FROM prima.buckets WHERE kind = %s AND tokens + "
                        "(extract(epoch FROM clock_timestamp()) - at) * %s >= %s",
                        [kind, rate, burst],
                    )
            return tokens

        return self._retried(take)

    def token_level(self, kind: str, key: str, rate: float, burst: float) -> float:
        """The tokens a shared bucket holds now (a peek)."""
        digest = hashlib.sha256(key.encode()).hexdigest()
        rows = self.run(
            "SELECT least(?, tokens + (extract(epoch FROM clock_timestamp()) - at) * ?) FROM prima.buckets "
            "WHERE kind = ? AND key = ?",
            [burst, rate, kind, digest],
        )
        return float(rows[0][0]) if rows else burst

    def close(self) -> None:
        with self._lock:
            self._con.close()
