"""What several benchmarks read the same way: the UCI Adult rows and random query ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def adult_rows() -> list[list[str]]:
    """adult.data + adult.test (48,842 rows): the 15 fields of every complete line, stripped."""
    rows = []
    for name in ("adult.data", "adult.test"):
        for line in (SHARED / name).read_text().splitlines():
            fields = [f.strip() for f in line.split(",")]
            if len(fields) == 15 and fields[0].isdigit():
                rows.append(fields)
    return rows


def random_range(rng: np.random.Generator, n: int) -> tuple[tuple[int, int]]:
    """A uniformly random cell range [l, r] ⊆ [0, n) as a one-run list."""
    lo, hi = sorted(rng.integers(0, n, 2))
    return ((int(lo), int(hi)),)


GEN_DOMAIN = 30  # values per dimension of the synthetic `gen` table (bench/perf.py, bench/sources.py)


def gen_rows_sql(dims: int) -> str:
    """DuckDB SELECT over ``range`` giving the synthetic rows: ``dims`` integer dimensions a0.. with
    30 values each and a measure m in 0..30, all from hashes of the row number (deterministic)."""
    cols = ", ".join(f"CAST(hash(range * {7 + i}) % {GEN_DOMAIN} AS INTEGER) AS a{i}" for i in range(dims))
    return f"SELECT {cols}, CAST(hash(range * 31) % 31 AS DOUBLE) AS m"


def gen_spec(source: dict, dims: int, strategy: str = "identity") -> dict:
    """The registration of the synthetic table: public domains 0..29 and measure bounds [0, 30]."""
    return {"name": "gen", "source": source, "epsilon": 1.0,
            "dimensions": [{"name": f"a{i}", "type": "int", "lo": 0, "hi": GEN_DOMAIN - 1} for i in range(dims)],
            "measures": [{"name": "m", "lo": 0, "hi": 30}], "cube": {"strategy": strategy}}
