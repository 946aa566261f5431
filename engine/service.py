"""The Prima service object: registration, budgets, cube builds (once, charged first) and queries.

Build protocol (SPEC §1–2, DEVELOPERS privacy rule 2). For one table at a time (a per-table lock,
so concurrent first queries build once):
  1. plan the build from public metadata only (bounds, ε per aggregate, sensitivities);
  2. probe the source's columns and types (no row is read): a wrong declaration costs nothing;
  3. charge the ledger in one committed transaction that refuses to exceed the total;
  4. aggregate the source (true cuboids stay in this function), measure (noise), prefix-sum,
     persist; mark the ledger entries ``done``.
Rows are read only after the charge (issue #29), so no row's value can make a build fail for free.
A failure after step 3 marks the entries ``failed`` (the budget stays spent) and is not retried
silently: an admin must ask for a rebuild (``force``), which spends again.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import orjson
from sqlglot import exp

from engine.sql import unnest
from engine.builds import growing, steps
from engine.builds.appends import Appends
from engine.answers.assemble import domain_answer, answer
from engine.sql.constants import time_dependent
from engine.synopses.cube import Cube
from engine.errors import Conflict, Invalid, NotFound, PrimaError, QueryError, TooLarge, Unavailable
from engine.builds.faults import fault_point
from engine.builds.locks import build_lock
from engine.plan import QueryPlan
from engine.builds.preview import preview
from engine.sql.templates import PlanShapes
from privacy.parallel import processes, progress
from privacy.accounting.currencies import declared_total
from privacy.mechanisms.sampler import RandomSource
from privacy.accounting.zcdp import epsilon_for
from storage import catalog, cube_store, demo, ledger, snapshot, sources
from storage.database import Database, StorageError
from storage.schema import OTHER_LABEL, IntDimension, TableSpec

log = logging.getLogger("prima.engine")

PLAN_CACHE_SIZE = 4096
INLINE_PLAN_CHARS = 2_000  # new SQL up to this length may be planned on the event loop (new_query_json)
BUILDING_RETRY_AFTER = 5  # seconds a query on a table being built is told to wait
SNAPSHOT_CHECK_SECONDS = 0.25  # a reader looks for a newer snapshot at most this often
BUILD_PHASES = ("bound", "charge", "aggregate", "measure", "post-process", "persist")
DEFAULT_MAX_CUBE_BYTES = 2**30


class Prima(Appends):
    """One data directory's service. Thread-safe; one instance per process (DuckDB's rule)."""

    def __init__(
        self,
        data_dir: Path,
        import_dir: Path | None = None,
        seed: int | None = None,
        max_cube_bytes: int = DEFAULT_MAX_CUBE_BYTES,
        role: str = "single",
        build_via: Callable[[str, bool], tuple[dict[str, Any], bool]] | None = None,
    ) -> None:
        """``role`` (issue #36, `storage.snapshot`): ``"single"`` owns the data dir alone; ``"writer"``
        owns it and publishes a snapshot after every change; ``"reader"`` serves from the snapshot and
        hands builds to the writer through ``build_via`` (its admin requests are forwarded above)."""
        if role not in ("single", "writer", "reader"):
            raise ValueError(f"unknown role {role!r}")
        self.data_dir = Path(data_dir)
        self.cube_root = self.data_dir / "cubes"
        self.import_dir = import_dir  # None: any absolute path (library use); the server sets one
        self.max_cube_bytes = max_cube_bytes
        self.role = role
        self._build_via = build_via
        self._stamp: str | None = None
        self._next_check = 0.0
        self.db = self._open_snapshot() if role == "reader" else Database(self.data_dir / "store.duckdb")
        self._seed = seed  # tests only: a seeded bit source makes builds repeatable
        self._builds = 0
        self._lock = threading.Lock()
        self._table_locks: dict[str, threading.Lock] = {}
        self._building: set[str] = set()
        self._progress: dict[str, dict[str, Any]] = {}  # table → {"phase", "fraction"} while building
        # table → {phase: seconds} of its last build in this process (the build's log line, bench/scale.py)
        self.last_build_seconds: dict[str, dict[str, float]] = {}
        self._phase_started: dict[str, tuple[str, float]] = {}
        self._background_errors: dict[str, str] = {}  # table → why the last background build stopped
        self.stats = {"builds_done": 0, "builds_failed": 0}
        self._cubes: dict[str, Cube] = {}
        # Bumped whenever the set of in-memory cubes changes: lets a caller that memoizes answers
        # (the HTTP fast path) check in one comparison that a remembered answer is still current.
        self.generation = 0
        self._specs: dict[str, TableSpec] = {}
        self._plans: collections.OrderedDict[str, QueryPlan] = collections.OrderedDict()
        self._shapes = PlanShapes()  # parse trees by query shape: a new query with known shape skips parsing
        if role == "reader":
            return
        failed = ledger.fail_unfinished(self.db)
        if failed:
            log.warning("marked %d interrupted build(s) as failed; their budget stays spent", len(failed))
        cube_store.remove_orphans(self.db, self.cube_root)
        self.publish()

    def close(self) -> None:
        self.db.close()

    def warm_build_workers(self) -> None:
        """Start the processes a build's fits run on (`privacy.parallel.processes`) now, so the first build
        does not wait ~0.5 s for their imports; a server calls this at start-up. Readers never build."""
        if self.role != "reader":
            processes.warm()

    # -- serving workers (issue #36) ---------------------------------------------------------
    def publish(self) -> None:
        """A writer's snapshot of its catalog, ledger and cube index for the readers."""
        if self.role == "writer":
            snapshot.publish(self.db, self.data_dir)

    def _open_snapshot(self, wait: float = 60.0) -> Database:
        """A reader's read-only view of the writer's latest snapshot (waiting for the first one)."""
        deadline = time.monotonic() + wait
        while (stamp := snapshot.stamp(self.data_dir)) is None:
            if time.monotonic() > deadline:
                raise StorageError(f"no catalog snapshot in {self.data_dir} after {wait:g} s: is the writer running?")
            time.sleep(0.05)
        self._stamp = stamp
        return Database(snapshot.open_path(self.data_dir, stamp), read_only=True)

    def refresh(self, force: bool = False) -> None:
        """A reader picks up the writer's newest snapshot: checked (one stat) at most every
        `SNAPSHOT_CHECK_SECONDS`, so a cube built by the writer is answered here within that time.
        The old view is dropped, not closed: a request still reading it finishes on it."""
        if self.role != "reader":
            return
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + SNAPSHOT_CHECK_SECONDS
        stamp = snapshot.stamp(self.data_dir)
        if stamp is None or stamp == self._stamp:
            return
        try:
            fresh = Database(snapshot.open_path(self.data_dir, stamp), read_only=True)
        except StorageError:  # replaced again while opening: the next check takes the newest
            return
        with self._lock:
            self.db, self._stamp = fresh, stamp
            self._cubes.clear()
            self._specs.clear()
            self._plans.clear()
            self.generation += 1

    def current_generation(self) -> int:
        """`generation` after a reader has looked for the writer's newest snapshot: a caller that
        memoizes answers by it (the HTTP fast path) never serves one across an append, rebuild or
        retirement for longer than `SNAPSHOT_CHECK_SECONDS`."""
        self.refresh()
        return self.generation

    def _writable(self, what: str) -> None:
        """Readers change nothing themselves: their admin requests go to the writer (`app.workers`)."""
        if self.role == "reader":
            raise Unavailable(f"this serving worker cannot {what}: send it to the writer (the admin API is "
                              "forwarded there; with the library, open the data dir itself)", retry_after=1)

    # -- tables ----------------------------------------------------------------------------
    def ensure_demo(self) -> bool:
        """Create and register the demo table when no table is registered yet (the writer's job)."""
        if self.role == "reader" or catalog.names(self.db):
            return False
        demo.create_demo_rows(self.db)
        self.register(demo.demo_spec())
        return True

    def register(self, spec: TableSpec, dry_run: bool = False, force: bool = False,
                 new_population: bool = False) -> dict[str, Any]:
        """Register ``spec``; the answer includes its cost preview and (for the admin) the
        preflight. ``dry_run``: validate and preview only — nothing is loaded, stored or spent.
        A source with no row inside every declared domain is refused unless ``force`` (a build would
        spend the budget on an empty cube); a source already in another id space unless
        ``new_population`` (issue #29)."""
        stored = self._check_cube_size(spec)
        # The preview plans the build from the metadata alone (checking strategy and weights): it runs
        # beside the source's copy and is waited for before anything is recorded (issue #36).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prima-preview") as pool:
            planned = pool.submit(growing.preview_growing if spec.growth is not None else preview, spec, stored)
            return self._register(spec, planned, dry_run, force, new_population)

    def _register(self, spec: TableSpec, planned: Future, dry_run: bool, force: bool,
                  new_population: bool) -> dict[str, Any]:
        try:
            if dry_run:
                cost = planned.result()
                if catalog.get(self.db, spec.name) is not None:
                    raise catalog.TableExists(spec.name)
                return {"dry_run": True, "name": spec.name, "cells": math.prod(spec.shape), "preview": cost}
            preflight: dict[str, Any] = {}
            declared = declared_total(spec.epsilon, spec.rho, spec.delta)
            self._writable("register a table")

            def vet(record: catalog.TableRecord) -> None:
                planned.result()
                self._vet(record, force, preflight)

            catalog.register(self.db, spec, self.import_dir, new_population=new_population, vet=vet,
                             budget=(declared.currency, declared.amount))
            cost = planned.result()
            self.publish()
        except catalog.TableExists:
            raise Conflict(f"table {spec.name!r} already exists") from None
        except catalog.PopulationConflict as exc:
            raise Conflict(str(exc)) from None
        except (StorageError, ValueError) as exc:
            raise Invalid(str(exc)) from None
        self._forget_plans()
        out = self.table_info(spec.name) | {"preview": cost, "preflight": preflight}
        budget = out["budget"]
        others = [t for t in budget["tables_in_space"] if t != spec.name]
        if others:  # an honest mistake (the same source twice) must not double the spend (issue #20)
            symbol, declared_amount = ledger.SYMBOL[budget["currency"]], declared_total(spec.epsilon, spec.rho, spec.delta)
            out["notes"] = [f"{spec.name!r} joins the id space {budget['id_space']!r} of {others}: they share one budget "
                            f"(total {symbol}={budget['total']:g}, spent {budget['spent']:g}), because they "
                            "cover the same source or declare the same privacy_unit.id_space"
                            + (f"; the registration's {budget['currency']}={declared_amount.amount:g} does not change the "
                               "shared total (PUT the budget to change it)"
                               if abs(declared_amount.amount - budget["total"]) > 1e-12 else "")]
        return out

    def _vet(self, record: catalog.TableRecord, force: bool, preflight: dict[str, Any]) -> None:
        """The preflight of a loaded source (into ``preflight``), refused before anything is recorded
        when `_registration_refusal` says so."""
        preflight.update(self._preflight(record))
        refusal = _registration_refusal(record.spec, preflight, force)
        if refusal:
            raise Invalid(refusal, extra={"preflight": dict(preflight)})

    def _preflight(self, record: catalog.TableRecord) -> dict[str, Any]:
        """How the source fits the declared metadata, for the registering admin only (exact row
        counts: SECURITY.md, "Registration preflight"). Returned once, never stored or logged;
        warnings say what to fix before a build spends the budget."""
        try:
            report = sources.fit_report(self.db, record.spec.source, record.source_table, record.spec)
        except StorageError as exc:
            return {"error": str(exc)}
        warnings, suggestions = _fit_warnings(record.spec, report)
        if report["rows_in_every_domain"] == 0:
            warnings.insert(0, "no row falls inside every declared domain: a build would spend the budget on an "
                               "empty cube (registered only because force=true was given)")
        return report | {"warnings": warnings} | ({"suggestions": suggestions} if suggestions else {})

    def retire(self, name: str) -> dict[str, Any]:
        """Remove a table (`catalog.retire`); its ledger entries stay and count again if the name
        is registered anew. Refused while a build runs (409)."""
        self._writable("retire a table")
        with self._table_lock(name):
            self._record(name)
            if name in self._building:
                raise Conflict(f"a cube build of {name!r} is running; retire the table when it has finished")
            spent = ledger.spent(self.db, name)
            currency, _ = ledger.space_currency(self.db, ledger.space_of(self.db, name))
            catalog.retire(self.db, name, self.cube_root)
            self._cubes.pop(name, None)
            self._specs.pop(name, None)
            self.generation += 1  # the fast path's remembered answers of this table are void
        self._forget_plans()
        log.info("retired table %s", name)
        self.publish()
        return {"name": name, "retired": True, "currency": currency, "spent": spent, f"{currency}_spent": spent,
                "note": "the ledger keeps this table's entries; registering the name again starts from what was spent"}

    def _check_cube_size(self, spec: TableSpec) -> int:
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
        if size > self.max_cube_bytes:
            raise TooLarge(
                f"the declared domains give a {strategy.name} synopsis of {size:,} bytes for {aggregates} "
                f"aggregates, over the {self.max_cube_bytes:,}-byte cube limit (PRIMA_MAX_CUBE_BYTES); use "
                "coarser bins, fewer dimensions or another cube strategy (cuboids stores 1-/2-way cuboids only)"
            )
        return size

    def table_names(self) -> list[str]:
        self.refresh()
        return catalog.names(self.db)

    def table_info(self, name: str) -> dict[str, Any]:
        record = self._record(name)
        spec = record.spec
        return {
            "name": spec.name,
            "description": spec.description,
            "dimensions": [d.model_dump(mode="json") for d in spec.dimensions],
            "measures": [m.model_dump(mode="json") for m in spec.measures],
            "cells": math.prod(spec.shape),
            "cube": {"config": spec.cube.model_dump(mode="json"), **self._cube_status(name)},
            "budget": self.budget(name),
        } | ({"growth": self.growth_status(name)} if spec.growth is not None else {})

    def _record(self, name: str) -> catalog.TableRecord:
        self.refresh()
        record = catalog.get(self.db, name)
        if record is None:
            raise NotFound(f"unknown table {name!r}")
        return record

    # -- budget ----------------------------------------------------------------------------
    def budget(self, name: str) -> dict[str, Any]:
        """The budget of the table's id space (issue #20): shared by every table over the same
        population or source, retired ones' spend included."""
        spec = self._record(name).spec
        space = ledger.space_of(self.db, name)
        out = _space_budget(self.db, space) | {"id_space": ledger.public_space(self.db, space),
                                               "tables_in_space": catalog.space_tables(self.db, space)}
        if spec.growth is not None and spec.growth.model == "period":  # issue #32: parallel composition
            grain = growing.period_dimension(spec).granularity
            out |= {"composition": f"per {grain}",
                    "note": f"every {grain}'s rows get the total: the releases of different {grain}s read disjoint rows, "
                            f"so spent is what the most-charged {grain} has spent, and each new {grain} has the total "
                            "minus the spend that covers every period"}
        return out

    def set_budget(self, name: str, epsilon: float | None = None, rho: float | None = None) -> dict[str, Any]:
        """Set the space's total, in the currency it is declared in (``epsilon`` or ``rho``)."""
        self._writable("change a budget")
        self._record(name)
        if (epsilon is None) == (rho is None):
            raise Invalid('give the new total as "epsilon" or as "rho", the currency the table is budgeted in')
        try:
            catalog.set_total(self.db, name, epsilon if rho is None else rho, "epsilon" if rho is None else "rho")
        except catalog.BudgetBelowSpent as exc:
            raise Conflict(str(exc)) from None
        except ValueError as exc:
            raise Invalid(str(exc)) from None
        self.publish()
        return self.budget(name)

    def ledger_entries(self, name: str) -> list[dict[str, Any]]:
        """A table's entries: a live table's, or a retired one's (its ledger stays, issue #29)."""
        entries = ledger.entries(self.db, name)
        if not entries:
            self._record(name)  # NotFound for a name that was never registered or charged
        return [_entry_json(e) for e in entries]

    def spaces(self) -> list[dict[str, Any]]:
        """Every id space with its total, spend, live tables and registered sources (admin)."""
        out = []
        for space in ledger.space_names(self.db):
            out.append({"id_space": space, "shown_as": ledger.public_space(self.db, space)} | _space_budget(self.db, space)
                       | {"tables": catalog.space_tables(self.db, space), "sources": catalog.space_sources(self.db, space)})
        return out

    def space_ledger(self, space: str) -> list[dict[str, Any]]:
        """Every entry charged to one id space, retired tables' included (admin): named as stored, or
        as analysts see it."""
        real = ledger.space_named(self.db, space)
        if real is None:
            raise NotFound(f"unknown id space {space!r}")
        space = real
        return [_entry_json(e) | {"table": t} for e, t in ledger.space_entries(self.db, space)]

    # -- cubes -----------------------------------------------------------------------------
    def cube_status(self, name: str) -> dict[str, Any]:
        """The table's cube: building (with phase), ready (with its public facts), failed or none."""
        self._record(name)  # NotFound for an unknown table
        return self._cube_status(name)

    def _cube_status(self, name: str) -> dict[str, Any]:
        spec = self._spec(name)
        if spec.growth is not None:
            measured = self._measured_through(name, spec)
            return {"status": "growing" if measured >= 0 else "none", "periods_measured": measured + 1,
                    **({"appending": True} if name in self._building else {})}
        if name in self._building:
            return {"status": "building", **self._progress.get(name, {"phase": "waiting", "fraction": 0.0})}
        cube = self._cube_if_built(name)
        entries = ledger.entries(self.db, name)
        last_failed = bool(entries) and entries[-1].status == "failed"
        if cube is not None:
            out = {"status": "ready", **cube.public}
            if last_failed:
                out["last_build"] = "failed"
            warnings = self._total_warnings(name, cube)
            return out | ({"warnings": warnings} if warnings else {})
        out = {"status": "failed" if last_failed else "none"}
        if name in self._background_errors:
            out["error"] = self._background_errors[name]
        return out

    def _total_warnings(self, name: str, cube: Cube) -> list[str]:
        """SUMs whose whole-table total is noise-dominated, judged from released values only (the
        answer to ``SELECT SUM(m)``: its noisy value and stddev; free post-processing): issue #30's
        Bank example answered 7·10⁷ ± 2·10⁸ and nothing said so."""
        out = []
        for m in self._spec(name).measures:
            try:
                r = self._answer(self.plan(f'SELECT SUM("{m.name}") FROM "{name}"'), cube)
            except PrimaError:
                continue
            value, sd = r["rows"][0][0], r["stddev"][0][0]
            if value is not None and sd is not None and sd > TOTAL_WARN_SHARE * abs(value):
                out.append(f"SUM({m.name}) over the whole table is {value:.3g} with a noise stddev of {sd:.3g} "
                           f"({sd / max(abs(value), 1e-300):.0%} of it): most of its answers are noise; declare bounds "
                           "a row can plausibly reach, a measure axis (measures[].axis), fewer dimensions or coarser "
                           "bins, or more epsilon, and rebuild")
        return out

    def build_in_background(self, name: str, force: bool = False) -> dict[str, Any]:
        """Start a build on its own thread (or join the one running); returns the current status."""
        self._record(name)
        if name not in self._building and (force or self._cube_if_built(name) is None):
            self._background_errors.pop(name, None)
            self._progress[name] = {"phase": "waiting", "fraction": 0.0}
            self._building.add(name)  # visible as 'building' before the thread gets the lock
            threading.Thread(target=self._background_build, args=(name, force), daemon=True).start()
        return self._cube_status(name)

    def _background_build(self, name: str, force: bool) -> None:
        try:
            self.build(name, force=force)
        except PrimaError as exc:
            self._background_errors[name] = exc.detail
        except Exception as exc:  # the type only: messages from lower layers may quote data
            self._background_errors[name] = f"build failed ({type(exc).__name__})"
            log.error("background build of %s failed: %s", name, type(exc).__name__)
        finally:
            self._building.discard(name)

    def build(self, name: str, force: bool = False) -> tuple[dict[str, Any], bool]:
        """Build the table's cube unless one exists; returns (status, built_now). A reader has the
        writer build it (one build and one charge whichever worker asked) and reads the result."""
        if self.role == "reader":
            if self._build_via is None:
                self._writable("build a cube")
            status, built = self._build_via(name, force)
            self.refresh(force=True)
            return status, built
        try:
            status, built = self._build_here(name, force)
        except BaseException:
            self.publish()  # a failed build's ledger entries are news too
            raise
        if built:
            self.publish()
        return status, built

    def _build_here(self, name: str, force: bool) -> tuple[dict[str, Any], bool]:
        with self._table_lock(name):
            record = self._record(name)
            if record.spec.growth is not None:
                raise Conflict(f"{name!r} grows by periods: it is measured one closed period at a time (`prima append "
                               f"{name}` or POST /v1/admin/tables/{name}/append), never as a whole")
            existing = self._cube_if_built(name)
            if existing is not None and not force:
                return self._cube_status(name), False
            if not force and self._cube_status(name)["status"] == "failed":
                raise Conflict(
                    f"the last cube build of {name!r} failed after its budget was charged; an admin "
                    "must rebuild explicitly (POST /v1/admin/tables/{table}/cube with {\"force\": true})"
                )
            self._building.add(name)
            try:
                with build_lock(self.data_dir / "locks" / f"{name}.lock"):
                    self._build_locked(record)
                self.stats["builds_done"] += 1
            except Exception:
                self.stats["builds_failed"] += 1
                raise
            finally:
                self._building.discard(name)
                self._progress.pop(name, None)
            return self._cube_status(name), True

    def _measure_progress(self, name: str, fraction: float, step: str) -> None:
        """Inside the measure phase: its share of the build's progress, and which fit is running."""
        at = BUILD_PHASES.index("measure")
        self._progress[name] = {"phase": "measure", "step": step, "fraction": (at + fraction) / len(BUILD_PHASES)}

    def _phase(self, name: str, phase: str | None) -> None:
        """Build phases in order, for progress displays (fraction of phases completed), and each
        phase's wall time (``None`` ends the last one)."""
        now = time.perf_counter()
        previous = self._phase_started.pop(name, None)
        if previous is not None:
            self.last_build_seconds.setdefault(name, {})[previous[0]] = now - previous[1]
        if phase is None:
            return
        if phase == BUILD_PHASES[0]:
            self.last_build_seconds[name] = {}
        self._phase_started[name] = (phase, now)
        self._progress[name] = {"phase": phase, "fraction": BUILD_PHASES.index(phase) / len(BUILD_PHASES)}

    def _build_locked(self, record: catalog.TableRecord) -> None:
        name = record.name
        strategy = steps.table_strategy(record.spec)
        remaining = self.budget(name)["remaining"]
        if remaining <= 1e-12:
            raise Conflict(f"table {name!r}: the privacy budget is exhausted; an admin can raise it")
        self._phase(name, "bound")
        plan = steps.plan_build(record, remaining)
        if plan.epsilon > remaining + 1e-12:
            raise Conflict(
                f"table {name!r}: building the cube needs {plan.currency}={plan.epsilon:g} but only "
                f"{remaining:g} remains; an admin can raise the budget"
            )
        try:  # the source's columns and types only (no row read): a wrong declaration costs nothing
            sources.check_columns(self.db, record.spec.source, record.source_table, record.spec)
        except StorageError as exc:
            raise Invalid(str(exc)) from None
        build_id = uuid.uuid4().hex
        fault_point("before_charge")
        self._phase(name, "charge")
        try:
            ledger.charge(self.db, name, build_id, plan.charges(strategy))
        except ledger.BudgetExceeded as exc:
            raise Conflict(str(exc)) from None
        fault_point("after_charge")
        # The charge is committed before any row is read (issue #29): whatever the rows hold, a build
        # that reads them is paid for, so no row's value can make it fail for free. From here on a
        # failure leaves the spend recorded as 'failed', with a message that names no data.
        try:
            self.publish()  # the readers' budget views show the charge from now on
            self._phase(name, "aggregate")
            source = self._random_source()
            try:
                if plan.unit_histogram:
                    plan, record = steps.choose_rows_per_unit(steps.true_unit_counts(self.db, record), plan, record,
                                                              source)
                if plan.histograms:
                    plan = steps.choose_bounds(steps.true_histograms(self.db, record, plan), plan, source)
                true = steps.true_cuboids(self.db, record, plan)
            except StorageError as exc:  # the same words whatever the rows held: the admin's log has the cause
                log.error("cube build %s for table %s could not read its source: %s", build_id, name, exc)
                raise Unavailable(f"the cube build of {name!r} could not read its source after the budget was "
                                  "charged; an admin can see the cause in the server log and rebuild with "
                                  "{\"force\": true}") from None
            fault_point("after_aggregate")
            self._phase(name, "measure")
            with progress.listening(lambda f, step: self._measure_progress(name, f, step)):
                measurements = steps.measure(true, plan, strategy, source)
            del true
            meta = steps.cube_meta(record, plan, strategy, measurements)
            self._phase(name, "post-process")
            prefixes = steps.stored_arrays(measurements)
            self._phase(name, "persist")
            cube_store.save(self.db, self.cube_root, name, build_id, prefixes, meta,
                            on_file_written=lambda: fault_point("during_persist"), on_committed=self.publish)
            fault_point("after_persist")
            ledger.set_status(self.db, build_id, "done")
            self._phase(name, None)
        except BaseException:
            ledger.set_status(self.db, build_id, "failed")
            log.error("cube build %s for table %s failed after charging", build_id, name)
            raise
        self._cubes.pop(name, None)
        self.generation += 1  # after the pop: nothing computed from the old cube can carry the new number
        log.info("built cube for %s (build %s, %s %g; seconds per phase %s)", name, build_id, plan.currency, plan.epsilon,
                 {k: round(v, 3) for k, v in self.last_build_seconds.get(name, {}).items()})

    def _random_source(self) -> RandomSource:
        if self._seed is None:
            return RandomSource()
        with self._lock:
            self._builds += 1
            return RandomSource(self._seed * 1_000_003 + self._builds)

    def _cube_if_built(self, name: str) -> Cube | None:
        cube = self._cubes.get(name)
        if cube is not None:
            return cube
        try:
            stored = cube_store.load(self.db, self.cube_root, name)
        except FileNotFoundError:
            if self.role != "reader":
                raise
            # A reader whose snapshot names a cube the writer has just replaced (and removed): the
            # newer snapshot, published before the removal, names the new one.
            self.refresh(force=True)
            stored = cube_store.load(self.db, self.cube_root, name)
        if stored is None:
            return None
        cube = steps.loaded_cube(name, stored.build_id, stored.arrays, stored.meta)
        cube.public = _public_meta(cube)
        cube.answer_meta = _answer_meta(cube.public)
        self._cubes[name] = cube
        self.generation += 1
        return cube

    def _cube_for_query(self, name: str) -> Cube:
        self.refresh()
        if name not in self._cubes and self._spec(name).growth is not None:
            return self._growing_cube(name)
        cube = self._cubes.get(name) or self._cube_if_built(name)
        if cube is None and name in self._building:  # another request's build: say so now, not after a timeout
            status = self._progress.get(name, {"phase": "waiting", "fraction": 0.0})
            step = f" ({status['step']})" if status.get("step") else ""
            raise Unavailable(f"the cube of {name!r} is being built: {status['phase']} {status['fraction']:.0%}{step}; "
                              "retry shortly", retry_after=BUILDING_RETRY_AFTER, extra={"build": status})
        if cube is None:
            spec = self._spec(name)
            if spec.cube.build != "on_first_query":  # issue #29: no analyst query spends the budget unseen
                raise Conflict(f"the cube of {name!r} has not been built yet: an admin builds it (`prima build {name}` "
                               f"or POST /v1/admin/tables/{name}/cube); a table declared with "
                               '"cube": {"build": "on_first_query"} builds on its first query instead')
            self.build(name)
            cube = self._cube_if_built(name)
        if cube is None:  # pragma: no cover - build() raises when it cannot produce a cube
            raise Conflict(f"no cube for {name!r}")
        return cube

    def _table_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._table_locks.setdefault(name, threading.Lock())

    # -- tables that grow (issue #32; appends in `engine.builds.appends`) ------------------------
    def _growing_cube(self, name: str) -> growing.GrowingCube:
        """The releases of the measured periods as one synopsis (cached until the next append)."""
        spec = self._spec(name)
        through = self._measured_through(name, spec)
        if through < 0:
            raise Conflict(f"no period of {name!r} is measured yet: an admin appends each closed period (`prima append "
                           f"{name}` or POST /v1/admin/tables/{name}/append)")
        stored = cube_store.load_prefixed(self.db, self.cube_root, growing.node_prefix(name))
        last = ledger.done_periods(self.db, name)[growing.period_dimension(spec).label(through)]
        cube = growing.loaded(name, spec, stored, through, last, steps.loaded_cube)
        cube.public = _public_meta(cube) | {"growth": self.growth_status(name)}
        cube.answer_meta = _answer_meta(cube.public)
        with self._lock:
            self._cubes[name] = cube
            self.generation += 1
        return cube

    # -- queries ---------------------------------------------------------------------------
    def plan(self, sql: str, lookup: Callable[[str, bool], TableSpec | None] | None = None) -> QueryPlan:
        """The plan of ``sql`` (cached by text); ``lookup`` resolves table names (default: the catalog)."""
        key = sql.strip() if isinstance(sql, str) else sql
        with self._lock:
            cached = self._plans.get(key)
            if cached is not None:
                self._plans.move_to_end(key)
                return cached
        split = unnest.series_limit(sql)
        if split is not None:  # for its columns only (describe): `query` answers it in two steps
            return self.plan(split.restricted(exp.true()), lookup)
        try:
            plan = self._shapes.plan(sql, lookup or self._spec_or_none)
        except RecursionError:  # a construct check_nesting does not count, nested past the interpreter's stack
            raise QueryError("the query is nested too deeply to plan; flatten it") from None
        if isinstance(sql, str) and time_dependent(sql):  # NOW(), CURRENT_DATE: folded as of now, never kept
            return plan
        with self._lock:
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return plan

    def _spec_or_none(self, name: str, case_insensitive: bool = False) -> TableSpec | None:
        """Declared metadata, cached: it never changes after registration. ``case_insensitive``:
        an unquoted SQL name, which matches a registered name in any case."""
        self.refresh()
        spec = self._specs.get(name)  # an exact name first, in memory or in the catalog
        if spec is None and (record := catalog.get(self.db, name)) is not None:
            spec = self._specs.setdefault(name, record.spec)
        if spec is None and case_insensitive:
            match = next((n for n in self.table_names() if n.lower() == name.lower()), None)
            spec = None if match is None else self._spec_or_none(match)
        return spec

    def _spec(self, name: str) -> TableSpec:
        spec = self._spec_or_none(name)
        if spec is None:
            raise NotFound(f"unknown table {name!r}")
        return spec

    def _forget_plans(self) -> None:
        with self._lock:
            self._plans.clear()

    def query(self, sql: str, clamp: bool = True, truncate: bool = True) -> dict[str, Any]:
        """The answer to ``sql``; ``clamp=False`` keeps values outside their possible range (raw);
        ``truncate=False`` answers SUMs over a measure's class axis untruncated (unbiased, additive)."""
        split = unnest.series_limit(sql)
        if split is not None:  # Superset's series limit: a JOIN on the top n groups of a ranking query
            return self._series_limited(split, clamp, truncate)
        plan = self.plan(sql)
        if not truncate:
            plan = dataclasses.replace(plan, truncate=False)
        if not plan.aggregates:  # `SELECT dim FROM t GROUP BY dim` (a BI tool's field scan): the declared values
            return domain_answer(plan, self._spec(plan.table)) | {"table": plan.table}
        return self._answer(plan, self._cube_for_query(plan.table), clamp)

    def _series_limited(self, split: unnest.SeriesLimit, clamp: bool, truncate: bool) -> dict[str, Any]:
        """The outer query over the groups the ranking query's released answer puts on top
        (post-processing of two answers: no privacy cost beyond the cube's)."""
        top = self.query(split.ranking, clamp, truncate)
        names = [c.lower() for c in top["columns"]]
        if split.key.lower() not in names:
            raise QueryError(f"the series limit's key {split.key!r} is not a column of its ranking query")
        at = names.index(split.key.lower())
        outer_plan = self.plan(split.restricted(exp.true()))
        dim = self._spec(outer_plan.table).dimension(split.column)
        if dim is None:
            raise QueryError(f"the series limit joins on {split.column!r}, which is not a dimension")
        labels = [row[at] for row in top["rows"] if row[at] is not None and row[at] != OTHER_LABEL]
        condition = exp.or_(*[_group_condition(dim, label) for label in labels]) if labels else exp.condition("1 = 0")
        result = self.query(split.restricted(exp.Paren(this=condition)), clamp, truncate)
        note = (f"series limit: the groups of {split.column!r} among the top {len(top['rows'])} of the ranking query's "
                "released answer (noisy: a group near the cut may be in or out)")
        return result | {"notes": result["notes"] + [note]}

    def _in_memory(self, sql: str) -> tuple[QueryPlan, Cube] | None:
        """The cached plan and loaded cube for ``sql``, if both are in memory (no DB, no build) and
        its answer is remembered or light to compute (`_light`): callers run on the event loop."""
        self.refresh()
        with self._lock:
            plan = self._plans.get(sql.strip()) if isinstance(sql, str) else None
        cube = self._cubes.get(plan.table) if plan is not None else None
        if cube is None or (cube.answers.get(plan) is None and not _light(plan)):
            return None
        return plan, cube

    def cached_query(self, sql: str) -> dict[str, Any] | None:
        """The answer if it needs only memory (plan cached, cube loaded), else None.

        Never touches the database or builds, so an event loop may call it inline; everything
        else goes through `query` on a worker thread.
        """
        hit = self._in_memory(sql)
        return None if hit is None else self._answer(*hit)

    def cached_query_json(self, sql: str) -> bytes | None:
        """`cached_query` already serialized, memoized with the answer: a repeat costs a lookup."""
        hit = self._in_memory(sql)
        return None if hit is None else self._answer_json(*hit)

    def _answer_json(self, plan: QueryPlan, cube: Cube) -> bytes:
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
            plan = self.plan(sql, self._spec_in_memory)  # never the database: this runs on the loop
        except PrimaError:
            return None
        cube = self._cubes.get(plan.table)
        return None if cube is None or not _light(plan) else self._answer_json(plan, cube)

    def _spec_in_memory(self, name: str, case_insensitive: bool = False) -> TableSpec | None:
        """A spec already cached under exactly this name, else None (NotFound upstream): any other
        case — a name in another case, a table not yet read — takes the ordinary path, which looks
        in the catalog the way `_spec_or_none` does."""
        return self._specs.get(name)

    def _answer(self, plan: QueryPlan, cube: Cube, clamp: bool = True) -> dict[str, Any]:
        """The answer, memoized per cube as JSON: a released cube answers a plan identically every
        time (the raw, unclamped form is not memoized: it is the rarer request)."""
        if not clamp:
            return self._fresh_answer(plan, cube, clamp=False)
        encoded = cube.answers.get(plan)
        return self._remembered_answer(plan, cube)[0] if encoded is None else orjson.loads(encoded)

    def _remembered_answer(self, plan: QueryPlan, cube: Cube) -> tuple[dict[str, Any], bytes]:
        """A clamped answer computed now, as a dict and as JSON, and remembered by its cube."""
        result = self._fresh_answer(plan, cube)
        encoded = orjson.dumps(result)
        cube.remember(plan, result, encoded)
        return result, encoded

    def _fresh_answer(self, plan: QueryPlan, cube: Cube, clamp: bool = True) -> dict[str, Any]:
        spec = self._spec(plan.table)
        if isinstance(cube, growing.GrowingCube):
            plan = growing.restricted(plan, cube, spec)
        result = answer(plan, cube, spec, clamp=clamp)
        result["table"] = plan.table
        result["cube"] = cube.answer_meta
        return result

    def query_batch(self, queries: list[str]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for sql in queries:
            try:
                results.append(self.query(sql))
            except PrimaError as exc:
                results.append({"error": {"status": exc.status, "detail": exc.detail}})
        return results

    def answer_with(self, sql: str, cube_for: Callable[[str], Cube]) -> dict[str, Any]:
        """Answer ``sql`` from a caller-supplied cube (tests use `steps.exact_cube`)."""
        plan = self.plan(sql)
        cube = cube_for(plan.table)
        if isinstance(cube, growing.GrowingCube):
            plan = growing.restricted(plan, cube, self._spec(plan.table))
        return answer(plan, cube, self._spec(plan.table))

    def exact_cube(self, name: str) -> Cube:
        """TEST-ONLY: see `engine.builds.steps.exact_cube`; a growing table's releases of its measured
        periods, each exact. Not reachable from any endpoint."""
        record = self._record(name)
        if record.spec.growth is None:
            return steps.exact_cube(self.db, record)
        spec = record.spec
        through = self._measured_through(name, spec)
        scheme = growing.releases_of(spec)
        nodes = {node: steps.exact_cube(self.db, growing.node_record(record, node, 1.0))
                 for node in scheme.released(through)}
        return growing.GrowingCube(table=name, build_id="exact", shape=tuple(spec.shape), meta={}, scheme=scheme,
                                   axis=growing.period_axis(spec), nodes=nodes, through=through)


def _entry_json(e: ledger.Entry) -> dict[str, Any]:
    return {"id": e.id, "at": e.at.isoformat(timespec="seconds") + "Z", "epsilon": e.epsilon, "rho": e.rho,
            "purpose": e.purpose, "status": e.status, "build_id": e.build_id}


COMPARISON_DELTA = 1e-9  # the δ a ρ is shown at as (ε, δ) when the space declared none (AIM's, MST's)


ON_LOOP_WORK = 50_000  # groups × aggregates (a quantile counting 64) an event loop may compute inline


def _light(plan: QueryPlan) -> bool:
    """Whether a plan's answer is cheap enough to compute on the event loop. Heavier ones go to a
    thread with the request's deadline: 199 PERCENTILE_CONTs over 8,064 groups, answered inline
    from a cached plan, held the loop for minutes."""
    groups = math.prod(sum(hi - lo + 1 for lo, hi in plan.selection[a]) for a in plan.group_axes)
    work = sum(64 if a.func == "quantile" else 1 for a in plan.aggregates)
    return groups * max(work, 1) <= ON_LOOP_WORK


def _space_budget(db: Database, space: str) -> dict[str, Any]:
    """An id space's budget in its currency (``total``/``spent``/``remaining``, also under the
    currency's own names, e.g. ``epsilon_total``) and, for comparison, the other: the tight ρ every
    entry adds up to, and for a ρ space the (ε, δ) its total and spend mean (issue #34)."""
    currency, delta = ledger.space_currency(db, space)
    total, spent = ledger.space_budget(db, space)
    remaining = max(total - spent, 0.0)
    out: dict[str, Any] = {"currency": currency, "total": total, "spent": spent, "remaining": remaining,
                           f"{currency}_total": total, f"{currency}_spent": spent, f"{currency}_remaining": remaining}
    if currency == "epsilon":
        out["rho_spent"] = ledger.space_rho(db, space)
        return out
    shown = delta or COMPARISON_DELTA
    out |= {"delta": delta, "as_epsilon_delta": {
        "delta": shown, "epsilon_total": round(epsilon_for(total, shown), 6),
        "epsilon_spent": round(epsilon_for(spent, shown), 6) if spent > 0 else 0.0,
        "conversion": "Canonne, Kamath & Steinke 2020, Corollary 13"}}
    return out


EXACT_SUM_LIMIT = 2.0**53  # float64 adds integers exactly up to here


KEPT_OUTSIDE_WARNING = 0.05  # a kept dimension's outside share worth a word (its ranges cannot resolve them)


def _fit_warnings(spec: TableSpec, report: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What the preflight says about rows outside the domains and missing measures (issue #30) —
    warnings: any row an "exclude" dimension drops, a large share in a kept dimension's outside
    cells, NULLs under a measure declared never NULL; suggestions: the ε a never-NULL measure saves."""
    rows, out, suggestions = max(report["rows"], 1), [], []
    for d, n in report["outside_domain"].items():
        dim = spec.dimension(d)
        share = f"{n:,} of {report['rows']:,} rows ({n / rows:.1%})"
        if n and dim.outside == "exclude":
            out.append(f"{share} fall outside the declared domain of {d!r} (or are NULL) and are excluded from every "
                       'answer ("outside": "exclude"); check its values, case and surrounding text, or keep them')
        elif n / rows >= KEPT_OUTSIDE_WARNING:
            out.append(f"{share} fall outside the declared domain of {d!r} (or are NULL): answers count them in its "
                       "outside cells, but no range or group can tell them apart; check its values, case and "
                       "surrounding text")
    for m, n in report["measure_missing"].items():
        measure = spec.measure(m)
        if n and not measure.nullable:
            out.append(f"{n:,} rows ({n / rows:.1%}) have no numeric value of {m!r}, declared \"nullable\": false: "
                       "AVG would divide by rows without it; declare it nullable (the default)")
        elif not n and measure.nullable:
            suggestions.append(f"every row has a numeric {m!r}: if that always holds, \"nullable\": false saves "
                               f"the ε of COUNT({m}) (AVG then divides by COUNT(*))")
    return out, suggestions


def _registration_refusal(spec: TableSpec, preflight: dict[str, Any], force: bool) -> str | None:
    """Why a registration is refused from its preflight (admin-only exact counts), or None.

    * No row inside every declared domain: a build would spend the budget on an empty cube
      (issue #29: an analyst's first query once did exactly that); ``force`` registers anyway.
    * |bound| × rows beyond 2^53: float64 sums of the clipped values would no longer be exact, so one
      row could move a sum by more than the sensitivity the noise is calibrated to. Not forcible."""
    rows = preflight.get("rows")
    if rows is None:  # the preflight could not read the source: its error is in the preflight
        return None
    widest = max((max(abs(m.lo), abs(m.hi)) for m in spec.measures), default=0.0)
    if widest * rows > EXACT_SUM_LIMIT:
        return (f"measure bounds up to {widest:g} over {rows:,} rows can sum past 2^53, where float64 sums stop "
                "being exact and a row could move a sum by more than its declared bound; declare the measure in "
                "larger units (thousands, millions) or narrower bounds")
    if preflight.get("rows_in_every_domain") == 0 and not force and spec.growth is None:  # (a growing table's rows come later)
        return ("no row of the source falls inside every declared domain, so a build would spend the budget on "
                "an empty cube; check the preflight below (values, case, separators) and register corrected "
                "metadata, or register with force=true if rows will arrive later")
    return None


def _group_condition(dim: Any, label: Any) -> exp.Expression:
    """The condition selecting one group of a dimension by its label: a whole integer bin, a month
    ('2020-03'), a category value."""
    column = exp.column(dim.name, quoted=True)
    if isinstance(dim, IntDimension) and dim.bin > 1:
        return exp.Between(this=column, low=exp.Literal.number(label), high=exp.Literal.number(int(label) + dim.bin - 1))
    value = exp.Literal.number(label) if isinstance(label, (int, float)) else exp.Literal.string(str(label))
    return exp.EQ(this=column, expression=value)


TOTAL_WARN_SHARE = 0.1  # a SUM total whose stddev exceeds this share of its noisy value is flagged


def _public_meta(cube: Cube) -> dict[str, Any]:
    """What a cube's status shows: all public facts of the build (ε, noise scales, clipping)."""
    meta = cube.meta
    return {
        "strategy": meta.get("strategy"),
        # the build's amount under its currency's name: "epsilon" (pure ε), or "rho" with "epsilon" null
        "epsilon": meta.get("epsilon") if meta.get("currency", "epsilon") == "epsilon" else None,
        "currency": meta.get("currency", "epsilon"),
        **({"rho": meta.get("epsilon")} if meta.get("currency") == "rho" else {}),
        "built_at": meta.get("built_at"),
        "build_id": cube.build_id,
        "aggregates": meta.get("aggregates"),
        "clipping": meta.get("clipping"),
        **({"privacy_unit": meta["privacy_unit"]} if "privacy_unit" in meta else {}),
    }


def _answer_meta(public: dict[str, Any]) -> dict[str, Any]:
    """What every answer carries about its cube: the build and the clipping bounds used (the
    full record, with noise scales and the clipping histogram, is in the table's cube status)."""
    clipping = {m: {k: c[k] for k in ("strategy", "lo", "hi")} for m, c in (public.get("clipping") or {}).items()}
    return ({k: public[k] for k in ("strategy", "epsilon", "currency", "built_at", "build_id")}
            | ({"rho": public["rho"]} if "rho" in public else {}) | {"clipping": clipping})


__all__ = ["Prima", "QueryError", "Conflict", "NotFound", "Invalid", "PrimaError"]
