"""The Prima service: one data directory's tables, builds and queries behind one small facade.

Every face (REST, the wire, the CLI, the library) calls `Prima`; it hands each call to the
collaborator whose one job it is, all sharing one `engine.workspace.Workspace` (the database, the
catalog read once per table, the loaded synopses):

* `engine.tables.Tables` — registration and its preflight, retirement, descriptions, budgets, ledger;
* `engine.builds.builder.Builds` — builds and appends (charged before any row is read), cube status,
  loading synopses;
* `engine.queries.Queries` — plans and answers (memoized), which spend nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.answer import Answer
from engine.answers.options import DEFAULT, AnswerOptions
from engine.builds.builder import Builds, BuildVia
from engine.errors import Conflict, Invalid, NotFound, PrimaError, QueryError
from engine.plan import QueryPlan
from engine.queries import Queries
from engine.synopses.protocol import Synopsis
from engine.tables import Tables
from engine.workspace import Workspace
from storage.catalog import TableRecord
from storage.database import Database
from storage.schema import TableSpec

DEFAULT_MAX_CUBE_BYTES = 2**30


class Prima:
    """One data directory's service. Thread-safe; one instance per process (DuckDB's rule)."""

    def __init__(
        self,
        data_dir: Path,
        import_dir: Path | None = None,
        seed: int | None = None,
        max_cube_bytes: int = DEFAULT_MAX_CUBE_BYTES,
        role: str = "single",
        build_via: BuildVia | None = None,
        state: str | None = None,
        cube_dir: str | Path | None = None,
    ) -> None:
        """``role`` (`engine.workspace.Workspace`): ``"single"``, ``"writer"`` or ``"reader"``; a reader
        hands builds to the writer through ``build_via`` (its admin requests are forwarded above).
        ``state``: a PostgreSQL URL that this server shares with others (role ``"shared"``; the
        catalog, ledger and cube index live there, the cubes in ``cube_dir``).
        ``seed`` (tests only): seeded noise, so builds repeat."""
        if state is not None:
            role = "shared"
        self.ws = Workspace(data_dir, import_dir, max_cube_bytes, role, state, cube_dir)
        self.builds = Builds(self.ws, lambda name: self.tables.budget(name)["remaining"], seed, build_via)
        self.tables = Tables(self.ws, self.builds.status, self.builds.growth_status)
        self.queries = Queries(self.ws, self.builds)
        if role != "reader":
            self.builds.recover()

    # -- the data directory ------------------------------------------------------------------
    @property
    def db(self) -> Database:
        return self.ws.db

    @property
    def data_dir(self) -> Path:
        return self.ws.data_dir

    @property
    def cube_root(self) -> Path:
        return self.ws.cube_root

    @property
    def role(self) -> str:
        return self.ws.role

    @property
    def stats(self) -> dict[str, int]:
        return self.builds.stats

    @property
    def last_build_seconds(self) -> dict[str, dict[str, float]]:
        return self.builds.last_build_seconds

    def close(self) -> None:
        self.ws.close()

    def warm_build_workers(self) -> None:
        self.builds.warm_workers()

    def publish(self) -> None:
        self.ws.publish()

    def refresh(self, force: bool = False) -> None:
        self.ws.refresh(force)

    def current_generation(self) -> int:
        return self.ws.current_generation()

    # -- tables and budgets --------------------------------------------------------------------
    def ensure_demo(self) -> bool:
        return self.tables.ensure_demo()

    def register(
        self, spec: TableSpec, dry_run: bool = False, force: bool = False, new_population: bool = False
    ) -> dict[str, Any]:
        return self.tables.register(spec, dry_run=dry_run, force=force, new_population=new_population)

    def retire(self, name: str) -> dict[str, Any]:
        return self.tables.retire(name)

    def table_names(self) -> list[str]:
        return self.ws.table_names()

    def table_info(self, name: str) -> dict[str, Any]:
        return self.tables.table_info(name)

    def record(self, name: str) -> TableRecord:
        return self.ws.record(name)

    def spec(self, name: str) -> TableSpec:
        return self.ws.spec(name)

    def spec_or_none(self, name: str, case_insensitive: bool = False) -> TableSpec | None:
        return self.ws.spec_or_none(name, case_insensitive)

    def budget(self, name: str) -> dict[str, Any]:
        return self.tables.budget(name)

    def set_budget(
        self, name: str, epsilon: float | None = None, rho: float | None = None, delta: float | None = None
    ) -> dict[str, Any]:
        return self.tables.set_budget(name, epsilon, rho, delta)

    def ledger_entries(self, name: str) -> list[dict[str, Any]]:
        return self.tables.ledger_entries(name)

    def spaces(self) -> list[dict[str, Any]]:
        return self.tables.spaces()

    def space_ledger(self, space: str) -> list[dict[str, Any]]:
        return self.tables.space_ledger(space)

    # -- builds and appends ----------------------------------------------------------------------
    def cube_status(self, name: str) -> dict[str, Any]:
        """The table's cube: building (with phase), ready (with its public facts), failed or none."""
        self.ws.record(name)  # NotFound for an unknown table
        return self.builds.status(name)

    def build(self, name: str, force: bool = False) -> tuple[dict[str, Any], bool]:
        return self.builds.build(name, force)

    def build_in_background(self, name: str, force: bool = False) -> dict[str, Any]:
        return self.builds.build_in_background(name, force)

    def append(
        self,
        name: str,
        through: dt.date | None = None,
        period: str | None = None,
        limit: int | None = None,
        today: dt.date | None = None,
        remeasure: bool = False,
    ) -> dict[str, Any]:
        return self.builds.append(name, through=through, period=period, limit=limit, today=today, remeasure=remeasure)

    def scheduled_appends(self) -> dict[str, list[str]]:
        return self.builds.scheduled_appends()

    def growth_status(self, name: str) -> dict[str, Any]:
        return self.builds.growth_status(name)

    def measured_through(self, name: str) -> int:
        """The last measured period of a growing table (−1: none yet)."""
        return self.builds.measured_through(name, self.ws.spec(name))

    def cube_for_query(self, name: str) -> Synopsis:
        """The table's loaded synopsis, built first if it is declared to build on a first query."""
        return self.builds.cube_for_query(name)

    def exact_cube(self, name: str) -> Synopsis:
        """TEST-ONLY: see `engine.builds.steps.exact_cube`. Not reachable from any endpoint."""
        return self.builds.exact_cube(name)

    def reseed(self, seed: int | None) -> None:
        """Tests: the next builds draw from seeded streams."""
        self.builds.reseed(seed)

    # -- queries ---------------------------------------------------------------------------------
    def plan(self, sql: str, lookup: Callable[[str, bool], TableSpec | None] | None = None) -> QueryPlan:
        return self.queries.plan(sql, lookup)

    def query(self, sql: str, options: AnswerOptions = DEFAULT) -> Answer:
        return self.queries.query(sql, options)

    def query_batch(self, queries: list[str]) -> list[Answer | dict[str, Any]]:
        return self.queries.query_batch(queries)

    def cached_query(self, sql: str) -> Answer | None:
        return self.queries.cached_query(sql)

    def cached_query_json(self, sql: str) -> bytes | None:
        return self.queries.cached_query_json(sql)

    def new_query_json(self, sql: str) -> bytes | None:
        return self.queries.new_query_json(sql)

    def in_memory(self, sql: str) -> tuple[QueryPlan, Synopsis] | None:
        return self.queries.in_memory(sql)

    def answer_with(self, sql: str, cube_for: Callable[[str], Synopsis]) -> Answer:
        return self.queries.answer_with(sql, cube_for)


__all__ = ["Prima", "QueryError", "Conflict", "NotFound", "Invalid", "PrimaError"]
