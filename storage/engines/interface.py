"""The source interface: "give me the clipped base cuboid" and "give me this measure's histogram"."""

from __future__ import annotations

import itertools
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import duckdb
import numpy as np
from sqlglot import exp

from storage import aggregate_sql
from storage.database import OutOfMemory, StorageError
from storage.schema import TableSpec

log = logging.getLogger("prima.storage")
# (engine, table, column names and types, spec) whose aggregate bound in this process (`SourceEngine.check`):
# a build checks before it charges, and the generated query took ~20 ms to build, render and bind
# each time (every seeded build of the tests' coverage runs repeats one table's).
_BOUND: set[tuple[Any, ...]] = set()
_BOUND_KEPT = 1024

COUNT_KEY = "count"
BATCH_ROWS = 65_536  # aggregate rows per fetched batch: bounds the driver's buffers


def sum_key(measure: str) -> str:
    return f"sum:{measure}"


def class_count_key(measure: str) -> str:
    """The COUNT-by-class aggregate of a measure with an axis (``"count": true``)."""
    return f"count:{measure}"


def present_key(measure: str) -> str:
    """COUNT(measure): the rows where the measure is present (not NULL, numeric), SQL's AVG denominator."""
    return f"present:{measure}"


def measure_of(key: str) -> str:
    """The measure a ``sum_key`` names."""
    return key.split(":", 1)[1]


Batch = dict[str, np.ndarray]


def value_keys(spec: TableSpec) -> dict[str, str]:
    """The aggregate query's value columns (`aggregate_sql.cuboid_columns`) → aggregate keys."""
    return (
        {"n": COUNT_KEY}
        | {f"s{j}": sum_key(m.name) for j, m in enumerate(spec.measures)}
        | {f"q{j}": present_key(m.name) for j, m in enumerate(spec.measures)}
    )


class SourceEngine(ABC):
    """One source table in one engine. Subclasses say how to run a query and list columns."""

    dialect: ClassVar[str]
    kind: ClassVar[str]  # what error messages call it: "DuckDB", "PostgreSQL", "Spark"
    in_store: ClassVar[bool] = False  # runs in the data dir's own DuckDB (`Database.streaming` applies)

    def __init__(self, table: exp.Table) -> None:
        self.table = table

    @abstractmethod
    def columns(self) -> list[str]:
        """The source's column names (no row is read)."""

    @abstractmethod
    def batches(self, sql: str, params: dict[str, Any], names: list[str]) -> Iterator[Batch]:
        """Run ``sql`` with named parameters; yield its result columns (``names``) in batches."""

    def close(self) -> None:  # noqa: B027 — a hook with a default, not an abstract method
        """Release connections; the default holds none."""

    # -- the two aggregates, written once ----------------------------------------------------------
    def base_cuboids(self, spec: TableSpec, bounds: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
        """The true base cuboids: COUNT and clipped SUM per measure, dense arrays of ``spec.shape``.

        ``bounds`` are the clipping bounds chosen by the privacy layer (declared, or DP-derived).
        """
        query, params = aggregate_sql.cuboid_query(self.table, spec, bounds)
        dense = self._dense_cells(
            query, params, aggregate_sql.cuboid_columns(spec), spec.shape, "aggregating the source"
        )
        return {key: dense[name] for name, key in value_keys(spec).items()}

    def class_cuboids(
        self,
        spec: TableSpec,
        bounds: dict[str, tuple[float, float]],
        measure: str,
        edges: list[float],
        closed_above: list[bool],
        class_bounds: list[float],
    ) -> tuple[np.ndarray, np.ndarray]:
        """One measure's class cuboids, dense over (dimensions…, class): the COUNT of rows whose
        value is known, and Σ v/u_k (`aggregate_sql.class_cuboid_query`)."""
        query, params = aggregate_sql.class_cuboid_query(
            self.table, spec, bounds, measure, edges, closed_above, class_bounds
        )
        dense = self._dense_cells(
            query,
            params,
            aggregate_sql.class_cuboid_columns(),
            spec.shape + (len(edges) - 1,),
            f"the classes of {measure!r}",
        )
        return dense["n"], dense["s"]

    def base_and_class_cuboids(
        self,
        spec: TableSpec,
        bounds: dict[str, tuple[float, float]],
        measure: str,
        edges: list[float],
        closed_above: list[bool],
        class_bounds: list[float],
    ) -> tuple[dict[str, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """`base_cuboids` and `class_cuboids` from one read of the rows
        (`aggregate_sql.base_class_cuboid_query`): the slots summed, and the known-value slots."""
        query, params = aggregate_sql.base_class_cuboid_query(
            self.table, spec, bounds, measure, edges, closed_above, class_bounds
        )
        # Each result row is one (cell, slot) with slot < K a class and slot K the NULL measure: the base
        # cuboid sums a cell's slots, the class cuboids keep the class slots. Scattered batch by batch
        # into the outputs themselves: no slot-sized arrays summed and copied (the CPS-shaped test
        # table, 5.7 M class cells: its aggregate phase 0.09–0.11 → 0.05 s, four 48 MB arrays fewer).
        keys = value_keys(spec)
        cells, classes = math.prod(spec.shape), len(edges) - 1
        base = {key: np.zeros(cells) for key in keys.values()}
        counts, sums = np.zeros(cells * classes), np.zeros(cells * classes)
        what = f"aggregating the source with the classes of {measure!r}"
        names = aggregate_sql.base_class_cuboid_columns(spec)
        for batch in self._run(query, params, names, what):
            cell, slot = np.divmod(batch["cell"].astype(np.int64), classes + 1)
            for name, key in keys.items():
                base[key] += np.bincount(cell, weights=batch[name], minlength=cells)
            known = slot < classes
            index = cell[known] * classes + slot[known]
            counts[index], sums[index] = batch["n"][known], batch["w"][known]
        shape = spec.shape + (classes,)
        return {k: v.reshape(spec.shape) for k, v in base.items()}, (counts.reshape(shape), sums.reshape(shape))

    def _dense_cells(
        self, query: exp.Select, params: aggregate_sql.Params, names: list[str], shape: tuple[int, ...], what: str
    ) -> dict[str, np.ndarray]:
        """A query's rows (a flat ``cell`` index, then values) as dense arrays of ``shape`` per value
        column, empty cells 0. Batches are scattered as they arrive, so memory is the cube's."""
        dense = {name: np.zeros(math.prod(shape), dtype=np.float64) for name in names[1:]}
        for batch in self._run(query, params, names, what):
            cells = batch["cell"].astype(np.int64)
            for name, array in dense.items():
                array[cells] = batch[name]
        return {name: array.reshape(shape) for name, array in dense.items()}

    def marginal_cuboids(
        self, spec: TableSpec, bounds: dict[str, tuple[float, float]], cuboids: list[tuple[int, ...]]
    ) -> dict[str, dict[tuple[int, ...], np.ndarray]]:
        """The true cuboids of a wide table, per aggregate: ``cuboids`` (sorted axis tuples) as dense
        arrays over their own axes. One ``GROUPING SETS`` query over the maximal ones; the others are
        their exact sums. Memory is the cuboids', never the rows' or the base cube's."""
        maximal = _maximal(cuboids)
        keys = value_keys(spec)
        if len(maximal) > MANY_SETS:
            dense = self._sets_from_cells(spec, bounds, maximal, list(keys))
            return {key: _summed(dense[v], cuboids, maximal) for v, key in keys.items()}
        query, params = aggregate_sql.cuboids_query(self.table, spec, bounds, maximal)
        names = aggregate_sql.cuboids_columns(spec)
        dense = self._grouping_sets(
            query,
            params,
            names,
            names[: len(spec.dimensions)],
            spec.shape,
            maximal,
            list(keys),
            "aggregating the source's cuboids",
        )
        return {key: _summed(dense[v], cuboids, maximal) for v, key in keys.items()}

    def _sets_from_cells(
        self,
        spec: TableSpec,
        bounds: dict[str, tuple[float, float]],
        maximal: list[tuple[int, ...]],
        values: list[str],
    ) -> dict[str, dict[tuple[int, ...], np.ndarray]]:
        """Many cuboids from one read: the engine groups the rows by every coordinate once
        (`aggregate_sql.cells_query`, the base cuboid's non-empty cells), and each cuboid is the
        weighted bincount of those cells' coordinates, batch by batch as they arrive (memory is the
        cuboids' and one batch's). The engines' GROUPING SETS aggregate every row once per set: the
        16-column Bank example's 546 maximal cuboids took DuckDB 1.79 s over 45,211 rows, the cells and
        their bincounts 0.34 s (`bench/wide_aggregate.py`). Counts are exact; a SUM is the same sum in another order."""
        query, params = aggregate_sql.cells_query(self.table, spec, bounds)
        names = aggregate_sql.cells_columns(spec)
        shape = spec.shape
        sizes = {s: math.prod(shape[i] for i in s) for s in maximal}
        dense = {v: {s: np.zeros(sizes[s]) for s in maximal} for v in values}
        for batch in self._run(query, params, names, "aggregating the source's cuboids"):
            coords = [batch[f"c{i}"].astype(np.int64) for i in range(len(shape))]
            rows = len(batch[values[0]])
            for s in maximal:
                cell = np.ravel_multi_index([coords[i] for i in s], [shape[i] for i in s]) if s else np.zeros(rows, int)
                for v in values:
                    dense[v][s] += np.bincount(cell, weights=batch[v], minlength=sizes[s])
        return {v: {s: a.reshape([shape[i] for i in s]) for s, a in per.items()} for v, per in dense.items()}

    def class_marginal_cuboids(
        self,
        spec: TableSpec,
        bounds: dict[str, tuple[float, float]],
        measure: str,
        edges: list[float],
        closed_above: list[bool],
        class_bounds: list[float],
        cuboids: list[tuple[int, ...]],
    ) -> tuple[dict[tuple[int, ...], np.ndarray], ...]:
        """A wide table's class axis: the COUNT and Σ v/u_k cuboids over the dimensions
        and the measure's class (axis d), `aggregate_sql.class_cuboids_query`."""
        maximal = _maximal(cuboids)
        query, params = aggregate_sql.class_cuboids_query(
            self.table, spec, bounds, measure, edges, closed_above, class_bounds, maximal
        )
        names = aggregate_sql.class_cuboids_columns(spec)
        shape = spec.shape + (len(edges) - 1,)
        dense = self._grouping_sets(
            query, params, names, names[: len(shape)], shape, maximal, ["n", "s"], f"the classes of {measure!r}"
        )
        return _summed(dense["n"], cuboids, maximal), _summed(dense["s"], cuboids, maximal)

    def _grouping_sets(
        self,
        query: Any,
        params: Any,
        names: list[str],
        axes: list[str],
        shape: tuple[int, ...],
        maximal: list[tuple[int, ...]],
        values: list[str],
        what: str,
    ) -> dict[str, dict[tuple[int, ...], np.ndarray]]:
        """Scatter a GROUPING SETS result into dense arrays per set: a coordinate is −1 exactly when its
        axis is not in the row's set, so the pattern of −1s says which set a row belongs to."""
        dense = {v: {s: np.zeros([shape[i] for i in s]) for s in maximal} for v in values}
        bits = 1 << np.arange(len(axes), dtype=np.int64)
        sets = {sum(1 << i for i in s): s for s in maximal}  # a set's bit pattern → the set
        for batch in self._run(query, params, names, what):
            coords = np.stack([batch[a] for a in axes], axis=1).astype(np.int64)
            pattern = (coords >= 0) @ bits  # one code per row: sorted, each set's rows are one run
            order = np.argsort(pattern, kind="stable")
            codes, starts = np.unique(pattern[order], return_index=True)
            for code, start, end in zip(codes, starts, [*starts[1:], len(order)]):
                s, rows = sets[int(code)], order[start:end]
                index = tuple(coords[rows, i] for i in s)
                for v in values:
                    dense[v][s][index] = batch[v][rows]
        return dense

    def nonzero_cells(
        self, spec: TableSpec, bounds: dict[str, tuple[float, float]]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The non-empty cells of the base cuboid: coordinates (m, d) and, per aggregate, their COUNT
        and clipped SUMs. For data-aware partitions (HDPView); memory is the non-empty cells'."""
        query, params = aggregate_sql.cells_query(self.table, spec, bounds)
        names = aggregate_sql.cells_columns(spec)
        d = len(spec.dimensions)
        parts: list[Batch] = list(self._run(query, params, names, "aggregating the source's non-empty cells"))

        def column(name: str) -> np.ndarray:
            return np.concatenate([b[name] for b in parts]) if parts else np.zeros(0)

        coords = (
            np.stack([column(f"c{i}").astype(np.int64) for i in range(d)], axis=1)
            if parts
            else np.zeros((0, d), np.int64)
        )
        return coords, {key: column(name) for name, key in value_keys(spec).items()}

    def unit_row_counts(self, spec: TableSpec) -> tuple[np.ndarray, np.ndarray]:
        """(n, how many units have n in-domain rows), untruncated: for the rows-per-unit histogram."""
        query, params = aggregate_sql.unit_rows_query(self.table, spec)
        parts = list(self._run(query, params, ["n", "units"], "counting rows per privacy unit"))
        if not parts:
            return np.zeros(0), np.zeros(0)
        return np.concatenate([b["n"] for b in parts]), np.concatenate([b["units"] for b in parts])

    def measure_histogram(self, spec: TableSpec, measure: str, edges: np.ndarray) -> np.ndarray:
        """Counts of the measure (clipped to its public bounds) in the buckets ``edges`` over the
        rows that fall in the cube's domains. Only bucket counts leave this method."""
        query, params = aggregate_sql.histogram_query(self.table, spec, measure, edges)
        counts = np.zeros(len(edges) - 1)
        for batch in self._run(query, params, ["b", "n"], f"the histogram of {measure!r}"):
            counts[batch["b"].astype(np.int64)] = batch["n"]
        return counts

    def fit_report(self, spec: TableSpec) -> dict[str, Any]:
        """How many rows fit the declared metadata (exact counts for the admin's registration
        response only — see SECURITY.md "Registration preflight"; never stored or logged)."""
        query, params = aggregate_sql.fit_query(self.table, spec)
        names = aggregate_sql.fit_columns(spec)
        row = {name: 0.0 for name in names}
        for batch in self._run(query, params, names, "checking the source against the metadata"):
            row = {name: float(batch[name][0]) for name in names}
        return {
            "rows": int(row["n"]),
            "rows_in_every_domain": int(row["inside"]),
            "outside_domain": {d.name: int(row[f"out{i}"]) for i, d in enumerate(spec.dimensions)},
            "measure_missing": {m.name: int(row[f"null{j}"]) for j, m in enumerate(spec.measures)},
            "measure_clipped": {m.name: int(row[f"clip{j}"]) for j, m in enumerate(spec.measures)},
        }

    def check(self, spec: TableSpec) -> None:
        """Every declared column exists and the aggregate binds (types inspected, no row read)."""
        try:
            present = self.columns()
        except StorageError:
            raise
        except Exception as exc:
            log.warning("%s source probe failed: %s", self.kind, type(exc).__name__)
            raise StorageError(
                f"could not read the {self.kind} source table's columns ({type(exc).__name__})"
            ) from None
        lower = {c.lower() for c in present}
        declared = [c.name for c in [*spec.dimensions, *spec.measures]]
        declared += [spec.privacy_unit.column] if spec.privacy_unit is not None else []
        missing = [c for c in declared if c.lower() not in lower]
        if missing:
            raise StorageError(f"source has no column(s) {missing}; it has {sorted(present)}")
        schema = self.schema_key()
        key = None if schema is None else (self.kind, self.table.sql(), schema, spec.model_dump_json())
        if key in _BOUND:
            return
        self._bind(spec)
        if key is not None:
            if len(_BOUND) >= _BOUND_KEPT:
                _BOUND.clear()
            _BOUND.add(key)

    def schema_key(self) -> tuple[Any, ...] | None:
        """The source's column names and types, where reading them is cheap: `check`'s binding depends
        on nothing else in the source, so an outcome seen once holds while they stay. None: bind
        every time."""
        return None

    def _bind(self, spec: TableSpec) -> None:
        """Run the aggregate with LIMIT 0: its columns bind to the source's types (no row is read)."""
        query, params = aggregate_sql.cuboid_query(self.table, spec, {m.name: (m.lo, m.hi) for m in spec.measures})
        names = aggregate_sql.cuboid_columns(spec)
        try:
            for _ in self._run(query.limit(0, copy=False), params, names, "binding the declared columns to the source"):
                pass
        except StorageError as exc:
            raise StorageError(
                f"{exc}: measures and int dimensions need numeric columns, date dimensions date or "
                "timestamp columns (on PostgreSQL a text column is not cast row by row, where one "
                "bad value would fail a build: cast it in a view)"
            ) from None

    def prepared(self, query: exp.Expression, values: dict[str, Any]) -> tuple[exp.Expression, dict[str, Any]]:
        """The query and its parameters as this engine runs them best (the default: as written)."""
        return query, values

    def _run(self, query: exp.Select, params: aggregate_sql.Params, names: list[str], what: str) -> Iterator[Batch]:
        ready, values = self.prepared(query, params.values)
        sql = aggregate_sql.render(ready, self.dialect)
        try:
            yield from self.batches(sql, values, names)
        except StorageError:
            raise
        except duckdb.OutOfMemoryException:  # (`Database.streamed` tries again without its limit)
            raise OutOfMemory(f"{what} ran out of memory on {self.kind}") from None
        except Exception as exc:  # driver messages can quote row values: keep only the type
            log.warning("%s failed on %s: %s", what, self.kind, type(exc).__name__)
            raise StorageError(f"{what} failed on {self.kind} ({type(exc).__name__}; details withheld)") from None


# More maximal cuboids than this are summed from the base cuboid's non-empty cells (`_sets_from_cells`)
# rather than by the engine's GROUPING SETS: a public count, so the path never depends on the rows.
MANY_SETS = 32
_ENUMERATED_AXES = 8  # `_maximal`: cuboids up to this many axes have their 2^k subsets listed


def _maximal(cuboids: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The cuboids no other one contains: the only sets the query groups by. Every proper subset of
    every cuboid of up to `_ENUMERATED_AXES` axes is collected once (a pairwise comparison of the Bank
    example's ~700 cuboids took 0.25 s); the few larger ones a named cuboid can be (2^d subsets) are
    compared directly."""
    contained: set[frozenset[int]] = set()
    large = []
    for t in {frozenset(c) for c in cuboids}:
        if len(t) > _ENUMERATED_AXES:
            large.append(t)
            continue
        for k in range(len(t)):
            contained.update(frozenset(c) for c in itertools.combinations(sorted(t), k))
    sets = [frozenset(s) for s in cuboids]
    return [s for s, a in zip(cuboids, sets) if a not in contained and not any(a < t for t in large)]


def _summed(
    dense: dict[tuple[int, ...], np.ndarray], cuboids: list[tuple[int, ...]], maximal: list[tuple[int, ...]]
) -> dict[tuple[int, ...], np.ndarray]:
    """Every cuboid as the exact sum of a maximal one that contains it (the smallest such)."""
    tops = sorted(((frozenset(t), t) for t in maximal), key=lambda m: dense[m[1]].size)
    out = {}
    for s in cuboids:
        top = next(t for axes, t in tops if axes.issuperset(s))
        drop = tuple(k for k, i in enumerate(top) if i not in s)
        out[s] = dense[top].sum(axis=drop) if drop else dense[top]
    return out


def to_batch(rows: list[tuple], names: list[str]) -> Batch:
    """Driver rows (tuples) → columns as float64 arrays (NULL sums are COALESCEd to 0 in SQL)."""
    array = np.asarray(rows, dtype=np.float64).reshape(len(rows), len(names))
    return {name: array[:, k] for k, name in enumerate(names)}
