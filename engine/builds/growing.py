"""Tables that grow: per-period releases, and answers over any range of periods.

A growing table declares a date dimension as its period axis (`storage.schema.Growth`). Each closed
period is appended once: its rows alone (the source filtered to its dates, `storage.sources.windowed`)
are measured into a synopsis over the *other* dimensions — the period axis summed away — by the
table's own strategy, at the amount `privacy.accounting.periods.Releases` gives one release. Under a tree, the
append that closes a block of b, b², … periods also releases that block (its rows read again, at the
same per-release amount). `GrowingCube` answers a selection on the period axis from the fewest
released blocks that tile it, summing their totals and variances (independent noise), so every
answer path of `engine.answers.assemble` (GROUP BY, DATE_TRUNC, AVG, HAVING) works unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.errors import Invalid, QueryError
from engine.plan import QueryPlan
from engine.synopses.protocol import SynopsisBase
from privacy.accounting.currencies import declared_total
from privacy.accounting.periods import Node, Releases, choose, crossover, typical_range_of
from privacy.estimation.prefix import Runs, selected_cells
from storage import sources
from storage.catalog import TableRecord
from storage.schema import DateDimension, Growth, TableSpec

NODE_SEPARATOR = "~"  # a release's cube name: "<table>~<first period>+<periods>"


def growth_of(spec: TableSpec) -> Growth:
    """A growing table's growth declaration (callers know the table grows)."""
    assert spec.growth is not None
    return spec.growth


def period_axis(spec: TableSpec) -> int:
    period = growth_of(spec).period.lower()
    return next(i for i, d in enumerate(spec.dimensions) if d.name.lower() == period)


def period_dimension(spec: TableSpec) -> DateDimension:
    dim = spec.dimensions[period_axis(spec)]
    assert isinstance(dim, DateDimension)  # registration checks the period is a date dimension
    return dim


def releases_of(spec: TableSpec) -> Releases:
    """The table's release scheme, from its public declaration (`privacy.accounting.periods.choose`)."""
    g = spec.growth
    assert g is not None
    if g.model == "lifetime" and spec.privacy_unit is not None:  # `TableSpec._growth`: trees bound units per block
        return Releases(period_dimension(spec).size)
    return choose(g.releases, period_dimension(spec).size, g.typical_range, spec.currency)


def period_amount(spec: TableSpec) -> float:
    """What one period's rows may spend in all, in the table's currency: its declared budget under
    the "period" model (every period gets it), ``per_period`` under "lifetime"."""
    g = spec.growth
    assert g is not None
    if g.model == "lifetime":
        return float(g.per_period)  # type: ignore[arg-type]
    return declared_total(spec.epsilon, spec.rho, spec.delta).amount


def period_index(spec: TableSpec, period: str) -> int:
    """The index of a period written as the period dimension labels it ('2025-01-03', '2025-01')."""
    dim = period_dimension(spec)
    labels = [dim.label(t) for t in range(dim.size)]
    if period not in labels:
        raise Invalid(f"{period!r} is not a period of {dim.name!r} (periods are written like {dim.label(0)!r})")
    return labels.index(period)


def node_name(table: str, node: Node) -> str:
    return f"{table}{NODE_SEPARATOR}{node[0]}+{node[1]}"


def node_prefix(table: str) -> str:
    return f"{table}{NODE_SEPARATOR}"


def parse_node(name: str) -> Node:
    first, size = name.rsplit(NODE_SEPARATOR, 1)[1].split("+")
    return int(first), int(size)


def period_dates(dim: DateDimension, node: Node) -> tuple[dt.date, dt.date]:
    """The first and last day a block of periods covers."""
    first = dim.date_of(node[0])
    after = dim.date_of(node[0] + node[1])
    return first, after - dt.timedelta(days=1)


def closed(dim: DateDimension, t: int, today: dt.date) -> bool:
    """A period is closed once its last day is over (UTC): no row can still arrive for it on time."""
    return period_dates(dim, (t, 1))[1] < today


def node_spec(spec: TableSpec, amount: float) -> TableSpec:
    """The spec one release measures: the period dimension removed (its rows are one period's or
    block's), the budget the release's amount, in the table's currency."""
    axis = period_axis(spec)
    dims = [d for i, d in enumerate(spec.dimensions) if i != axis]
    budget = {"epsilon": amount, "rho": None} if spec.currency == "epsilon" else {"epsilon": None, "rho": amount}
    update: dict[str, Any] = {"dimensions": dims, "growth": None, "delta": None, **budget}
    if spec.privacy_unit is not None and per_period_units(spec):
        update["privacy_unit"] = spec.privacy_unit.model_copy(update={"column": sources.UNIT_PERIOD})
    return spec.model_copy(update=update)


def per_period_units(spec: TableSpec) -> bool:
    """Under the "period" model a privacy unit is one unit's rows in one period (a person-period):
    every release bounds each (unit, period) to k rows, a block's as each of its periods' own."""
    return spec.privacy_unit is not None and spec.growth is not None and spec.growth.model == "period"


def node_record(record: TableRecord, node: Node, amount: float) -> TableRecord:
    """The release's record: its spec (`node_spec`) over the source's rows dated in the block."""
    spec = record.spec
    first, last = period_dates(period_dimension(spec), node)
    unit = spec.privacy_unit.column if per_period_units(spec) else None  # type: ignore[union-attr]
    window = sources.windowed(record.source_table, period_dimension(spec).name, first, last, unit)
    return TableRecord(node_spec(spec, amount), window, amount, record.currency)


def growth_facts(spec: TableSpec, node_bytes: int) -> dict[str, Any]:
    """What the registration preview and the table's status say about growth (public facts only)."""
    g = spec.growth
    assert g is not None
    scheme, dim = releases_of(spec), period_dimension(spec)
    amount = period_amount(spec)
    out = {
        "period": dim.name,
        "grain": dim.granularity,
        "periods": dim.size,
        "first": dim.label(0),
        "last": dim.label(dim.size - 1),
        "model": g.model,
        "releases": scheme.name,
        "branching": scheme.branching,
        "levels": scheme.levels,
        f"{spec.currency}_per_period": amount,
        f"{spec.currency}_per_release": scheme.node_amount(amount),
        "typical_range": typical_range_of(dim.size, g.typical_range),
        "bytes_per_release": node_bytes,
        "bytes_at_horizon": len(scheme.released(dim.size - 1)) * node_bytes,
    }
    if scheme.branching is not None:
        out["tree_beats_flat_from"] = crossover(scheme, spec.currency)
    return out


@dataclass
class GrowingCube(SynopsisBase):
    """The released blocks of a growing table, answered as one synopsis over the full shape."""

    axis: int = 0
    scheme: Releases = field(default_factory=lambda: Releases(1))
    nodes: dict[Node, Any] = field(default_factory=dict)
    through: int = -1  # the last measured period (every one before it is measured too)

    def _sub(self, selection: Sequence[Runs]) -> tuple[Runs, ...]:
        return tuple(r for a, r in enumerate(selection) if a != self.axis)

    def _axes(self, group_axes: Sequence[int]) -> list[int]:
        return [a - (a > self.axis) for a in group_axes if a != self.axis]

    def _tiles(self, runs: Runs) -> list[tuple[Any, int]]:
        """The releases (and their signs) whose sum is the runs' periods (`Releases.signed_tiling`)."""
        out = []
        for lo, hi in runs:
            hi = min(hi, self.through)
            if lo <= hi:
                out += [(self.nodes[n], sign) for n, sign in self.scheme.signed_tiling(lo, hi, self.through)]
        return out

    def read_axes(self, selection: Sequence[Runs], group_axes: Sequence[int]) -> list[int]:
        """The axes whose selected cells count as independent noise terms (`class_answers.noise_terms`):
        not the period axis, whose cells come from fewer releases (counted as one: errs wide)."""
        return [a for a in range(len(selection)) if a != self.axis]

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        sub = self._sub(selection)
        return float(sum(sign * node.total(key, sub) for node, sign in self._tiles(selection[self.axis])))

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None:
        sub = self._sub(selection)
        parts = [node.variance(key, sub) for node, _ in self._tiles(selection[self.axis])]
        return None if any(v is None for v in parts) else float(sum(parts))

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        return self._grouped(
            selection,
            group_axes,
            lambda node, sub, axes: node.grouped_totals(key, sub, axes),
            lambda node, sub: node.total(key, sub),
            signed=True,
        )

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray | None:
        try:
            return self._grouped(
                selection,
                group_axes,
                lambda node, sub, axes: _required(node.grouped_variances(key, sub, axes)),
                lambda node, sub: _required(node.variance(key, sub)),
            )
        except _Exact:
            return None

    def _grouped(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int],
        grouped: Callable[[Any, tuple[Runs, ...], list[int]], Any],
        single: Callable[[Any, tuple[Runs, ...]], Any],
        signed: bool = False,
    ) -> np.ndarray:
        """Per group: the tiles' grouped reads summed; grouped on the period axis, one period's own
        release per group (`restricted` keeps the selection inside the measured periods), stacked
        where the period axis stands among ``group_axes``."""
        sub, axes = self._sub(selection), self._axes(group_axes)
        shape = [selected_cells(selection[a]).size for a in group_axes if a != self.axis]
        if self.axis not in group_axes:
            out = np.zeros(shape)
            for node, sign in self._tiles(selection[self.axis]):  # variances add whatever the sign
                out = out + (sign if signed else 1) * np.reshape(grouped(node, sub, axes), shape)
            return out
        cells = selected_cells(selection[self.axis])
        per_cell = [
            np.reshape(grouped(self.nodes[(int(c), 1)], sub, axes), shape)
            if axes
            else np.asarray(float(single(self.nodes[(int(c), 1)], sub)))
            for c in cells
        ]
        at = list(group_axes).index(self.axis)
        if not per_cell:
            return np.zeros(shape[:at] + [0] + shape[at:])
        return np.stack(per_cell, axis=at)

    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]:
        sub, axes = self._sub(selection), self._axes(group_axes)
        sub_reads = [(k, self._sub(s)) for k, s in reads]
        notes: set[str] = set()
        for node, _ in self._tiles(selection[self.axis]):
            notes.update(node.error_notes(sub, axes, sub_reads))
        return sorted(notes)

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float | None:
        return None  # growing tables have no measure axes (`storage.schema.TableSpec._growth`)


class _Exact(Exception):
    """A release without an error model (a test's exact cube): no variances to sum."""


def _required(v: np.ndarray | None) -> np.ndarray:
    if v is None:
        raise _Exact
    return v


def restricted(plan: QueryPlan, cube: GrowingCube, spec: TableSpec) -> QueryPlan:
    """The plan with its period runs cut to the measured periods, and a note saying which periods
    the answer covers; a range with no measured period is refused (its answer would be no data)."""
    dim, axis = period_dimension(spec), cube.axis

    def cut(runs: Runs) -> tuple[tuple[int, int], ...]:
        return tuple((lo, min(hi, cube.through)) for lo, hi in runs if lo <= cube.through)

    asked = plan.selection[axis]
    kept = cut(asked)
    if not kept:
        measured = f"{dim.label(0)} to {dim.label(cube.through)}" if cube.through >= 0 else "none yet"
        raise QueryError(
            f"no measured period of {dim.name!r} is in this query's range: periods are measured as "
            f"they close (measured: {measured})"
        )
    selection = plan.selection[:axis] + (kept,) + plan.selection[axis + 1 :]
    inner = plan.inner
    if inner is not None:
        inner_runs = cut(inner[0][axis])
        inner = (inner[0][:axis] + (inner_runs,) + inner[0][axis + 1 :], inner[1])
    first, last = kept[0][0], kept[-1][1]
    note = (
        f"covers the measured {dim.granularity}s of {dim.name!r} in the query's range, {dim.label(first)} to "
        f"{dim.label(last)}"
    )
    if any(hi > cube.through for _, hi in asked):
        after = dim.label(cube.through + 1) if cube.through + 1 < dim.size else None
        note += f"; {after} onwards is not measured yet (periods are appended once closed)" if after else ""
    tiles = sum(len(cube.scheme.signed_tiling(lo, hi, cube.through)) for lo, hi in kept)
    note += f" — summed from {tiles} release{'s' if tiles != 1 else ''} ({cube.scheme.name})"
    return dataclasses.replace(plan, selection=selection, inner=inner, notes=plan.notes + (note,))


def loaded(
    table: str,
    spec: TableSpec,
    stored: dict[str, Any],
    through: int,
    build_id: str,
    load: Callable[[str, str, dict, dict], Any],
) -> GrowingCube:
    """The growing cube of the releases stored for periods 0..``through`` (``stored``: name → the
    `storage.cube_store.StoredCube`; ``load`` makes one release's synopsis)."""
    scheme = releases_of(spec)
    wanted = set(scheme.released(through))
    nodes = {}
    for name, cube in stored.items():
        node = parse_node(name)
        if node in wanted:
            nodes[node] = load(name, cube.build_id, cube.arrays, cube.meta)
    missing = wanted - set(nodes)
    if missing:  # pragma: no cover - an append is marked done only after all its releases are stored
        raise RuntimeError(f"growing table {table}: {len(missing)} release(s) of measured periods are not stored")
    last = nodes[(through, 1)].meta if through >= 0 else {}
    meta = dict(last) | {"growth": {"through": through, "releases": scheme.name}}
    return GrowingCube(
        table=table,
        build_id=build_id,
        shape=tuple(spec.shape),
        meta=meta,
        axis=period_axis(spec),
        scheme=scheme,
        nodes=nodes,
        through=through,
    )
