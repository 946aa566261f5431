"""SUM answers over a measure's class axis: query-specific truncation and its asymmetric interval.

The release holds, per cell and class, the measure's rescaled class sums (`privacy.clipping.measure_axis`).
An untruncated answer (the default) is their plain total — unbiased, additive across groups, with
the exact bar of the strategy's error model. A truncated answer (asked for: the table's
``answers.truncate`` or the query's ``truncate``; biased low where upper classes hold mass the noise
hides, tests/test_bias.py) runs Qiu et al.'s doubling test on
the *released* class sums of the query's own region and drops the top classes whose mass is not
significantly above zero: post-processing of released values only (no budget, no data, the same
answer every time). Its interval is asymmetric: the kept part's 95 % interval, widened on the side
of each dropped side by a one-sided bound on the dropped mass computed from the released values of
the dropped classes (`privacy.clipping.measure_axis.DROPPED_MASS_Z`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privacy.clipping.measure_axis import DROPPED_MASS_Z, MeasureClasses, truncate
from privacy.estimation.error import z95
from privacy.estimation.prefix import Runs


@dataclass(frozen=True)
class TruncatedSum:
    value: float
    variance: float
    ci95: tuple[float, float]
    tau: float  # the kept classes' largest |v|
    dropped_bound: tuple[float, float]  # one-sided bounds on the dropped mass: (below, above)
    classes_dropped: int


def classes_of_cube(meta: dict[str, Any], measure: str) -> MeasureClasses | None:
    """A built cube's classes for ``measure`` (public, in its clipping facts), if it has an axis."""
    axis = ((meta.get("clipping") or {}).get(measure) or {}).get("axis")
    return None if axis is None else MeasureClasses(axis["kind"], tuple(axis["edges"]))


def truncated_sum(cube: Any, key: str, selection: Sequence[Runs], classes: MeasureClasses) -> TruncatedSum | None:
    """The truncated answer of one box (last selection entry: class runs); None without an error
    model (an exact test cube), where there is nothing to test against."""
    if cube.class_variance(key, selection) is None:
        return None
    dims, runs = tuple(selection[:-1]), selection[-1]
    per_class = np.atleast_1d(cube.grouped_totals(key, selection, (len(dims),)))
    cells = [k for lo, hi in runs for k in range(lo, hi + 1)]
    normalised = {k: float(t) / classes.bounds[k] for k, t in zip(cells, per_class)}
    cut = truncate(tuple(runs), normalised, lambda r: cube.class_variance(key, dims + (r,), normalised=True), classes)
    kept_total = sum(float(t) for k, t in zip(cells, per_class) if _inside(k, cut.kept))
    # the kept part's noise; nothing kept (the answer is 0): the noise of the dropped mass it stands for
    var = cube.class_variance(key, dims + (cut.kept if cut.kept else cut.dropped,)) if cut.kept or cut.dropped else 0.0
    below = above = 0.0
    neg = classes.negative
    for side_negative in (False, True):
        side = tuple((lo, hi) for lo, hi in cut.dropped if bool(neg[lo]) == side_negative)
        if not side:
            continue
        mass = sum(float(t) for k, t in zip(cells, per_class) if _inside(k, side))
        sd = math.sqrt(max(cube.class_variance(key, dims + (side,)), 0.0))
        if side_negative:
            below = max(0.0, -mass + DROPPED_MASS_Z * sd)
        else:
            above = max(0.0, mass + DROPPED_MASS_Z * sd)
    sd = math.sqrt(max(var, 0.0))
    z = z95(noise_terms(cube, dims + (cut.kept,), (), classes.bounds)) if cut.kept else 0.0
    ci = (kept_total - z * sd - below, kept_total + z * sd + above)
    dropped = sum(hi - lo + 1 for lo, hi in cut.dropped)
    return TruncatedSum(kept_total, var, ci, cut.tau, (below, above), dropped)


def noise_terms(
    cube: Any, selection: Sequence[Runs], group_axes: Sequence[int] = (), bounds: np.ndarray | None = None
) -> float:
    """How many cells' noises one answer of ``selection`` sums (one group's, under GROUP BY): the
    selected cells of every axis the cube reads (a wide cube: only its cuboid's, `WideCube.read_axes`),
    with a class axis (last, when its class ``bounds`` are given) counted as its `effective_terms`.
    A cube measured with Gaussian noise (a ρ budget) has normal noise in every answer
    however few cells it sums: infinitely many terms, i.e. the normal quantile, exactly."""
    if cube.meta.get("currency") == "rho":
        return math.inf
    read_axes = getattr(cube, "read_axes", None)
    axes = range(len(selection)) if read_axes is None else read_axes(selection, group_axes)
    out = 1.0
    for a in axes:
        if a in group_axes:
            continue
        if bounds is not None and a == len(selection) - 1:
            out *= effective_terms(bounds, selection[a])
        else:
            out *= sum(hi - lo + 1 for lo, hi in selection[a])
    return out


def effective_terms(bounds: np.ndarray, runs: Runs) -> float:
    """(Σu_k²)²/Σu_k⁴ over the selected classes: how many equal noises a sum weighted by the class
    bounds behaves like (1 when one class dominates; the class count when all weigh the same)."""
    u2 = np.array([float(bounds[k]) ** 2 for lo, hi in runs for k in range(lo, hi + 1)])
    return float(u2.sum() ** 2 / (u2 @ u2)) if u2.size and u2.any() else 1.0


def _inside(k: int, runs: Runs) -> bool:
    return any(lo <= k <= hi for lo, hi in runs)


def note(name: str, measure: str) -> str:
    return (
        f"{name}: truncated — classes of {measure!r} whose released mass in this query's region is not "
        "significantly above zero were dropped (query-specific truncation); the interval is asymmetric and "
        "includes a bound on the dropped mass; truncated answers do not add up across groups; for the "
        'unbiased, additive answer send "truncate": false over REST, or SET prima.truncate = off on the '
        "PostgreSQL wire"
    )
