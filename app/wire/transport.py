"""The wire listener's transport: TLS and the framing limits PostgreSQL itself enforces.

pg-mimic declines TLS and reads whatever length a client announces. This server class keeps its
protocol handling and changes two things at the edge:

* **TLS** (`--pg-tls-cert` / `--pg-tls-key`): an SSLRequest is answered `S` and the connection is
  upgraded in place (`StreamWriter.start_tls`), as PostgreSQL does. Off loopback, TLS is required:
  a client that does not ask for it gets SQLSTATE 28000 and is closed (PostgreSQL's `hostssl`).
* **Limits**: a startup packet over 10,000 bytes is refused (PostgreSQL's MAX_STARTUP_PACKET_LENGTH);
  until the password is accepted every message is held to the same 10,000 bytes, and after it a
  message over 16 MB (far beyond any SQL the engine accepts) closes the connection before it is
  buffered; a client has 60 s to finish its startup *and* authentication (PostgreSQL's
  authentication_timeout); at most `MAX_CONNECTIONS` connections are open, `MAX_PER_ADDRESS` from
  one address (SQLSTATE 53300, as PostgreSQL's max_connections). 20 unauthenticated
  connections each announcing a 16 MB password pinned 295 MB, and stayed open past 75 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import ssl
import struct
from pathlib import Path
from typing import Any

from pg_mimic import PgError, PgServer, messages
from pg_mimic.connection import Connection, PortalEntry
from pg_mimic.stream import ConnectionClosed, PgStream
from pg_mimic.types import unpack_int32

from app.wire.copy_out import CopyPortal, copy_messages, copy_request, run_copy
from app.wire.cursors import cursor_portal

log = logging.getLogger("prima.wire")

MAX_STARTUP_BYTES = 10_000
MAX_PREAUTH_BYTES = 10_000  # a password message (a token) is far shorter
MAX_MESSAGE_BYTES = 16 * 2**20
STARTUP_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 256
MAX_PER_ADDRESS = 64
MAX_PREPARED = 1_000  # named prepared statements one connection keeps
MAX_PREPARED_CHARS = 16 * 2**20  # and their SQL text in all
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class LimitedStream(PgStream):
    """PgStream that refuses oversized frames before reading their bodies: `MAX_PREAUTH_BYTES` until
    `authenticated` says otherwise, then `MAX_MESSAGE_BYTES`; `deadline` (loop time) bounds the login."""

    limit = MAX_PREAUTH_BYTES
    deadline = float("inf")

    def authenticated(self) -> None:
        self.limit = MAX_MESSAGE_BYTES
        self.deadline = float("inf")

    async def read_login_message(self) -> tuple[bytes, bytes]:
        """The next message of the login exchange, within what is left of the startup deadline."""
        left = self.deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(self.read_message(), max(left, 0.0))
        except TimeoutError:
            await self._refuse("08P01", "the startup and authentication took too long (PRIMA_PG_AUTH_TIMEOUT)")
            raise  # pragma: no cover - _refuse raises

    async def read_startup_packet(self) -> tuple[int, bytes]:
        header = await self._read_exactly(8)
        length, code = unpack_int32(header, 0), unpack_int32(header, 4)
        if not 8 <= length <= MAX_STARTUP_BYTES:
            await self._refuse("08P01", f"invalid length of startup packet ({length})")
        return code, (await self._read_exactly(length - 8) if length > 8 else b"")

    async def read_message(self) -> tuple[bytes, bytes]:
        header = await self._read_exactly(5)
        length = unpack_int32(header, 1)
        if not 4 <= length <= self.limit:
            await self._refuse(
                "54000",
                f"message of {length:,} bytes refused (at most {self.limit:,}"
                + (" before authentication)" if self.limit < MAX_MESSAGE_BYTES else ")"),
            )
        return header[0:1], (await self._read_exactly(length - 4) if length > 4 else b"")

    async def _refuse(self, code: str, message: str) -> None:
        log.info("wire connection refused: %s", message)
        self.write(messages.make_error_response({"S": "FATAL", "V": "FATAL", "C": code, "M": message}))
        try:
            await self.drain()
        except (ConnectionError, OSError):
            pass
        raise ConnectionClosed(message)


# The messages whose payload pg-mimic parses, and its parser for each.
_PARSERS = {
    messages.QUERY: messages.parse_query,
    messages.PARSE: messages.parse_parse,
    messages.BIND: messages.parse_bind,
    messages.DESCRIBE: messages.parse_describe,
    messages.EXECUTE: messages.parse_execute,
    messages.CLOSE: messages.parse_close,
}


class PrimaConnection(Connection):
    """pg-mimic's connection, with a malformed message answered as the protocol violation it is
    (SQLSTATE 08P01, as PostgreSQL does) instead of pg-mimic's XX000 carrying the parser's own text:
    each message is parsed once here first (the fuzzing over the wire)."""

    async def _dispatch(self, tag: bytes, payload: bytes) -> None:
        parse = _PARSERS.get(tag)
        if parse is not None and not self._ignore_until_sync:
            try:
                parse(payload)
            except Exception:  # noqa: BLE001 — any parser failure means the bytes are not that message
                self.stream.write(
                    messages.make_error_response(
                        {"S": "ERROR", "V": "ERROR", "C": "08P01", "M": f"malformed {tag.decode('latin-1')!r} message"}
                    )
                )
                if self.tx_status != b"I":
                    self.tx_status = b"E"
                self._ignore_until_sync = True
                return
        await super()._dispatch(tag, payload)

    async def _handle_parse(self, parsed: Any) -> None:
        """pg-mimic's, with the connection's prepared statements capped in count and text (each holds
        its SQL until DEALLOCATE or the connection's end; without a cap 200 of 1 MB held 212 MB)."""
        kept = [s for name, s in self.statements.items() if name != parsed.statement_name]
        if parsed.statement_name and (
            len(kept) >= MAX_PREPARED
            or sum(len(getattr(s, "sql", "") or "") for s in kept) + len(parsed.sql) > MAX_PREPARED_CHARS
        ):
            raise PgError(
                "53400",
                f"a connection keeps at most {MAX_PREPARED:,} prepared statements of "
                f"{MAX_PREPARED_CHARS:,} characters in all: DEALLOCATE some",
            )
        await super()._handle_parse(parsed)

    async def _execute_one_simple_statement(self, sql: str) -> None:
        """pg-mimic's, with `COPY (SELECT …) TO STDOUT` answered through the COPY sub-protocol."""
        request = copy_request(sql) if self.tx_status != b"E" else None
        if request is None:
            await super()._execute_one_simple_statement(sql)
            return
        await self._copy_out(request)

    async def _handle_execute(self, parsed: Any) -> None:
        """pg-mimic's, with a prepared COPY's portal answered through the COPY sub-protocol."""
        entry = self._get_portal(parsed.portal_name)
        if not isinstance(entry.portal, CopyPortal):
            await super()._handle_execute(parsed)
            return
        await self._copy_out(entry.portal.statement.request)

    async def _copy_out(self, request: tuple[str, str, bool]) -> None:
        """Run a COPY's query through the session and send its rows: CopyOut…, then `COPY n`."""
        query, fmt, header = request
        columns, rows = await run_copy(self.session, query, [])
        for message in copy_messages(columns, rows, fmt, header):
            self.stream.write(message)
        self.stream.write(messages.make_command_complete(f"COPY {len(rows)}"))

    def _get_portal(self, name: str) -> PortalEntry:
        """pg-mimic's portals, and the cursors a DECLARE opened under the same names (PostgreSQL's
        cursors are portals: psycopg describes its named cursor's portal before it FETCHes)."""
        try:
            return super()._get_portal(name)
        except PgError:
            cursors = getattr(self.session, "cursors", None)
            found = cursor_portal(cursors, name) if cursors is not None else None
            if found is None:
                raise
            portal, columns = found
            return PortalEntry(portal, columns, "FETCH")


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for the listener (TLS 1.2+), from PEM files."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


class PrimaPgServer(PgServer):
    """pg-mimic's server with TLS and framing limits (the protocol handling is pg-mimic's)."""

    def __init__(
        self,
        *args: Any,
        tls: ssl.SSLContext | None = None,
        require_tls: bool = False,
        auth_timeout: float = STARTUP_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.tls, self.require_tls, self.auth_timeout = tls, require_tls, auth_timeout
        self.open_by_address: dict[str, int] = {}

    async def _handle_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer else "unknown"
        stream = LimitedStream(reader, writer)
        stream.deadline = asyncio.get_running_loop().time() + self.auth_timeout
        if (
            sum(self.open_by_address.values()) >= MAX_CONNECTIONS
            or self.open_by_address.get(address, 0) >= MAX_PER_ADDRESS
        ):
            log.warning(
                "wire connection refused: too many connections (from %s: %d open)",
                address,
                self.open_by_address.get(address, 0),
            )
            with contextlib.suppress(ConnectionClosed):
                await stream._refuse(
                    "53300",
                    f"too many connections (at most {MAX_CONNECTIONS}, {MAX_PER_ADDRESS} "  # noqa: SLF001
                    "from one address): close idle ones or use a connection pool",
                )
            with contextlib.suppress(Exception):
                await stream.close()
            return
        self.open_by_address[address] = self.open_by_address.get(address, 0) + 1
        try:
            await self._serve(stream)
        finally:
            self.open_by_address[address] -= 1
            if not self.open_by_address[address]:
                del self.open_by_address[address]

    async def _serve(self, stream: LimitedStream) -> None:
        try:
            startup_params = await asyncio.wait_for(self._negotiate_startup(stream), self.auth_timeout)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError):  # a malformed startup packet
            with contextlib.suppress(Exception):
                await stream._refuse("08P01", "malformed startup packet")  # noqa: SLF001
            return
        except (TimeoutError, ConnectionClosed, ssl.SSLError, ConnectionError, OSError):
            with contextlib.suppress(Exception):
                await stream.close()
            return
        if startup_params is None:
            return
        session = self.session_factory()
        if inspect.isawaitable(session):
            session = await session
        pid = self._allocate_pid()
        secret = struct.unpack("!i", os.urandom(4))[0]
        connection = PrimaConnection(stream, session, self, pid, secret, startup_params)
        self._connections[pid] = connection
        try:
            await connection.run()
        finally:
            self._connections.pop(pid, None)

    async def _negotiate_startup(self, stream: PgStream) -> dict[str, str] | None:
        code, payload = await stream.read_startup_packet()
        encrypted = False
        if code == messages.SSL_REQUEST_CODE and self.tls is not None:
            stream.write(b"S")
            await stream.drain()
            await stream.writer.start_tls(self.tls)  # the reader reads through the TLS layer from here
            encrypted = True
            code, payload = await stream.read_startup_packet()
        elif code in (messages.SSL_REQUEST_CODE, messages.GSSENC_REQUEST_CODE):
            stream.write(b"N")
            await stream.drain()
            code, payload = await stream.read_startup_packet()
        if code == messages.CANCEL_REQUEST_CODE:
            pid, secret = messages.parse_cancel_request(payload)
            self.cancel(pid, secret)
            await stream.close()
            return None
        if self.require_tls and not encrypted:
            await stream._refuse("28000", "this listener requires TLS: connect with sslmode=require")  # noqa: SLF001
        return messages.parse_startup_message(payload)
