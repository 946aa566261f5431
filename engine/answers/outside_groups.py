"""Which outside groups — a category's ``(other)``, a dimension's NULL — a GROUP BY shows.

Every grouped axis keeps cells for the rows outside its declared values (`storage.schema._Axis`),
and a GROUP BY over it used to show them always: a 4-region chart had 6 bars, the two extra ones
the noise of empty cells. An outside group is now shown only when its released count says rows are
there: its noisy COUNT over the query's selection exceeds `threshold_z` of its own standard
deviations (and half a row). This reads released values only — post-processing, no privacy cost.

The threshold is set by the chance that an empty group shows, `EMPTY_GROUP_SHOWN`, from the tail of
the table's noise: Laplace's P(X > zσ) = ½·e^{−√2·z} for an ε budget (z = 4.39 at 0.1 %), the
normal's for a ρ budget (discrete Gaussian noise, z = 3.09). A sum of independent Laplace releases
(a group read from several marginal cells) is a normal scale mixture whose mixing variance is less
spread than one Laplace's, so its far tail is no heavier. (A fixed 3σ let 0.7 % of empty groups
through under Laplace noise — in CI, a NULL education of 86 ± 26 on a chart, flagged as noise.)
A group left out still counts in every total; the answer says which were left out and how
to see them (REST ``"outside_groups": "all"``, wire ``SET prima.outside_groups = all``, or the
table's ``answers.outside_groups``). A query whose condition selects only outside values of an
axis (``WHERE region IS NULL``) asked for them: they are shown.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from engine.plan import QueryPlan, Runs
from engine.synopses.cube import selected_cells
from engine.synopses.protocol import Synopsis
from privacy.estimation.prefix import cell_runs
from storage.engines.interface import COUNT_KEY, class_count_key
from storage.schema import TableSpec

EMPTY_GROUP_SHOWN = 1e-3  # the chance that an outside group with no rows shows (per group and query)
MIN_ROWS = 0.5  # and at least this many rows (an exact cube: one row or more)


def threshold_z(currency: str) -> float:
    """Standard deviations a noisy count must clear: the z with P(noise > z·σ) = `EMPTY_GROUP_SHOWN`
    under the table's noise (Laplace for "epsilon", the normal for "rho")."""
    if currency == "rho":
        return statistics.NormalDist().inv_cdf(1.0 - EMPTY_GROUP_SHOWN)
    return math.log(1.0 / (2.0 * EMPTY_GROUP_SHOWN)) / math.sqrt(2.0)  # Laplace, σ = √2·b


def measured(plan: QueryPlan, cube: Synopsis, spec: TableSpec) -> QueryPlan:
    """The plan grouped only over outside cells whose released count shows rows, its notes saying
    which were left out; returned with ``all_groups`` set (every remaining group is to be shown)."""
    if plan.all_groups or not plan.group_axes:
        return plan
    selection, hidden, z = list(plan.selection), [], threshold_z(spec.currency)
    inner = None if plan.inner is None else list(plan.inner[0])  # a cut condition's inner selection too
    cased = {a for a, unit in plan.coarse if isinstance(unit, tuple)}  # a CASE's groups mix outside and declared
    for axis in (a for a in plan.group_axes if a not in cased):
        dim = spec.dimensions[axis]
        cells = selected_cells(selection[axis]).tolist()
        outside = [c for c in cells if c >= dim.size]
        if not outside or len(outside) == len(cells):  # none, or only outside values asked for
            continue
        empty = {c for c in outside if not _has_rows(plan, cube, tuple(selection), axis, c, z)}
        if empty:
            selection[axis] = _without(selection[axis], empty)
            if inner is not None:
                inner[axis] = _without(inner[axis], empty)
            hidden += [f"{dim.name} = {_shown(dim.label(c))}" for c in sorted(empty)]
    if not hidden:
        return dataclasses.replace(plan, all_groups=True)
    return dataclasses.replace(
        plan,
        selection=tuple(selection),
        inner=None if plan.inner is None or inner is None else (tuple(inner), plan.inner[1]),
        notes=plan.notes + (_note(hidden, z),),
        all_groups=True,
    )


def _without(runs: Runs, cells: set[int]) -> Runs:
    return cell_runs([c for c in selected_cells(runs).tolist() if c not in cells])


def _has_rows(plan: QueryPlan, cube: Synopsis, selection: tuple[Runs, ...], axis: int, cell: int, z: float) -> bool:
    """Whether the released COUNT of the rows in ``cell`` (and the rest of the selection, under the
    query's measure condition) clears ``z`` standard deviations."""
    box = selection[:axis] + (((cell, cell),),) + selection[axis + 1 :]
    key, read = COUNT_KEY, box
    if plan.measure_filter is not None:  # the rows the query counts: those meeting its measure condition
        key, read = class_count_key(plan.measure_filter[0]), box + (plan.measure_filter[1],)
    count, variance = cube.total(key, read), cube.variance(key, read)
    sd = 0.0 if variance is None else math.sqrt(max(variance, 0.0))
    return count > max(z * sd, MIN_ROWS)


def _shown(label: object) -> str:
    return "NULL" if label is None else repr(label)


def _note(hidden: list[str], z: float) -> str:
    return (
        f"groups left out: {', '.join(hidden)} — rows outside the declared values whose released count does not "
        f"clear {z:.2f} standard deviations of its noise, which an empty group's would in {EMPTY_GROUP_SHOWN:.1%} "
        "of builds (likely empty; each total still counts them); "
        'show every group with "outside_groups": "all" (REST) or SET prima.outside_groups = all (SQL clients)'
    )
