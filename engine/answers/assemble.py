"""Answering a bound plan from a cube: values, their standard deviations, and notes."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np

from engine.answers import classes as class_answers
from engine.answers import having, misaligned, model_bounds, noise, outside_groups, quantiles, ranking
from engine.errors import QueryError, TooLarge
from engine.plan import Aggregate, Derived, GroupKey, QueryPlan
from engine.sql import derived
from engine.synopses.cube import selected_cells
from engine.synopses.protocol import Synopsis
from privacy.estimation.error import Z95_NORMAL, z95, z975
from privacy.estimation.prefix import cell_runs
from storage.engines.interface import present_key
from storage.schema import DateDimension, TableSpec

# AVG = SUM/COUNT is withheld when the noisy count is below 1 or within two of its own standard
# deviations of zero: the ratio would be dominated by noise (or divide by ~0).
MIN_AVG_COUNT = 1.0
MAX_GROUP_ROWS = 1_000_000


def answer(plan: QueryPlan, cube: Synopsis, spec: TableSpec, clamp: bool = True) -> dict[str, Any]:
    """Rows (one, or one per group) with a stddev, a 95 % interval and a noise flag for every
    aggregate value.

    ``clamp`` (default) moves each value and its interval into what the aggregate can possibly be
    (`clamp_answer`); ``clamp=False`` keeps the raw, unbiased estimates that add up across groups.
    Outside groups show only when measured (`engine.answers.outside_groups`), and noisy values are
    flagged or NULL (`engine.answers.noise`).
    """
    plan = outside_groups.measured(_released_present_counts(plan, cube), cube, spec)
    ranges = [
        possible_range(o, cube) if isinstance(o, Aggregate) and o.func != "quantile" else None for o in plan.outputs
    ]
    return noise.flagged(_answer(plan, cube, spec, clamp), plan.suppress_noisy, ranges)


def _answer(plan: QueryPlan, cube: Synopsis, spec: TableSpec, clamp: bool) -> dict[str, Any]:
    if plan.coarse:
        return _coarse_groups(plan, cube, spec, clamp)
    result = misaligned.answer(plan, cube, spec, ALIGNED) if plan.inner is not None else _unclamped(plan, cube, spec)
    result["notes"] = result["notes"] + _chosen_clipping_notes(plan, cube, spec) + _unit_bound_notes(cube)
    return clamp_answer(result, plan, cube) if clamp else result


def _unit_bound_notes(cube: Synopsis) -> list[str]:
    """A privacy unit's row bound k leaves out each unit's rows beyond k (a salted-hash choice of
    which): SQL counts them, the cube cannot. the events example's COUNT(*) came back
    22 % below SQL's with k = 17 and nothing said."""
    unit = cube.meta.get("privacy_unit")
    if not unit or not unit.get("max_rows"):
        return []
    estimate = (
        " (the cube status shows the build's noisy estimate of their share, low where a few units hold many rows)"
        if "noisy_share_of_rows_truncated" in unit
        else ""
    )
    return [
        f"each {unit['column']!r} (the privacy unit) contributes at most {unit['max_rows']} rows to this cube: "
        f"rows beyond that are in no answer{estimate}, so COUNTs and SUMs estimate the bounded table"
    ]


def _chosen_clipping_notes(plan: QueryPlan, cube: Synopsis, spec: TableSpec) -> list[str]:
    """SUMs and AVGs of a measure whose clip range the build chose from a noisy histogram (sbs, clasp,
    support: PRIMA's double-sided clipping) narrower than declared estimate the clipped values' answer:
    clasp chose [1,226, 17,137] for Bank's balance, raising every smaller balance to 1,226 (+45 % on
    the total, outside its bar). The answer says so; the bias is not in the interval."""
    out = []
    for agg in plan.aggregates:
        clip = (cube.meta.get("clipping") or {}).get(agg.measure or "")
        if agg.func == "count" or not clip or clip.get("strategy", "fixed") == "fixed":
            continue
        declared = spec.declared_measure(agg.measure or "")
        if clip["lo"] > declared.lo or clip["hi"] < declared.hi:
            out.append(
                f"{agg.name}: {agg.measure!r} is clipped to [{clip['lo']:.6g}, {clip['hi']:.6g}], a range the "
                f"build chose privately ({clip['strategy']}) inside the declared [{declared.lo:g}, {declared.hi:g}]: "
                "values outside it count as its nearest end, so this estimates the answer on clipped values "
                'and the interval does not include the difference (declare "clipping": "fixed" for SQL\'s '
                "answer within the declared bounds)"
            )
    return out


def _released_present_counts(plan: QueryPlan, cube: Synopsis) -> QueryPlan:
    """The plan without COUNT(m) reads this cube does not hold (built by an earlier version): COUNT(*)
    stands in, and the answer says so."""
    released = cube.meta.get("errors")
    missing = [m for m in plan.present if released is not None and present_key(m) not in released]
    if not missing or not any(a.measure in missing and a.func != "sum" for a in plan.aggregates):
        return plan
    note = (
        f"AVG/COUNT of {', '.join(map(repr, missing))} count all rows (COUNT(*)): this cube was built before "
        "COUNT(measure) was released; rebuild it to count only the rows where the measure is present"
    )
    return dataclasses.replace(
        plan, present=tuple(m for m in plan.present if m not in missing), notes=plan.notes + (note,)
    )


def _coarse_groups(plan: QueryPlan, cube: Synopsis, spec: TableSpec, clamp: bool) -> dict[str, Any]:
    """`GROUP BY DATE_TRUNC('year', d)` on a finer date dimension: each year is a range over its
    cells, answered as its own query (so its error bar is the model's exact range variance), its
    rows tagged with the year; ORDER BY / LIMIT then apply to all rows."""
    (axis, unit), rest = plan.coarse[0], plan.coarse[1:]
    dim = spec.dimensions[axis]
    key_at = next(i for i, o in enumerate(plan.outputs) if isinstance(o, GroupKey) and o.axis == axis)
    buckets = labelled_cells(plan, spec, axis)
    if len(buckets) > MAX_GROUP_ROWS:
        raise TooLarge(f"GROUP BY would return more than {MAX_GROUP_ROWS} rows")
    sub_outputs = tuple(o for i, o in enumerate(plan.outputs) if i != key_at)
    rows: list[list[Any]] = []
    sds: list[list[Any]] = []
    cis: list[list[Any]] = []
    notes = list(plan.notes)
    truncation: dict[str, Any] = {}
    for label, cells in buckets.items():
        selection = tuple(cell_runs(cells) if a == axis else runs for a, runs in enumerate(plan.selection))
        sub = dataclasses.replace(
            plan,
            outputs=sub_outputs,
            selection=selection,
            coarse=rest,
            order_by=(),
            limit=None,
            offset=0,
            group_axes=tuple(a for a in plan.group_axes if a != axis),
            having=None,
        )
        part = _answer(sub, cube, spec, clamp)
        for values, sd, ci in zip(part["rows"], part["stddev"], part["ci95"]):
            rows.append(values[:key_at] + [label] + values[key_at:])
            sds.append(sd[:key_at] + [None] + sd[key_at:])
            cis.append(ci[:key_at] + [None] + ci[key_at:])
        notes += [n for n in part["notes"] if n not in notes]
        for name, cut in part.get("truncation", {}).items():
            facts, seen = _grouped_truncation(cut), truncation.get(name)
            truncation[name] = (
                facts
                if seen is None
                else {
                    "groups_truncated": seen["groups_truncated"] + facts["groups_truncated"],
                    "tau_min": min(seen["tau_min"], facts["tau_min"]),
                    "tau_max": max(seen["tau_max"], facts["tau_max"]),
                }
            )
    if len(rows) > MAX_GROUP_ROWS:
        raise TooLarge(f"GROUP BY would return {len(rows)} rows; the limit is {MAX_GROUP_ROWS}")
    notes.append(
        f"{plan.outputs[key_at].name}: {dim.name} grouped by CASE — each group is the set of its values, "
        "answered as one query"
        if isinstance(unit, tuple)
        else f"{plan.outputs[key_at].name}: {dim.name} grouped by {unit} — each group is the range of its "
        f"{getattr(dim, 'granularity', '')}s, answered as one query"
    )
    rows, sds, cis = having.keep(plan.having, rows, sds, cis)
    ranked = _ranked(plan, rows, sds, notes)
    rows, sds, cis = _order_and_page(plan, rows, sds, cis)
    groups = [o.name for o in plan.outputs if isinstance(o, GroupKey)]
    result = {"columns": plan.columns, "rows": rows, "stddev": sds, "ci95": cis, "group_columns": groups} | ranked
    return result | ({"truncation": truncation} if truncation else {})


def domain_answer(plan: QueryPlan, spec: TableSpec) -> dict[str, Any]:
    """A GROUP BY without aggregates — BI tools listing a column's values — from the declared domain
    (public metadata): every selected value, no cube read, no build, no budget."""
    keys = [list(labelled_cells(plan, spec, axis, declared=True)) for axis in plan.group_axes]
    if math.prod(len(k) for k in keys) > MAX_GROUP_ROWS:
        raise TooLarge(f"GROUP BY would return more than {MAX_GROUP_ROWS} rows")
    position = {axis: i for i, axis in enumerate(plan.group_axes)}
    combos = [list(c) for c in itertools.product(*keys)] if keys else []
    outputs = [o for o in plan.outputs if isinstance(o, GroupKey)]
    assert len(outputs) == len(plan.outputs)  # no aggregate: every output is a group key
    rows = [[combo[position[o.axis]] for o in outputs] for combo in combos]
    blank = [[None] * len(plan.outputs) for _ in rows]
    rows, sds, cis = _order_and_page(plan, rows, blank, [list(b) for b in blank])
    return {
        "columns": plan.columns,
        "rows": rows,
        "stddev": sds,
        "ci95": cis,
        "noisy": [[None] * len(plan.outputs) for _ in rows],
        "group_columns": [o.name for o in plan.outputs],
        "notes": list(plan.notes)
        + ["no aggregate: the declared values of the grouped columns (public metadata), not the data's"],
    }


def labelled_cells(plan: QueryPlan, spec: TableSpec, axis: int, declared: bool = False) -> dict[Any, list[int]]:
    """A grouped axis's selected cells by the group key they show: each cell's own label, or under
    `DATE_TRUNC` at a coarser unit (`plan.coarse`) the label of its truncated date — in domain order
    (``declared``: the declared cells only, not the NULL and other cells)."""
    dim, unit = spec.dimensions[axis], dict(plan.coarse).get(axis)
    out: dict[Any, list[int]] = {}
    if isinstance(unit, tuple):  # a CASE over the dimension's values (`Binder._case_groups`): its groups in order
        selected = set(selected_cells(plan.selection[axis]).tolist())
        for label, cells in unit[1]:
            kept = [c for c in cells if c in selected and not (declared and c >= dim.size)]
            if kept:
                out[label] = kept
        return out
    for cell in selected_cells(plan.selection[axis]):
        if declared and cell >= dim.size:
            continue
        label = (
            dim.truncated_label(int(cell), unit) if unit and isinstance(dim, DateDimension) else dim.label(int(cell))
        )
        out.setdefault(label, []).append(int(cell))
    return out


def _unclamped(plan: QueryPlan, cube: Synopsis, spec: TableSpec) -> dict[str, Any]:
    if not plan.group_axes:
        return _single_row(plan, cube)
    shape = [selected_cells(plan.selection[a]).size for a in plan.group_axes]
    n_rows = int(np.prod(shape)) if shape else 1
    if n_rows > MAX_GROUP_ROWS:
        raise TooLarge(f"GROUP BY would return {n_rows} rows; the limit is {MAX_GROUP_ROWS}")
    notes = list(plan.notes) + cube.error_notes(plan.selection, plan.group_axes, _reads(plan))
    columns_values: list[list[Any]] = []
    columns_sd: list[list[Any]] = []
    columns_ci: list[list[Any] | None] = []  # per-group intervals where they are not value ± 1.96·sd
    truncation: dict[str, Any] = {}
    for out in plan.outputs:
        if isinstance(out, GroupKey):
            columns_values.append(_labels(plan, spec, out.axis, shape))
            columns_sd.append([None] * n_rows)
            columns_ci.append(None)
            continue
        if isinstance(out, Aggregate) and out.func == "quantile":
            values, intervals = _quantiles(out, plan, cube, notes)
            columns_values.append(values)
            columns_sd.append([None] * n_rows)
            columns_ci.append(intervals)
            continue
        cuts = None if isinstance(out, Derived) else _grouped_truncated(out, plan, cube, shape)
        if cuts is not None and isinstance(out, Aggregate):
            columns_values.append([c.value for c in cuts])
            columns_sd.append([math.sqrt(max(c.variance, 0.0)) for c in cuts])
            columns_ci.append([list(c.ci95) for c in cuts])
            truncation[out.name] = {
                "groups_truncated": sum(c.classes_dropped > 0 for c in cuts),
                "tau_min": min(c.tau for c in cuts),
                "tau_max": max(c.tau for c in cuts),
            }
            notes.append(class_answers.note(out.name, out.measure or ""))
            continue
        interval: list[Any] | None
        if isinstance(out, Derived):
            value, var, interval = _grouped_derived(out, plan, cube)
            withheld = 0
        else:
            value, var, withheld, interval = _aggregate(out, plan, cube)
        columns_values.append(_as_list(value))
        columns_sd.append([None] * n_rows if var is None else _as_list(np.sqrt(np.maximum(var, 0.0))))
        columns_ci.append(interval)
        if withheld:
            notes.append(f"{out.name}: {withheld} value(s) withheld (null): the noisy count is too close to zero")
    rows = [list(r) for r in zip(*columns_values)]
    sds = [list(r) for r in zip(*columns_sd)]
    cis = [[None if col is None else col[i] for col in columns_ci] for i in range(n_rows)]
    rows, sds, cis = having.keep(plan.having, rows, sds, cis)
    ranked = _ranked(plan, rows, sds, notes)
    rows, sds, cis = _order_and_page(plan, rows, sds, cis)
    _fill_ci95(rows, sds, cis, [z95(_terms(o, plan, cube)) if isinstance(o, Aggregate) else None for o in plan.outputs])
    groups = [o.name for o in plan.outputs if isinstance(o, GroupKey)]
    result = {"columns": plan.columns, "rows": rows, "stddev": sds, "ci95": cis, "group_columns": groups} | ranked
    return result | ({"truncation": truncation} if truncation else {})


def _reads(plan: QueryPlan) -> list[tuple[str, tuple]]:
    """Every (key, selection) the answer reads (a wide table's class axes may route them to a model)."""
    return list(dict.fromkeys(read for agg in plan.aggregates for read in plan.reads(agg)))


def _ranked(plan: QueryPlan, rows: list[list[Any]], sds: list[list[Any]], notes: list[str]) -> dict[str, Any]:
    """The answer's notes, and its `ranking` field and note when a LIMIT keeps the top of noisy
    groups (`engine.answers.ranking`)."""
    facts = ranking.ranking(plan, rows, sds)
    if facts is None:
        return {"notes": notes}
    said = ranking.note(facts)
    return {"notes": notes + ([said] if said else []), "ranking": facts}


MAX_TRUNCATED_GROUPS = 10_000  # beyond this, grouped SUMs over a class axis are answered untruncated


def _grouped_truncated(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis, shape: list[int]
) -> list[class_answers.TruncatedSum] | None:
    """Per group (row-major), the truncated SUM: each group's box tested on its own class sums."""
    if (
        agg.func != "sum"
        or not plan.truncate
        or agg.measure not in dict(plan.class_axes)
        or math.prod(shape) > MAX_TRUNCATED_GROUPS
    ):
        return None
    (key, sel), _ = plan.reads(agg)
    cells = [selected_cells(plan.selection[a]) for a in plan.group_axes]
    out = []
    for index in np.ndindex(*shape):
        box = list(sel)
        for a, c, i in zip(plan.group_axes, cells, index):
            box[a] = ((int(c[i]), int(c[i])),)
        cut = _truncated(agg, plan, cube, key, tuple(box))
        if cut is None:
            return None
        out.append(cut)
    return out


def _single_row(plan: QueryPlan, cube: Synopsis) -> dict[str, Any]:
    """The hot path for dashboard tiles: scalars only, no per-group arrays."""
    if plan.limit == 0 or plan.offset > 0:  # `LIMIT 0` probes (BI tools learning the columns): no row
        return {
            "columns": plan.columns,
            "rows": [],
            "stddev": [],
            "ci95": [],
            "group_columns": [],
            "notes": list(plan.notes),
        }
    values, sds, cis, notes = [], [], [], list(plan.notes) + cube.error_notes(plan.selection, (), _reads(plan))
    truncation: dict[str, Any] = {}
    computed: dict[Aggregate, tuple[Any, Any, Any]] = {}

    def one(agg: Aggregate) -> tuple[Any, Any, Any]:
        if agg not in computed:
            computed[agg] = _single_aggregate(agg, plan, cube, notes, truncation)
        return computed[agg]

    for out in plan.outputs:
        assert not isinstance(out, GroupKey)  # a single row has no group key
        value, var, interval = _single_derived(out, one) if isinstance(out, Derived) else one(out)
        values.append(value)
        sds.append(None if var is None else math.sqrt(max(var, 0.0)))
        cis.append(interval)
    rows, sd_rows, ci_rows = having.keep(plan.having, [values], [sds], [cis])
    result = {
        "columns": plan.columns,
        "rows": rows,
        "stddev": sd_rows,
        "ci95": ci_rows,
        "group_columns": [],
        "notes": notes,
    }
    return result | ({"truncation": truncation} if truncation else {})


def _single_aggregate(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis, notes: list[str], truncation: dict[str, Any]
) -> tuple[Any, Any, Any]:
    """One aggregate of a single-row answer: value, variance, 95 % interval (notes and truncation
    facts are added to the answer's)."""
    if agg.func == "quantile":
        values, intervals = _quantiles(agg, plan, cube, notes)
        return values[0], None, intervals[0]
    (key, sel), (count_key, count_sel) = plan.reads(agg)
    cut = _truncated(agg, plan, cube, key, sel)
    value, var = (cut.value, cut.variance) if cut else (cube.total(key, sel), cube.variance(key, sel))
    interval: Any = list(cut.ci95) if cut else None
    if agg.func == "avg":
        c, c_var = cube.total(count_key, count_sel), cube.variance(count_key, count_sel)
        if not _avg_defined(c, c_var):
            notes.append(f"{agg.name}: value withheld (null): the noisy count is too close to zero")
            return None, None, None
        interval = _avg_interval(agg, plan, cube, value, var, c, c_var)
        interval = None if interval is None else [float(interval[0][()]), float(interval[1][()])]
        value, var = value / c, None if var is None or c_var is None else _ratio_variance(value, var, c, c_var)
    sd = None if var is None else math.sqrt(max(var, 0.0))
    if interval is None and agg.func != "avg":
        interval = _model_interval(agg, plan, cube, value, sd, key, sel)
    if cut:
        truncation[agg.name] = _truncation_facts(cut)
        notes.append(class_answers.note(agg.name, agg.measure or ""))
    return value, var, interval or _ci95([value], [sd], [z95(_terms(agg, plan, cube))])[0]


def _single_derived(out: Derived, one: Any) -> tuple[Any, Any, Any]:
    """A derived output of a single-row answer from its parts (`engine.sql.derived`)."""
    parts = {a: one(a) for a in derived.parts(out)}
    if any(v is None for v, _, _ in parts.values()):
        return None, None, None
    value, var = derived.evaluate(out, {a: p[0] for a, p in parts.items()}, {a: p[1] for a, p in parts.items()})
    if np.isnan(value):
        return None, None, None
    number, variance = float(value), None if var is None else float(var)
    sd = None if variance is None else math.sqrt(max(variance, 0.0))
    return number, variance, _ci95([number], [sd], [Z95_NORMAL])[0]


def _grouped_derived(out: Derived, plan: QueryPlan, cube: Synopsis) -> tuple[np.ndarray, np.ndarray | None, list[Any]]:
    """A derived output per group from its parts' grouped values (`engine.sql.derived`)."""
    parts = {a: _aggregate(a, plan, cube) for a in derived.parts(out)}
    value, var = derived.evaluate(out, {a: p[0] for a, p in parts.items()}, {a: p[1] for a, p in parts.items()})
    values = _as_list(value)
    sds = [None] * len(values) if var is None else _as_list(np.sqrt(np.maximum(var, 0.0)))
    return value, var, _ci95(values, sds, [Z95_NORMAL] * len(values))


def _truncated(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis, key: str, selection: tuple
) -> class_answers.TruncatedSum | None:
    """The truncated SUM for a measure with a class axis (None: not truncated — another aggregate,
    no axis, ``"truncate": false``, or no error model to test against)."""
    if agg.func != "sum" or not plan.truncate or agg.measure not in dict(plan.class_axes):
        return None
    classes = class_answers.classes_of_cube(cube.meta, agg.measure)
    return None if classes is None else class_answers.truncated_sum(cube, key, selection, classes)


def _quantiles(agg: Aggregate, plan: QueryPlan, cube: Synopsis, notes: list[str]) -> tuple[list[Any], list[Any]]:
    """A quantile per group (or of the one row) from the measure's counts per class (`engine.answers.quantiles`)."""
    (key, sel), _ = plan.reads(agg)
    classes = class_answers.classes_of_cube(cube.meta, agg.measure or "")
    if classes is None:
        raise QueryError(f"{agg.name}: this build of the table has no class axis for {agg.measure!r}; rebuild it")
    found = quantiles.answer(cube, key, sel, plan.group_axes, float(agg.p or 0.0), classes)
    notes += [n for n in quantiles.notes(agg.name, agg.measure or "", classes, agg.disc) if n not in notes]
    values, intervals = quantiles.as_rows(found)
    if any(v is None for v in values):
        notes.append(f"{agg.name}: null where the noisy count of rows is not above zero")
    return values, intervals


def _grouped_truncation(facts: dict[str, Any]) -> dict[str, Any]:
    """A part's truncation facts in the grouped form a coarse group's answer merges: a single row's
    (``tau``, ``classes_dropped``: a coarse group whose part has no other key) counts as one group."""
    if "groups_truncated" in facts:
        return facts
    return {"groups_truncated": int(facts["classes_dropped"] > 0), "tau_min": facts["tau"], "tau_max": facts["tau"]}


def _truncation_facts(cut: class_answers.TruncatedSum) -> dict[str, Any]:
    return {
        "tau": cut.tau,
        "classes_dropped": cut.classes_dropped,
        "dropped_bound": {"below": cut.dropped_bound[0], "above": cut.dropped_bound[1]},
    }


def possible_range(agg: Aggregate, cube: Synopsis) -> tuple[float, float]:
    """Where an aggregate's true value must lie, from public facts: a COUNT ≥ 0, an AVG inside the
    measure's clip range, a SUM of a measure clipped to [lo ≥ 0, …] ≥ 0 (and ≤ 0 mirrored)."""
    if agg.func == "count":
        return 0.0, math.inf
    bounds = (cube.meta.get("clipping") or {}).get(agg.measure or "", {})
    lo, hi = float(bounds.get("lo", -math.inf)), float(bounds.get("hi", math.inf))
    if agg.func in ("avg", "quantile"):
        return lo, hi
    return (0.0 if lo >= 0 else -math.inf), (0.0 if hi <= 0 else math.inf)


def clamp_answer(result: dict[str, Any], plan: QueryPlan, cube: Synopsis) -> dict[str, Any]:
    """Clamp values and 95 % intervals into each aggregate's possible range (post-processing of
    released values and public bounds: free, and it never moves a value further from the truth).
    The stddev stays the noise's; a note says how many values moved and how to get them raw.
    The intervals that cross a bound are fixed together in numpy (a 2,700-group answer had
    ~4,000 of them, one call each)."""
    columns = {o.name: o for o in plan.outputs if isinstance(o, Aggregate)}
    notes = list(result["notes"])
    rows, cis = result["rows"], result["ci95"]
    for j, name in enumerate(result["columns"]):
        agg = columns.get(name)
        if agg is None:
            continue
        lo, hi = possible_range(agg, cube)
        if lo == -math.inf and hi == math.inf:
            continue
        moved, crossing = 0, []
        for i, (row, ci) in enumerate(zip(rows, cis)):
            v = row[j]
            if v is None:
                continue
            if v < lo or v > hi:
                row[j] = min(max(v, lo), hi)
                moved += 1
            if ci[j] is not None and (ci[j][0] < lo or ci[j][1] > hi):  # (most lie inside already)
                crossing.append(i)
        if crossing:
            ends = np.array([cis[i][j] for i in crossing], dtype=float)
            for i, pair in zip(crossing, _clamped_intervals(ends[:, 0], ends[:, 1], lo, hi).tolist()):
                cis[i][j] = pair
        if moved:
            what = f"[{lo:g}, {hi:g}]" if agg.func == "avg" else ("≥ 0" if lo == 0 else "≤ 0")
            notes.append(
                f"{name}: {moved} value(s) clamped to {what}, the range the true value must lie in; "
                'for the raw values (unbiased, they add up across groups) send "clamp": false over REST, '
                "or SET prima.clamp = off on the PostgreSQL wire"
            )
    result["notes"] = notes
    return result


def _clamped_intervals(a: np.ndarray, b: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Intervals [a, b] moved inside [lo, hi] without losing their width where they crossed a bound:
    the part cut off is laid back from the bound (a count whose interval lay wholly
    below 0 showed [0, 0] next to a stddev of 944 while the truth was 323). Only ever widens what
    the plain cut keeps, so the coverage is at least the uncut interval's. Rows of [lo', hi']."""
    half = (b - a) / 2
    new_a, new_b = np.minimum(np.maximum(a, lo), hi), np.maximum(np.minimum(b, hi), lo)
    with np.errstate(invalid="ignore"):  # ±inf bounds: the branch not taken may hold inf − inf
        new_b = np.where(a < lo, np.maximum(new_b, np.minimum(hi, lo + half)), new_b)
        new_a = np.where(b > hi, np.minimum(new_a, np.maximum(lo, hi - half)), new_a)
    return np.stack([new_a, new_b], axis=1)


def _fill_ci95(rows: list[list[Any]], sds: list[list[Any]], cis: list[list[Any]], zs: list[float | None]) -> None:
    """In place, per group: `_ci95`'s value ± z·stddev where no interval was given (a loop without a
    call per cell: a 961-group answer spent 2 of its 4 ms in per-row calls)."""
    for j, z in enumerate(zs):
        if z is None:
            continue
        for row, sd, ci in zip(rows, sds, cis):
            v, s = row[j], sd[j]
            if ci[j] is None and v is not None and s is not None and not isinstance(v, str):
                ci[j] = [v - z * s, v + z * s]


def _ci95(values: list[Any], sds: list[Any], zs: list[float | None]) -> list[Any]:
    """95 % intervals of the noise, value ± z·stddev, z the noise's own quantile (`privacy.estimation.error.z95`)."""
    return [
        None if v is None or sd is None or z is None or isinstance(v, str) else [v - z * sd, v + z * sd]
        for v, sd, z in zip(values, sds, zs)
    ]


def _terms(agg: Aggregate, plan: QueryPlan, cube: Any) -> float:
    """How many cells' noises one answer of ``agg`` sums (one group's, under GROUP BY): the fewest
    over what it reads (an AVG's SUM and COUNT), so its interval's multiplier errs wide. A SUM over a
    measure's class axis weighs class k's noise by u_k, so its classes count as the *effective*
    number of terms (Σu²)²/Σu⁴: dominated by a top class, such a sum is nearly one Laplace, whose
    ±1.96σ held 92 % of Bank's per-group SUMs on a wide table (2.12σ holds 95 %)."""
    (key, sel), (_, count_sel) = plan.reads(agg)
    classes = (
        class_answers.classes_of_cube(cube.meta, agg.measure or "")
        if (key.startswith("sum:") and agg.measure in dict(plan.class_axes))
        else None
    )
    return min(
        class_answers.noise_terms(cube, sel, plan.group_axes, None if classes is None else classes.bounds),
        class_answers.noise_terms(cube, count_sel, plan.group_axes),
    )


def _avg_defined(c: Any, c_var: Any) -> Any:
    """AVG is shown only where the noisy count is ≥ 1 and ≥ 2 of its standard deviations."""
    return c >= np.maximum(MIN_AVG_COUNT, 2.0 * np.sqrt(c_var if c_var is not None else 0.0))


def _ratio_variance(s: Any, s_var: Any, c: Any, c_var: Any) -> Any:
    """Delta method for a ratio of independent noisy estimates (SUM and COUNT use separate
    noise): Var(S/C) ≈ Var(S)/C² + S²·Var(C)/C⁴."""
    return s_var / c**2 + s**2 * c_var / c**4


def _avg_interval(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis, s: Any, s_var: Any, c: Any, c_var: Any
) -> tuple[np.ndarray, np.ndarray] | None:
    """AVG = S/C's 95 % interval from the two parts' own 97.5 % intervals (both hold together at
    ≥ 95 %, Bonferroni): the extreme ratios of their ends, or the whole clip range where the count's
    interval reaches 0. The delta method's ±1.96σ held 64 % of per-group AVGs whose count was a
    few of its standard deviations (tests/test_interval_coverage.py): the ratio is skewed there."""
    if s_var is None or c_var is None:
        return None
    z = z975(_terms(agg, plan, cube))
    (key, sel), (count_key, count_sel) = plan.reads(agg)
    s_lo, s_hi = _part_interval(cube, key, sel, plan.group_axes, s, s_var, z)
    c_lo, c_hi = _part_interval(cube, count_key, count_sel, plan.group_axes, c, c_var, z)
    c_pos = np.maximum(c_lo, 1e-300)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # where c_lo ≤ 0 the clip range stands in
        ends = np.stack([s_lo / c_pos, s_lo / c_hi, s_hi / c_pos, s_hi / c_hi])
    lo, hi = possible_range(agg, cube)
    reached = c_lo <= 0
    return np.where(reached, lo, ends.min(axis=0)), np.where(reached, hi, ends.max(axis=0))  # `clamp_answer` clamps


def _part_interval(
    cube: Synopsis, key: str, selection: tuple, group_axes: tuple[int, ...], t: Any, t_var: Any, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """One part of an AVG, t ± z·stddev, widened to the 2-D marginals' bounds where ``pairwise``'s
    model fills it in (`engine.answers.model_bounds`), shaped like ``t``."""
    t, sd = np.asarray(t, dtype=float), np.sqrt(np.maximum(t_var, 0.0))
    hull = model_bounds.interval(cube, key, selection, group_axes, t, sd, z, z)
    return (t - z * sd, t + z * sd) if hull is None else hull


def _model_interval(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis, values: Any, sds: Any, key: str, selection: tuple
) -> Any:
    """A COUNT's or SUM's interval where ``pairwise``'s model fills the answer in (`engine.answers.model_bounds`):
    per group for grouped answers, one [lo, hi] for a single row; None elsewhere."""
    if not model_bounds.reads_model(cube, key, selection, plan.group_axes):
        return None
    terms = _terms(agg, plan, cube)
    out = model_bounds.widened(cube, key, selection, plan.group_axes, values, sds, z95(terms), z975(terms))
    return out[0] if out is not None and not plan.group_axes else out


def _aggregate(
    agg: Aggregate, plan: QueryPlan, cube: Synopsis
) -> tuple[np.ndarray, np.ndarray | None, int, list[Any] | None]:
    """Values, variances, withheld count and (AVG only) intervals per group as released (truncated
    SUMs go through `_grouped_truncated`)."""

    def totals(key: str, selection: tuple) -> tuple[np.ndarray, np.ndarray | None]:
        if plan.group_axes:
            return (
                cube.grouped_totals(key, selection, plan.group_axes),
                cube.grouped_variances(key, selection, plan.group_axes),
            )
        var = cube.variance(key, selection)
        return np.array(cube.total(key, selection)), None if var is None else np.array(var)

    (key, sel), count = plan.reads(agg)
    if agg.func != "avg":
        read = count if agg.func == "count" else (key, sel)
        t, t_var = totals(*read)
        sd = None if t_var is None else np.sqrt(np.maximum(t_var, 0.0))
        return t, t_var, 0, _model_interval(agg, plan, cube, t, sd, *read)
    s, s_var = totals(key, sel)
    c, c_var = totals(*count)
    ok = _avg_defined(c, c_var)
    safe_c = np.where(ok, c, 1.0)
    avg = np.where(ok, s / safe_c, np.nan)
    var = None
    if s_var is not None and c_var is not None:
        var = np.where(ok, _ratio_variance(s, s_var, safe_c, c_var), np.nan)
    ends = _avg_interval(agg, plan, cube, s, s_var, safe_c, c_var)
    interval = None
    if ends is not None:
        interval = [
            [a, b] if good else None
            for a, b, good in zip(np.ravel(ends[0]).tolist(), np.ravel(ends[1]).tolist(), np.ravel(ok).tolist())
        ]
    return avg, var, int(np.size(ok) - np.count_nonzero(ok)), interval


def _as_list(values: np.ndarray) -> list[Any]:
    """Floats as a list, NaN (withheld) as None; vectorized because groups can be many."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    out: list[Any] = flat.tolist()
    for i in np.flatnonzero(np.isnan(flat)).tolist():
        out[i] = None
    return out


def _labels(plan: QueryPlan, spec: TableSpec, axis: int, shape: list[int]) -> list[Any]:
    """The group key column: each row's cell label on ``axis`` (row-major over the groups)."""
    dim = spec.dimensions[axis]
    labels = np.array([dim.label(int(c)) for c in selected_cells(plan.selection[axis])], dtype=object)
    position = plan.group_axes.index(axis)
    index = np.indices(shape).reshape(len(shape), -1)[position]
    return labels[index].tolist()


def _order_and_page(
    plan: QueryPlan, rows: list[list[Any]], sds: list[list[Any]], cis: list[list[Any]]
) -> tuple[list, list, list]:
    order = list(range(len(rows)))
    for key in reversed(plan.order_by):  # stable sorts, last key first
        present = [i for i in order if rows[i][key.output] is not None]
        missing = [i for i in order if rows[i][key.output] is None]  # nulls last, either direction
        present.sort(key=lambda i: rows[i][key.output], reverse=key.descending)
        order = present + missing
    end = None if plan.limit is None else plan.offset + plan.limit
    order = order[plan.offset : end]
    return [rows[i] for i in order], [sds[i] for i in order], [cis[i] for i in order]


# What `engine.answers.misaligned` reads of this module, handed to it (it imports nothing of this one).
ALIGNED = misaligned.Aligned(
    unclamped=_unclamped, ranked=_ranked, order_and_page=_order_and_page, possible_range=possible_range
)
