"""The live server with a PostgreSQL wire listener that the wire tests share (one per test module)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import TLS, LiveServer, free_port

ANALYST_TOKEN = "analyst-token-1"


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    """`prima serve --pg-port` with the demo table `people`; yields (server, wire port)."""
    pg_port = free_port()
    server = LiveServer(
        tmp_path_factory.mktemp("wire") / "data",
        extra_args=("--pg-port", str(pg_port)),
        env={"PRIMA_ANALYST_TOKENS": ANALYST_TOKEN},
    )
    server.start()
    yield server, pg_port
    server.stop()


def dsn(port: int, password: str = ANALYST_TOKEN) -> str:
    return f"host=127.0.0.1 port={port} user=bi password={password} dbname=prima sslmode=disable connect_timeout=10"


def rest(server: LiveServer, sql: str, **options: bool) -> dict:
    """The REST answer to ``sql`` (``options``: the body's "clamp", "truncate")."""
    r = httpx.post(
        server.url + "/v1/query",
        json={"sql": sql, **options},
        headers={"Authorization": f"Bearer {ANALYST_TOKEN}"},
        timeout=120,
        verify=TLS,
    )
    assert r.status_code == 200, r.text
    return r.json()
