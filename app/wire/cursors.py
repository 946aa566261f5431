"""SQL cursors and statement batches on the wire: what psqlODBC (Tableau, Power BI's ODBC path) sends.

psqlODBC with `UseDeclareFetch` wraps every query in a cursor, in one simple-query batch:

    BEGIN;declare "SQL_CUR0x…" cursor with hold for SELECT …;fetch 100 in "SQL_CUR0x…"
    SAVEPOINT _EXEC_SVP_0x…;fetch 100 in "SQL_CUR0x…"
    close "SQL_CUR0x…";commit

An answer is small and already in memory (a cube lookup), so a cursor is emulated over the
materialised rows: DECLARE runs the query through the session (the same engine as REST), FETCH
hands out the next rows, CLOSE drops them. Batches are split on the tokenizer's semicolons with
the statements' own text kept (pg-mimic re-renders a batch through sqlglot, which mangles
`close "cur"`), and a batch is capped so one message cannot queue unbounded work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pg_mimic import PgError, ResultColumn
from pg_mimic.session import Portal, Statement, drain_rows
from sqlglot.tokens import Tokenizer, TokenType

from app.wire.text import last_name, statement_text

MAX_STATEMENTS = 1000  # statements in one simple-query message
MAX_CURSORS = 64  # open cursors per connection
MAX_CURSOR_ROWS = 1_000_000  # rows all of a connection's open cursors hold (one GROUP BY answer's limit)

# Matched against `app.wire.text.statement_text`, blanks possessive (linear on any input).
_DECLARE = re.compile(
    r"^declare\s++(?P<name>\"(?:[^\"]|\"\")++\"|\w++)\s++(?:binary\s++)?(?:(?:in)?sensitive\s++|asensitive\s++)?"
    r"(?:no\s++)?(?:scroll\s++)?cursor\s++(?:(?:with|without)\s++hold\s++)?for\s++(?P<query>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_FETCH = re.compile(r"^(?P<verb>fetch|move)(?P<rest>\s.*)$", re.IGNORECASE | re.DOTALL)
_CLOSE = re.compile(r"^close\s++(?P<name>\"(?:[^\"]|\"\")++\"|\w++)$", re.IGNORECASE)
_INVALID_CURSOR = "34000"


def split_statements(sql: str) -> list[str]:
    """A simple-query message's statements, each as the client wrote it."""
    try:
        tokens = Tokenizer().tokenize(sql)
    except Exception:  # noqa: BLE001 — unterminated strings etc.: one statement, the session reports it
        return [sql]
    cuts = [t.start for t in tokens if t.token_type == TokenType.SEMICOLON]
    if not cuts:
        return [sql]
    if len(cuts) > MAX_STATEMENTS:
        raise PgError("54000", f"{len(cuts) + 1:,} statements in one message; at most {MAX_STATEMENTS:,} are accepted")
    parts, start = [], 0
    for cut in cuts + [len(sql)]:
        part = sql[start:cut]
        if part.strip():
            parts.append(part.strip())
        start = cut + 1
    return parts or [sql]


@dataclass
class Cursor:
    columns: list[ResultColumn] | None
    rows: list[tuple]
    position: int = 0


@dataclass
class Cursors:
    """A connection's open cursors."""

    open: dict[str, Cursor] = field(default_factory=dict)

    def get(self, name: str) -> Cursor:
        if name not in self.open:
            raise PgError(_INVALID_CURSOR, f'cursor "{name}" does not exist')
        return self.open[name]


def _name(token: str) -> str:
    return token[1:-1].replace('""', '"') if token.startswith('"') else token.lower()


def cursor_statement(session: Any, cursors: Cursors, sql: str, param_oids: list[int | None]) -> Statement | None:
    """DECLARE / FETCH / MOVE / CLOSE as statements, or None for anything else."""
    sql = statement_text(sql)
    if m := _DECLARE.match(sql):
        return _Declare(session, cursors, _name(m["name"]), m["query"], param_oids)
    if (m := _FETCH.match(sql)) and (split := last_name(m["rest"])) is not None:
        count = _count(split[0])
        return _Fetch(cursors, sql, _name(split[1]), count, move=m["verb"].lower() == "move")
    if m := _CLOSE.match(sql):
        return _Close(cursors, sql, None if m["name"].lower() == "all" else _name(m["name"]))
    return None


def _count(how: str) -> int:
    """FETCH's direction as a row count (-1: all). Only forward directions: answers are small and
    drivers read them front to back."""
    words = [w for w in how.lower().split() if w not in ("in", "from")]
    if not words or words in (["next"], ["forward"]):
        return 1
    if words in (["all"], ["forward", "all"]):
        return -1
    number = words[-1]
    if len(words) <= 2 and number.isdigit() and words[0] in (number, "forward"):
        return int(number)
    raise PgError("0A000", f"FETCH {how.strip()} is not supported here: use FETCH [FORWARD] n | ALL | NEXT")


class _Declare(Statement):
    def __init__(self, session: Any, cursors: Cursors, name: str, query: str, param_oids: list[int | None]) -> None:
        self.session, self.cursors, self.name, self.query = session, cursors, name, query
        self.sql, self.param_oids = f"DECLARE {name}", param_oids

    async def describe(self) -> list[ResultColumn] | None:
        return None

    def bind(self, params: list[str | None]) -> Portal:
        return _DeclarePortal(self, params)


class _DeclarePortal(Portal):
    def __init__(self, declare: _Declare, params: list[str | None]) -> None:
        self.declare, self.params, self.done = declare, params, False

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        d = self.declare
        if not self.done:
            if d.name in d.cursors.open:
                raise PgError("42P03", f'cursor "{d.name}" already exists')
            if len(d.cursors.open) >= MAX_CURSORS:
                raise PgError("53000", f"at most {MAX_CURSORS} cursors may be open on one connection: CLOSE some")
            inner = await d.session.prepare(d.query, d.param_oids)
            columns = await inner.describe()
            rows, _ = await inner.bind(self.params).execute(0)
            held = sum(len(c.rows) for c in d.cursors.open.values())
            if held + len(rows) > MAX_CURSOR_ROWS:
                raise PgError(
                    "53200",
                    f"the open cursors of one connection hold at most {MAX_CURSOR_ROWS:,} rows "
                    f"({held:,} held now): CLOSE some, or FETCH the answer without a cursor",
                )
            d.cursors.open[d.name] = Cursor(columns, rows)
            self.done = True
        return [], False


class _Fetch(Statement):
    def __init__(self, cursors: Cursors, sql: str, name: str, count: int, move: bool) -> None:
        self.cursors, self.sql, self.name, self.count, self.move = cursors, sql, name, count, move
        self.param_oids = []

    async def describe(self) -> list[ResultColumn] | None:
        return None if self.move else self.cursors.get(self.name).columns

    def bind(self, params: list[str | None]) -> Portal:
        return _FetchPortal(self)


class _FetchPortal(Portal):
    def __init__(self, fetch: _Fetch) -> None:
        self.fetch, self._rows = fetch, None

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        if self._rows is None:
            cursor = self.fetch.cursors.get(self.fetch.name)
            end = len(cursor.rows) if self.fetch.count < 0 else cursor.position + self.fetch.count
            taken = cursor.rows[cursor.position : end]
            cursor.position += len(taken)
            self._rows = iterate([] if self.fetch.move else taken)
        return await drain_rows(self._rows, max_rows)


class _Close(Statement):
    def __init__(self, cursors: Cursors, sql: str, name: str | None) -> None:
        self.cursors, self.sql, self.name, self.param_oids = cursors, sql, name, []

    async def describe(self) -> list[ResultColumn] | None:
        return None

    def bind(self, params: list[str | None]) -> Portal:
        return _ClosePortal(self)


class _ClosePortal(Portal):
    def __init__(self, close: _Close) -> None:
        self.close = close

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        if self.close.name is None:
            self.close.cursors.open.clear()
        else:
            self.close.cursors.get(self.close.name)
            del self.close.cursors.open[self.close.name]
        return [], False


async def iterate(rows: list[tuple]) -> Any:
    """Rows as the async source a pg-mimic portal drains."""
    for row in rows:
        yield row


def cursor_portal(cursors: Cursors, name: str) -> tuple[Portal, list[ResultColumn] | None] | None:
    """A DECLAREd cursor as a protocol portal of the same name, and its columns; None when no such
    cursor is open. psycopg's named cursors (SQLAlchemy's `stream_results`) DECLARE, then send
    Describe Portal with the cursor's name (in PostgreSQL a cursor is a portal), then FETCH."""
    cursor = cursors.open.get(name)
    if cursor is None:
        return None
    return _FetchPortal(_Fetch(cursors, f"FETCH ALL FROM {name}", name, -1, move=False)), cursor.columns
