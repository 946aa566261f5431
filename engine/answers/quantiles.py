"""Quantiles (MEDIAN, PERCENTILE_CONT/DISC, QUANTILE_CONT, APPROX_QUANTILE) from released class counts.

A measure whose axis has ``"count": true`` releases, per cell, the number of rows in each of its
classes (`privacy.clipping.measure_axis`). A quantile of the measure over a query's region is a read of those
counts' cumulative distribution — post-processing of released values and public class edges only,
free after the build, the same answer every time:

1. the query region's noisy count per class, c_k (one grouped read, the class axis last);
2. a monotone CDF: weighted isotonic regression (pool-adjacent-violators) of the noisy cumulative
   counts Ŝ_k = Σ_{j≤k} c_j, weights 1/Var(Ŝ_k), floored at 0 — the least-squares monotone fit;
   N̂, its last value, is the row count;
3. the rank r = p·N̂ falls in the first class whose fitted cumulative count reaches it, and the
   value is read within that class by a stated *within-class model*: values spread uniformly over
   the class, or log-uniformly for a ``log2`` axis' doubling classes away from 0 (the geometric
   interpolation that matches how those classes are laid out);
4. the 95 % interval covers the rank uncertainty and the class resolution. The true quantile lies in
   class k exactly when D_{k−1} < 0 ≤ D_k, with D_k = S_k − p·N (S_k the true cumulative count;
   D is non-decreasing in k). A class k is ruled out from below when D̂_k + z·sd(D̂_k) < 0 and from
   above when D̂_{k−1} − z·sd(D̂_{k−1}) ≥ 0; the interval runs from the lower edge of the first class
   not ruled out to the upper edge of the last — whole classes, so that it holds wherever the rows
   lie inside them. Var(D̂_k) = (1−p)·Var(Ŝ_k) + p·Var(N̂ − Ŝ_k) − p(1−p)·Var(N̂), from the variances
   of three class-run totals the error model states (the covariance follows from Var(N̂)).

PERCENTILE_DISC returns a value of the data in SQL; the release holds no values, so DISC is read by
the same model as CONT (a note says so). Values are of the clipped measure, as SUM's are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import deadline
from engine.synopses.protocol import Synopsis
from privacy.clipping.measure_axis import MeasureClasses
from privacy.estimation.error import z95
from privacy.estimation.prefix import Runs, cell_runs, selected_cells

DISC_NOTE = (
    "{name}: PERCENTILE_DISC/QUANTILE_DISC return a value of the data in SQL; the release holds class "
    "counts, not values, so it is read like PERCENTILE_CONT"
)
NOTE = (
    "{name}: read from the released counts per class of {measure!r} (a monotone fit; within a class the "
    "values are taken as spread {model}); the 95 % interval covers the rank's noise and whole classes; no stddev"
)


@dataclass(frozen=True)
class Quantiles:
    """Per group (row-major): value (NaN: no rows), interval ends."""

    values: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def within_class_model(classes: MeasureClasses) -> str:
    return "log-uniformly (uniformly in classes touching 0)" if classes.kind == "log2" else "uniformly"


def answer(
    cube: Synopsis, key: str, selection: Sequence[Runs], group_axes: Sequence[int], p: float, classes: MeasureClasses
) -> Quantiles:
    """The quantile at level ``p`` of every group (``selection``'s last entry: the class runs read)."""
    dims, runs, groups = tuple(selection[:-1]), selection[-1], tuple(group_axes)
    ks = [int(k) for k in selected_cells(runs)]
    counts = np.asarray(cube.grouped_totals(key, dims + (runs,), groups + (len(dims),)), dtype=np.float64)
    counts = counts.reshape(-1, len(ks))
    var_s, var_t = _run_variances(cube, key, dims, groups, ks)  # (groups, len(ks)) each
    var_n = var_s[:, -1]
    cumulative = np.cumsum(counts, axis=1)
    values, lower, upper = (np.full(len(counts), np.nan) for _ in range(3))
    z = z95(max(1, math.prod(sum(b - a + 1 for a, b in r) for i, r in enumerate(dims) if i not in groups)))
    for g in range(len(counts)):
        if g % 256 == 0:
            deadline.check()
        fitted = _monotone(cumulative[g], var_s[g])
        n = fitted[-1]
        if n <= 0:
            continue
        values[g] = _read(fitted, p * n, ks, classes)
        d = cumulative[g] - p * cumulative[g, -1]
        sd = np.sqrt(np.maximum((1 - p) * var_s[g] + p * var_t[g] - p * (1 - p) * var_n[g], 0.0))
        lower[g], upper[g] = _interval(d, sd, z, ks, classes)
        lower[g], upper[g] = min(lower[g], values[g]), max(upper[g], values[g])
    return Quantiles(values, lower, upper)


def _run_variances(
    cube: Synopsis, key: str, dims: tuple, groups: tuple, ks: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, Var(Ŝ_k) (the classes up to the k-th read) and Var(N̂ − Ŝ_k) (those above it); zeros
    for an exact cube."""
    n_groups = math.prod(len(selected_cells(dims[a])) for a in groups) if groups else 1

    def var(part: list[int]) -> np.ndarray:
        if not part:
            return np.zeros(n_groups)
        sel = dims + (cell_runs(part),)
        v = cube.grouped_variances(key, sel, groups) if groups else cube.variance(key, sel)
        return np.zeros(n_groups) if v is None else np.broadcast_to(np.asarray(v, dtype=float).ravel(), (n_groups,))

    deadline.check()
    below = np.stack([var(ks[: i + 1]) for i in range(len(ks))], axis=1)
    above = np.stack([var(ks[i + 1 :]) for i in range(len(ks))], axis=1)
    return below, above


def _monotone(cumulative: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing, non-negative fit of noisy cumulative counts (weights 1/Var)."""
    from scipy.optimize import isotonic_regression  # (not at the top: scipy is ~0.35 s of every server's
    # start-up; a process's first quantile answer imports it once)

    weights = 1.0 / np.maximum(variances, 1e-9) if np.any(variances > 0) else np.ones_like(cumulative)
    return np.maximum(isotonic_regression(cumulative, weights=weights).x, 0.0)


def _read(fitted: np.ndarray, rank: float, ks: list[int], classes: MeasureClasses) -> float:
    """The value at ``rank`` rows: the first class whose cumulative count reaches it, read within it."""
    i = int(np.searchsorted(fitted, rank, side="left"))
    i = min(i, len(ks) - 1)
    below = fitted[i - 1] if i > 0 else 0.0
    inside = fitted[i] - below
    share = 0.5 if inside <= 0 else min(max((rank - below) / inside, 0.0), 1.0)
    return _within(classes, ks[i], share)


def _within(classes: MeasureClasses, k: int, share: float) -> float:
    """The value a ``share`` of the way through class k's rows, by the within-class model."""
    a, b = classes.edges[k], classes.edges[k + 1]
    if classes.kind == "log2" and a * b > 0:  # a doubling class away from 0: log-uniform
        return float(math.copysign(math.exp(math.log(abs(a)) + share * (math.log(abs(b)) - math.log(abs(a)))), a))
    return float(a + share * (b - a))


def _interval(d: np.ndarray, sd: np.ndarray, z: float, ks: list[int], classes: MeasureClasses) -> tuple[float, float]:
    """Whole classes not ruled out by the tests on D̂ (module docstring, step 4)."""
    possible = [i for i in range(len(ks)) if d[i] + z * sd[i] >= 0 and (i == 0 or d[i - 1] - z * sd[i - 1] < 0)]
    if not possible:  # every class ruled out (noise pulling both ways): the whole read range
        possible = list(range(len(ks)))
    return classes.edges[ks[possible[0]]], classes.edges[ks[possible[-1]] + 1]


def notes(name: str, measure: str, classes: MeasureClasses, disc: bool) -> list[str]:
    out = [NOTE.format(name=name, measure=measure, model=within_class_model(classes))]
    return out + ([DISC_NOTE.format(name=name)] if disc else [])


def as_rows(q: Quantiles) -> tuple[list[Any], list[Any]]:
    """Values (None where no rows are estimated) and intervals per group."""
    values = [None if math.isnan(v) else float(v) for v in q.values.tolist()]
    cis = [None if v is None else [float(a), float(b)] for v, a, b in zip(values, q.lower.tolist(), q.upper.tolist())]
    return values, cis
