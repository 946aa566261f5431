"""The PostgreSQL wire listener against REST: latency of a repeated query, connections/s.

One `prima serve --pg-port` subprocess on a temporary data dir (the demo table). In the same run,
alternating rounds so this VM's speed drift lands on both: the p50/p99 latency of a repeated 4-D
box query over the wire (psycopg, one connection, simple protocol) and over REST (httpx, one
keep-alive connection); then new wire connections per second (connect, authenticate, one query,
close).

Run: .venv/bin/python bench/wire.py [--rounds 5] [--queries 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import REPO, _wait_healthy  # noqa: E402
from bench.shared_data import publish  # noqa: E402
from tests.conftest import free_port  # noqa: E402

SQL = (
    "SELECT SUM(salary), COUNT(*) FROM people WHERE age BETWEEN 30 AND 50 AND education IN ('bsc', 'msc') "
    "AND hours BETWEEN 35 AND 50 AND region <> 'west'"
)


def _times(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    port, pg_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as folder:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--data-dir",
                str(Path(folder) / "data"),
                "--port",
                str(port),
                "--pg-port",
                str(pg_port),
                "--log-level",
                "warning",
            ],
            cwd=REPO,
        )
        try:
            _wait_healthy(port)
            dsn = f"host=127.0.0.1 port={pg_port} user=bench password=x dbname=prima sslmode=disable"
            rest = httpx.Client(base_url=f"http://127.0.0.1:{port}")
            rest.post("/v1/query", json={"sql": SQL}).raise_for_status()  # builds the cube
            wire = psycopg.connect(dsn, autocommit=True)
            wire.execute(SQL).fetchall()
            t_rest, t_wire = [], []
            for _ in range(args.rounds):
                t_rest += _times(lambda: rest.post("/v1/query", json={"sql": SQL}).raise_for_status(), args.queries)
                t_wire += _times(lambda: wire.execute(SQL, prepare=False).fetchall(), args.queries)
            start, n = time.perf_counter(), 0
            while time.perf_counter() - start < 5:
                with psycopg.connect(dsn, autocommit=True) as c:
                    c.execute("SELECT COUNT(*) FROM people").fetchall()
                n += 1
            per_second = n / (time.perf_counter() - start)
            wire.close()
            rest.close()
        finally:
            proc.terminate()
            proc.wait(30)

    def pct(xs: list[float], q: float) -> float:
        return statistics.quantiles(xs, n=100)[q - 1] * 1000

    lines = [
        "# PostgreSQL wire vs REST",
        "",
        f"`.venv/bin/python bench/wire.py --rounds {args.rounds} --queries {args.queries}` — one client each, "
        f"the same repeated 4-condition query ({args.rounds} alternating rounds of {args.queries}).",
        "",
        "| path | p50 ms | p99 ms |",
        "|---|---|---|",
        f"| REST (httpx, keep-alive) | {pct(t_rest, 50):.3f} | {pct(t_rest, 99):.3f} |",
        f"| wire (psycopg, simple protocol) | {pct(t_wire, 50):.3f} | {pct(t_wire, 99):.3f} |",
        "",
        f"wire / REST p50: **{pct(t_wire, 50) / pct(t_rest, 50):.2f}×**; new wire connections (connect, "
        f"authenticate, one query, close): {per_second:.0f} per second.",
        "",
    ]
    publish("wire.md", lines)


if __name__ == "__main__":
    main()
