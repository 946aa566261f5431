"""Appending a growing table's periods: which periods, what each charges, and each
release measured and stored — the append side of `engine.builds.builder.Builds` (a mixin: it uses
the builds' workspace, locks and steps). Protocol per period, like a build's: charge
(or take up the period's interrupted charge), read only the block's rows, measure, store, mark done.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from engine.builds import growing, steps
from engine.builds.faults import fault_point
from engine.builds.preview import check_cube_size
from engine.errors import Conflict, Invalid, PrimaError, Unavailable
from engine.workspace import Workspace
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import processes
from storage import catalog, cube_store, growing_files, ledger
from storage.database import StorageError
from storage.ledger import Charge
from storage.schema import TableSpec

log = logging.getLogger("prima.engine")


class Appends:
    """The append side of `engine.builds.builder.Builds` (mixed into it)."""

    ws: Workspace
    seed: int | None

    def warm_workers(self, spec: TableSpec | None = None) -> None:
        """Start the processes a build's fits run on (`privacy.parallel.processes`) now, in the
        background, if the build of ``spec`` has fits big enough for them (None: start them). A build
        calls this as it starts reading rows, so the workers' ~0.5 s of imports overlap its aggregate
        SQL; a server that never builds (a query-only replica, a reader) or builds only small cubes
        never starts them: at start-up they cost every server ~1 s of CPU and two idle processes.
        Benchmarks call it before their measured window. Readers never build."""
        if self.ws.role != "reader":
            processes.warm(processes.STARTING_SECONDS if spec is None else steps.fit_seconds(spec))

    def measured_through(self, name: str, spec: TableSpec) -> int:
        """The last period measured, every one before it measured too (−1: none)."""
        done = ledger.done_periods(self.ws.db, name)
        dim, t = growing.period_dimension(spec), -1
        while t + 1 < dim.size and dim.label(t + 1) in done:
            t += 1
        return t

    def growth_status(self, name: str) -> dict[str, Any]:
        """A growing table's periods: measured, next, the releases scheme, the ledger per period and,
        under the lifetime model, the runway (periods the remaining budget still pays for)."""
        record = self.ws.record(name)
        spec, dim = record.spec, growing.period_dimension(record.spec)
        through = self.measured_through(name, spec)
        appended = ledger.periods(self.ws.db, name)
        total, spent = ledger.space_budget(self.ws.db, ledger.space_of(self.ws.db, name))
        node_bytes = check_cube_size(spec, self.ws.max_cube_bytes)
        out = growing.growth_facts(spec, node_bytes)
        out |= {
            "measured": through + 1,
            "measured_first": dim.label(0) if through >= 0 else None,
            "measured_last": dim.label(through) if through >= 0 else None,
            "next": dim.label(through + 1) if through + 1 < dim.size else None,
            "ledger": [{"period": p, "status": st, spec.currency: amount} for p, st, _, amount in appended],
        }
        if growing.growth_of(spec).model == "lifetime":
            per = (
                max(self._append_cost(spec, t) for t in range(through + 1, min(through + 1 + 64, dim.size)))
                if through + 1 < dim.size
                else float(growing.growth_of(spec).per_period or 0.0)  # (a lifetime model declares it)
            )
            out["runway_periods"] = int((max(total - spent, 0.0) + 1e-12) // per) if per > 0 else None
            out["runway_note"] = (
                f"at least {out['runway_periods']} more period(s) fit in the remaining lifetime budget "
                f"({max(total - spent, 0.0):g} of {total:g})"
            )
        return out

    def _append_cost(self, spec: TableSpec, t: int) -> float:
        """What appending period ``t`` charges: the period's whole amount under the "period" model
        (it pays for every release its rows will be in); under "lifetime", each release made now."""
        scheme, amount = growing.releases_of(spec), growing.period_amount(spec)
        if growing.growth_of(spec).model == "period":
            return amount
        return len(scheme.closing(t)) * scheme.node_amount(amount)

    def append(
        self,
        name: str,
        through: dt.date | None = None,
        period: str | None = None,
        limit: int | None = None,
        today: dt.date | None = None,
        remeasure: bool = False,
    ) -> dict[str, Any]:
        """Measure the next closed period(s) of a growing table: ``period`` (it must be the next one),
        else every closed period up to ``through`` (default: all closed), at most ``limit`` of them.
        Each is charged before its rows are read, exactly once (an interrupted append is completed by
        the next, under its charge). ``remeasure``: measure the measured ``period`` again from its rows
        as they are now (late or corrected rows) — charged again, flat releases only."""
        self.ws.writable("append a period")
        today = today or dt.datetime.now(dt.UTC).date()
        with self.ws.exclusive(name):
            record = self.ws.record(name)
            spec = record.spec
            if spec.growth is None:
                raise Invalid(
                    f"{name!r} is not a growing table (its registration declares no growth): it is "
                    "measured once, by a build"
                )
            dim = growing.period_dimension(spec)
            targets = (
                self._remeasure_target(name, spec, period)
                if remeasure
                else self._append_targets(name, spec, through, period, today)[:limit]
            )
            self.ws.building.add(name)
            done = []
            try:
                for t in targets:
                    self._append_one(record, t, remeasure)
                    done.append(dim.label(t))
                    with self.ws.lock:
                        self.ws.cubes.pop(name, None)
                        self.ws.generation += 1
                    self.ws.publish()
            finally:
                self.ws.building.discard(name)
        return {"table": name, "appended": done, "growth": self.growth_status(name)}

    def scheduled_appends(self) -> dict[str, list[str]]:
        """Append every closed period of the growing tables that declare ``"schedule": true`` (the
        server's timer calls this); a table with nothing to append is skipped, a refusal logged."""
        if self.ws.role == "reader":
            return {}
        out = {}
        for name in self.ws.table_names():
            spec = self.ws.spec_or_none(name)
            if spec is None or spec.growth is None or not spec.growth.schedule:
                continue
            dim = growing.period_dimension(spec)
            nxt = self.measured_through(name, spec) + 1
            if nxt >= dim.size or not growing.closed(dim, nxt, dt.datetime.now(dt.UTC).date()):
                continue
            try:
                out[name] = self.append(name)["appended"]
            except PrimaError as exc:  # the messages name periods and budgets, never data
                log.warning("scheduled append of %s refused: %s", name, exc.detail)
        return out

    def _append_targets(
        self, name: str, spec: TableSpec, through: dt.date | None, period: str | None, today: dt.date
    ) -> list[int]:
        dim = growing.period_dimension(spec)
        start = self.measured_through(name, spec) + 1
        if start >= dim.size:
            raise Conflict(
                f"every period of {name!r} up to the horizon {dim.label(dim.size - 1)} is measured; register "
                "a table with a later horizon to go on"
            )
        if period is not None:
            t = growing.period_index(spec, period)
            if t < start:
                raise Conflict(
                    f"period {period} of {name!r} is already measured; late or corrected rows are not "
                    "appended to a measured period (its release stands)"
                )
            if t > start:
                raise Conflict(
                    f"period {period} of {name!r} comes after {dim.label(start)}, which is not measured yet: "
                    "append periods in order"
                )
            if not growing.closed(dim, t, today):
                raise Conflict(
                    f"period {period} of {name!r} is not closed yet (it ends "
                    f"{growing.period_dates(dim, (t, 1))[1]}); append it once it is over"
                )
            return [t]
        last = start - 1
        while (
            last + 1 < dim.size
            and growing.closed(dim, last + 1, today)
            and (through is None or growing.period_dates(dim, (last + 1, 1))[1] <= through)
        ):
            last += 1
        if last < start:
            ends = growing.period_dates(dim, (start, 1))[1]
            raise Conflict(
                f"no period of {name!r} to append: the next, {dim.label(start)}, ends {ends}, "
                + (f"after {through}" if through is not None and ends > through else "and is not closed yet")
            )
        return list(range(start, last + 1))

    def _remeasure_target(self, name: str, spec: TableSpec, period: str | None) -> list[int]:
        """The one measured period a re-measure replaces (refused under a tree: its blocks hold the
        period's old rows too, and would disagree with a new release of it)."""
        if period is None:
            raise Invalid('a re-measure names its period (--period / "period"): only that period is measured again')
        t = growing.period_index(spec, period)
        if t > self.measured_through(name, spec):
            raise Conflict(
                f"period {period} of {name!r} is not measured yet: append it (a re-measure replaces a measured period)"
            )
        if growing.releases_of(spec).branching is not None:
            raise Conflict(
                f"{name!r} releases a tree over its periods: blocks already released hold {period}'s old "
                "rows, so it cannot be measured again alone (re-measure is offered for flat releases)"
            )
        return [t]

    def _append_one(self, record: catalog.TableRecord, t: int, remeasure: bool = False) -> None:
        """Charge period ``t`` (or take up its interrupted charge), then measure and store each
        release it closes that is not stored yet, then mark the charge done."""
        name, spec = record.name, record.spec
        dim, scheme = growing.period_dimension(spec), growing.releases_of(spec)
        label = dim.label(t)
        nodes = scheme.closing(t)
        amount = scheme.node_amount(growing.period_amount(spec))
        try:  # a link out of the import directory is refused before anything is charged
            growing_files.check(record.source_table)
        except StorageError as exc:
            raise Invalid(f"cannot append {name!r}: {exc}") from None
        build_id = ledger.open_append(self.ws.db, name, label)
        if build_id is None:
            build_id = uuid.uuid4().hex
            cost = self._append_cost(spec, t)
            what = ", ".join(f"{dim.label(a)}" + (f"+{n - 1}" if n > 1 else "") for a, n in nodes)
            purpose = (
                (f"re-measure {label} (late or corrected rows): " if remeasure else f"append {label}: ")
                + f"{len(nodes)} release(s) ({what}) at {spec.currency}={amount:g} each"
                + ("; pays for this period's releases to come" if growing.growth_of(spec).model == "period" else "")
            )
            charge = Charge(cost, purpose) if spec.currency == "epsilon" else Charge(None, purpose, rho=cost)
            fault_point("append_before_charge")
            try:
                ledger.charge(
                    self.ws.db,
                    name,
                    build_id,
                    [charge],
                    period=label,
                    parallel=growing.growth_of(spec).model == "period",
                )
            except ledger.BudgetExceeded as exc:
                why = (
                    "the lifetime cap every table over these people shares is spent"
                    if growing.growth_of(spec).model == "lifetime"
                    else f"period {label} has spent its budget; raise the total (PUT …/budget) to pay for its "
                    "re-measure"
                    if remeasure
                    else f"another table over the same rows (id space) has charged period {label} already"
                )
                raise Conflict(f"{exc} for period {label}; nothing was read: {why}") from None
            self.ws.publish()
        fault_point("append_after_charge")
        for node in nodes:
            release = growing.node_name(name, node)
            if cube_store.stored_build(self.ws.db, release) == build_id:  # stored before an interruption
                continue
            self._measure_release(record, node, amount, release, build_id)
        fault_point("append_before_done")
        ledger.set_status(self.ws.db, build_id, "done")
        log.info("appended period %s of %s (%d release(s), build %s)", label, name, len(nodes), build_id)

    def _measure_release(
        self, record: catalog.TableRecord, node: tuple[int, int], amount: float, release: str, build_id: str
    ) -> None:
        """One block's release: its rows aggregated, measured at ``amount``, stored."""
        node_rec = growing.node_record(record, node, amount)
        strategy = steps.table_strategy(node_rec.spec)
        plan = steps.plan_build(node_rec, amount)
        source = self._release_source(node)
        self.warm_workers(node_rec.spec)  # their imports overlap the aggregate SQL
        try:
            true = steps.true_cuboids(self.ws.db, node_rec, plan)
        except StorageError as exc:
            log.error("append %s for table %s could not read its source: %s", build_id, record.name, exc)
            raise Unavailable(
                f"the append of {record.name!r} could not read its source after the period was charged; "
                "the server log has the cause; appending again completes it under the same charge"
            ) from None
        fault_point("append_after_aggregate")
        measurements = steps.measure(true, plan, strategy, source)
        del true
        meta = steps.cube_meta(node_rec, plan, strategy, measurements) | {"release": list(node)}
        if growing.per_period_units(record.spec):  # the unit as the analyst knows it: a person per day
            grain = growing.period_dimension(record.spec).granularity
            unit = record.spec.privacy_unit
            assert unit is not None  # per-period units: the table declares one
            meta["privacy_unit"] |= {"column": f"{unit.column} per {grain}"}
        cube_store.save(
            self.ws.db,
            self.ws.cube_root,
            release,
            build_id,
            steps.stored_arrays(measurements),
            meta,
            on_file_written=lambda: fault_point("append_during_persist"),
            remote=self.ws.cube_remote,
        )

    def _release_source(self, node: tuple[int, int]) -> RandomSource:
        """Fresh OS randomness; seeded (tests), one stream per block, so two engines over the same
        rows release the same values."""
        if self.seed is None:
            return RandomSource()
        return RandomSource(self.seed * 1_000_003 + node[0] * 65_537 + node[1])
