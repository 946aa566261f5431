"""The PostgreSQL wire protocol for BI tools: `prima serve --pg-port 5433`.

A thin face like the REST API: pg-mimic (pure-Python asyncio, MIT; the same sqlglot as the engine)
speaks the v3 protocol — startup, password auth, simple and extended query, SET/SHOW/transaction
boilerplate — and this module routes each statement: queries on tables to the same engine call as
``POST /v1/query``, drivers' catalog queries to the sealed catalog engine (app/wire/pg_catalog), cursors
to app/wire/cursors; TLS and framing limits are app/wire/transport's. Nothing changes in privacy: analyst SQL
is planned and answered from the cube only, never run against DuckDB.

* Auth: any user name; the password is an analyst token or the admin token, checked by the same
  `app.guard.Guard` (same rate limit); with no analyst tokens configured, the same open posture
  as REST.
* Catalog: each registered table, its dimensions typed `integer` / `text` / `date`, its measures
  `double precision`. Answers carry the requested columns exactly as requested, then one
  `<aggregate>_stddev` per aggregate after all of them (Superset keeps the first n columns
  it asked for, and with each stddev right after its aggregate a second metric showed the first's
  stddev); `SET prima.stddev = off` or the startup option `-c prima.stddev=off` leaves them out.
  `SET prima.clamp = off` / `prima.truncate = on|off` are REST's `"clamp": false` / `"truncate"`.
  Group keys of a date dimension come back as dates (the first day of the month, or of the
  `DATE_TRUNC` unit).
* Errors: SQLSTATE 42501 for raw columns and `SELECT *` (the REST message), 42601 for other SQL
  outside the surface, 42P01 for an unknown table, 57P03 while a cube is building.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import time
from pathlib import Path
from typing import Any

import pg_mimic.connection
import sqlglot
from pg_mimic import BOOL, FLOAT8, INT4, TEXT, PgError, PgServer, ResultColumn, Session, StaticStatement, messages
from pg_mimic import types as pgtypes
from pg_mimic.arrays import format_array_literal
from pg_mimic.auth import AuthPlugin, IdentityProvider
from pg_mimic.middleware import session_functions, set_show, static_select, transaction_control
from pg_mimic.session import CallbackStatement
from sqlglot import exp

from app.guard import Denied, Guard
from app.wire import pg_catalog
from app.wire.copy_out import CopyStatement, copy_request
from app.wire.cursors import Cursors, cursor_statement, split_statements
from app.wire.introspection import (
    FROM_WORD,
    TEXT_ARRAY,
    CatalogStatement,
    catalog_for,
    infer_parameter_types,
    reads_catalog,
    undeclared,
)
from app.wire.text import statement_text
from app.wire.transport import LOOPBACK, PrimaPgServer, tls_context
from engine import deadline
from engine.answers.options import AnswerOptions
from engine.errors import NotFound, PrimaError, QueryError, Unavailable
from engine.plan import GroupKey
from engine.service import Prima
from engine.sql.bind import check_nesting
from engine.sql.constants import NUMERIC
from storage.schema import CategoryDimension, DateDimension

log = logging.getLogger("prima.wire")
# Batches split with their statements' own text (see app/wire/cursors.split_statements).
pg_mimic.connection.split_statements = split_statements

# What clients see as the server's version: the PostgreSQL whose catalogs app/wire/pg_catalog reproduces
# (drivers choose their catalog queries by it).
SERVER_VERSION = pg_catalog.server_version()
VERSION = f"PostgreSQL {SERVER_VERSION} (Prima, differentially private answers) on x86_64-pc-linux-gnu, 64-bit"
# Routers match `statement_text` (no surrounding blanks, no trailing ";"), blanks possessive: linear.
_VERSION = re.compile(r"^select\s++(pg_catalog\.)?version\s*+\(\s*+\)$", re.IGNORECASE)
_ISOLATION = re.compile(r"^show\s++transaction\s++isolation\s++level$", re.IGNORECASE)
_SAVEPOINT = re.compile(r"^(savepoint|release|rollback\s++to)\b", re.IGNORECASE)
_SELECT = re.compile(r"^(select|with)\b", re.IGNORECASE)
_CATALOG_WORDS = re.compile(
    r"pg_catalog|information_schema|\bpg_\w+|current_(?!date\b|timestamp\b|time\b)|version\s*\(|"
    r"set_config",
    re.IGNORECASE,
)  # CURRENT_DATE in a table's query is a constant (#31)
_SESSION_RESET = re.compile(r"^(discard|reset|deallocate|unlisten)\s++(all|prepare\s++)?[\w*\"]*+$", re.IGNORECASE)
# The settings a client reads with SHOW / current_setting(): the same allow-list the catalog answers.
_SETTINGS = pg_catalog.settings(SERVER_VERSION)
_TIME_ZONE = re.compile(
    r"^(SHOW|SET)\s++(?:SESSION\s++|LOCAL\s++)?TIME\s++ZONE(?:\s++TO\s++|\s*+=\s*+|\s++|$)(.*)$",
    re.IGNORECASE | re.DOTALL,
)
_SHOW_ALL = re.compile(r"^SHOW\s++ALL$", re.IGNORECASE)
TOO_DEEP = "the statement is nested too deeply to parse; flatten it"
STDDEV_SETTING = "prima.stddev"
CI95_SETTING = "prima.ci95"
CLAMP_SETTING = "prima.clamp"  # REST's "clamp" (default on)
TRUNCATE_SETTING = "prima.truncate"  # REST's "truncate": on / off (unset: the table's answers.truncate)
FLAGS_SETTING = "prima.flags"  # `<aggregate>_noisy` columns (REST's "noisy" field), off by default
# REST's "outside_groups" / "noisy": a word each (unset: the table's `answers` defaults)
CHOICES = {"prima.outside_groups": ("measured", "all"), "prima.noisy": ("flag", "null")}
_OFF = ("off", "false", "0", "no")
_ON = ("on", "true", "1", "yes")
MAX_NOTICES = 32  # notes per answer sent as notices (an answer has a handful)
LONG_STATEMENT = 1_000  # characters: pg-mimic's middleware parses longer statements off the event loop
_DOTTED_SET = re.compile(
    r"^SET\s++(?:SESSION\s++|LOCAL\s++)?(\w++\.\w++)(?:\s++TO\b|\s*+=)\s*+(.+)$", re.IGNORECASE | re.DOTALL
)
_DOTTED_SHOW = re.compile(r"^SHOW\s++(\w++\.\w++)$", re.IGNORECASE)
_LEADING_COMMENTS = re.compile(r"^(\s*(--[^\n]*(\n|$)|/\*.*?\*/))+", re.DOTALL)
# `IN ($1,$2)`: sqlglot's tokenizer reads `$1,$` as the start of a dollar-quoted string;
# a blank after each such parameter (never inside a quoted string) tokenizes as PostgreSQL does.
_PARAMETER_COMMA = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\$\d+),")
_CATALOG_FUNCTION = re.compile(r"\bpg_catalog\.(\w+)\s*\(", re.IGNORECASE)

# What a refusal of raw data says over REST, and the SQLSTATE it gets here (insufficient_privilege).


def peer_address(stream: Any) -> str:
    """The client's address (rate limits and failed logins are counted per address, as REST's)."""
    peer = stream.writer.get_extra_info("peername")
    return f"wire:{peer[0]}" if isinstance(peer, tuple) and peer else "wire:unknown"


class TokenPassword(AuthPlugin):
    """The password is a Prima token: an analyst token or the admin token (`Guard.analyst`)."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    async def authenticate(self, stream: Any, username: str, identity_provider: IdentityProvider) -> bool:
        stream.write(messages.make_authentication_cleartext_password())
        await stream.drain()
        tag, payload = await stream.read_login_message()  # ≤ 10 kB, within the startup deadline
        if tag != messages.PASSWORD:
            await stream._refuse("28P01", "expected a password: send a Prima analyst token as the password")  # noqa: SLF001
        token = payload.rstrip(b"\x00").decode("utf-8", "replace")
        try:
            self.guard.analyst(f"Bearer {token}" if token else None, peer_address(stream))
        except Denied as denied:  # pg-mimic answers 28P01 "password authentication failed"
            log.info("wire login refused: %s", denied.detail)
            if denied.status == 429:  # failed logins from this address are throttled (app/guard.py)
                await stream._refuse("53300", denied.detail)  # noqa: SLF001 — FATAL, then closed
            return False
        stream.authenticated()  # messages up to 16 MB from here, no login deadline
        stream.prima_token = token or None  # the session counts each statement against it (rate limit)
        return True


def _column_type(spec: Any, name: str) -> int:
    dim = spec.dimension(name)
    if dim is None:
        return FLOAT8
    if isinstance(dim, CategoryDimension):
        return TEXT
    if isinstance(dim, DateDimension):
        return pgtypes.DATE  # the first day of the cell (or of the DATE_TRUNC unit)
    return INT4


class PrimaSession(Session):
    """One wire connection: plans and answers through the same service as REST."""

    # pg-mimic's boilerplate answers (transactions, SET/SHOW, session functions) and table-less constant
    # SELECTs (`SELECT 1`, a pool's ping); catalog queries go to app/wire/pg_catalog instead of its emulation.
    middleware = (transaction_control, set_show, session_functions, static_select)

    def __init__(
        self, prima: Prima, metrics: Any = None, guard: Guard | None = None, timeout: float | None = None
    ) -> None:
        """``timeout``: a statement's engine work stops after it (PRIMA_REQUEST_TIMEOUT, as REST's)."""
        self.prima, self.metrics, self.guard, self.timeout = prima, metrics, guard, timeout
        self.cursors = Cursors()
        self.token: str | None = None
        self.client = "wire:unknown"

    async def init(self, connection: Any) -> None:
        """Settings drivers read with SHOW / current_setting(), as the emulated server has them, and
        those the client's startup packet sets (`options=-c name=value`, as libpq, psycopg, pgjdbc,
        Npgsql and node-postgres send them)."""
        await super().init(connection)
        self.token = getattr(connection.stream, "prima_token", None)
        self.client = peer_address(connection.stream)
        for name, value in _SETTINGS.items():
            connection.session_vars.setdefault(name, value)
        connection.session_vars.update(startup_settings(connection.startup_params))

    def count_request(self) -> None:
        """The REST rate limit (PRIMA_RATE_LIMIT), per statement answered from the engine or catalog."""
        if self.guard is not None:
            try:
                self.guard.throttle(self.token, self.client)
            except Denied as denied:
                raise PgError("53400", denied.detail) from None

    async def prepare(self, sql: str, param_oids: list[int | None]) -> Any:
        """Route a statement (`_route`), refusing SQL nested too deeply for any parser on the way
        (RecursionError was XX000 and a traceback per statement)."""
        try:
            check_nesting(sql)
            return await self._route(sql, param_oids)
        except QueryError as exc:
            raise PgError(exc.sqlstate, exc.detail) from None
        except RecursionError:
            raise PgError("42601", TOO_DEEP) from None

    async def _route(self, sql: str, param_oids: list[int | None]) -> Any:
        """Boilerplate answered here, cursors, driver catalog queries to the catalog engine, queries
        on tables to the engine (as REST), the rest to pg-mimic's middleware."""
        sql = _LEADING_COMMENTS.sub("", sql)  # Npgsql's batches start statements with comments
        sql = statement_text(
            _PARAMETER_COMMA.sub(lambda m: m.group(0) if m.group(1) is None else m.group(1) + " ,", sql)
        )
        zone = _TIME_ZONE.match(sql)
        if zone:  # psql and pgcli: SHOW TIME ZONE / SET TIME ZONE 'UTC' (two words, which pg-mimic does not take)
            if zone.group(1).upper() == "SHOW":
                return StaticStatement(
                    "SHOW", [ResultColumn("TimeZone", TEXT)], [(self._connection.session_vars.get("timezone", "UTC"),)]
                )
            return self._set_statement("timezone", zone.group(2) or "UTC")
        if _SHOW_ALL.match(sql):
            rows = sorted((k, v, "") for k, v in self._connection.session_vars.items())
            return StaticStatement("SHOW", [ResultColumn(c, TEXT) for c in ("name", "setting", "description")], rows)
        setting = _DOTTED_SET.match(sql)
        if setting:  # `SET prima.stddev = off`: pg-mimic's SET takes plain names only
            return self._set_statement(setting.group(1).lower(), setting.group(2))
        shown = _DOTTED_SHOW.match(sql)
        if shown:
            value = self._connection.session_vars.get(shown.group(1).lower(), "")
            return StaticStatement("SHOW", [ResultColumn(shown.group(1).lower(), TEXT)], [(value,)])
        if _VERSION.match(sql):  # drivers parse it as "PostgreSQL <major>.<minor> …"
            return StaticStatement("SELECT", [ResultColumn("version", TEXT)], [(VERSION,)])
        if _ISOLATION.match(sql):  # SQLAlchemy's second statement; answers are read-only snapshots
            return StaticStatement("SHOW", [ResultColumn("transaction_isolation", TEXT)], [("read committed",)])
        reset = _SESSION_RESET.match(sql)
        if reset:  # connection pools reset sessions between borrowers: cursors and prepared statements go
            self._release(reset.group(1).lower(), sql.split()[-1])
            return StaticStatement(" ".join(reset.group(0).split()).upper(), None, [])
        copy = copy_request(sql)
        if copy is not None:  # COPY (SELECT …) TO STDOUT prepared with the extended protocol (DuckDB's scanner)
            return CopyStatement(self, sql, copy)
        cursor = cursor_statement(self, self.cursors, sql, param_oids)
        if cursor is not None:  # psqlODBC's DECLARE … CURSOR / FETCH / CLOSE
            return cursor
        savepoint = _SAVEPOINT.match(sql)
        if savepoint:  # psycopg nests transactions with savepoints; nothing here is transactional
            return StaticStatement(savepoint.group(1).split()[0].upper(), None, [])
        catalog_words = _SELECT.match(sql) and _CATALOG_WORDS.search(sql)
        if FROM_WORD.search(sql) and catalog_words and reads_catalog(sql):
            return CatalogStatement(self, sql, param_oids)  # driver introspection: the catalog engine
        if not FROM_WORD.search(sql) and _SELECT.match(sql) and "$" not in sql:
            # a constant SELECT (`SELECT 1`, current_schemas(), 'a' LIKE …): the catalog engine types it as
            # PostgreSQL does (int4, name[]); the session's own values (current_user) are put in first
            return CatalogStatement(self, sql, param_oids)
        if not FROM_WORD.search(sql):
            sql = _CATALOG_FUNCTION.sub(r"\1(", sql)
        elif _SELECT.match(sql) and not catalog_words:  # a query on a table: no middleware parse
            return CallbackStatement(self, sql, await self._parameter_types(sql, param_oids))
        statement = await self._middleware(sql, param_oids)
        if isinstance(statement, CallbackStatement) and (
            catalog_words or (_SELECT.match(sql) and not FROM_WORD.search(sql))
        ):
            # e.g. SELECT format_type(23, -1), 'people'::regclass; or a constant SELECT without FROM
            # (`SELECT 'a' NOT LIKE 'b' ESCAPE '\'`, `SELECT 'int4'::regtype`): no table, nothing to protect
            return CatalogStatement(self, sql, param_oids)
        return statement

    async def _middleware(self, sql: str, param_oids: list[int | None]) -> Any:
        """pg-mimic's middleware (SET, SHOW, BEGIN, constant SELECTs). It parses with sqlglot, in pure
        Python: `SELECT version()` followed by 1,666 `$1,` held the event loop (and every other
        connection, /healthz included) 0.5 s. A long statement is parsed on a worker thread with a
        loop of its own (the middleware awaits nothing of this loop), so the GIL switches back."""
        prepare = super().prepare(sql, param_oids)
        if len(sql) <= LONG_STATEMENT:
            return await prepare
        return await asyncio.to_thread(asyncio.run, prepare)

    def _release(self, verb: str, target: str) -> None:
        """DISCARD ALL: the cursors and prepared statements; DEALLOCATE [PREPARE] name | ALL: those."""
        statements = getattr(self._connection, "statements", {})
        if verb == "discard":
            self.cursors.open.clear()
            statements.clear()
        elif verb == "deallocate":
            name = target[1:-1].replace('""', '"') if target.startswith('"') else target.lower()
            if target.lower() == "all":
                statements.clear()
            else:
                statements.pop(name, None)
                statements.pop(target, None)  # drivers name statements in any case and unquoted

    def _set_statement(self, name: str, raw: str) -> StaticStatement:
        """A SET pg-mimic's middleware does not take (a dotted custom setting, TIME ZONE), applied when
        it executes, as PostgreSQL does."""
        value = raw.strip().strip("'\"")
        session_vars = self._connection.session_vars
        allowed = CHOICES.get(name)
        if allowed is not None and value.lower() not in (*allowed, "default"):
            raise PgError("22023", f'invalid value for parameter "{name}": "{value}" (one of {", ".join(allowed)})')

        def apply() -> None:
            if value.upper() == "DEFAULT":
                session_vars.pop(name, None)
            else:
                session_vars[name] = value

        return StaticStatement("SET", None, [], apply)

    async def _parameter_types(self, sql: str, declared: list[int | None]) -> list[int | None]:
        """Undeclared $n types from the table's declared columns (`wire_catalog.infer_parameter_types`);
        unknown (0) when the statement does not plan — it fails on its own later."""
        if not undeclared(sql, declared):  # the usual case (psycopg, pgjdbc, no parameters): no planning
            return declared
        try:
            plan = await asyncio.to_thread(self.prima.plan, _without_where(sql))
            spec = await asyncio.to_thread(self.prima.spec, plan.table)
            tree = sqlglot.parse_one(sql, read="postgres")
        except (PrimaError, sqlglot.errors.SqlglotError):
            return infer_parameter_types(sql, declared, None, lambda _: TEXT, default=None)
        return infer_parameter_types(sql, declared, tree, lambda column: _column_type(spec, column))

    async def catalog(self) -> pg_catalog.Catalog:
        """The catalog engine for the tables registered now (rebuilt when they change)."""
        database = getattr(self._connection, "database", None) or "prima"
        return await asyncio.to_thread(catalog_for, self.prima, database, SERVER_VERSION)

    async def describe(self, sql: str, param_oids: list[int | None]) -> list[ResultColumn] | None:
        """The result's columns from the plan alone (the WHERE clause, with its parameters, does
        not change them: a statement with $n parameters is planned without it)."""
        text = _without_where(sql) if param_oids or "$" in sql else sql  # plans are cached by text
        try:  # off the event loop: planning may read the catalog
            plan = await asyncio.to_thread(self.prima.plan, text)
        except PrimaError as exc:
            raise _pg_error(exc) from None
        spec = await asyncio.to_thread(self.prima.spec, plan.table)
        cased = {a: unit[1] for a, unit in plan.coarse if isinstance(unit, tuple)}  # a CASE's labels: its own type
        cols = [
            ResultColumn(
                out.name,
                _case_type(cased[out.axis])
                if out.axis in cased
                else _column_type(spec, spec.dimensions[out.axis].name),
            )
            if isinstance(out, GroupKey)
            else ResultColumn(out.name, FLOAT8)
            for out in plan.outputs
        ]
        aggregates = [out.name for out in plan.outputs if not isinstance(out, GroupKey)]
        if self.stddev_columns:  # after every requested column: clients that keep the first n stay right
            cols += [ResultColumn(f"{name}_stddev", FLOAT8) for name in aggregates]
        if self.ci95_columns:
            cols += [ResultColumn(f"{name}_ci95_{end}", FLOAT8) for name in aggregates for end in ("lo", "hi")]
        if self._switch(FLAGS_SETTING):
            cols += [ResultColumn(f"{name}_noisy", BOOL) for name in aggregates]
        return cols

    async def query(self, sql: str, params: list[str | None]) -> list[tuple]:
        self.count_request()
        try:
            text = _bind(sql, params) if params else sql
        except RecursionError:
            raise PgError("42601", TOO_DEEP) from None
        start = time.perf_counter()
        try:  # a repeated query is answered from memory on the loop, like REST's fast path
            options = self.options
            result = (self.prima.cached_query(text) if options.default else None) or await asyncio.to_thread(
                deadline.call, self.timeout, self.prima.query, text, options
            )
        except PrimaError as exc:
            self._observe(exc.status, start)
            log.info("wire query refused (%d)", exc.status)  # never the detail: it can quote the SQL's literals
            raise _pg_error(exc) from None
        self._observe(200, start)
        keys = set(result.get("group_columns", []))
        dates = self._date_keys(text) if keys else set()
        aggregates = [i for i, c in enumerate(result["columns"]) if c not in keys]
        with_stddev, with_ci95, with_flags = self.stddev_columns, self.ci95_columns, self._switch(FLAGS_SETTING)
        rows = []
        for values, sds, cis, flags in zip(result["rows"], result["stddev"], result["ci95"], result["noisy"]):
            row = [_label_date(v) if i in dates else v for i, v in enumerate(values)]
            if with_stddev:
                row += [sds[i] for i in aggregates]
            if with_ci95:
                row += [None if cis[i] is None else cis[i][end] for i in aggregates for end in (0, 1)]
            if with_flags:
                row += [flags[i] for i in aggregates]
            rows.append(tuple(row))
        self._notify(result.get("notes", []))
        return rows

    def _notify(self, notes: list[str]) -> None:
        """An answer's notes as NoticeResponse messages (over the wire they were lost),
        sent before its rows; psql prints them, psycopg, pgjdbc and Npgsql hand them to the
        application (`conn.notices`, `getWarnings()`, `Notice` events)."""
        stream = getattr(self._connection, "stream", None)
        for note in notes[:MAX_NOTICES]:
            stream.write(messages.make_notice_response({"S": "NOTICE", "V": "NOTICE", "C": "01000", "M": note}))

    @property
    def ci95_columns(self) -> bool:
        """Whether answers carry `<aggregate>_ci95_lo` / `_ci95_hi` columns (after the stddevs): off
        unless the connection said `SET prima.ci95 = on` or `options=-c prima.ci95=on`.
        The interval is REST's ``ci95``: clamped, truncated and one-cell answers have their own."""
        return self._switch(CI95_SETTING)

    def _word(self, name: str) -> str:
        """A setting as this connection set it (`SET <name> = …`, `-c <name>=…`), lower case; "" if unset."""
        return ((getattr(self._connection, "session_vars", None) or {}).get(name) or "").strip().lower()

    def _switch(self, name: str) -> bool:
        """A connection's off-by-default switch: on when it said `SET <name> = on` (or `-c <name>=on`)."""
        return self._word(name) in _ON

    @property
    def options(self) -> AnswerOptions:
        """REST's answer options from this connection's settings (`SET prima.clamp = off`, …)."""

        def chosen(name: str) -> Any:  # a word of CHOICES[name], or None (the table's default)
            value = self._word(name).strip("'\"")
            return value if value in CHOICES[name] else None

        return AnswerOptions(
            clamp=self._setting(CLAMP_SETTING),
            truncate=self._tristate(TRUNCATE_SETTING),
            outside_groups=chosen("prima.outside_groups"),
            noisy=chosen("prima.noisy"),
        )

    @property
    def stddev_columns(self) -> bool:
        """Whether answers carry `<aggregate>_stddev` columns (after the requested ones): on unless the
        connection said `SET prima.stddev = off` or `options=-c prima.stddev=off`."""
        return self._setting(STDDEV_SETTING)

    def _tristate(self, name: str) -> bool | None:
        """A switch whose default is the table's: True / False when the connection set it, else None."""
        value = self._word(name)
        return True if value in _ON else False if value in _OFF else None

    def _setting(self, name: str) -> bool:
        """A connection's on-by-default switch: off when it said `SET <name> = off` (or
        `options=-c <name>=off`). `prima.clamp` is REST's "clamp"."""
        return self._word(name) not in _OFF

    def _date_keys(self, sql: str) -> set[int]:
        """Output positions of date group keys (the plan is cached by the query just answered)."""
        plan = self.prima.plan(sql)
        spec = self.prima.spec(plan.table)
        cased = {a for a, unit in plan.coarse if isinstance(unit, tuple)}  # a CASE's labels are its own values
        return {
            i
            for i, out in enumerate(plan.outputs)
            if isinstance(out, GroupKey)
            and out.axis not in cased
            and isinstance(spec.dimensions[out.axis], DateDimension)
        }

    def _observe(self, status: int, start: float) -> None:
        """Counted like REST queries: `prima_queries_total{endpoint="wire"}` and its latency."""
        if self.metrics is not None:
            self.metrics.observe("wire", status, time.perf_counter() - start)


def startup_settings(params: dict[str, str]) -> dict[str, str]:
    """Prima's settings a startup packet sets: as parameters of their own (asyncpg's
    ``server_settings``; PostgreSQL takes any startup parameter as a setting), then `options`."""
    own = {name.lower(): value for name, value in params.items() if name.lower().startswith("prima.")}
    return own | startup_options(params.get("options", ""))


def startup_options(options: str) -> dict[str, str]:
    r"""Settings from a startup packet's `options` (`-c name=value`, `--name=value`; `\ ` escapes a
    space inside a value, as PostgreSQL reads them)."""
    words = re.split(r"(?<!\\)\s+", options.strip())
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        pair = words[i + 1] if word == "-c" and i + 1 < len(words) else word[2:] if word.startswith("--") else None
        if pair and "=" in pair:
            name, value = pair.split("=", 1)
            out[name.strip().lower()] = value.replace("\\ ", " ")
    return out


def _case_type(buckets: tuple) -> int:
    """The wire type of a CASE group key: text, unless every label is a number."""
    labels = [label for label, _ in buckets if label is not None]
    if labels and all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        return pgtypes.INT8
    return FLOAT8 if labels and all(isinstance(v, (int, float)) for v in labels) else TEXT


def _label_date(label: str | None) -> dt.date | None:
    """A date cell's label ('2020', '2020-03', '2020-03-15') as the first day it stands for."""
    if label is None:
        return None
    parts = [int(p) for p in label.split("-")]
    return dt.date(parts[0], parts[1] if len(parts) > 1 else 1, parts[2] if len(parts) > 2 else 1)


def _pg_error(exc: PrimaError) -> PgError:
    message = str(getattr(exc, "detail", exc))
    if isinstance(exc, NotFound):
        return PgError("42P01", message)
    if isinstance(exc, Unavailable):
        return PgError("57P03", message)
    if isinstance(exc, QueryError):  # 42601, or the class the engine named (0A000, 25006, 42501)
        return PgError(exc.sqlstate, message)
    return PgError("XX000" if exc.status >= 500 else "55000", message)


def _without_where(sql: str) -> str:
    """The statement without the clauses parameters live in and that never change its columns:
    every WHERE and HAVING (a subquery's too: SQLAlchemy wraps), and a LIMIT/OFFSET given as $n;
    a DATE_TRUNC unit given as $n reads as 'year' (the columns do not depend on it)."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except sqlglot.errors.SqlglotError:
        return sql
    if not isinstance(tree, exp.Select):
        return sql
    clauses = [n for n in tree.find_all(exp.Where, exp.Having)]
    clauses += [n for n in tree.find_all(exp.Limit, exp.Offset) if n.find(exp.Parameter, exp.Placeholder)]
    units = [
        n
        for n in tree.find_all(exp.Parameter, exp.Placeholder)
        if isinstance(n.parent, (exp.TimestampTrunc, exp.DateTrunc))
        or (isinstance(n.parent, exp.Cast) and isinstance(n.parent.parent, (exp.TimestampTrunc, exp.DateTrunc)))
    ]
    if not clauses and not units:
        return sql
    for node in clauses:
        node.pop()
    for node in units:  # `date_trunc($1, hired)`: any allowed unit gives the same columns; a year always is one
        node.replace(exp.Literal.string("year"))
    return tree.sql(dialect="postgres")  # the client's dialect: the engine reads PostgreSQL's text as written


# What a statement's text holds besides parameters: quoted strings and identifiers, comments,
# dollar-quoted strings; a `$n` outside them is a parameter. (sqlglot's tokenizer reads `IN ($1,$2)`'s
# `$1,$` as the start of a dollar-quoted string, so the scan is this one pattern.)
_PARAMETERS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/|\$([A-Za-z_]\w*)?\$.*?\$\1\$|\$(\d+)", re.S
)


def _bind(sql: str, params: list) -> str:
    """$n parameters (sent as text by the extended protocol) written into the client's own text as
    literals — numbers stay numbers, anything else a quoted string, NULL stays NULL — and nothing
    else touched: the engine reads what the client wrote, as with the simple protocol (re-writing
    the parsed statement in another dialect once turned `PERCENTILE_CONT … WITHIN GROUP` and
    `TO_DATE` into forms the planner refused)."""

    def literal(match: re.Match[str]) -> str:
        if match.group(2) is None:
            return match.group(0)
        index = int(match.group(2)) - 1
        if not 0 <= index < len(params):
            raise PgError("08P01", f"parameter ${index + 1} has no value")
        value = params[index]
        if value is None:
            return "NULL"
        if isinstance(value, list):  # an array parameter, decoded to its elements' text: PostgreSQL's `{…}`
            value = format_array_literal(TEXT_ARRAY, value)
        if NUMERIC.fullmatch(value.strip()):
            return f"({value.strip()})" if value.strip().startswith("-") else value.strip()
        return "'" + value.replace("'", "''") + "'"

    return _PARAMETERS.sub(literal, sql)


async def start(
    prima: Prima,
    guard: Guard,
    host: str,
    port: int,
    metrics: Any = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    auth_timeout: float = 60.0,
    reuse_port: bool = False,
    timeout: float | None = None,
) -> PgServer:
    """Start the listener on the running loop (the app's lifespan calls this). With a certificate
    it speaks TLS, and off loopback it accepts nothing else. ``reuse_port``: every serving worker
    listens on the port (`app.workers`)."""
    tls = tls_context(tls_cert, tls_key) if tls_cert and tls_key else None
    server = PrimaPgServer(
        lambda: PrimaSession(prima, metrics, guard, timeout),
        auth_plugin_factory=lambda username: TokenPassword(guard),
        server_version=SERVER_VERSION,
        tls=tls,
        require_tls=host not in LOOPBACK,
        auth_timeout=auth_timeout,
    )
    await server.start_server(host, port, reuse_port=reuse_port or None)
    log.info("PostgreSQL wire listener on %s:%d%s", host, port, " (TLS)" if tls else "")
    return server


def check_bind(host: str, tls: bool = False) -> None:
    """Off loopback the listener needs TLS (passwords are tokens): refuse to bind there without it."""
    if host not in LOOPBACK and not tls:
        raise ValueError(
            f"--pg-host {host}: off loopback the PostgreSQL listener requires TLS; give "
            "--pg-tls-cert and --pg-tls-key (PEM files), or keep it on 127.0.0.1"
        )
