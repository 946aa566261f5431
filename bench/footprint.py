"""Stored size, peak memory and build time of wide registrations (UCI Adult).

The issue's report: a 1.08 M-cell `pairwise` cube stored 554 MB (16 float32 bootstrap replicate
arrays per aggregate) and an 8-dimension build peaked at 1.66 GB RSS. Here each configuration is
registered from `examples/adult.yaml`'s public metadata (a subset of its dimensions, COUNT and
SUM(hours_per_week)) and built through the library in its own process, so its peak RSS is its own:

* Adult-6 (age/5, education, marital status, occupation, relationship, race: 1.2 M cells) with the
  default (`auto`, which measures `cuboids` above 2^20 cells or 6 dimensions) and with `pairwise`;
* Adult-8 (workclass, education, marital status, occupation, relationship, race, sex, age/10:
  10.9 M cells) with the default.

Prints the table and writes bench/results/footprint.md.
Run: .venv/bin/python bench/footprint.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ADULT = REPO.parent / "shared" / "datasets" / "adult.data"
CONFIGS = {
    "Adult-6 default (auto)": (["age", "education", "marital_status", "occupation", "relationship", "race"], 5, "auto"),
    "Adult-6 pairwise": (["age", "education", "marital_status", "occupation", "relationship", "race"], 5, "pairwise"),
    "Adult-8 default (auto)": (
        ["workclass", "education", "marital_status", "occupation", "relationship", "race", "sex", "age"],
        10,
        "auto",
    ),
}


def spec_for(dims: list[str], age_bin: int, strategy: str) -> dict:
    raw = yaml.safe_load((REPO / "examples" / "adult.yaml").read_text())
    by_name = {d["name"]: d for d in raw["dimensions"]}
    dimensions = [dict(by_name[n], bin=age_bin) if n == "age" else by_name[n] for n in dims]
    raw["source"]["csv"] = str(ADULT)
    return {**raw, "name": "adult", "dimensions": dimensions, "cube": {"strategy": strategy}}


def one(name: str) -> dict:
    """Register and build one configuration in this process; its figures as a dict."""
    sys.path.insert(0, str(REPO))
    from engine.service import Prima
    from storage.schema import TableSpec

    dims, age_bin, strategy = CONFIGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        prima = Prima(Path(tmp) / "data", seed=1)
        spec = TableSpec.model_validate(json.loads(json.dumps(spec_for(dims, age_bin, strategy), default=str)))
        prima.register(spec)
        start = time.perf_counter()
        prima.build("adult")
        seconds = time.perf_counter() - start
        status = prima.table_info("adult")["cube"]
        stored = sum(f.stat().st_size for f in (Path(tmp) / "data" / "cubes").rglob("*") if f.is_file())
        prima.close()
    cells = 1
    for d in spec.dimensions:
        cells *= d.size
    return {
        "config": name,
        "cells": cells,
        "strategy": status.get("strategy", strategy),
        "stored_mb": stored / 1e6,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "build_s": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of the configurations")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    rows = []
    for name in args.configs.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", name],
            capture_output=True,
            text=True,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
        if out.returncode != 0:
            raise SystemExit(f"{name}: {out.stderr[-2000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    lines = [
        "# Footprint of wide registrations",
        "",
        "`.venv/bin/python bench/footprint.py` — each configuration registered from `examples/adult.yaml`'s "
        "public metadata (COUNT and SUM(hours_per_week), ε = 1) and built in its own process. The issue "
        "reported 554 MB stored for a 1.08 M-cell `pairwise` cube and 1.66 GB peak RSS for an 8-dimension build.",
        "",
        "| configuration | cells | strategy | stored MB | peak RSS MB | build s |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['config']} | {r['cells']:,} | {r['strategy']} | {r['stored_mb']:.1f} | {r['peak_rss_mb']:.0f} | "
        f"{r['build_s']:.1f} |"
        for r in rows
    ]
    text = "\n".join(lines) + "\n"
    (REPO / "bench" / "results" / "footprint.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
