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
