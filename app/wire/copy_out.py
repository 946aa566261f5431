"""`COPY (SELECT …) TO STDOUT` on the wire: psql's `\\copy (…) TO 'f.csv'`, DuckDB's postgres scanner
(`postgres_query`, binary) and pandas' fast readers fetch answers this way.

The query runs through the session like any other (the same engine and answer as REST); its rows
go out as the COPY sub-protocol carries them: CopyOutResponse, one CopyData per row (text, CSV or
PostgreSQL's binary format), CopyDone, then `COPY n`. Only query results are copied: `COPY table
TO …` would be raw rows and is refused like `SELECT *`, and `COPY … FROM` is a write.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from pg_mimic import PgError
from pg_mimic.results import ResultColumn, encode_row
from pg_mimic.session import Portal, Statement

from app.wire.text import statement_text

_COPY_QUERY = re.compile(r"^copy\s*+\((?P<query>.+)\)\s*+to\s++stdout\b(?P<options>.*)$", re.IGNORECASE | re.DOTALL)
_COPY_ANY = re.compile(r"^copy\b", re.IGNORECASE)
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack("!ii", 0, 0)
_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def copy_request(sql: str) -> tuple[str, str, bool] | None:
    """(query, format — text, csv or binary —, header) of a `COPY (query) TO STDOUT`; None for a
    statement that is no COPY; a PgError for any other COPY."""
    sql = statement_text(sql)  # matched without blanks around it or its ";" (`app.wire.text`)
    if not _COPY_ANY.match(sql):
        return None
    m = _COPY_QUERY.match(sql)
    if m is None:
        if re.search(r"\bfrom\s+stdin\b", sql, re.IGNORECASE):
            raise PgError("25006", "COPY … FROM is a write; Prima's tables are read-only")
        raise PgError(
            "42501",
            "COPY copies a query's answer only: COPY (SELECT … GROUP BY …) TO STDOUT "
            "(a table's rows are never released)",
        )
    options = m["options"].lower()
    fmt = "binary" if "binary" in options else "csv" if "csv" in options else "text"
    return m["query"], fmt, "header" in options and fmt == "csv"


def copy_messages(columns: list[ResultColumn] | None, rows: list[tuple], fmt: str, header: bool) -> list[bytes]:
    """The backend messages of one COPY TO STDOUT: CopyOutResponse, CopyData…, CopyDone."""
    columns = columns or []
    code = 1 if fmt == "binary" else 0
    out = [
        _message(
            b"H", struct.pack("!bh", code, len(columns)) + struct.pack(f"!{len(columns)}h", *[code] * len(columns))
        )
    ]
    if fmt == "binary":  # the file header travels with the first row, as PostgreSQL sends it (psycopg expects so)
        bodies = [
            struct.pack("!h", len(columns))
            + b"".join(
                struct.pack("!i", -1) if f is None else struct.pack("!i", len(f)) + f
                for f in encode_row(tuple(row), columns, [1] * len(columns))
            )
            for row in rows
        ]
        bodies.append(struct.pack("!h", -1))
        bodies[0] = _BINARY_HEADER + bodies[0]
        out += [_message(b"d", body) for body in bodies]
    else:
        if header:
            out.append(_message(b"d", (",".join(_csv(c.name) for c in columns) + "\n").encode()))
        for row in rows:
            fields = encode_row(tuple(row), columns)
            line = (
                ",".join("" if f is None else _csv(f.decode()) for f in fields)
                if fmt == "csv"
                else "\t".join("\\N" if f is None else f.decode().translate(_TEXT_ESCAPES) for f in fields)
            )
            out.append(_message(b"d", (line + "\n").encode()))
    out.append(_message(b"c", b""))
    return out


def _csv(value: str) -> str:
    return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"\n\r') or value == "" else value


def _message(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


async def run_copy(session: Any, query: str, param_oids: list[int | None]) -> tuple[list[ResultColumn] | None, list]:
    """The copied query's columns and rows, through the session (as any query)."""
    statement = await session.prepare(query, param_oids)
    columns = await statement.describe()
    rows, _ = await statement.bind([]).execute(0)
    return columns, rows


class CopyStatement(Statement):
    """A COPY prepared with the extended protocol (libpq's PQprepare: DuckDB's postgres scanner). It
    describes as NoData; executing its portal sends the COPY sub-protocol (`PrimaConnection`)."""

    def __init__(self, session: Any, sql: str, request: tuple[str, str, bool]) -> None:
        self.session, self.sql, self.request, self.param_oids = session, sql, request, []

    async def describe(self) -> list[ResultColumn] | None:
        return None

    def bind(self, params: list[str | None]) -> Portal:
        return CopyPortal(self)


class CopyPortal(Portal):
    def __init__(self, statement: CopyStatement) -> None:
        self.statement = statement

    async def execute(self, max_rows: int) -> tuple[list[tuple], bool]:
        return [], False  # the connection writes a COPY's rows itself (`copy_messages`)
