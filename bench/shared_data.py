"""What several benchmarks read the same way: the UCI Adult rows, PRIMA's Normal, random query ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
RESULTS = Path(__file__).resolve().parent / "results"


def publish(name: str, lines: list[str]) -> str:
    """Write a benchmark's report to bench/results/<name> and print it (every bench prints its figures)."""
    text = "\n".join(lines)
    (RESULTS / name).write_text(text)
    print(text)
    return text


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


def _levels(z: np.ndarray, dom: int) -> np.ndarray:
    """Standard-normal values discretised to ``dom`` equal-width levels over [−3, 3] (ends clipped)."""
    return np.clip(np.floor((z + 3.0) / 6.0 * dom), 0, dom - 1).astype(np.int64)


def prima_normal(n: int, d: int, dom_a: int, dom_m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PRIMA's synthetic Normal (§6.1): a multivariate normal, mean 0, variance 1, covariance 0.5
    between every two attributes, discretised to dom(A) levels per dimension; the measure is one
    more such attribute, discretised to 1..dom(M). Returns (attributes (d, n), measure (n,))."""
    rng = np.random.default_rng(seed)  # data generation, not noise
    cov = np.full((d + 1, d + 1), 0.5) + 0.5 * np.eye(d + 1)
    z = rng.multivariate_normal(np.zeros(d + 1), cov, size=n, method="cholesky")
    attrs = np.stack([_levels(z[:, k], dom_a) for k in range(d)])
    return attrs, _levels(z[:, d], dom_m) + 1.0


GEN_DOMAIN = 30  # values per dimension of the synthetic `gen` table (bench/perf.py, bench/sources.py)


def gen_rows_sql(dims: int) -> str:
    """DuckDB SELECT over ``range`` giving the synthetic rows: ``dims`` integer dimensions a0.. with
    30 values each and a measure m in 0..30, all from hashes of the row number (deterministic)."""
    cols = ", ".join(f"CAST(hash(range * {7 + i}) % {GEN_DOMAIN} AS INTEGER) AS a{i}" for i in range(dims))
    return f"SELECT {cols}, CAST(hash(range * 31) % 31 AS DOUBLE) AS m"


def gen_spec(source: dict, dims: int, strategy: str = "identity") -> dict:
    """The registration of the synthetic table: public domains 0..29 and measure bounds [0, 30]."""
    return {
        "name": "gen",
        "source": source,
        "epsilon": 1.0,
        "dimensions": [{"name": f"a{i}", "type": "int", "lo": 0, "hi": GEN_DOMAIN - 1} for i in range(dims)],
        "measures": [{"name": "m", "lo": 0, "hi": 30}],
        "cube": {"strategy": strategy},
    }
