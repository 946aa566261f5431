"""A request that runs past PRIMA_REQUEST_TIMEOUT is answered 503 and its work stops: the engine's
long loops see the request's deadline (`engine.deadline`) instead of computing on for minutes on a
thread nobody waits for."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import psycopg
import pytest

from tests.conftest import TLS, LiveServer, admin_headers, free_port
from tests.wire_server import dsn


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


def test_a_timed_out_quantile_request_stops_computing_over_rest_and_the_wire(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    csv = tmp_path / "wide.csv"
    rows = ["a,b,amount"] + [
        f"{a},{b},{v:.2f}"
        for a, b, v in zip(rng.integers(0, 96, 30_000), rng.integers(0, 84, 30_000), rng.lognormal(5, 1, 30_000))
    ]
    csv.write_text("\n".join(rows) + "\n")
    spec = {
        "name": "wide",
        "source": {"csv": str(csv)},
        "epsilon": 1.0,
        "dimensions": [
            {"name": "a", "type": "int", "lo": 0, "hi": 95},
            {"name": "b", "type": "int", "lo": 0, "hi": 83},
        ],
        "measures": [{"name": "amount", "lo": 0, "hi": 10_000, "axis": {"kind": "log2", "count": True}}],
    }
    pg_port = free_port()
    server = LiveServer(
        tmp_path / "data", demo=False, env={"PRIMA_REQUEST_TIMEOUT": "1"}, extra_args=("--pg-port", str(pg_port))
    )
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=120, verify=TLS) as c:
            assert c.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
            c.post("/v1/admin/tables/wide/cube", json={}, headers=admin_headers())  # may outlive 1 s: it goes on
            deadline = time.monotonic() + 90
            while c.get("/v1/tables/wide").json()["cube"]["status"] != "ready" and time.monotonic() < deadline:
                time.sleep(0.5)
            assert c.get("/v1/tables/wide").json()["cube"]["status"] == "ready"
            items = ", ".join(
                f"PERCENTILE_CONT({(k + 1) / 200:.3f}) WITHIN GROUP (ORDER BY amount)" for k in range(199)
            )
            start = time.monotonic()
            r = c.post("/v1/query", json={"sql": f"SELECT a, b, {items} FROM wide GROUP BY a, b"})
            assert r.status_code == 503 and time.monotonic() - start < 10, (r.status_code, r.text[:200])
            time.sleep(0.75)  # the loop's next check (every 256 groups) comes well within this
            before = _cpu_seconds(server.proc.pid)
            time.sleep(1.5)  # a loop computing on would use ~1.5 s of CPU here
            busy = _cpu_seconds(server.proc.pid) - before
            assert busy < 0.5, f"the server computed on for {busy:.1f} of 1.5 s after answering 503"
            assert c.get("/healthz").status_code == 200
        with psycopg.connect(dsn(pg_port), autocommit=True) as conn:  # the wire's statements have the same limit
            start = time.monotonic()
            with pytest.raises(psycopg.Error) as err:
                conn.execute(f"SELECT a, b, {items} FROM wide GROUP BY a, b").fetchall()
            assert err.value.sqlstate is not None and err.value.sqlstate != "XX000"
            assert time.monotonic() - start < 10
        time.sleep(0.75)
        before = _cpu_seconds(server.proc.pid)
        time.sleep(1.5)
        assert _cpu_seconds(server.proc.pid) - before < 0.5
    finally:
        server.stop()
