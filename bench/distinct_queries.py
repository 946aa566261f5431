"""New (never-seen) queries over HTTP against GET /healthz, and their in-process planning cost.

Dashboards mostly repeat queries (answered from memory in microseconds, bench/perf.py); an
analyst exploring sends new ones. A new query whose *shape* (its text without constants) was seen
before is bound on the kept parse tree (engine/sql/templates.py); a new shape is parsed by sqlglot.
Here every request is a distinct 4-condition range query on the demo table (distinct as a whole:
its conditions repeat, as an analyst's do, and are remembered once bound), in two client set-ups
that alternate rounds of distinct queries and of /healthz so this VM's speed drift lands on both:
  * 8 asyncio connections of raw HTTP bytes: the client costs almost nothing, so the server is
    saturated and the p50 ratio is the ratio of the server's CPU per request;
  * 8 client threads with http.client keep-alive connections (the protocol), where the
    client's own cost per request is part of both figures, as it is for a real client.
Prints p50/p99 and requests/s, the server's CPU per request, and the in-process time of a new query.

Run: .venv/bin/python bench/distinct_queries.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import REPO, _http_worker, _wait_healthy  # noqa: E402

CLIENTS = 8


def distinct_sql(rng: random.Random) -> str:
    a, b = sorted(rng.sample(range(18, 91), 2))
    h, k = sorted(rng.sample(range(10, 81), 2))
    return (
        f"SELECT SUM(salary) FROM people WHERE age BETWEEN {a} AND {b} AND hours BETWEEN {h} AND {k} "
        f"AND education IN ('bsc', 'msc') AND region <> 'north'"
    )


def unseen_ranges_sql(rng: random.Random) -> str:
    """A query of the same shape whose two ranges were never asked before (fractional bounds), so
    neither BETWEEN is a remembered conjunct (engine/sql/templates.py); the IN and <> conditions are."""
    a, h = rng.uniform(18, 60), rng.uniform(10, 50)
    return (
        f"SELECT SUM(salary) FROM people WHERE age BETWEEN {a:.6f} AND {a + rng.uniform(1, 30):.6f} "
        f"AND hours BETWEEN {h:.6f} AND {h + rng.uniform(1, 30):.6f} AND education IN ('bsc', 'msc') AND region <> 'north'"
    )


KINDS = {
    "GET /healthz": None,
    "POST /v1/query (distinct)": distinct_sql,
    "POST /v1/query (distinct, ranges never seen)": unseen_ranges_sql,
}


def request(sql: str) -> bytes:
    body = json.dumps({"sql": sql}).encode()
    return (
        b"POST /v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


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


def load_threads(port: int, bodies: list[list[str]] | None, per_client: int) -> tuple[list[float], float]:
    """8 client threads, one keep-alive http.client connection each: /healthz, or the given bodies."""
    latencies: list[float] = []

    def client(work: list[str] | None) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        for i in range(per_client):
            t = time.perf_counter()
            if work is None:
                conn.request("GET", "/healthz")
            else:
                conn.request("POST", "/v1/query", body=work[i], headers={"Content-Type": "application/json"})
            conn.getresponse().read()
            latencies.append(time.perf_counter() - t)
        conn.close()

    threads = [threading.Thread(target=client, args=(None if bodies is None else bodies[i],)) for i in range(CLIENTS)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return latencies, time.perf_counter() - t


def server_cpu(pid: int) -> float:
    """CPU seconds the server process has used (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp:
        port = 19000 + os.getpid() % 1000
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--data-dir",
                str(Path(tmp) / "d"),
                "--port",
                str(port),
                "--log-level",
                "error",
            ],
            cwd=REPO,
        )
        try:
            _wait_healthy(port)
            load(port, [[request(distinct_sql(rng))]], 1)  # builds the demo cube
            per_client = 150
            out: dict[str, tuple[list[float], list[float], list[float]]] = {}
            for _ in range(args.rounds):
                for setup in ("asyncio", "threads"):
                    for kind, make in KINDS.items():
                        cpu = server_cpu(server.pid)
                        if setup == "asyncio":
                            reqs = (
                                None
                                if make is None
                                else [[request(make(rng)) for _ in range(per_client)] for _ in range(CLIENTS)]
                            )
                            lat, wall = load(port, reqs, per_client)
                        else:
                            bodies = (
                                None
                                if make is None
                                else [
                                    [json.dumps({"sql": make(rng)}) for _ in range(per_client)] for _ in range(CLIENTS)
                                ]
                            )
                            lat, wall = load_threads(port, bodies, per_client)
                        lats, rates, cpus = out.setdefault(f"{setup:8s} {kind}", ([], [], []))
                        lats.extend(lat)
                        rates.append(len(lat) / wall)
                        cpus.append((server_cpu(server.pid) - cpu) / len(lat))
        finally:
            server.terminate()
            server.wait(timeout=15)
    p50 = {}
    for name, (lat, rates, cpus) in out.items():
        lat.sort()
        p50[name] = statistics.median(lat) * 1e3
        print(
            f"{name:50s} p50 {p50[name]:.2f} ms  p99 {lat[int(0.99 * (len(lat) - 1))] * 1e3:.2f} ms  "
            f"{statistics.median(rates):,.0f} req/s  server CPU {statistics.median(cpus) * 1e6:.0f} µs/req"
        )
    for setup in ("asyncio", "threads"):
        for kind in list(KINDS)[1:]:
            ratio = p50[f"{setup:8s} {kind}"] / p50[f"{setup:8s} GET /healthz"]
            print(
                f"{kind.removeprefix('POST /v1/query ')} / healthz p50, {CLIENTS} "
                f"{'connections' if setup == 'asyncio' else 'client threads'}: {ratio:.2f}x"
            )

    from app.http.runtime import rarer_full_collections
    from engine.service import Prima
    from engine.sql.bind import plan_query

    with tempfile.TemporaryDirectory() as tmp, rarer_full_collections():  # the server's collector policy
        prima = Prima(Path(tmp) / "d", seed=1)
        prima.ensure_demo()
        prima.query(distinct_sql(rng))  # builds the demo cube
        for sql in (distinct_sql(rng) for _ in range(3000)):  # the state a server is in after a while
            prima.new_query_json(sql)
        for label, run, make in (
            ("full parse + bind (a new shape)", lambda sql: plan_query(sql, prima.spec_or_none), distinct_sql),
            ("plan of a new query, known shape", prima.plan, distinct_sql),
            ("plan of a new query, known shape, both ranges never seen", prima.plan, unseen_ranges_sql),
            ("plan + answer + JSON, known shape", prima.new_query_json, distinct_sql),
            ("plan + answer + JSON, known shape, both ranges never seen", prima.new_query_json, unseen_ranges_sql),
        ):
            times = []
            for _ in range(3):  # the median of 3 batches: a full garbage collection lands in one of them
                sqls = [make(rng) for _ in range(2000)]
                t = time.perf_counter()
                for sql in sqls:
                    run(sql)
                times.append((time.perf_counter() - t) / len(sqls))
            print(f"in-process {label}: {statistics.median(times) * 1e6:.0f} µs")
        prima.close()
    print(f"Reproduce: .venv/bin/python bench/distinct_queries.py --rounds {args.rounds}")


if __name__ == "__main__":
    main()
