"""What a registration will cost and deliver, from its public metadata alone (no data, no budget).

Shown at registration and by a free dry run (``POST /v1/admin/tables?dry_run=true``, ``prima
register --dry-run``): the expected standard deviation of the queries a new user runs first — the
total COUNT/SUM, one group of a `GROUP BY` on one dimension, one group of two — from each
strategy's own error model (`MeasurementStrategy.expected_error`: exact for every linear strategy,
and for `pairwise` on ≤ 2 dimensions, which is all these queries touch), the stored size, a rough
build time, and warnings when a one- or two-dimension group would need more rows than a table is
likely to have in it.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from engine.builds import growing, rollups, steps
from engine.builds.workload import DEFAULT_PAIRS_WEIGHT, default_workload, shapes_cuboids, splits, workload_queries
from engine.errors import Invalid, TooLarge
from privacy.accounting import split as budget
from privacy.accounting.currencies import declared_total, mechanism
from privacy.accounting.zcdp import epsilon_for
from privacy.estimation.error import ClassAxisError
from privacy.strategies import time_rollups
from privacy.strategies.cuboid_selection import MAX_CELLS
from privacy.strategies.dense_auto import PILOT_SHARE
from storage.catalog import TableRecord
from storage.schema import Measure, TableSpec

# Seconds per cube cell and aggregate of the measure phase on this class of machine (2 cores),
# from bench/perf.py and bench/crossover.py runs; source aggregation comes on top (∝ rows).
# cuboids: per stored cell (estimates and replicates), its cost the bootstrap's 16 shrunk refits;
# measured at 960c192: Adult-14 (COUNT, SUM, COUNT(m); 1.41 M cells) 16.3 s, Bank-16 (a signed SUM,
# not shrunk; 1.95 M) 13.2 s — the 2e-6 of before shrinking said 2.8 s for Adult.
MEASURE_SECONDS_PER_CELL = {
    "identity": 2e-7,
    "prima": 2e-6,
    "marginals": 7e-7,
    "hierarchical": 1e-6,
    "pairwise": 8e-6,
    "cuboids": 1.2e-5,
    "auto": 8e-6,
}  # auto: at most pairwise's
# The exact discrete Gaussian sampler's extra time under ρ (Adult-14 at ρ = 0.015: 20.6 s against 16.3 s).
GAUSSIAN_MEASURE_FACTOR = 1.3
ROWS_FOR_HALF = 1.96 / 0.5  # rows a group needs per unit of stddev for a 95 % interval of ±50 %
WARN_ROWS = 1_000  # a group needing more rows than this for ±50 % is flagged
PLAUSIBLE_SHARE = 0.1  # a SUM total whose stddev exceeds this share of a plausible total is flagged


def preview(spec: TableSpec, stored_bytes: int) -> dict[str, Any]:
    """Expected errors, size, build time and warnings for ``spec`` (public facts only)."""
    declared = declared_total(spec.epsilon, spec.rho, spec.delta)
    plan = steps.plan_build(TableRecord(spec, "", declared.amount, declared.currency), declared.amount)
    strategy = steps.table_strategy(spec)
    shape, names = spec.shape, [d.name for d in spec.dimensions]
    full = [((0, n - 1),) for n in shape]
    errors: dict[str, Any] | None = {}
    warnings: list[str] = []
    shapes = steps.aggregate_shapes(spec)
    for key, epsilon in plan.shares.items():
        try:
            model = _expected(strategy, shapes[key], plan, key, epsilon)
        except NotImplementedError:  # data-aware (hdpview): the error depends on the partition it finds
            errors = None
            warnings.append(
                f"{strategy.name}'s error depends on the data-aware partition it finds: no preview; "
                "bench/results/wide_tables.md has measured errors on real tables"
            )
            break
        one = {names[i]: _sd(model, _one_value(full, (i,))) for i in range(len(shape))}
        two = {
            f"{names[i]} × {names[j]}": _sd(model, _one_value(full, (i, j)))
            for i, j in itertools.combinations(range(len(shape)), 2)
        }
        label = steps.label(key)
        total_sd = _sd(model, full)
        if errors is not None:
            errors[label] = {
                plan.currency: epsilon,
                "total_stddev": total_sd,
                "group_by_one_dimension_stddev": one,
                "group_by_two_dimensions_stddev": two,
            }
        if key == steps.COUNT_KEY:
            warnings += _count_warnings(one, two)
        elif key.startswith("sum:"):
            warnings += _sum_warnings(spec, steps.sources.measure_of(key), label, total_sd)
    if spec.auto_rows_per_unit:
        warnings.append(
            '"max_rows": "auto": these stddevs are for one row per unit; the build multiplies them by '
            "the k it chooses (shown in the cube status)"
        )
    # cells the measure step touches: the dense cube's, or (cuboids) what is stored
    cells = stored_bytes // 8 if strategy.reads == "cuboids" else math.prod(shape) * len(plan.shares)
    estimate = MEASURE_SECONDS_PER_CELL.get(strategy.name, 1e-6) * cells
    if plan.currency == "rho":
        estimate *= GAUSSIAN_MEASURE_FACTOR
    # data-aware: its cost follows the non-empty cells, unknown before the build
    seconds = None if errors is None else estimate
    notes = (
        [
            "stddevs are of the noise only (not clipping bias); data-driven clipping (sbs/clasp/support) "
            "usually narrows the bounds, and with them the SUM stddevs"
        ]
        if plan.histograms
        else []
    )
    if getattr(strategy, "estimator", None) == "shrunk":
        notes.append(
            "1- and 2-column stddevs are what least squares would give; the build projects the 1-way counts "
            "onto nonnegative ones (1-column bars: at least these) and shrinks each column pair toward "
            "independence, which is usually more accurate on nearly independent pairs, and states an "
            'estimated bar per answer ("estimator": "least_squares" keeps exact 1- and 2-column bars)'
        )
    notes += _selection_notes(strategy, plan, shapes)
    axes = (
        {
            m: {
                "classes": c.count,
                "edges": list(c.edges),
                "cost_factor": plan.clipping[m]["axis"]["cost_factor"],
                "meaning": "stddev of an untruncated whole-range SUM relative to the same release without the axis",
                "by_candidate": _axis_costs(strategy, spec, plan, shapes, m),
            }
            for m, c in plan.axes.items()
        }
        if errors is not None
        else {}
    )
    workload = _workload(spec, plan, strategy, shapes) if errors is not None and spec.cube.workload else None
    if workload:
        warnings += [w for entry in workload for w in entry.pop("warnings")]
    shaped_by = _default_workload(spec, plan) if spec.cube.workload is None else None
    if shapes_cuboids(spec):
        notes.append(
            f"cube.workload sets this table's split between the aggregates and its {strategy.name!r} shares: the 1- "
            f"and 2-way cuboids' minimise the declared queries' error; the columns of a statement on 3 or 4 of "
            f"them are measured as a cuboid (at most {MAX_CELLS:,} cells)"
        )
    elif spec.cube.workload and strategy.name not in ("pairwise", "marginals", "auto"):
        warnings.append(
            f"cube.workload sets only the budget's split between the aggregates: cube.one_way_share is declared, so "
            f"this table's {strategy.name!r} cuboids keep that rule's shares (leave it out to have the workload "
            f"set them); the columns of a statement on 3 or 4 of them are measured as a cuboid (at most "
            f"{MAX_CELLS:,} cells)"
            if splits(spec) and strategy.name == "cuboids"
            else f"cube.workload is not used: this table is measured with {strategy.name!r} (a workload shapes a "
            "dense cube or a wide table's cuboids, measured once)"
        )
    return {
        "strategy": strategy.name,
        "privacy": _privacy(spec, plan, strategy),
        "expected_errors": errors,
        **({"workload": workload} if workload else {}),
        **({"default_workload": shaped_by} if shaped_by else {}),
        "stored_bytes": stored_bytes,
        **({"measure_axes": axes} if axes else {}),
        **({"time_rollups": _rollups(spec, plan)} if plan.rollups else {}),
        "estimated_measure_seconds": None if seconds is None else round(seconds, 1),
        "warnings": warnings,
        "notes": notes
        + [
            "estimated_measure_seconds covers the noise and fitting step on a 2-core machine; reading the "
            "source adds time in proportion to its rows"
        ],
    }


def _default_workload(spec: TableSpec, plan: steps.BuildPlan) -> dict[str, Any] | None:
    """What shapes a build nobody declared a workload for (`engine.builds.workload.default_workload`):
    its queries in words and the budget split they give the aggregates."""
    queries = default_workload(spec)
    if not queries:
        return None
    total = sum(plan.shares.values())
    return {
        "queries": "the total, every one-column GROUP BY (COUNT, SUM, AVG), each date dimension's coarser "
        f"series, and the two-column GROUP BYs ({DEFAULT_PAIRS_WEIGHT:g} one-column queries' weight in all)",
        "split": {steps.label(k): round(v / total, 3) for k, v in plan.shares.items()},
        "note": 'declare "cube": {"workload": [...]} for your dashboards\' queries, or "workload": [] to '
        "serve every one- and two-column query alike (COUNT 20 %)",
    }


def _rollups(spec: TableSpec, plan: steps.BuildPlan) -> dict[str, Any]:
    """The time rollups a build releases (`engine.builds.rollups`): per date dimension its grains, and
    per aggregate the stddev of one released block (a month or a year), which a time series' answer
    combines with the cube's (never worse than either)."""
    return {
        "share": time_rollups.ROLLUP_SHARE,
        "dimensions": {plan.rollup_names[a]: list(g) for a, g in plan.rollup_axes.items()},
        "block_stddev": {  # on the first rolled-up axis (a table has one date dimension by day, as a rule)
            steps.label(k): round(math.sqrt(rollups.mechanism(k, next(iter(plan.rollup_axes)), plan).variance), 4)
            for k in plan.rollups
        },
        "note": "a selection of whole months or years (DATE_TRUNC('year'|'quarter'|'month', …) series, ranges of "
        "them) combines these blocks with the cube's answer; every other answer has the cube's share less "
        f"{time_rollups.ROLLUP_SHARE:.0%}",
    }


def _workload(
    spec: TableSpec, plan: steps.BuildPlan, strategy: Any, shapes: dict[str, tuple[int, ...]]
) -> list[dict[str, Any]]:
    """Per declared workload query and aggregate: the expected stddev of one answer cell, its ratio
    to the same table without the workload (the default shares and split) and to a per-query engine
    that splits the aggregates' budget evenly over the workload's Q aggregate queries (one
    Laplace/Gaussian release per query, sensitivity Δ: a GROUP BY's cells partition the rows; an AVG
    halves its part); a warning when a declared COUNT is expected to be noise (needs
    ``expected_rows``: its rows spread evenly over the cells)."""
    declared = (workload_queries(spec) or ())[: len(spec.cube.workload or [])]
    default_spec = spec.model_copy(update={"cube": spec.cube.model_copy(update={"workload": None})})
    default = steps.table_strategy(default_spec)
    keys = list(plan.shares)
    present = [k for k in keys if k.startswith("present:")]
    without = budget.split(sum(plan.shares.values()), keys, budget.default_weights(keys, steps.COUNT_KEY, present))
    asked = sum(len(q.asked([m.name for m in spec.measures])) for q in declared)  # Q aggregate queries
    per_query = sum(plan.shares.values()) / asked
    out = []
    for entry, query in zip(spec.cube.workload or [], declared):
        lengths = query.on(spec.shape)
        selection = [((0, length - 1),) for length in lengths]
        cells = math.prod(n / length for n, length in zip(spec.shape, lengths))  # answer cells
        row: dict[str, Any] = {
            "query": entry.sql or ("GROUP BY " + ", ".join(entry.group_by) if entry.group_by else "the total"),
            "weight": entry.weight,
            "stddev": {},
            "vs_default": {},
            "vs_per_query_split": {},
            "warnings": [],
        }
        for key, epsilon in plan.shares.items():
            if key.startswith(("count:", "present:")):
                continue
            label = steps.label(key)
            sd = _sd(_expected(strategy, shapes[key], plan, key, epsilon), selection)
            before = _sd(_expected(default, shapes[key], plan, key, without.get(key, epsilon)), selection)
            split = mechanism(_per_query_sensitivity(plan, key), plan.budget(per_query), plan.rows_per_unit)
            row["stddev"][label] = sd
            row["vs_default"][label] = round(sd / before, 3) if before and math.isfinite(before) else None
            row["vs_per_query_split"][label] = round(sd / math.sqrt(split.variance), 3)
            if key == steps.COUNT_KEY and spec.expected_rows and ROWS_FOR_HALF * sd > spec.expected_rows / cells:
                row["warnings"].append(
                    f"workload {row['query']!r}: COUNT per answer cell has a stddev of about {sd:,.0f}, and "
                    f"~{spec.expected_rows / cells:,.0f} rows per cell are expected: its values will be noise"
                )
        out.append(row)
    return out


def _per_query_sensitivity(plan: steps.BuildPlan, key: str) -> float:
    """What one row moves a per-query engine's answer by: the aggregate's sensitivity, except for a
    SUM released over its measure's class axis, whose release is normalised per class (sensitivity
    1, answers in the measure's units): a per-query engine clips at the bound, max(|lo|, |hi|) — as
    `privacy.strategies.workload.aggregate_split` compares it. (The preview stated that SUM's ratio
    in the wrong units: 3.7·10⁵× on examples/bank.yaml.)"""
    measure = steps.sources.measure_of(key) if key.startswith("sum:") else None
    if measure is None or measure not in plan.axes:
        return plan.sensitivities[key]
    lo, hi = plan.bounds[measure]
    return max(abs(lo), abs(hi))


def _selection_notes(strategy: Any, plan: steps.BuildPlan, shapes: dict[str, tuple[int, ...]]) -> list[str]:
    """What the adaptive step of a wide or dense-model build spends (`privacy.strategies.cuboid_selection`):
    which triples it measures depends on the data, so only its budget and each pick's noise are shown."""
    out = []
    for key, share in plan.shares.items():
        budget = plan.budget(share)
        chosen = strategy.for_aggregate(steps.is_count(key)).selection(shapes[key], budget, plan.nonnegative(key))
        if chosen is None:
            continue
        pick = chosen.pick_mechanism(plan.sensitivities[key], plan.rows_per_unit)
        when = " where the build takes pairwise (auto's noisy total decides)" if strategy.name == "auto" else ""
        out.append(
            f"{steps.label(key)}: {chosen.share:.0%} of its budget{when} selects and measures {chosen.rounds} 3-way "
            f"cuboids the pair model gets worst (exponential mechanism, {chosen.select_fraction:.0%} of that "
            f"share); each pick costs {chosen.pick.amount:.4g} {plan.currency} (noise stddev "
            f"{math.sqrt(pick.variance):.3g} per cell); which triples is data-dependent: the cube status lists "
            "them after the build"
        )
    return out


def _privacy(spec: TableSpec, plan: steps.BuildPlan, strategy: Any) -> dict[str, Any]:
    """What one build costs in both currencies: the declared one, and for comparison
    the tight ρ of a pure-ε plan (what its Laplace releases add up to in zCDP) or the (ε, δ) of a ρ."""
    rho = sum(c.zcdp for c in plan.charges(strategy))
    out: dict[str, Any] = {
        "currency": plan.currency,
        "build": plan.epsilon,
        "build_rho": round(rho, 6),
        "noise": "discrete Gaussian" if plan.currency == "rho" else "discrete Laplace",
    }
    if plan.currency == "rho":
        delta = spec.delta or 1e-9
        out["build_as_epsilon_delta"] = {"epsilon": round(epsilon_for(plan.epsilon, delta), 4), "delta": delta}
    return out


def _expected(strategy: Any, shape: tuple[int, ...], plan: steps.BuildPlan, key: str, epsilon: float) -> Any:
    """The strategy's error model for one aggregate; over a class axis, the SUM's model in the
    measure's units, read with every class selected (what an untruncated SUM costs)."""
    model = strategy.for_aggregate(steps.is_count(key)).expected_error(
        shape,
        plan.sensitivities[key],
        plan.budget(epsilon),
        nonnegative=plan.nonnegative(key),
        coordinates=plan.rows_per_unit,
    )
    if key.startswith("sum:") and steps.sources.measure_of(key) in plan.axes:
        classes = plan.axes[steps.sources.measure_of(key)]
        return _AllClasses(ClassAxisError(model, tuple(classes.bounds.tolist())), classes.count)
    if key.startswith("count:"):
        return _AllClasses(model, shape[-1])
    return model


class _AllClasses:
    """An error model over (dimensions…, class) read like one over the dimensions: all classes selected."""

    def __init__(self, model: Any, classes: int) -> None:
        self.model, self.classes = model, classes

    def variance(self, selection: list) -> float:
        return self.model.variance(list(selection) + [((0, self.classes - 1),)])


def _one_value(full: list, axes: tuple[int, ...]) -> list:
    """A selection with one value (the middle one) on ``axes`` and every other axis free."""
    sel = list(full)
    for i in axes:
        middle = full[i][0][1] // 2
        sel[i] = ((middle, middle),)
    return sel


def _sd(model: Any, selection: list) -> float:
    return round(math.sqrt(max(model.variance(selection), 0.0)), 3)


def _count_warnings(one: dict[str, float], two: dict[str, float]) -> list[str]:
    out = []
    for what, sds in (("one dimension", one), ("two dimensions", two)):
        worst = max(sds, key=lambda name: sds[name], default=None)
        if worst is not None and ROWS_FOR_HALF * sds[worst] > WARN_ROWS:
            out.append(
                f"COUNT grouped by {what} ({worst}) has a noise stddev of about {sds[worst]:,.0f} per "
                f"group: a group needs about {ROWS_FOR_HALF * sds[worst]:,.0f} rows for a ±50 % answer. "
                "Raise epsilon, declare fewer dimensions or coarser bins, or give COUNT more weight"
            )
    return out


def _sum_warnings(spec: TableSpec, measure: str, label: str, total_sd: float) -> list[str]:
    """Bank as shipped answered SUM(balance) with a stddev of 1.4·10⁸ against a total of
    6·10⁷, and nothing said so. A plausible total, from public facts only: the admin's
    ``expected_rows`` times the measure's ``typical`` |value| (or, without one, its widest bound —
    then only hopeless configurations are flagged)."""
    rows, m = spec.expected_rows, spec.declared_measure(measure)
    if rows is None:
        return []
    per_row, what = (m.typical, "typical") if m.typical is not None else (max(abs(m.lo), abs(m.hi)), "widest bound")
    plausible = rows * per_row
    if total_sd <= PLAUSIBLE_SHARE * plausible:
        return []
    axis = " (over every class of its axis, before truncation)" if m.axis is not None else ""
    return [
        f"{label} over the whole table has a noise stddev of about {total_sd:.3g}{axis}, "
        f"{total_sd / plausible:.0%} of a plausible total ({rows:,} expected rows × {what} {per_row:g}): "
        + sum_noise_advice(m)
    ]


def sum_noise_advice(measure: Measure) -> str:
    """What an admin can do about a noise-dominated SUM; an axis only where none is declared."""
    axis = "a measure axis (measures[].axis), " if measure.axis is None else ""
    return f"declare bounds a row can plausibly reach, {axis}fewer dimensions or coarser bins, or raise epsilon"


def _axis_costs(
    strategy: Any, spec: TableSpec, plan: steps.BuildPlan, shapes: dict[str, tuple[int, ...]], measure: str
) -> dict[str, dict[str, float | None]]:
    """Per strategy the build may use (both of ``auto``'s candidates), the whole-table SUM's
    stddev with the axis (every class, untruncated: the worst case; truncation drops the classes a
    query's rows do not reach) and without it, from each strategy's own error model."""
    key = f"sum:{measure}"
    m = spec.declared_measure(measure)
    shape = shapes[key]
    candidates = getattr(strategy, "candidates", None)
    epsilon = plan.shares[key] * ((1 - PILOT_SHARE) if candidates else 1.0)
    k = plan.rows_per_unit
    out = {}
    for c in candidates or (strategy,):
        with_axis = _expected(c, shape, plan, key, epsilon)
        plain = c.expected_error(
            shape[:-1], max(abs(m.lo), abs(m.hi)) * k, plan.budget(epsilon), nonnegative=m.lo >= 0, coordinates=k
        )
        sd, sd_plain = (
            _sd(with_axis, [((0, n - 1),) for n in shape[:-1]]),
            _sd(plain, [((0, n - 1),) for n in shape[:-1]]),
        )
        out[c.name] = {
            "total_stddev": sd,
            "total_stddev_without_axis": sd_plain,
            "ratio": round(sd / sd_plain, 4) if sd_plain else None,
        }
    return out


def preview_growing(spec: TableSpec, node_bytes: int) -> dict[str, Any]:
    """The registration preview of a growing table: one release's (`preview` on `growing.node_spec`
    at its amount, so the errors shown are one period's), and the growth facts."""
    amount = growing.releases_of(spec).node_amount(growing.period_amount(spec))
    out = preview(growing.node_spec(spec, amount), node_bytes)
    return out | {
        "growth": growing.growth_facts(spec, node_bytes),
        "growth_note": "the errors above are one release's (one period, or one block under a tree); a "
        "range of periods sums the releases that tile it",
    }


def check_cube_size(spec: TableSpec, max_cube_bytes: int) -> int:
    """Refuse, before loading anything, a cube whose stored arrays would exceed the memory cap;
    returns the bytes it will store."""
    try:
        strategy = steps.table_strategy(spec)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if spec.growth is not None:  # what is stored is one release per block: each over the other dimensions
        spec = growing.node_spec(spec, 1.0)
    try:
        shapes = steps.aggregate_shapes(spec)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    aggregates = len(shapes)
    size = sum(strategy.stored_bytes(shape, 1) for shape in shapes.values())
    if size > max_cube_bytes:
        raise TooLarge(
            f"the declared domains give a {strategy.name} synopsis of {size:,} bytes for {aggregates} "
            f"aggregates, over the {max_cube_bytes:,}-byte cube limit (PRIMA_MAX_CUBE_BYTES); use "
            "coarser bins, fewer dimensions or another cube strategy (cuboids stores 1-/2-way cuboids only)"
        )
    return size
