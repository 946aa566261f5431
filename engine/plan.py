"""The typed query plan the SQL front end produces and the cube answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from storage.engines.interface import COUNT_KEY, class_count_key, present_key, sum_key

Runs = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent inclusive cell runs on one axis


@dataclass(frozen=True)
class Aggregate:
    func: Literal["sum", "count", "avg", "quantile"]
    measure: str | None  # None for COUNT(*)
    name: str  # output column name (alias or canonical text)
    p: float | None = None  # a quantile's level in [0, 1] (MEDIAN: 0.5)
    disc: bool = False  # PERCENTILE_DISC / QUANTILE_DISC (read like CONT: `engine.answers.quantiles`)


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY dimension shown in the output: one value per group (its cell's label)."""

    axis: int
    name: str


@dataclass(frozen=True)
class Derived:
    """Arithmetic between aggregates (`SUM(a) / COUNT(*)`): a tree over Aggregates and numbers
    (`engine.sql.derived`), computed from their released values."""

    expr: tuple
    name: str


Output = Aggregate | GroupKey | Derived


@dataclass(frozen=True)
class OrderKey:
    output: int  # index into QueryPlan.outputs
    descending: bool = False


@dataclass(frozen=True)
class QueryPlan:
    table: str
    outputs: tuple[Output, ...]
    selection: tuple[Runs, ...]  # one entry per cube dimension, in cube order
    group_axes: tuple[int, ...] = ()  # cube axes grouped on, in GROUP BY order
    order_by: tuple[OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    notes: tuple[str, ...] = field(default=())
    # A condition on a measure with an axis: (measure, the class runs it covers).
    measure_filter: tuple[str, Runs] | None = None
    class_axes: tuple[tuple[str, int], ...] = ()  # measures released over a class axis: (name, classes)
    # query-specific truncation of SUMs over a class axis (privacy.clipping.measure_axis): the table's
    # `answers.truncate` unless a request says otherwise (off by default: truncation is biased)
    truncate: bool = False
    # Axes grouped coarser than their cells: (axis, unit) for `GROUP BY DATE_TRUNC('year', d)`, or
    # (axis, ("case", ((label, cells), …))) for a CASE over the axis's values (`Binder._case_groups`),
    # ("buckets", …) alike for fixed-width time buckets (`Binder._time_buckets`).
    coarse: tuple[tuple[int, Any], ...] = ()
    # Measures whose COUNT(m) is released (``"nullable"``): AVG(m) divides by it, as SQL does.
    present: tuple[str, ...] = ()
    # Conditions that cut bins or classes: (the selection wholly inside them, the measure
    # condition's classes wholly inside), and the share of the cut cells the condition keeps. The
    # answer lies between the two selections' (`engine.answers.misaligned`).
    inner: tuple[tuple[Runs, ...], tuple[str, Runs] | None] | None = None
    inner_share: float = 0.5
    # HAVING as a predicate over output indices (`engine.answers.having`): a filter on the released values.
    having: tuple | None = None
    # Show every selected group, outside groups ((other), NULL) included; False: only those whose
    # released count says rows are there (`engine.answers.outside_groups`).
    all_groups: bool = False
    suppress_noisy: bool = False  # flagged values as NULL (`engine.answers.noise`)

    def reads(self, agg: Aggregate) -> tuple[tuple[str, tuple[Runs, ...]], tuple[str, tuple[Runs, ...]]]:
        """(SUM key, its selection), (COUNT key, its selection) an aggregate reads: a measure's class
        axis adds the class runs (all classes, or the measure condition's) to the selection, a
        COUNT under a measure condition reads that measure's COUNT per class (rows where it is
        present), and AVG(m) / COUNT(m) of a nullable measure read COUNT(m)."""
        axes = dict(self.class_axes)
        count: tuple[str, tuple[Runs, ...]] = (COUNT_KEY, self.selection)
        if self.measure_filter is not None:
            name, filtered = self.measure_filter
            count = (class_count_key(name), self.selection + (filtered,))
        if agg.measure is None:
            return count, count
        if agg.measure in self.present and self.measure_filter is None:  # SQL: AVG(m) = SUM(m) / COUNT(m)
            count = (present_key(agg.measure), self.selection)
        if agg.func == "count":
            return count, count
        runs: Runs | None = ((0, axes[agg.measure] - 1),) if agg.measure in axes else None
        if self.measure_filter is not None and self.measure_filter[0] == agg.measure:
            runs = self.measure_filter[1]
        if agg.func == "quantile":  # read from the measure's COUNT per class (`engine.answers.quantiles`)
            assert runs is not None  # a quantile's measure has a class axis (the binder checks)
            per_class = (class_count_key(agg.measure), self.selection + (runs,))
            return per_class, per_class
        sel = self.selection if runs is None else self.selection + (runs,)
        return (sum_key(agg.measure), sel), count

    @property
    def columns(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def aggregates(self) -> list[Aggregate]:
        """The aggregates the answer reads: the outputs', and the parts of arithmetic between them."""
        out = [o for o in self.outputs if isinstance(o, Aggregate)]
        for o in self.outputs:
            if isinstance(o, Derived):
                out += [a for a in expression_parts(o.expr) if a not in out]
        return out


def expression_parts(tree: tuple) -> list[Aggregate]:
    """The aggregates in a `Derived` expression tree, left to right (repeats included)."""
    if tree[0] == "agg":
        return [tree[1]]
    return [] if tree[0] == "num" else [a for child in tree[1:] for a in expression_parts(child)]
