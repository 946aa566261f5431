"""Many servers on one state (`prima serve --state … --cube-dir …`): what sharing costs and how fast
news travels.

* **Query latency.** One embedded server and one server of a three-server shared state answer the
  same remembered query (the fast path) over one keep-alive connection, alternated in rounds:
  median and 99th percentile. A shared server polls PostgreSQL's change counter at most every
  0.25 s on that path; this shows what it costs.
* **Build fan-in.** 24 concurrent build requests spread over the three servers: how many builds ran,
  how many ledger entries, and the wall time against one server's single build of the same table.
* **Append visibility.** Appends of one period at a time on server A; after each, the time until
  servers B and C answer the new period (polled every 10 ms).

Run:  .venv/bin/python bench/shared_state.py [--rounds 3] [--appends 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import LiveServer, admin_headers, sales_spec, write_sales_csv  # noqa: E402
from tests.servers import postgres_server  # noqa: E402
from tests.test_growing import events_spec, write_events  # noqa: E402
from tests.test_shared_state import ANALYST  # noqa: E402
from tests.test_shared_state import _servers as servers  # noqa: E402

QUERY = "SELECT region, COUNT(*), SUM(amount) FROM sales WHERE age BETWEEN 30 AND 60 GROUP BY region"
ADMIN = admin_headers()
ANALYST_HEADERS = {"Authorization": f"Bearer {ANALYST}"}


def latencies(server: LiveServer, n: int) -> list[float]:
    """Seconds per answer of one remembered query, over one keep-alive connection."""
    out = []
    with httpx.Client(base_url=server.url, timeout=30, headers=ANALYST_HEADERS) as client:
        client.post("/v1/query", json={"sql": QUERY}).raise_for_status()
        for _ in range(n):
            t = time.perf_counter()
            client.post("/v1/query", json={"sql": QUERY})
            out.append(time.perf_counter() - t)
    return out


def fan_in(trio: list[LiveServer], name: str, csv: Path) -> tuple[int, int, float]:
    """(builds that ran, ledger entries, wall seconds) for 24 build requests over the servers."""
    httpx.post(trio[0].url + "/v1/admin/tables", json=sales_spec(csv, name=name), headers=ADMIN, timeout=120)
    started = time.perf_counter()
    with ThreadPoolExecutor(24) as pool:
        codes = list(
            pool.map(
                lambda s: httpx.post(s.url + f"/v1/admin/tables/{name}/cube", headers=ADMIN, timeout=300).status_code,
                [trio[i % len(trio)] for i in range(24)],
            )
        )
    wall = time.perf_counter() - started
    entries = httpx.get(trio[-1].url + f"/v1/admin/tables/{name}/ledger", headers=ADMIN).json()["entries"]
    return codes.count(201), len(entries), wall


def append_visibility(trio: list[LiveServer], root: Path, appends: int) -> list[float]:
    events = write_events(root / "import", days=appends + 1)
    body = events_spec(events).model_dump(mode="json", exclude_none=True)
    httpx.post(trio[0].url + "/v1/admin/tables", json=body, headers=ADMIN, timeout=120).raise_for_status()
    sql = "SELECT COUNT(*) FROM events WHERE day BETWEEN '2025-01-01' AND '2025-03-31'"
    waits = []
    for day in range(1, appends + 1):
        label = f"2025-01-{day:02d}"
        r = httpx.post(
            trio[0].url + "/v1/admin/tables/events/append", json={"period": label}, headers=ADMIN, timeout=120
        )
        r.raise_for_status()
        done = time.perf_counter()
        for s in trio[1:]:
            while f"to {label}" not in " ".join(
                httpx.post(s.url + "/v1/query", json={"sql": sql}, headers=ANALYST_HEADERS).json()["notes"]
            ):
                time.sleep(0.01)
            waits.append(time.perf_counter() - done)
    return waits


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--appends", type=int, default=10)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="prima-shared-bench-"))
    (root / "import").mkdir()
    csv = write_sales_csv(root / "import" / "sales.csv", rows=200_000)
    with postgres_server() as dsn:
        (single,) = servers(root, None, 1, name="single")
        trio = servers(root, dsn, 3, name="shared")
        try:
            t = time.perf_counter()
            httpx.post(single.url + "/v1/admin/tables", json=sales_spec(csv), headers=ADMIN, timeout=120)
            httpx.post(single.url + "/v1/admin/tables/sales/cube", headers=ADMIN, timeout=300).raise_for_status()
            single_build = time.perf_counter() - t
            builds, entries, wall = fan_in(trio, "sales", csv)
            emb: list[float] = []
            shr: list[float] = []
            for _ in range(args.rounds):
                emb += latencies(single, args.queries)
                shr += latencies(trio[1], args.queries)
            waits = append_visibility(trio, root, args.appends)
        finally:
            for s in [single, *trio]:
                s.stop()

    def ms(xs: list[float], q: float) -> float:
        return 1000 * statistics.quantiles(xs, n=100)[int(q) - 1] if q < 100 else 1000 * max(xs)

    print(f"query latency, remembered answer, {args.rounds}×{args.queries} requests (ms):")
    print("| server | median | p99 |\n|---|---:|---:|")
    print(f"| embedded (one data dir) | {ms(emb, 50):.2f} | {ms(emb, 99):.2f} |")
    print(f"| one of three on a shared state | {ms(shr, 50):.2f} | {ms(shr, 99):.2f} |")
    print(
        f"\nbuild fan-in: 24 requests over 3 servers → {builds} build(s), {entries} ledger entries, "
        f"{wall:.2f} s wall (one server's single build from registration: {single_build:.2f} s)"
    )
    print(
        f"append visibility on the other two servers over {args.appends} appends: median "
        f"{1000 * statistics.median(waits):.0f} ms, max {1000 * max(waits):.0f} ms"
    )
    print(
        f"\nReproduce: .venv/bin/python bench/shared_state.py --rounds {args.rounds} --queries {args.queries} "
        f"--appends {args.appends}"
    )


if __name__ == "__main__":
    main()
