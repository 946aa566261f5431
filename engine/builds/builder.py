"""Builds of a table's synopsis, and the synopses this process has loaded: the `engine.service.Prima`
collaborator that spends budget (appends too, `engine.builds.appends`).

Build protocol: the ledger is charged before a noisy result exists, never beyond the budget. For one
table at a time (a per-table lock, so concurrent first queries build once):
  1. plan the build from public metadata only (bounds, ε per aggregate, sensitivities);
  2. probe the source's columns and types (no row is read): a wrong declaration costs nothing;
  3. charge the ledger in one committed transaction that refuses to exceed the total;
  4. aggregate the source (true cuboids stay in this function), measure (noise), prefix-sum,
     persist; mark the ledger entries ``done``.
Rows are read only after the charge, so no row's value can make a build fail for free. A failure
after step 3 marks the entries ``failed`` (the budget stays spent) and is not retried silently: an
admin must ask for a rebuild (``force``), which spends again.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from engine.answers.assemble import answer
from engine.builds import growing, rollups, steps
from engine.builds.appends import Appends
from engine.builds.faults import fault_point
from engine.builds.locks import build_lock
from engine.builds.preview import sum_noise_advice
from engine.errors import Conflict, Invalid, PrimaError, Unavailable
from engine.sql.bind import plan_query
from engine.synopses.protocol import Synopsis
from engine.workspace import Workspace
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import progress
from storage import catalog, cube_store, ledger, sources
from storage.database import StorageError

log = logging.getLogger("prima.engine")

BUILDING_RETRY_AFTER = 5  # seconds a query on a table being built is told to wait
BUILD_PHASES = ("bound", "charge", "aggregate", "measure", "post-process", "persist")

BuildVia = Callable[[str, bool], tuple[dict[str, Any], bool]]


class Builds(Appends):
    """Builds and appends of one workspace's tables, and its loaded synopses."""

    def __init__(
        self,
        ws: Workspace,
        remaining: Callable[[str], float],
        seed: int | None = None,
        build_via: BuildVia | None = None,
    ) -> None:
        """``remaining``: a table's unspent budget; ``seed`` (tests only): a seeded bit source makes
        builds repeatable; ``build_via``: how a reader has the writer build (`app.workers`)."""
        self.ws = ws
        self._remaining = remaining
        self.seed = seed
        self._count = 0
        self._build_via = build_via
        self._progress: dict[str, dict[str, Any]] = {}  # table → {"phase", "fraction"} while building
        # table → {phase: seconds} of its last build in this process (the build's log line, bench/scale.py)
        self.last_build_seconds: dict[str, dict[str, float]] = {}
        self._phase_started: dict[str, tuple[str, float]] = {}
        self._background_errors: dict[str, str] = {}  # table → why the last background build stopped
        self._warnings: dict[tuple[str, str], list[str]] = {}  # (table, build id) → its noisy-SUM warnings
        self.stats = {"builds_done": 0, "builds_failed": 0}

    def recover(self) -> None:
        """On opening the data dir (writer or single): builds a crash interrupted are marked failed
        (their budget stays spent), files of unfinished writes removed, and a first snapshot published."""
        failed = ledger.fail_unfinished(self.ws.db)
        if failed:
            log.warning("marked %d interrupted build(s) as failed; their budget stays spent", len(failed))
        if self.ws.role != "shared":  # a shared cube dir holds other servers' writes in progress
            cube_store.remove_orphans(self.ws.db, self.ws.cube_root)
        self.ws.publish()

    def reseed(self, seed: int | None) -> None:
        """Tests: the next builds draw from seeded streams (same inputs, same outputs)."""
        self.seed, self._count = seed, 0

    def status(self, name: str) -> dict[str, Any]:
        spec = self.ws.spec(name)
        if spec.growth is not None:
            measured = self.measured_through(name, spec)
            return {
                "status": "growing" if measured >= 0 else "none",
                "periods_measured": measured + 1,
                **({"appending": True} if name in self.ws.building else {}),
            }
        if name in self.ws.building:
            return {"status": "building", **self._progress.get(name, {"phase": "waiting", "fraction": 0.0})}
        cube = self.cube_if_built(name)
        entries = ledger.entries(self.ws.db, name)
        if cube is None and entries and entries[-1].status == "charged" and self.ws.busy_elsewhere(name):
            return {"status": "building", "phase": "on another server"}
        # a charged build whose server died (no one holds its lock) is as failed as one marked so
        last_failed = bool(entries) and (
            entries[-1].status == "failed"
            or (
                self.ws.role == "shared"
                and cube is None
                and entries[-1].status == "charged"
                and entries[-1].period is None
            )
        )
        if cube is not None:
            out = {"status": "ready", **cube.public}
            if last_failed:
                out["last_build"] = "failed"
            notes = self._total_warnings(name, cube)
            return out | ({"warnings": notes} if notes else {})
        out = {"status": "failed" if last_failed else "none"}
        if name in self._background_errors:
            out["error"] = self._background_errors[name]
        return out

    def _total_warnings(self, name: str, cube: Synopsis) -> list[str]:
        """SUMs whose whole-table total is noise-dominated, judged from released values only (the
        answer to ``SELECT SUM(m)``: its noisy value and stddev; free post-processing): the Bank
        example answered 7·10⁷ ± 2·10⁸ and nothing said so. Computed once per release (status
        displays poll it)."""
        key = (name, cube.build_id)
        if key not in self._warnings:
            self._warnings[key] = self._noisy_sums(name, cube)
        return self._warnings[key]

    def _noisy_sums(self, name: str, cube: Synopsis) -> list[str]:
        out = []
        for m in self.ws.spec(name).measures:
            try:
                r = answer(
                    plan_query(f'SELECT SUM("{m.name}") FROM "{name}"', self.ws.spec_or_none), cube, self.ws.spec(name)
                )
            except PrimaError:
                continue
            value, sd = r["rows"][0][0], r["stddev"][0][0]
            if value is not None and sd is not None and sd > TOTAL_WARN_SHARE * abs(value):
                out.append(
                    f"SUM({m.name}) over the whole table is {value:.3g} with a noise stddev of {sd:.3g} "
                    f"({sd / max(abs(value), 1e-300):.0%} of it): most of its answers are noise; "
                    f"{sum_noise_advice(m)}, and rebuild"
                )
        return out

    def build_in_background(self, name: str, force: bool = False) -> dict[str, Any]:
        """Start a build on its own thread (or join the one running); returns the current status."""
        self.ws.record(name)
        if name not in self.ws.building and (force or self.cube_if_built(name) is None):
            self._background_errors.pop(name, None)
            self._progress[name] = {"phase": "waiting", "fraction": 0.0}
            self.ws.building.add(name)  # visible as 'building' before the thread gets the lock
            threading.Thread(target=self._background_build, args=(name, force), daemon=True).start()
        return self.status(name)

    def _background_build(self, name: str, force: bool) -> None:
        try:
            self.build(name, force=force)
        except PrimaError as exc:
            self._background_errors[name] = exc.detail
        except Exception as exc:  # the type only: messages from lower layers may quote data
            self._background_errors[name] = f"build failed ({type(exc).__name__})"
            log.error("background build of %s failed: %s", name, type(exc).__name__)
        finally:
            self.ws.building.discard(name)

    def build(self, name: str, force: bool = False) -> tuple[dict[str, Any], bool]:
        """Build the table's cube unless one exists; returns (status, built_now). A reader has the
        writer build it (one build and one charge whichever worker asked) and reads the result."""
        if self.ws.role == "reader":
            if self._build_via is None:
                self.ws.refuse("build a cube")
            status, built = self._build_via(name, force)
            self.ws.refresh(force=True)
            return status, built
        try:
            status, built = self._build_here(name, force)
        except BaseException:
            self.ws.publish()  # a failed build's ledger entries are news too
            raise
        if built:
            self.ws.publish()
        return status, built

    def _build_here(self, name: str, force: bool) -> tuple[dict[str, Any], bool]:
        with self.ws.exclusive(name):
            if self.ws.role == "shared":  # holding the table across servers: what a dead server left is stale
                cube_store.remove_orphans(self.ws.db, self.ws.cube_root, name, self.ws.cube_remote)
                if ledger.fail_unfinished(self.ws.db, name):
                    log.warning(
                        "a build of %s interrupted on another server is marked failed; its budget stays spent", name
                    )
                    self.ws.publish()
            record = self.ws.record(name)
            if record.spec.growth is not None:
                raise Conflict(
                    f"{name!r} grows by periods: it is measured one closed period at a time (`prima append "
                    f"{name}` or POST /v1/admin/tables/{name}/append), never as a whole"
                )
            existing = self.cube_if_built(name)
            if existing is not None and not force:
                return self.status(name), False
            if not force and self.status(name)["status"] == "failed":
                raise Conflict(
                    f"the last cube build of {name!r} failed after its budget was charged; an admin "
                    'must rebuild explicitly (POST /v1/admin/tables/{table}/cube with {"force": true})'
                )
            self.ws.building.add(name)
            try:
                with build_lock(self.ws.data_dir / "locks" / f"{name}.lock"):
                    self._build_locked(record)
                self.stats["builds_done"] += 1
            except Exception:
                self.stats["builds_failed"] += 1
                raise
            finally:
                self.ws.building.discard(name)
                self._progress.pop(name, None)
            return self.status(name), True

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
        remaining = self._remaining(name)
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
            catalog.ensure_local_source(self.ws.db, record, self.ws.import_dir)
            sources.check_columns(self.ws.db, record.spec.source, record.source_table, record.spec)
        except StorageError as exc:
            raise Invalid(str(exc)) from None
        build_id = uuid.uuid4().hex
        fault_point("before_charge")
        self._phase(name, "charge")
        try:
            ledger.charge(self.ws.db, name, build_id, plan.charges(strategy))
        except ledger.BudgetExceeded as exc:
            raise Conflict(str(exc)) from None
        fault_point("after_charge")
        # The charge is committed before any row is read: whatever the rows hold, a build
        # that reads them is paid for, so no row's value can make it fail for free. From here on a
        # failure leaves the spend recorded as 'failed', with a message that names no data.
        try:
            self.ws.publish()  # the readers' budget views show the charge from now on
            self._phase(name, "aggregate")
            self.warm_workers(record.spec)  # their imports overlap the aggregate SQL
            source = self.random_source()
            try:
                if plan.unit_histogram:
                    plan, record = steps.choose_rows_per_unit(
                        steps.true_unit_counts(self.ws.db, record), plan, record, source
                    )
                if plan.histograms:
                    plan = steps.choose_bounds(steps.true_histograms(self.ws.db, record, plan), plan, source)
                true = steps.true_cuboids(self.ws.db, record, plan)
                true_rollups = rollups.true_totals(self.ws.db, record, plan)
            except StorageError as exc:  # the same words whatever the rows held: the admin's log has the cause
                log.error("cube build %s for table %s could not read its source: %s", build_id, name, exc)
                raise Unavailable(
                    f"the cube build of {name!r} could not read its source after the budget was "
                    "charged; an admin can see the cause in the server log and rebuild with "
                    '{"force": true}'
                ) from None
            fault_point("after_aggregate")
            self._phase(name, "measure")
            with progress.listening(lambda f, step: self._measure_progress(name, f, step)):
                measurements = steps.measure(true, plan, strategy, source)
                rolled = rollups.measure(true_rollups, plan, record.spec, source)
            del true, true_rollups
            meta = steps.cube_meta(record, plan, strategy, measurements)
            if rolled:
                meta["time_rollups"] = rollups.meta(rolled, plan, record.spec)
            self._phase(name, "post-process")
            prefixes = steps.stored_arrays(measurements) | rollups.stored(rolled, plan, record.spec)
            self._phase(name, "persist")
            cube_store.save(
                self.ws.db,
                self.ws.cube_root,
                name,
                build_id,
                prefixes,
                meta,
                on_file_written=lambda: fault_point("during_persist"),
                on_committed=self.ws.publish,
                remote=self.ws.cube_remote,
            )
            fault_point("after_persist")
            ledger.set_status(self.ws.db, build_id, "done")
            self._phase(name, None)
        except BaseException:
            ledger.set_status(self.ws.db, build_id, "failed")
            log.error("cube build %s for table %s failed after charging", build_id, name)
            raise
        self.ws.cubes.pop(name, None)
        self.ws.generation += 1  # after the pop: nothing computed from the old cube can carry the new number
        log.info(
            "built cube for %s (build %s, %s %g; seconds per phase %s)",
            name,
            build_id,
            plan.currency,
            plan.epsilon,
            {k: round(v, 3) for k, v in self.last_build_seconds.get(name, {}).items()},
        )

    def random_source(self) -> RandomSource:
        if self.seed is None:
            return RandomSource()
        with self.ws.lock:
            self._count += 1
            return RandomSource(self.seed * 1_000_003 + self._count)

    def cube_if_built(self, name: str) -> Synopsis | None:
        cube = self.ws.cubes.get(name)
        if cube is not None:
            return cube
        try:
            stored = cube_store.load(self.ws.db, self.ws.cube_root, name, self.ws.cube_remote)
        except FileNotFoundError:
            if self.ws.role not in ("reader", "shared"):
                raise
            # A reader whose snapshot names a cube the writer has just replaced (and removed): the
            # newer snapshot, published before the removal, names the new one (a server of a
            # shared state: the index, read again, names it).
            self.ws.refresh(force=True)
            stored = cube_store.load(self.ws.db, self.ws.cube_root, name, self.ws.cube_remote)
        if stored is None:
            return None
        cube = steps.loaded_cube(name, stored.build_id, stored.arrays, stored.meta)
        cube.public = public_meta(cube)
        cube.answer_meta = answer_meta(cube.public)
        self.ws.cubes[name] = cube
        self.ws.generation += 1
        return cube

    def cube_for_query(self, name: str) -> Synopsis:
        self.ws.refresh()
        if name not in self.ws.cubes and self.ws.spec(name).growth is not None:
            return self._growing_cube(name)
        cube = self.ws.cubes.get(name) or self.cube_if_built(name)
        if cube is None and name in self.ws.building:  # another request's build: say so now, not after a timeout
            status = self._progress.get(name, {"phase": "waiting", "fraction": 0.0})
            step = f" ({status['step']})" if status.get("step") else ""
            raise Unavailable(
                f"the cube of {name!r} is being built: {status['phase']} {status['fraction']:.0%}{step}; retry shortly",
                retry_after=BUILDING_RETRY_AFTER,
                extra={"build": status},
            )
        if cube is None:
            spec = self.ws.spec(name)
            if spec.cube.build != "on_first_query":  # no analyst query spends the budget unseen
                raise Conflict(
                    f"the cube of {name!r} has not been built yet: an admin builds it (`prima build {name}` "
                    f"or POST /v1/admin/tables/{name}/cube); a table declared with "
                    '"cube": {"build": "on_first_query"} builds on its first query instead'
                )
            self.build(name)
            cube = self.cube_if_built(name)
        if cube is None:  # pragma: no cover - build() raises when it cannot produce a cube
            raise Conflict(f"no cube for {name!r}")
        return cube

    # -- tables that grow (appends in `engine.builds.appends`) ----------------------------------
    def _growing_cube(self, name: str) -> growing.GrowingCube:
        """The releases of the measured periods as one synopsis (cached until the next append)."""
        spec = self.ws.spec(name)
        through = self.measured_through(name, spec)
        if through < 0:
            raise Conflict(
                f"no period of {name!r} is measured yet: an admin appends each closed period (`prima append "
                f"{name}` or POST /v1/admin/tables/{name}/append)"
            )
        stored = cube_store.load_prefixed(self.ws.db, self.ws.cube_root, growing.node_prefix(name), self.ws.cube_remote)
        last = ledger.done_periods(self.ws.db, name)[growing.period_dimension(spec).label(through)]
        cube = growing.loaded(name, spec, stored, through, last, steps.loaded_cube)
        cube.public = public_meta(cube) | {"growth": self.growth_status(name)}
        cube.answer_meta = answer_meta(cube.public)
        with self.ws.lock:
            self.ws.cubes[name] = cube
            self.ws.generation += 1
        return cube

    def exact_cube(self, name: str) -> Synopsis:
        """TEST-ONLY: see `engine.builds.steps.exact_cube`; a growing table's releases of its measured
        periods, each exact. Not reachable from any endpoint."""
        record = self.ws.record(name)
        if record.spec.growth is None:
            return steps.exact_cube(self.ws.db, record)
        spec = record.spec
        through = self.measured_through(name, spec)
        scheme = growing.releases_of(spec)
        nodes = {
            node: steps.exact_cube(self.ws.db, growing.node_record(record, node, 1.0))
            for node in scheme.released(through)
        }
        return growing.GrowingCube(
            table=name,
            build_id="exact",
            shape=tuple(spec.shape),
            meta={},
            scheme=scheme,
            axis=growing.period_axis(spec),
            nodes=nodes,
            through=through,
        )


TOTAL_WARN_SHARE = 0.1  # a SUM total whose stddev exceeds this share of its noisy value is flagged


def public_meta(cube: Synopsis) -> dict[str, Any]:
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
        **({"time_rollups": meta["time_rollups"]} if "time_rollups" in meta else {}),
    }


def answer_meta(public: dict[str, Any]) -> dict[str, Any]:
    """What every answer carries about its cube: the build and the clipping bounds used (the
    full record, with noise scales and the clipping histogram, is in the table's cube status)."""
    clipping = {m: {k: c[k] for k in ("strategy", "lo", "hi")} for m, c in (public.get("clipping") or {}).items()}
    return (
        {k: public[k] for k in ("strategy", "epsilon", "currency", "built_at", "build_id")}
        | ({"rho": public["rho"]} if "rho" in public else {})
        | {"clipping": clipping}
    )
