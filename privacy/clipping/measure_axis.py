"""Measure axes: magnitude classes of a measure, normalised class sums, query-specific truncation.

A measure declared with an axis is released as a SUM cuboid with one more axis, the measure's
*class*. Classes come from the public bounds only:

* ``log2`` — Qiu et al. (KDD'22) §4.2's magnitude classes anchored at the bound: (hi/2^(j+1), hi/2^j]
  for j = 1 … J−1 and a bottom class [0, hi/2^J], under a top class (hi/4, hi] two octaves wide; a
  signed measure gets the mirror image anchored at lo on its negative side (Qiu §5: w = w⁺ − w⁻).
  The wide top class is ours: an untruncated SUM's noise is √(Σ u_k²), which Qiu's layout makes
  √(4/3) = 1.155× today's and this one √(13/12) = 1.041× (bench/numerical_queries.py at ε = 1: the
  untruncated median 1.33× → 1.18× on Bank balance, 1.19× → 1.09× on Adult), while truncation —
  which matters where the data sit far below the bound — keeps its doubling resolution there;
* ``linear`` — n equal-width classes over [lo, hi] (TiMM/TaMM's buckets);
* ``edges`` — the admin's own class edges.

Each cell of the released cuboid holds Σ v/u_k over the cell's rows in class k, where u_k is the
largest |v| the class admits (its *class bound*). One row changes one cell by |v|/u_k ≤ 1, so the
release has L1 sensitivity 1 whatever the bounds (TaMM's noise proportional to bucket weight, with
exact class sums); answers rescale each class by u_k, so a query that touches only small classes
gets noise sized for them, not for max(|lo|, |hi|).

Query-specific truncation (Qiu Alg. 1's doubling test, run as post-processing on the *released*
class sums of the query's region): scanning the classes upward from the smallest, stop at the first
class above which the released normalised mass is not significantly above zero, and drop the classes
above it. In log2 classes a row in class k weighs v/u_k > 1/2, so that mass bounds the number of rows
there (Qiu's c_{w,τ} counts). No budget, no data: a function of released values and public bounds.

The TiMM/TaMM text we have lost its inline formulas; what is used of it here (a bucket's noise
proportional to its weight, prefix sums over buckets) is the standard matrix-mechanism algebra of a
diagonal strategy W = diag(1/u_k), reconstructed from its prose.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from privacy.estimation.prefix import cell_runs

CLASS_SUM_SENSITIVITY = 1.0  # L1: one row moves one (cell, class) sum by |v|/u_k ≤ 1
MAX_CLASSES = 64
DEFAULT_LOG2_MAX = 20  # at most this many doubling classes per side by default (2^20 ≈ 10^6)
# A class's mass above the kept ones is "significantly above zero" when it exceeds this many of its
# standard deviations (one-sided ≈ 6.7 % false-keep rate per test; Qiu's α plays this role). 1.5
# rather than 2: at ε = 1 it drops more of the noise-only top classes (Bank balance median 0.036×
# → 0.029× today's) and the interval below still covers (bench/numerical_queries.py, --z).
TRUNCATION_Z = 1.5
# The dropped mass's upper bound: estimate + this many of its standard deviations. Above the plain
# one-sided 95 % (1.645): classes are dropped *because* their noisy mass came out low, so that bound
# under-covers (tests/test_measure_axis.py: 92 %); 1.96 over-covers on Bank balance (97.5 %); 1.8 puts
# the truncated intervals at 94.6–96.6 % on Adult and Bank (bench/numerical_queries.py at ε = 1).
DROPPED_MASS_Z = 1.8


@dataclass(frozen=True)
class MeasureClasses:
    """Class edges e_0 ≤ … ≤ e_K over [lo, hi]; class k spans e_k … e_{k+1}.

    Membership (the same rule in SQL and numpy, `closed_above`): a class of negative values is
    [e_k, e_{k+1}), a class of positive values (e_k, e_{k+1}] (Qiu's (hi/2^(j+1), hi/2^j]), the lowest
    class is closed below and the highest above. A repeated edge 0 makes the *zero class* {0}, so
    ``WHERE m > 0`` selects whole classes; otherwise 0 falls in the class above it.
    """

    kind: str
    edges: tuple[float, ...]

    @property
    def count(self) -> int:
        return len(self.edges) - 1

    def _zero(self, k: int) -> bool:
        return self.edges[k] == 0 and self.edges[k + 1] == 0

    @cached_property
    def bounds(self) -> np.ndarray:
        """u_k = the largest |v| class k admits: what its normalised sums are scaled back by (the zero
        class, whose values are all 0, borrows the smallest other bound: its sums are 0 either way)."""
        e = np.asarray(self.edges)
        u = np.maximum(np.abs(e[:-1]), np.abs(e[1:]))
        return _frozen(np.where(u > 0, u, u[u > 0].min()))

    @cached_property
    def negative(self) -> np.ndarray:
        """Classes of negative values: truncated as their own side (Qiu §5: w = w⁺ − w⁻)."""
        return _frozen(np.array([self.edges[k + 1] <= 0 and not self._zero(k) for k in range(self.count)]))

    @cached_property
    def closed_above(self) -> tuple[bool, ...]:
        """Whether class k holds its upper edge (else the class above does)."""
        return tuple(k == self.count - 1 or self.edges[k + 1] > 0 or self._zero(k) for k in range(self.count))

    def closed_below(self, k: int) -> bool:
        return k == 0 or not self.closed_above[k - 1]

    def classify(self, values: np.ndarray) -> np.ndarray:
        """Class index of clipped values (reference for the SQL CASE in `storage.aggregate_sql`)."""
        v = np.asarray(values, dtype=float)
        out = np.full(v.shape, self.count - 1)
        decided = np.zeros(v.shape, dtype=bool)
        for k, (upper, closed) in enumerate(zip(self.edges[1:-1], self.closed_above)):
            inside = (v <= upper) if closed else (v < upper)
            out[inside & ~decided] = k
            decided |= inside
        return out

    def cost_factor(self, lo: float, hi: float) -> float:
        """Stddev of an untruncated whole-range SUM with this axis over today's (one Laplace cell of
        scale Δ = max(|lo|, |hi|)), for the same per-cell noise: √(Σ u_k²)/Δ."""
        return float(math.sqrt(float(np.sum(self.bounds**2))) / max(abs(lo), abs(hi)))

    def runs_for(
        self, lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False
    ) -> tuple[tuple[tuple[int, int], ...], bool]:
        """The classes covering every value of the condition [lo, hi] (None: unbounded; *_open:
        strict) among the clipped values, and whether they hold exactly its values (else the answer
        covers whole classes, and says so)."""
        e = self.edges
        if (hi is not None and (hi < e[0] or (hi == e[0] and hi_open))) or (
            lo is not None and (lo > e[-1] or (lo == e[-1] and lo_open))
        ):
            return (), True
        first, last = 0, self.count - 1
        if lo is not None:
            first = int(self.classify(np.array([lo]))[0])
            if lo_open and self.closed_above[first] and lo == e[first + 1] and first < last:
                first += 1
        if hi is not None:
            last = int(self.classify(np.array([hi]))[0])
            if hi_open and self.closed_below(last) and hi == e[last] and last > 0:
                last -= 1
        if first > last:
            return (), True
        exact_lo = lo is None or lo < e[0] or (lo == e[first] and self.closed_below(first) != lo_open)
        exact_hi = hi is None or hi > e[-1] or (hi == e[last + 1] and self.closed_above[last] != hi_open)
        return ((first, last),), bool(exact_lo and exact_hi)

    def to_json(self) -> dict:
        return {"kind": self.kind, "edges": list(self.edges), "bounds": self.bounds.tolist()}


def _frozen(a: np.ndarray) -> np.ndarray:
    """A cached array no caller can change in place."""
    a.setflags(write=False)
    return a


def log2_edges(lo: float, hi: float, classes: int | None = None) -> list[float]:
    """Qiu §4.2's doubling classes from the bounds: hi/2^j down to the bottom class (and the mirror
    image from lo on a signed measure). ``classes``: doubling classes per side, exactly Qiu's layout;
    by default down to about 1 (at most `DEFAULT_LOG2_MAX`), under a top class two octaves wide."""

    def side(top: float, floor: float) -> list[float]:
        j_max = classes if classes is not None else min(DEFAULT_LOG2_MAX, max(1, math.ceil(math.log2(max(top, 2.0)))))
        # by default the top class spans two octaves (hi/4, hi] (module docstring): no edge at hi/2;
        # a declared number of classes gets Qiu's layout exactly
        wide_top = classes is None and j_max >= 3
        out = [top / 2**j for j in range(j_max + 1) if top / 2**j > floor and not (wide_top and j == 1)]
        return out + [floor]  # descending, ends at the floor (0 or the positive lo)

    if lo > 0:
        return sorted(side(hi, lo))
    if hi < 0:
        return sorted(-x for x in side(-lo, -hi))
    positive = side(hi, 0.0) if hi > 0 else [0.0]
    negative = [-x for x in side(-lo, 0.0)] if lo < 0 else [0.0]
    return sorted(set(negative) | set(positive)) + [0.0]  # the repeated 0: the zero class {0}


def subdivided(edges: list[float], per_octave: int) -> list[float]:
    """Each doubling class away from 0 cut into ``per_octave`` geometric sub-classes per octave it
    spans (quantiles are read to within a class, so finer classes give narrower
    intervals; the SUM's untruncated noise grows by the preview's ``cost_factor``)."""
    if per_octave <= 1:
        return edges
    out = []
    for a, b in zip(edges[:-1], edges[1:]):
        out.append(a)
        if a * b > 0:
            parts = per_octave * max(1, round(abs(math.log2(b / a))))
            out += [math.copysign(abs(a) * (b / a) ** (i / parts), a) for i in range(1, parts)]
    return out + [edges[-1]]


def classes_of(
    kind: str,
    lo: float,
    hi: float,
    *,
    classes: int | None = None,
    edges: list[float] | None = None,
    per_octave: int = 1,
    zero: bool = False,
) -> MeasureClasses:
    """The classes a declaration means (validated: strictly increasing, spanning [lo, hi]).
    ``zero``: a linear axis over lo ≤ 0 ≤ hi gets the zero class {0} (0 repeated, as log2 has it)."""
    if kind == "log2":
        e = log2_edges(lo, hi, classes)
        e = (
            subdivided(e[:-1], per_octave) + [e[-1]]
            if e[-1] == 0.0 and e.count(0.0) == 2
            else subdivided(e, per_octave)
        )
    elif kind == "linear":
        n = classes or 16
        e = list(np.linspace(lo, hi, n + 1))
        if lo < 0 < hi and 0 not in e:  # keep positive and negative values in different classes
            e = sorted(set(e) | {0.0})
        if zero and lo <= 0 <= hi:
            e = sorted(set(e) | {0.0}) + [0.0]  # the repeated 0: the zero class {0}
    elif kind == "edges":
        if not edges:
            raise ValueError('axis kind "edges" needs "edges": a list of class edges')
        e = sorted(set(float(x) for x in edges) | {lo, hi})
        if e[0] < lo or e[-1] > hi:
            raise ValueError(f"axis edges must lie within the measure's bounds [{lo:g}, {hi:g}]")
        if lo < 0 < hi and 0.0 not in e:
            e = sorted(set(e) | {0.0})
    else:
        raise ValueError(f'axis kind must be "log2", "linear" or "edges"; got {kind!r}')
    e = sorted(e)
    if len(e) - 1 > MAX_CLASSES:
        raise ValueError(f"the axis has {len(e) - 1} classes; at most {MAX_CLASSES} are allowed")
    if len(e) < 3:
        raise ValueError("the axis needs at least 2 classes")
    return MeasureClasses(kind, tuple(float(x) + 0.0 for x in e))  # + 0.0: no −0.0 edge


def normalised_weights(values: np.ndarray, classes: MeasureClasses) -> tuple[np.ndarray, np.ndarray]:
    """(class index, v/u_k) per clipped value — each |weight| ≤ 1 (the release's sensitivity 1)."""
    k = classes.classify(values)
    return k, np.asarray(values, dtype=float) / classes.bounds[k]


@dataclass(frozen=True)
class Truncation:
    """The classes a truncated answer keeps, and what it says about the dropped ones."""

    kept: tuple[tuple[int, int], ...]  # class runs kept
    dropped: tuple[tuple[int, int], ...]  # class runs dropped (the top of each side)
    tau: float  # the largest |v| the kept classes admit (Qiu's Δ̄_w)


def truncate(
    selected: tuple[tuple[int, int], ...],
    normalised: dict[int, float],
    variance: Callable[[tuple[tuple[int, int], ...]], float],
    classes: MeasureClasses,
    z: float | None = None,
) -> Truncation:
    """Qiu Alg. 1 on released class sums: per side, keep the selected classes from the smallest |v|
    up to the first one above which the normalised mass is ≤ z·its standard deviation.

    ``normalised``: the query region's released Σ v/u_k per selected class; ``variance(runs)``: the
    noise variance of the normalised mass of those class runs (an error model's; public). A
    deterministic function of released values and public bounds: post-processing, no budget.
    """
    z = TRUNCATION_Z if z is None else z
    cells = [k for lo, hi in selected for k in range(lo, hi + 1)]
    neg = classes.negative
    dropped: list[int] = []
    for side in ([k for k in cells if not neg[k]], [k for k in reversed(cells) if neg[k]]):  # smallest |v| first
        sign = -1.0 if side and neg[side[0]] else 1.0
        for i in range(len(side) - 1):
            above = side[i + 1 :]
            mass = sign * sum(normalised[k] for k in above)
            if mass <= z * math.sqrt(max(variance(cell_runs(above)), 0.0)):
                dropped += above
                break
    gone = set(dropped)
    kept = [k for k in cells if k not in gone]
    tau = float(classes.bounds[kept].max()) if kept else 0.0
    return Truncation(cell_runs(kept), cell_runs(dropped), tau)


def rescale_prefix(prefix: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Prefix sums of x·u (u along the last axis) from prefix sums of x: the last axis' first
    differences are the other axes' prefix sums per class, which scale by u_k and re-accumulate."""
    per_class = np.diff(prefix, axis=-1) * u
    out = np.zeros_like(prefix)
    np.cumsum(per_class, axis=-1, out=out[..., 1:])
    return out
