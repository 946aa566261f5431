"""Serving on every core: `prima serve --workers N` against one worker, and SIGKILL of the
writer mid-build.

**Throughput.** The demo table (`people`, 49,248 cells) built once; then `prima serve --workers 1`
and `--workers 2` on that data dir, alternated over rounds. Each round sends distinct GROUP BY
queries (age × region × education under a random hours range on its bins and an age cut: up to ~2,700
groups, never the same text twice) from ``--clients`` asyncio connections (default 64) of raw HTTP bytes (the client costs little next to a 1,200-group
answer), and `GET /healthz` the same way (the HTTP floor). Requests per second, medians over rounds.
The kernel's SO_REUSEPORT hash sends each connection to one worker for its life; with few long
connections the split is uneven (16 connections: 10/6 is common), and the busier worker's wall time
is the run's, so the default is 64, as a dashboard with many viewers opens (``--clients 16``: the
earlier setting).

**Kills.** With `--workers 2`, repeatedly: register a small pairwise table (its own file, so its own
budget), start its build in the background, SIGKILL the writer after a random delay, wait for the
supervisor to restart it, and read the ledger: each build id must be `done` or `failed` (never left
charged), at most one per table, and asking again without `force` must charge nothing more.

Run:  .venv/bin/python bench/workers.py [--rounds 3] [--kills 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.distinct_queries import request  # noqa: E402
from bench.perf import REPO, _http_worker  # noqa: E402

CLIENTS = 64
TOKEN = "bench-admin-token-0123456789"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def group_by_sql(rng: random.Random) -> str:
    """~2,700 groups under an hours range on the axis's 5-hour bins (a range that cuts a bin is the
    misaligned path, ~7× dearer: not what a dashboard's filters usually send), ages cut at random."""
    h, k = sorted(rng.sample(range(15), 2))
    a = rng.randrange(18, 40)
    return (
        f"SELECT age, region, education, SUM(salary), COUNT(*) FROM people WHERE hours BETWEEN {10 + 5 * h} AND "
        f"{9 + 5 * (k + 1)} AND age >= {a} GROUP BY age, region, education"
    )


def start(data: Path, port: int, workers: int) -> subprocess.Popen:
    env = os.environ | {"PRIMA_ADMIN_TOKEN": TOKEN, "PRIMA_IMPORT_DIR": str(data.parent)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            "--no-demo",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    roles(port, workers)
    return proc


def roles(port: int, want: int, timeout: float = 60) -> dict[str, dict]:
    """role → /healthz body, from new connections until ``want`` workers answered."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(seen)} of {want} workers answered")
        try:
            body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
            seen[body.get("pid", 0)] = body
        except httpx.HTTPError:
            time.sleep(0.1)
    return {b.get("role", "single"): b for b in seen.values()}


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def throughput(port: int, bodies: list[list[bytes]] | None, per_client: int, clients: int = CLIENTS) -> float:
    """Requests per second over all connections, until the last one is done."""

    async def run() -> float:
        t = time.perf_counter()
        if bodies is None:
            health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            await asyncio.gather(*(_http_worker(port, health, per_client, []) for _ in range(clients)))
            return clients * per_client / (time.perf_counter() - t)
        await asyncio.gather(*(_http_worker(port, b, len(b), []) for b in bodies))
        return sum(len(b) for b in bodies) / (time.perf_counter() - t)

    return asyncio.run(run())


def bench_throughput(tmp: Path, rounds: int, per_client: int, clients: int = CLIENTS) -> dict:
    from engine.service import Prima

    data = tmp / "data"
    prima = Prima(data, seed=1)
    prima.ensure_demo()
    prima.build("people")
    prima.close()
    rng = random.Random(7)
    port = 18500 + os.getpid() % 400
    out: dict[int, dict[str, list[float]]] = {1: {"query": [], "healthz": []}, 2: {"query": [], "healthz": []}}
    for r in range(rounds):
        for workers in (1, 2) if r % 2 == 0 else (2, 1):
            proc = start(data, port, workers)
            try:
                throughput(port, [[request(group_by_sql(rng)) for _ in range(5)] for _ in range(16)], 5)  # warm
                bodies = [[request(group_by_sql(rng)) for _ in range(per_client)] for _ in range(clients)]
                out[workers]["query"].append(throughput(port, bodies, per_client))
                out[workers]["healthz"].append(throughput(port, None, 500, clients=16))
            finally:
                stop(proc)
            print(
                f"round {r + 1}, {workers} worker(s): {out[workers]['query'][-1]:.0f} GROUP BY/s, "
                f"{out[workers]['healthz'][-1]:.0f} healthz/s",
                flush=True,
            )
    med = {w: {k: statistics.median(v) for k, v in d.items()} for w, d in out.items()}
    return {
        "median": med,
        "ratio_query": med[2]["query"] / med[1]["query"],
        "ratio_healthz": med[2]["healthz"] / med[1]["healthz"],
        "runs": out,
    }


def bench_kills(tmp: Path, kills: int) -> dict:
    data = tmp / "kills"
    port = 18900 + os.getpid() % 90
    staff = (REPO / "examples" / "staff.csv").read_text()
    proc = start(data, port, 2)
    rng = random.Random(3)
    outcomes: dict[str, int] = {}
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=120, limits=httpx.Limits(max_keepalive_connections=0)
        ) as c:
            for run in range(kills):
                name = f"staff{run}"
                path = tmp / f"{name}.csv"
                path.write_text(staff + "".join(f"{30 + i % 40},eng,2015-01-01,50000.0\n" for i in range(run + 1)))
                spec = {
                    "name": name,
                    "source": {"csv": str(path)},
                    "epsilon": 1.0,
                    "dimensions": [
                        {"name": "age", "type": "int", "lo": 15, "hi": 74},
                        {"name": "dept", "type": "category", "values": ["eng", "ops", "sales", "support"]},
                        {
                            "name": "hired",
                            "type": "date",
                            "lo": "2000-01-01",
                            "hi": "2024-12-31",
                            "granularity": "month",
                        },
                    ],
                    "measures": [{"name": "salary", "lo": 0, "hi": 300000}],
                    "cube": {"strategy": "pairwise"},
                }
                assert c.post("/v1/admin/tables", json=spec, headers=ADMIN).status_code == 201
                writer = roles(port, 2)["writer"]["pid"]
                c.post(f"/v1/admin/tables/{name}/cube", json={"background": True}, headers=ADMIN)
                time.sleep(rng.uniform(0.0, 1.5))
                os.kill(writer, signal.SIGKILL)
                while roles(port, 2)["writer"]["pid"] == writer:
                    time.sleep(0.2)
                before = ledger(c, name)
                again = c.post(f"/v1/admin/tables/{name}/cube", json={}, headers=ADMIN)
                after = ledger(c, name)
                ok = (
                    len(before) <= 1
                    and all(s in ({"done"}, {"failed"}) for s in before.values())
                    and (after == before if before else (again.status_code == 201 and len(after) == 1))
                )
                kind = (
                    "killed before the charge"
                    if not before
                    else "finished before the kill"
                    if list(before.values())[0] == {"done"}
                    else "charged, then failed"
                )
                outcomes[kind] = outcomes.get(kind, 0) + 1
                print(
                    f"kill {run + 1}: {kind}; ask again → {again.status_code}; "
                    f"{'ok' if ok else 'DOUBLE CHARGE OR LEFT CHARGED'}",
                    flush=True,
                )
                if not ok:
                    raise SystemExit(f"ledger after kill {run + 1}: {before} → {after}")
    finally:
        stop(proc)
    return {"kills": kills, "outcomes": outcomes, "double_charges": 0}


def ledger(c: httpx.Client, name: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for e in c.get(f"/v1/admin/tables/{name}/ledger", headers=ADMIN).json()["entries"]:
        out.setdefault(e["build_id"], set()).add(e["status"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-client", type=int, default=10)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        result = {
            "throughput": bench_throughput(Path(t), args.rounds, args.per_client, args.clients),
            "clients": args.clients,
            "per_client": args.per_client,
        }
        m = result["throughput"]["median"]
        print(
            f"distinct GROUP BY: 1 worker {m[1]['query']:.0f}/s, 2 workers {m[2]['query']:.0f}/s "
            f"→ {result['throughput']['ratio_query']:.2f}×; healthz {m[1]['healthz']:.0f} → {m[2]['healthz']:.0f}/s "
            f"({result['throughput']['ratio_healthz']:.2f}×)"
        )
        if args.kills:
            result["kills"] = bench_kills(Path(t), args.kills)
            print(
                f"SIGKILL of the writer mid-build, {args.kills} runs: {result['kills']['outcomes']}, no double charge"
            )
    out = REPO / "bench" / "results" / "workers.json"
    out.write_text(json.dumps(result, indent=1, default=str))
    print(
        f"wrote {out}; reproduce: .venv/bin/python bench/workers.py --rounds {args.rounds} --kills {args.kills} "
        f"--clients {args.clients} --per-client {args.per_client}"
    )


if __name__ == "__main__":
    main()
