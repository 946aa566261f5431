"""Build time and the service's peak memory when the rows live in DuckDB, PostgreSQL or Spark.

The same synthetic table (4 dimensions of 30 values, one measure in [0, 30]; 30^4 = 810,000 cells)
at 10^6 and 10^7 rows is put in each engine; each build runs in a fresh process (the service),
whose peak RSS during the build is read from /proc (VmHWM, reset just before the build). The point: memory follows the cube, not the row count,
because only the aggregate (at most one row per cell, fetched in batches) reaches the service.
Spark runs in local mode: its JVM is a separate process and is not in the service's RSS.

Needs PostgreSQL (Debian's package; a throwaway cluster is started like the tests do) and the
Spark extra (PRIMA_EXTRAS=spark ./run.sh test installs it). Sources that are missing are skipped.

Reproduce:  .venv/bin/python bench/sources.py           (~4 min on 2 cores)
            .venv/bin/python bench/sources.py --quick   (10^5 and 10^6 rows)
Writes bench/results/sources.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import duckdb  # noqa: E402
from shared_data import gen_rows_sql, gen_spec  # noqa: E402

from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

DIMS = 4
RESULTS = REPO / "bench" / "results"


def write_parquet(rows: int, path: Path) -> None:
    duckdb.sql(f"COPY ({gen_rows_sql(DIMS)} FROM range({rows})) TO '{path}' (FORMAT parquet)")


def load_postgres(dsn: str, parquet: Path, table: str) -> float:
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(f"CREATE TABLE {table} ({', '.join(f'a{i} integer' for i in range(DIMS))}, m double precision)")
        csv_path = parquet.with_suffix(".csv")
        duckdb.sql(f"COPY (SELECT * FROM read_parquet('{parquet}')) TO '{csv_path}' (FORMAT csv, HEADER)")
        with (
            conn.cursor().copy(f"COPY {table} FROM STDIN WITH (FORMAT csv, HEADER true)") as copy,
            csv_path.open("rb") as f,
        ):
            while block := f.read(1 << 20):
                copy.write(block)
        csv_path.unlink()
        conn.execute(f"ANALYZE {table}")
    return time.perf_counter() - start


def spec(source: dict) -> TableSpec:
    return TableSpec.model_validate(gen_spec(source, DIMS))


def build_one(kind: str, parquet: str, table: str, data_dir: str) -> dict:
    """Runs in a fresh process: register the source, build, report seconds and peak RSS."""
    prima = Prima(Path(data_dir))
    if kind == "duckdb":
        prima.db.run(f"CREATE TABLE gen_rows AS SELECT * FROM read_parquet('{parquet}')")
        source: dict = {"duckdb_table": "gen_rows"}
    elif kind == "postgres":
        source = {"postgres": {"dsn": "env:PRIMA_BENCH_PG_DSN", "table": table}}
    else:
        source = {"spark": {"parquet": parquet, "master": "local[2]"}}
    prima.register(spec(source))
    if kind == "spark":  # start the JVM before measuring, as a running service would have it
        from storage.engines.spark_source import session

        session("local[2]")
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
    rss_before = _status_mb("VmRSS")
    start = time.perf_counter()
    prima.build("gen")
    seconds = time.perf_counter() - start
    peak = _status_mb("VmHWM")
    cube_mb = sum(f.stat().st_size for f in (Path(data_dir) / "cubes").rglob("*.npy")) / 2**20
    prima.close()
    return {"build_s": seconds, "rss_before_mb": rss_before, "cube_mb": cube_mb, "peak_rss_mb": peak}


def _status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status (Linux), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def run_child(kind: str, parquet: Path, table: str, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as data_dir:
        out = subprocess.run(
            [sys.executable, __file__, "--one", kind, str(parquet), table, data_dir],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def available_sources() -> list[str]:
    kinds = ["duckdb"]
    try:
        import psycopg  # noqa: F401

        from tests.servers import _pg_bin

        if os.environ.get("PRIMA_TEST_PG_DSN") or _pg_bin():
            kinds.append("postgres")
    except ImportError:
        pass
    try:
        import pyspark  # noqa: F401

        kinds.append("spark")
    except ImportError:
        pass
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--one", nargs=4, metavar=("KIND", "PARQUET", "TABLE", "DATA_DIR"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(build_one(*args.one)))
        return
    sizes = [100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000]
    kinds = available_sources()
    results = []
    from tests.servers import postgres_server

    with tempfile.TemporaryDirectory() as tmp, postgres_server() if "postgres" in kinds else _null() as dsn:
        for rows in sizes:
            parquet = Path(tmp) / f"gen_{rows}.parquet"
            write_parquet(rows, parquet)
            table = f"gen_{rows}"
            if dsn:
                print(f"loading {rows:,} rows into PostgreSQL: {load_postgres(dsn, parquet, table):.1f} s", flush=True)
            for kind in kinds:
                r = run_child(kind, parquet, table, {"PRIMA_BENCH_PG_DSN": dsn or ""})
                r.update(kind=kind, rows=rows)
                results.append(r)
                print(
                    f"{kind:8s} {rows:>11,} rows: build {r['build_s']:.2f} s, peak RSS {r['peak_rss_mb']:.0f} MB "
                    f"(+{r['peak_rss_mb'] - r['rss_before_mb']:.0f} MB during the build), cube {r['cube_mb']:.1f} MB",
                    flush=True,
                )
    write_report(results, args.quick)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def write_report(results: list[dict], quick: bool) -> None:
    lines = [
        f"# Sources: build time and service memory{' (quick)' if quick else ''}",
        "",
        f"`.venv/bin/python bench/sources.py{' --quick' if quick else ''}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. 30^4 = 810,000 cells, identity "
        "strategy, COUNT + one SUM. Peak RSS is the service process's (Spark's JVM is separate).",
        "",
        "| source | rows | build s | peak RSS MB | growth during build MB | cube MB (.npy) | growth / cube |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        growth = r["peak_rss_mb"] - r["rss_before_mb"]
        lines.append(
            f"| {r['kind']} | {r['rows']:,} | {r['build_s']:.2f} | {r['peak_rss_mb']:.0f} | {growth:.0f} | "
            f"{r['cube_mb']:.1f} | {growth / r['cube_mb']:.2f}× |"
        )
    lines += [
        "",
        "Growth during the build minus twice the cube (the true cuboids, the noisy cuboids and the "
        "prefix cube are about 2× the stored cube), per source and row count — the fixed overhead:",
        "",
    ]
    for kind in dict.fromkeys(r["kind"] for r in results):
        parts = [
            f"{r['rows']:,} rows: {r['peak_rss_mb'] - r['rss_before_mb'] - 2 * r['cube_mb']:+.0f} MB"
            for r in results
            if r["kind"] == kind
        ]
        lines.append(f"- {kind}: " + ", ".join(parts))
    (RESULTS / f"sources{'_quick' if quick else ''}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
