"""Serving on every core: ``prima serve --workers N``.

One data directory, N processes, one writer:

* **worker 0, the writer**, opens ``store.duckdb`` (DuckDB allows one writing process per file): it
  registers, builds, charges the ledger and publishes a catalog snapshot after each change
  (`storage.snapshot`). It also listens on a Unix socket in the data dir for the other workers.
* **workers 1…N−1, readers**, open the snapshot read-only and memory-map the same immutable cube
  files, so answers need no other process and memory does not grow N× with the cubes. Every
  ``/v1/admin/*`` request is forwarded to the writer unchanged (its token checked there), and a
  build a query starts (``"build": "on_first_query"``) is the writer's too: one build and one ledger
  charge whichever worker was asked, serialised by the writer's per-table lock.

Every worker binds the public HTTP port (and the PostgreSQL port) with ``SO_REUSEPORT``, so the
kernel spreads connections over them. The supervisor (this module's `supervise`, the process the
command starts) restarts a worker that dies; a writer killed mid-build leaves its charge recorded
and the build marked failed at restart (`storage.ledger.fail_unfinished`), never charged twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.auth import FORWARDED_FOR
from engine.errors import Conflict, Invalid, NotFound, PrimaError, QueryError, TooLarge, Unavailable

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("prima.workers")

ROLE_ENV, INDEX_ENV = "PRIMA_WORKER_ROLE", "PRIMA_WORKER_INDEX"
TOKEN_ENV, SOCKET_ENV = "PRIMA_INTERNAL_TOKEN", "PRIMA_WRITER_SOCKET"
INTERNAL_HEADER = "x-prima-internal"
RESTART_DELAY = 0.5  # seconds before a dead worker is started again
QUICK_EXITS, QUICK_EXIT_SECONDS = 5, 10.0  # this many failed starts in a row: give up
_ERRORS: dict[int, type[PrimaError]] = {
    400: QueryError,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    422: Invalid,
    503: Unavailable,
}


def writer_socket(data_dir: Path) -> Path:
    """The writer's Unix socket: in the data dir, or (a path too long for AF_UNIX) in the temp dir
    under a name derived from the data dir."""
    path = Path(data_dir).resolve() / "writer.sock"
    if len(str(path)) < 100:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"prima-{digest}.sock"


def role() -> str:
    return os.environ.get(ROLE_ENV, "single")


ADMIN_FORWARD_SECONDS = 3600.0  # a forwarded admin request (registration of a large file, a build) waits this long


def forward_timeout(request_timeout: float) -> float:
    """How long a reader waits for the writer: the writer's own request timeout, and slack."""
    return request_timeout + 30


# -- a reader's calls to the writer ---------------------------------------------------------------
def remote_builder(path: Path, token: str, timeout: float) -> Callable[[str, bool], tuple[dict[str, Any], bool]]:
    """`engine.service.Prima`'s ``build_via`` for a reader: the writer builds, its error is raised here."""

    def build(name: str, force: bool) -> tuple[dict[str, Any], bool]:
        import httpx  # (here, not at the top: with its CLI, ~0.2 s of every server's start-up; readers only)

        try:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), timeout=timeout) as client:
                r = client.post(
                    "http://writer/internal/build",
                    json={"table": name, "force": force},
                    headers={INTERNAL_HEADER: token},
                )
        except httpx.HTTPError:
            raise Unavailable(
                "the writer worker is not reachable (restarting?): retry shortly", retry_after=1
            ) from None
        body = r.json()
        if r.status_code != 200:
            error = _ERRORS.get(r.status_code, PrimaError)
            raise error(body.get("detail", "the writer's build failed"))
        return body["status"], bool(body["built"])

    return build


class ForwardAdmin:
    """ASGI middleware of a reader: ``/v1/admin/*`` goes to the writer over its Unix socket, as is."""

    def __init__(self, app: Any, path: Path, timeout: float) -> None:
        self.app, self.path, self.timeout = app, path, timeout
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/admin"):
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        import httpx  # (see `remote_builder`)

        if self._client is None:  # an admin request (a registration, a build) may take long: wait for it
            timeout = httpx.Timeout(ADMIN_FORWARD_SECONDS, connect=5.0)
            self._client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(self.path)), timeout=timeout)
        dropped = (b"host", b"content-length", b"connection", INTERNAL_HEADER.encode(), FORWARDED_FOR.encode())
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k.lower() not in dropped]
        client = scope.get("client")
        headers.append((FORWARDED_FOR, client[0] if client else "unknown"))  # the writer's per-address limits
        url = "http://writer" + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        try:
            r = await self._client.request(scope["method"], url, content=body, headers=headers)
            status, out, content = (
                r.status_code,
                [
                    (k, v)
                    for k, v in r.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")
                ],
                r.content,
            )
        except httpx.TimeoutException:  # connected, still working: not a restart, and not cancelled
            status, content = (
                504,
                json.dumps(
                    {
                        "detail": f"the writer is still working on this request after "
                        f"{ADMIN_FORWARD_SECONDS:g} s; it goes on: check its outcome "
                        "(GET /v1/admin/tables/…) before sending it again"
                    }
                ).encode(),
            )
            out = [("content-type", "application/json")]
        except httpx.HTTPError:
            status, content = (
                503,
                json.dumps({"detail": "the writer worker is not reachable (restarting?): retry shortly"}).encode(),
            )
            out = [("content-type", "application/json"), ("retry-after", "1")]
        out.append(("content-length", str(len(content))))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out],
            }
        )
        await send({"type": "http.response.body", "body": content})


# -- a worker process ------------------------------------------------------------------------------
def public_socket(host: str, port: int) -> socket.socket:
    """The HTTP port, bound with SO_REUSEPORT so every worker can listen on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def unix_socket(path: Path) -> socket.socket:
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    os.chmod(path, 0o600)
    sock.listen(512)
    return sock


# -- the supervisor --------------------------------------------------------------------------------
def supervise(
    data_dir: Path, host: str, port: int, workers: int, log_level: str, log_format: str, env: dict[str, str]
) -> int:
    """Start the writer, then the readers; restart any that dies; stop them all on SIGTERM/SIGINT."""
    # Bound once without SO_REUSEPORT: fails now, with the usual message, if anything holds the port
    # (another server with SO_REUSEPORT included, which would otherwise silently share it).
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as check:
        check.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            check.bind((host, port))
        except OSError as exc:
            log.error("cannot listen on %s:%d (%s): is another server running there?", host, port, exc.strerror)
            return 1
    token = secrets.token_hex(32)
    base = (
        os.environ | env | {TOKEN_ENV: token, SOCKET_ENV: str(writer_socket(data_dir)), "PRIMA_DATA_DIR": str(data_dir)}
    )
    command = [sys.executable, "-m", "app.worker_process", host, str(port), log_level, log_format]
    roles = ["writer"] + ["reader"] * (workers - 1)
    stopping = False

    def start(i: int) -> subprocess.Popen:
        return subprocess.Popen(command, env=base | {ROLE_ENV: roles[i], INDEX_ENV: str(i)})

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    procs = [start(0)]
    procs += [start(i) for i in range(1, workers)]
    started = [time.monotonic()] * workers
    quick_exits = [0] * workers
    log.info("serving with %d workers (pids %s); the writer is %d", workers, [p.pid for p in procs], procs[0].pid)
    while not stopping:
        time.sleep(0.2)
        for i, p in enumerate(procs):
            if p.poll() is not None and not stopping:
                soon = time.monotonic() - started[i] < QUICK_EXIT_SECONDS
                quick_exits[i] = quick_exits[i] + 1 if soon and p.returncode > 0 else 0  # (killed: < 0)
                if quick_exits[i] >= QUICK_EXITS:  # a start-up failure, not a crash: restarting will not help
                    log.error(
                        "worker %d (%s) exited %d times within %g s of starting; stopping (see its log above)",
                        i,
                        roles[i],
                        QUICK_EXITS,
                        QUICK_EXIT_SECONDS,
                    )
                    stopping = True
                    break
                log.warning("worker %d (%s, pid %d) exited with %s; restarting it", i, roles[i], p.pid, p.returncode)
                time.sleep(RESTART_DELAY)
                procs[i], started[i] = start(i), time.monotonic()
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
    return 1 if any(n >= QUICK_EXITS for n in quick_exits) else 0
