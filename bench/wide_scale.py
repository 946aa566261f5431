"""Adult with all 14 dimensions at 10^6 rows through the service.

adult.data resampled with replacement to 1,000,000 rows (a Parquet file; sampling is bench scenario
design), registered from examples/adult.yaml exactly as an admin would, built by the service
(GROUPING SETS aggregation + cuboid release + bootstrap + persist). Reports the build's wall time,
the stored bytes per aggregate on disk, and in-process latency of never-seen queries: the whole
`Prima.query` (SQL parse + plan + answer) and the synopsis call alone, for a cuboid answer (2
columns) and a 4-column model answer with its bar.

Run:  .venv/bin/python bench/wide_scale.py [--rows 1000000]
Results: bench/results/wide_scale.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import SHARED  # noqa: E402
from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def resampled(rows: int, path: Path) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "adult.yaml").read_text())
    names = spec["source"]["columns"]
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE a AS SELECT * FROM read_csv('{SHARED / 'adult.data'}', header=false, "
        f"names={names!r}, auto_type_candidates=['BIGINT','DOUBLE','VARCHAR'])"
    )
    n = con.execute("SELECT COUNT(*) FROM a").fetchone()[0]
    picks = np.random.default_rng(1).integers(0, n, rows)  # scenario, not noise
    con.execute("CREATE TABLE p AS SELECT unnest(?) AS i", [picks.tolist()])
    con.execute(
        f"COPY (SELECT a.* FROM p JOIN (SELECT row_number() OVER () - 1 AS i, * FROM a) a USING (i)) "
        f"TO '{path}' (FORMAT parquet)"
    )
    con.close()
    return path


def queries(rng: np.random.Generator, k: int, n: int) -> list[str]:
    ints = [("age", 0, 119), ("education_num", 1, 16), ("fnlwgt", 0, 1_499_999), ("capital_gain", 0, 99_999)]
    out = []
    for _ in range(n):
        chosen = rng.choice(len(ints), size=k, replace=False)
        where = []
        for c in chosen:
            name, lo, hi = ints[c]
            a, b = sorted(rng.integers(lo, hi + 1, 2))
            where.append(f"{name} BETWEEN {a} AND {b}")
        out.append(f"SELECT COUNT(*), AVG(hours_per_week) FROM adult WHERE {' AND '.join(where)}")
    return out


def build_once(parquet: Path, data: Path, select_rounds: int | None) -> tuple[float, float, float, Prima]:
    """Register and build Adult from ``parquet`` in its own data dir: (register s, build s, stored bytes)."""
    raw = json.loads(json.dumps(yaml.safe_load((ROOT / "examples" / "adult.yaml").read_text()), default=str))
    raw["source"] = {"parquet": str(parquet)}
    raw.setdefault("cube", {})["select_rounds"] = select_rounds
    prima = Prima(data)
    start = time.perf_counter()
    prima.register(TableSpec.model_validate(raw))
    registered = time.perf_counter() - start
    start = time.perf_counter()
    prima.build("adult")
    built = time.perf_counter() - start
    stored = sum(f.stat().st_size for f in (data / "cubes").rglob("*.npy"))
    return registered, built, stored, prima


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        parquet = resampled(args.rows, tmp_path / "adult.parquet")
        # without the adaptive step first (the 1-/2-way cuboids alone), then the default: side by side
        _, plain_built, plain_stored, plain = build_once(parquet, tmp_path / "plain", 0)
        plain.close()
        registered, built, stored, prima = build_once(parquet, tmp_path / "data", None)
        rng = np.random.default_rng(3)
        timings = {}
        cube = prima.cube_for_query("adult")
        for label, k in (("cuboid (2 columns)", 2), ("model (4 columns)", 4)):
            sqls = queries(rng, k, 300)
            t_query, t_synopsis = [], []
            for sql in sqls:
                s = time.perf_counter()
                prima.query(sql)
                t_query.append(time.perf_counter() - s)
            for sql in queries(rng, k, 300):
                plan = prima.plan(sql)
                s = time.perf_counter()
                cube.total("count", plan.selection)
                cube.variance("count", plan.selection)
                t_synopsis.append(time.perf_counter() - s)
            timings[label] = (float(np.median(t_query) * 1e6), float(np.median(t_synopsis) * 1e6))
        prima.close()
    lines = [
        f"# Adult, 14 dimensions, resampled to {args.rows:,} rows",
        "",
        f"`.venv/bin/python bench/wide_scale.py --rows {args.rows}` on this 2-core machine.",
        "",
        f"* register (load Parquet + preflight): {registered:.1f} s",
        f"* build through the service (aggregate with GROUPING SETS — the 1-/2-way cuboids and every "
        f"candidate triple —, release, least squares, the picks' draws and releases, 16 bootstrap refits, "
        f"persist): **{built:.1f} s**; without picking triples (`select_rounds: 0`), the same run: "
        f"{plain_built:.1f} s ({built / plain_built:.2f}×)",
        f"* stored: {stored / 2**20:.2f} MB for 2 aggregates (COUNT, SUM(hours_per_week)): "
        f"**{stored / 2 / 2**20:.2f} MB per aggregate** (without picks: {plain_stored / 2 / 2**20:.2f} MB)",
        "",
        "| never-seen query | `Prima.query` median µs (parse + plan + answer) | synopsis call median µs (COUNT total + bar) |",
        "|---|---|---|",
    ]
    lines += [f"| {label} | {q:,.0f} | {s:,.0f} |" for label, (q, s) in timings.items()]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "wide_scale.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
