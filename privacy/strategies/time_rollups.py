"""Time rollups: calendar-block totals of a date axis, released beside any cube.

Why. A dashboard's most common chart is a yearly, quarterly or monthly series of a table declared by
day. Every synopsis answers a year of a day axis by summing 365 noisy cells (or tree blocks that
straddle years), so a yearly COUNT at ε = 1 came out ±500 on 4,000 orders and a yearly SUM was all
noise. HDMM's lesson (McKenna et al., VLDB 2018, §4: measure the workload's own structure) applied to
the calendar: measure the blocks BI tools ask for — every month and every year of the axis — once,
over the whole table, and combine each block answer with the cube's own.

Mechanism. For a date axis with G grains (month and year of a day axis; year of a month axis), the
release is the vector of every block total of every grain, y = B x (x: the aggregate's totals per
date cell, summed over every other axis), plus grid noise (the project's sampler). One row lies in
exactly one block of each grain, so one neighbour moves G coordinates by at most Δ each (Δ: the
aggregate's per-row sensitivity, times k rows for a privacy unit, whose rows may fall in G·k
blocks): L1 sensitivity G·Δ over G·k coordinates, L2 Δ·√G per row (k·Δ·√G for a unit whose rows
share blocks). ε (or ρ) is the share of the build set aside for rollups, a public constant.

Combination (post-processing). A selection that is a union of whole blocks of one grain, the whole
range of every other axis, and nothing else, has two independent unbiased estimates: the cube's
(value v_c, variance s_c²) and the blocks' sum (v_r, n·σ²). Their inverse-variance weighting is the
least-squares estimate of the two: (v_c/s_c² + v_r/s_r²) / (1/s_c² + 1/s_r²), with variance
1 / (1/s_c² + 1/s_r²) — never worse than either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, mechanism
from privacy.mechanisms.sampler import RandomSource

# The share of each plain aggregate's budget (COUNT(*), SUM, COUNT(m)) its rollups take: every answer
# the blocks do not tile gets 1/0.85 = 1.18× the stddev under ε (Laplace: ∝ 1/ε; 1/√0.85 = 1.08× under
# ρ), a yearly series of a day axis 0.15–0.25× (bench/time_rollups.py; 0.2 gave 0.14× at 1.25×).
ROLLUP_SHARE = 0.15


@dataclass(frozen=True)
class RollupRelease:
    """One aggregate's block totals per grain, and the mechanism that released them."""

    values: tuple[np.ndarray, ...]  # per grain: the noisy total of each block
    mechanism: Mechanism

    @property
    def block_variance(self) -> float:
        """The noise variance of every released block total (the same mechanism for all)."""
        return float(self.mechanism.variance)


def rollup_mechanism(grains: int, sensitivity: float, budget: float | Budget, coordinates: int = 1) -> Mechanism:
    """The release of ``grains`` block vectors: one row moves one block per grain by ≤ Δ
    (``sensitivity``, already k·Δ for a privacy unit of k rows) — L1 G·Δ over G·k coordinates, L2
    Δ·√G (module docstring)."""
    return mechanism(
        grains * sensitivity,
        budget,
        coordinates=grains * coordinates,
        l2_sensitivity=sensitivity * float(np.sqrt(grains)),
    )


def block_totals(per_cell: np.ndarray, blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The true total of every block of every grain: ``blocks[g][c]`` is the block of date cell c at
    grain g (−1: a cell no block holds, NULL or outside the declared range)."""
    out = []
    for ids in blocks:
        inside = ids >= 0
        out.append(np.bincount(ids[inside], weights=per_cell[: len(ids)][inside], minlength=int(ids.max()) + 1))
    return out


def release(
    per_cell: np.ndarray,
    blocks: Sequence[np.ndarray],
    sensitivity: float,
    budget: float | Budget,
    source: RandomSource,
    coordinates: int = 1,
) -> RollupRelease:
    """Every block total of every grain with the rollup mechanism's noise (`rollup_mechanism`)."""
    m = rollup_mechanism(len(blocks), sensitivity, budget, coordinates)
    totals = block_totals(per_cell, blocks)
    noisy = m.release(np.concatenate(totals), source)
    cuts = np.cumsum([len(t) for t in totals])[:-1]
    return RollupRelease(tuple(np.split(np.asarray(noisy, dtype=float), cuts)), m)


def combine(
    cube_value: float, cube_variance: float, rollup_value: float, rollup_variance: float
) -> tuple[float, float]:
    """Inverse-variance weighting of two independent unbiased estimates of one total (module docstring)."""
    if cube_variance <= 0:
        return cube_value, cube_variance
    if rollup_variance <= 0:
        return rollup_value, rollup_variance
    w_cube, w_rollup = 1.0 / cube_variance, 1.0 / rollup_variance
    return (w_cube * cube_value + w_rollup * rollup_value) / (w_cube + w_rollup), 1.0 / (w_cube + w_rollup)
