"""HTTP latency of two commits side by side: the repeated 4-D box and the /healthz floor.

bench/perf.py's HTTP table compares the query with the floor *of the same commit*; when the floor
itself moves (the server got faster at answering /healthz), the ratio moves with it though the query
costs the same. This runs both commits' servers on the same machine at once, each on its own cube
built by its own code, and alternates rounds between them, so drift lands on both.

    .venv/bin/python bench/http_ab.py --old 0a0debd [--new HEAD] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import perf  # noqa: E402  (http_load, _wait_healthy, BOX_SQL)
from distinct_queries import request  # noqa: E402

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def _checkout(rev: str, where: Path) -> Path:
    """The commit's tree in a detached worktree (the working copy itself for "WORKTREE")."""
    if rev == "WORKTREE":
        return REPO
    subprocess.run(
        ["git", "worktree", "add", "-f", "--detach", str(where), rev], cwd=REPO, check=True, capture_output=True
    )
    return where


def _serve(repo: Path, data_dir: Path, port: int) -> subprocess.Popen:
    """Build the 10⁶-row 4-D identity cube with that commit's code, then serve it."""
    subprocess.run(
        [sys.executable, "bench/perf.py", "--build-one", "1000000", "4", str(data_dir), "identity"],
        cwd=repo,
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            str(port),
            "--log-level",
            "error",
        ],
        cwd=repo,
        env={**os.environ, "PRIMA_DEMO": "0"},
    )
    perf._wait_healthy(port)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="a commit (e.g. 0a0debd)")
    parser.add_argument("--new", default="WORKTREE", help="a commit, or WORKTREE (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prima-http-ab-"))
    trees = {"old": _checkout(args.old, tmp / "old-tree"), "new": _checkout(args.new, tmp / "new-tree")}
    servers: dict[str, tuple[int, subprocess.Popen]] = {}
    query = request(perf.BOX_SQL[4])
    try:
        for i, (name, tree) in enumerate(trees.items()):
            port = 18600 + os.getpid() % 200 + i * 200
            servers[name] = (port, _serve(tree, tmp / f"data-{name}", port))
        print(f"old = {args.old}, new = {args.new}; p50 latency in ms, 1 connection per client")
        print("| clients | commit | /healthz p50 | query p50 | query − floor | ratio |")
        print("|---:|---|---:|---:|---:|---:|")
        for clients in (1, 8, 64):
            per = max(10, 3000 // clients // args.rounds)
            seen: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for name, (port, _) in servers.items():
                    for endpoint, raw in (("floor", HEALTH), ("query", query)):
                        seen.setdefault((name, endpoint), []).extend(
                            perf.http_load(port, raw, clients, per)["latencies"]
                        )
            for name in servers:
                floor, q = statistics.median(seen[(name, "floor")]), statistics.median(seen[(name, "query")])
                print(
                    f"| {clients} | {name} | {floor * 1e3:.3f} | {q * 1e3:.3f} | {(q - floor) * 1e3:.3f} | {q / floor:.2f}× |"
                )
        print(
            f"\nReproduce: .venv/bin/python bench/http_ab.py --old {args.old} --new {args.new} --rounds {args.rounds}"
        )
    finally:
        for _, server in servers.values():
            server.terminate()
            server.wait(timeout=15)
        for tree in trees.values():
            if tree != REPO:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)


if __name__ == "__main__":
    main()
