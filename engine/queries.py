"""Queries: SQL planned (each text once, each shape parsed once) and answered from the loaded synopsis,
answers memoized per synopsis — the `engine.service.Prima` collaborator that spends nothing."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson
from sqlglot import exp

from engine.answer import Answer
from engine.answers.assemble import answer, domain_answer
from engine.answers.options import DEFAULT, AnswerOptions
from engine.builds import growing
from engine.builds.builder import Builds
from engine.errors import PrimaError, QueryError
from engine.plan import QueryPlan
from engine.sql import unnest
from engine.sql.constants import time_dependent
from engine.sql.templates import PlanShapes
from engine.synopses.protocol import Synopsis
from engine.workspace import Workspace
from storage.schema import OTHER_LABEL, IntDimension, TableSpec

PLAN_CACHE_SIZE = 4096
INLINE_PLAN_CHARS = 2_000  # new SQL up to this length may be planned on the event loop (new_query_json)


class Queries:
    """Plans and answers over one workspace's synopses (loaded, or built on a first query, by ``builds``)."""

    def __init__(self, ws: Workspace, builds: Builds) -> None:
        self.ws = ws
        self._builds = builds
        self._shapes = PlanShapes()  # parse trees by query shape: a new query with known shape skips parsing

    def plan(self, sql: str, lookup: Callable[[str, bool], TableSpec | None] | None = None) -> QueryPlan:
        """The plan of ``sql`` (cached by text); ``lookup`` resolves table names (default: the catalog)."""
        key = sql.strip() if isinstance(sql, str) else sql
        with self.ws.lock:
            cached = self.ws.plans.get(key)
            if cached is not None:
                self.ws.plans.move_to_end(key)
                return cached
        split = unnest.series_limit(sql)
        if split is not None:  # for its columns only (describe): `query` answers it in two steps
            return self.plan(split.restricted(exp.true()), lookup)
        try:
            plan = self._shapes.plan(sql, lookup or self.ws.spec_or_none)
        except RecursionError:  # a construct check_nesting does not count, nested past the interpreter's stack
            raise QueryError("the query is nested too deeply to plan; flatten it") from None
        if isinstance(sql, str) and time_dependent(sql):  # NOW(), CURRENT_DATE: folded as of now, never kept
            return plan
        with self.ws.lock:
            self.ws.plans[key] = plan
            if len(self.ws.plans) > PLAN_CACHE_SIZE:
                self.ws.plans.popitem(last=False)
        return plan

    def query(self, sql: str, options: AnswerOptions = DEFAULT) -> Answer:
        """The answer to ``sql``, shown the way ``options`` ask (`engine.answers.options`)."""
        split = unnest.series_limit(sql)
        if split is not None:  # Superset's series limit: a JOIN on the top n groups of a ranking query
            return self._series_limited(split, options)
        plan = options.applied(self.plan(sql))
        if not plan.aggregates:  # `SELECT dim FROM t GROUP BY dim` (a BI tool's field scan): the declared values
            return Answer.of(domain_answer(plan, self.ws.spec(plan.table)) | {"table": plan.table})
        return self.answer(plan, self._builds.cube_for_query(plan.table), options.clamp)

    def _series_limited(self, split: unnest.SeriesLimit, options: AnswerOptions) -> Answer:
        """The outer query over the groups the ranking query's released answer puts on top
        (post-processing of two answers: no privacy cost beyond the cube's)."""
        top = self.query(split.ranking, options)
        names = [c.lower() for c in top["columns"]]
        if split.key.lower() not in names:
            raise QueryError(f"the series limit's key {split.key!r} is not a column of its ranking query")
        at = names.index(split.key.lower())
        outer_plan = self.plan(split.restricted(exp.true()))
        dim = self.ws.spec(outer_plan.table).dimension(split.column)
        if dim is None:
            raise QueryError(f"the series limit joins on {split.column!r}, which is not a dimension")
        labels = [row[at] for row in top["rows"] if row[at] is not None and row[at] != OTHER_LABEL]
        condition = exp.or_(*[_group_condition(dim, label) for label in labels]) if labels else exp.condition("1 = 0")
        result = self.query(split.restricted(exp.Paren(this=condition)), options)
        note = (
            f"series limit: the groups of {split.column!r} among the top {len(top['rows'])} of the ranking query's "
            "released answer (noisy: a group near the cut may be in or out)"
        )
        return result.with_notes(result.notes + [note])

    def in_memory(self, sql: str) -> tuple[QueryPlan, Synopsis] | None:
        """The cached plan and loaded cube for ``sql``, if both are in memory (no DB, no build) and
        its answer is remembered or light to compute (`_light`): callers run on the event loop."""
        self.ws.refresh()
        with self.ws.lock:
            plan = self.ws.plans.get(sql.strip()) if isinstance(sql, str) else None
        if plan is None:
            return None
        cube = self.ws.cubes.get(plan.table)
        if cube is None or (cube.answers.get(plan) is None and not _light(plan)):
            return None
        return plan, cube

    def cached_query(self, sql: str) -> Answer | None:
        """The answer if it needs only memory (plan cached, cube loaded), else None.

        Never touches the database or builds, so an event loop may call it inline; everything
        else goes through `query` on a worker thread.
        """
        hit = self.in_memory(sql)
        return None if hit is None else self.answer(*hit)

    def cached_query_json(self, sql: str) -> bytes | None:
        """`cached_query` already serialized, memoized with the answer: a repeat costs a lookup."""
        hit = self.in_memory(sql)
        return None if hit is None else self._answer_json(*hit)

    def _answer_json(self, plan: QueryPlan, cube: Synopsis) -> bytes:
        encoded = cube.answers.get(plan)
        return self._remembered_answer(plan, cube)[1] if encoded is None else encoded

    def new_query_json(self, sql: str) -> bytes | None:
        """A never-seen query answered without leaving memory: planned here (short SQL only), and
        answered if its table's cube is loaded. None when that is not possible — an error, a long
        query, a cube to load or build: the caller then takes the ordinary path (which reports
        errors). Lets an event loop answer exploring analysts without a thread hop."""
        if not isinstance(sql, str) or len(sql) > INLINE_PLAN_CHARS or unnest.series_limit(sql) is not None:
            return None  # (a series limit is answered in two steps by `query`)
        try:
            plan = self.plan(sql, self.ws.spec_in_memory)  # never the database: this runs on the loop
        except PrimaError:
            return None
        cube = self.ws.cubes.get(plan.table)
        return None if cube is None or not _light(plan) else self._answer_json(plan, cube)

    def answer(self, plan: QueryPlan, cube: Synopsis, clamp: bool = True) -> Answer:
        """The answer, memoized per cube as JSON: a released cube answers a plan identically every
        time (the raw, unclamped form is not memoized: it is the rarer request)."""
        if not clamp:
            return self._fresh_answer(plan, cube, clamp=False)
        encoded = cube.answers.get(plan)
        return self._remembered_answer(plan, cube)[0] if encoded is None else Answer.of(orjson.loads(encoded))

    def _remembered_answer(self, plan: QueryPlan, cube: Synopsis) -> tuple[Answer, bytes]:
        """A clamped answer computed now, as a dict and as JSON, and remembered by its cube."""
        result = self._fresh_answer(plan, cube)
        encoded = result.to_json()
        cube.remember(plan, result, encoded)
        return result, encoded

    def _fresh_answer(self, plan: QueryPlan, cube: Synopsis, clamp: bool = True) -> Answer:
        result = self._assembled(plan, cube, clamp)
        return Answer.of(result | {"table": plan.table, "cube": cube.answer_meta})

    def _assembled(self, plan: QueryPlan, cube: Synopsis, clamp: bool = True) -> dict[str, Any]:
        """The answer's values, bars and notes; a growing table's plan restricted to its measured periods."""
        spec = self.ws.spec(plan.table)
        if isinstance(cube, growing.GrowingCube):
            plan = growing.restricted(plan, cube, spec)
        return answer(plan, cube, spec, clamp=clamp)

    def query_batch(self, queries: list[str]) -> list[Answer | dict[str, Any]]:
        """Each query's answer, or its error as ``{"error": {"status", "detail"}}`` in its place."""
        results: list[Answer | dict[str, Any]] = []
        for sql in queries:
            try:
                results.append(self.query(sql))
            except PrimaError as exc:
                results.append({"error": {"status": exc.status, "detail": exc.detail}})
        return results

    def answer_with(self, sql: str, cube_for: Callable[[str], Synopsis]) -> Answer:
        """Answer ``sql`` from a caller-supplied cube (tests use `steps.exact_cube`)."""
        plan = self.plan(sql)
        return Answer.of(self._assembled(plan, cube_for(plan.table)))


ON_LOOP_WORK = 50_000  # groups × aggregates (a quantile counting 64) an event loop may compute inline


def _light(plan: QueryPlan) -> bool:
    """Whether a plan's answer is cheap enough to compute on the event loop. Heavier ones go to a
    thread with the request's deadline: 199 PERCENTILE_CONTs over 8,064 groups, answered inline
    from a cached plan, held the loop for minutes."""
    groups = math.prod(sum(hi - lo + 1 for lo, hi in plan.selection[a]) for a in plan.group_axes)
    work = sum(64 if a.func == "quantile" else 1 for a in plan.aggregates)
    return groups * max(work, 1) <= ON_LOOP_WORK


def _group_condition(dim: Any, label: Any) -> exp.Expr:
    """The condition selecting one group of a dimension by its label: a whole integer bin, a month
    ('2020-03'), a category value."""
    column = exp.column(dim.name, quoted=True)
    if isinstance(dim, IntDimension) and dim.bin > 1:
        return exp.Between(
            this=column, low=exp.Literal.number(label), high=exp.Literal.number(int(label) + dim.bin - 1)
        )
    value = exp.Literal.number(label) if isinstance(label, (int, float)) else exp.Literal.string(str(label))
    return exp.EQ(this=column, expression=value)
