"""New (never-seen) queries over HTTP against GET /healthz, and their in-process planning cost.

Dashboards mostly repeat queries (answered from memory in microseconds, bench/perf.py); an
analyst exploring sends new ones, each parsed and planned once (sqlglot, or sqlglotc when
installed). Here every request is a distinct 4-condition range query on the demo table; 8 client
connections alternate rounds of distinct queries and of /healthz so this VM's speed drift lands on
both. Prints p50/p99 and requests/s, and the in-process plan time per new query.

Run: .venv/bin/python bench/distinct_queries.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import REPO, _http_worker, _wait_healthy  # noqa: E402

CLIENTS = 8


def distinct_sql(rng: random.Random) -> str:
    a, b = sorted(rng.sample(range(18, 91), 2))
    h, k = sorted(rng.sample(range(10, 81), 2))
    return (f"SELECT SUM(salary) FROM people WHERE age BETWEEN {a} AND {b} AND hours BETWEEN {h} AND {k} "
            f"AND education IN ('bsc', 'msc') AND region <> 'north'")


def request(sql: str) -> bytes:
    body = json.dumps({"sql": sql}).encode()
    return (b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def load(port: int, make: list[list[bytes]] | None, per_client: int) -> tuple[list[float], float]:
    latencies: list[float] = []

    async def run() -> float:
        t = time.perf_counter()
        if make is None:
            health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            await asyncio.gather(*(_http_worker(port, health, per_client, latencies) for _ in range(CLIENTS)))
        else:
            await asyncio.gather(*(_http_worker(port, reqs, len(reqs), latencies) for reqs in make))
        return time.perf_counter() - t

    return latencies, asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        port = 19000 + os.getpid() % 1000
        server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--data-dir", str(Path(tmp) / "d"),
                                   "--port", str(port), "--log-level", "error"], cwd=REPO)
        try:
            _wait_healthy(port)
            load(port, [[request(distinct_sql(rng))]], 1)  # builds the demo cube
            per_client = 150
            out = {"GET /healthz": ([], []), "POST /v1/query (distinct)": ([], [])}
            for _ in range(args.rounds):
                lat, wall = load(port, None, per_client)
                out["GET /healthz"][0].extend(lat)
                out["GET /healthz"][1].append(len(lat) / wall)
                reqs = [[request(distinct_sql(rng)) for _ in range(per_client)] for _ in range(CLIENTS)]
                lat, wall = load(port, reqs, per_client)
                out["POST /v1/query (distinct)"][0].extend(lat)
                out["POST /v1/query (distinct)"][1].append(len(lat) / wall)
        finally:
            server.terminate()
            server.wait(timeout=15)
    p50 = {}
    for name, (lat, rates) in out.items():
        lat.sort()
        p50[name] = statistics.median(lat) * 1e3
        print(f"{name:28s} p50 {p50[name]:.2f} ms  p99 {lat[int(0.99 * (len(lat) - 1))] * 1e3:.2f} ms  "
              f"{statistics.median(rates):,.0f} req/s  ({CLIENTS} clients)")
    print(f"distinct / healthz p50: {p50['POST /v1/query (distinct)'] / p50['GET /healthz']:.2f}x")

    from engine.service import Prima
    from engine.sql import plan_query

    with tempfile.TemporaryDirectory() as tmp:
        prima = Prima(Path(tmp) / "d", seed=1)
        prima.ensure_demo()
        sqls = [distinct_sql(rng) for _ in range(2000)]
        t = time.perf_counter()
        for sql in sqls:
            plan_query(sql, prima._spec_or_none)
        print(f"in-process plan of a new query: {(time.perf_counter() - t) / len(sqls) * 1e6:.0f} µs")
        prima.close()
    print(f"Reproduce: .venv/bin/python bench/distinct_queries.py --rounds {args.rounds}")


if __name__ == "__main__":
    main()
