"""Choosing a privacy unit's row bound k privately (``"max_rows": "auto"``).

The same pattern as PRIMA's clipping histogram: a DP histogram of *rows per unit* — one bucket per
range of row counts, each unit counted once, so adding or removing one unit (with all its rows)
moves one bucket by 1: L1 sensitivity 1, one coordinate — released with its own ε share, and k
read from the noisy histogram alone: the smallest bucket edge at or above the declared quantile of
units (default 0.9: k covers 90 % of people fully; the rest are truncated to k). The share of rows
that truncation drops is estimated from the same noisy histogram and published with k.
"""

from __future__ import annotations

import numpy as np

from privacy.mechanisms.sampler import GridLaplace, RandomSource

UNIT_HISTOGRAM_SENSITIVITY = 1.0  # one unit lands in one bucket (one coordinate)
MAX_ROWS = 10_000  # the largest k (and the schema's limit)


def bucket_edges() -> np.ndarray:
    """Upper edges of the row-count buckets: 1–8 one by one, then ~×1.25 steps up to `MAX_ROWS`."""
    edges = list(range(1, 9))
    while edges[-1] < MAX_ROWS:
        edges.append(min(MAX_ROWS, int(np.ceil(edges[-1] * 1.25))))
    return np.array(edges, dtype=np.int64)


def bucketed(rows: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Units per bucket from (rows per unit, how many units have that many): the true histogram."""
    edges = bucket_edges()
    index = np.minimum(np.searchsorted(edges, np.asarray(rows, dtype=np.int64), side="left"), len(edges) - 1)
    out = np.zeros(len(edges))
    np.add.at(out, index, np.asarray(units, dtype=float))
    return out


def release(histogram: np.ndarray, epsilon: float, source: RandomSource) -> np.ndarray:
    """ε-DP release of the rows-per-unit histogram (sensitivity 1, one coordinate)."""
    return GridLaplace(UNIT_HISTOGRAM_SENSITIVITY, epsilon, coordinates=1).release(histogram, source)


def choose_k(noisy: np.ndarray, quantile: float) -> int:
    """The smallest bucket edge where the noisy cumulative count of units reaches ``quantile`` of the
    noisy total. The counts are used as released, negative ones included: their noise has mean 0,
    so the total and every cumulative sum are unbiased (clipping at 0 would let the many empty high
    buckets pull k up; dropping insignificant buckets would cut a heavy tail off and pull it down).
    Post-processing of the release only; 1 when the noisy total is not positive."""
    total = float(np.sum(noisy))
    if total <= 0:
        return 1
    reached = np.flatnonzero(np.cumsum(noisy) >= quantile * total)
    return int(bucket_edges()[reached[0] if reached.size else -1])


SIGNIFICANCE_BETA = 0.1  # an empty bucket passes `significant` with probability ≤ β/(2K)


def significant(noisy: np.ndarray, epsilon: float) -> np.ndarray:
    """Noisy counts above ln(K/β)/ε, others 0 (the CLASP histogram's rule)."""
    return np.where(noisy > np.log(len(noisy) / SIGNIFICANCE_BETA) / epsilon, noisy, 0.0)


def truncated_share(noisy: np.ndarray, k: int, epsilon: float) -> float:
    """The share of rows a bound k drops, estimated from the noisy histogram's significant buckets
    (each at the midpoint of its row counts; the empty high buckets' noise, times their large row
    counts, would swamp it otherwise): public, derived from released values only, an estimate."""
    edges = bucket_edges()
    lower = np.concatenate([[1], edges[:-1] + 1])
    mid = (lower + edges) / 2.0
    counts = significant(noisy, epsilon)
    rows = float(np.sum(counts * mid))
    return 0.0 if rows <= 0 else float(np.sum(counts * np.maximum(mid - k, 0.0)) / rows)
