"""Tables and their budgets: registration (with its preflight), retirement, the public description of
a table, id spaces' budgets and the ledger's entries — the `engine.service.Prima` collaborator that
reads and writes the catalog."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from engine.builds import axes, growing
from engine.builds.preview import check_cube_size, preview, preview_growing
from engine.errors import Conflict, Invalid, NotFound
from engine.workspace import Workspace
from privacy.accounting.currencies import declared_total
from privacy.accounting.zcdp import epsilon_for, rho_for
from storage import catalog, demo, ledger, sources
from storage.database import Database, StorageError
from storage.schema import TableSpec

log = logging.getLogger("prima.engine")


class Tables:
    """The catalog's side of the service: what is registered, described and budgeted."""

    def __init__(
        self,
        ws: Workspace,
        cube_status: Callable[[str], dict[str, Any]],
        growth_status: Callable[[str], dict[str, Any]],
    ) -> None:
        """``cube_status`` and ``growth_status``: a table's synopsis as the builds see it, for its description."""
        self.ws = ws
        self._cube_status = cube_status
        self._growth_status = growth_status

    def ensure_demo(self) -> bool:
        """Create and register the demo table when no table is registered yet (the writer's job)."""
        if self.ws.role == "reader":
            return False
        rows_everywhere = self.ws.role == "shared"  # every server holds the (deterministic) rows: any may build it
        if rows_everywhere:
            demo.create_demo_rows(self.ws.db)
        if catalog.names(self.ws.db):
            return False
        if not rows_everywhere:
            demo.create_demo_rows(self.ws.db)
        try:
            self.register(demo.demo_spec(), with_preview=False)
        except Conflict:  # servers of a shared state starting together: another one registered it
            return False
        return True

    def register(
        self,
        spec: TableSpec,
        dry_run: bool = False,
        force: bool = False,
        new_population: bool = False,
        *,
        with_preview: bool = True,
    ) -> dict[str, Any]:
        """Register ``spec``; the answer includes its cost preview and (for the admin) the
        preflight. ``dry_run``: validate and preview only — nothing is loaded, stored or spent.
        A source with no row inside every declared domain is refused unless ``force`` (a build would
        spend the budget on an empty cube); a source already in another id space unless
        ``new_population``. ``with_preview=False`` (the demo table at start-up, whose spec is the
        project's own): no preview in the answer — planning its declared workload imported scipy's
        optimiser and ran it, ~0.4 s of every fresh server's start, for an answer nobody reads."""
        spec = axes.settled(spec)  # the defaults a stored spec keeps (a linear axis's zero class)
        stored = check_cube_size(spec, self.ws.max_cube_bytes)
        # The preview plans the build from the metadata alone (checking strategy and weights): it runs
        # beside the source's copy and is waited for before anything is recorded.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prima-preview") as pool:
            previewing = preview_growing if spec.growth is not None else preview
            planned = pool.submit(previewing if with_preview or dry_run else _no_preview, spec, stored)
            return self._register(spec, planned, dry_run, force, new_population)

    def _register(
        self, spec: TableSpec, planned: Future, dry_run: bool, force: bool, new_population: bool
    ) -> dict[str, Any]:
        try:
            if dry_run:
                cost = planned.result()
                if catalog.get(self.ws.db, spec.name) is not None:
                    raise catalog.TableExists(spec.name)
                return {"dry_run": True, "name": spec.name, "cells": math.prod(spec.shape), "preview": cost}
            preflight: dict[str, Any] = {}
            declared = declared_total(spec.epsilon, spec.rho, spec.delta)
            self.ws.writable("register a table")

            def vet(record: catalog.TableRecord) -> None:
                planned.result()
                self._vet(record, force, preflight)

            catalog.register(
                self.ws.db,
                spec,
                self.ws.import_dir,
                new_population=new_population,
                vet=vet,
                budget=(declared.currency, declared.amount),
            )
            cost = planned.result()
            self.ws.publish()
        except catalog.TableExists:
            raise Conflict(f"table {spec.name!r} already exists") from None
        except catalog.PopulationConflict as exc:
            raise Conflict(str(exc)) from None
        except (StorageError, ValueError) as exc:
            raise Invalid(str(exc)) from None
        self.ws.forget_plans()
        out = self.table_info(spec.name) | ({"preview": cost} if cost is not None else {}) | {"preflight": preflight}
        budget = out["budget"]
        others = [t for t in budget["tables_in_space"] if t != spec.name]
        if others:  # an honest mistake (the same source twice) must not double the spend
            symbol, declared_amount = (
                ledger.SYMBOL[budget["currency"]],
                declared_total(spec.epsilon, spec.rho, spec.delta),
            )
            out["notes"] = [
                f"{spec.name!r} joins the id space {budget['id_space']!r} of {others}: they share one budget "
                f"(total {symbol}={budget['total']:g}, spent {budget['spent']:g}), because they "
                "cover the same source or declare the same privacy_unit.id_space"
                + (
                    f"; the registration's {budget['currency']}={declared_amount.amount:g} does not change the "
                    "shared total (PUT the budget to change it)"
                    if abs(declared_amount.amount - budget["total"]) > 1e-12
                    else ""
                )
            ]
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
            report = sources.fit_report(self.ws.db, record.spec.source, record.source_table, record.spec)
        except StorageError as exc:
            return {"error": str(exc)}
        warnings, suggestions = _fit_warnings(record.spec, report)
        if report["rows_in_every_domain"] == 0:
            warnings.insert(
                0,
                "no row falls inside every declared domain: a build would spend the budget on an "
                "empty cube (registered only because force=true was given)",
            )
        return report | {"warnings": warnings} | ({"suggestions": suggestions} if suggestions else {})

    def retire(self, name: str) -> dict[str, Any]:
        """Remove a table (`catalog.retire`); its ledger entries stay and count again if the name
        is registered anew. Refused while a build runs (409)."""
        self.ws.writable("retire a table")
        if self.ws.busy_elsewhere(name):
            raise Conflict(
                f"a cube build of {name!r} is running on another server; retire the table when it has finished"
            )
        with self.ws.exclusive(name):
            self.ws.record(name)
            if name in self.ws.building:
                raise Conflict(f"a cube build of {name!r} is running; retire the table when it has finished")
            spent = ledger.spent(self.ws.db, name)
            currency, _ = ledger.space_currency(self.ws.db, ledger.space_of(self.ws.db, name))
            catalog.retire(self.ws.db, name, self.ws.cube_root, self.ws.cube_remote)
            self.ws.forget(name)
        self.ws.forget_plans()
        log.info("retired table %s", name)
        self.ws.publish()
        return {
            "name": name,
            "retired": True,
            "currency": currency,
            "spent": spent,
            f"{currency}_spent": spent,
            "note": "the ledger keeps this table's entries; registering the name again starts from what was spent",
        }

    def table_info(self, name: str) -> dict[str, Any]:
        record = self.ws.record(name)
        spec = record.spec
        return {
            "name": spec.name,
            "description": spec.description,
            "dimensions": [d.model_dump(mode="json") for d in spec.dimensions],
            "measures": [m.model_dump(mode="json") for m in spec.measures],
            "cells": math.prod(spec.shape),
            "cube": {"config": spec.cube.model_dump(mode="json"), **self._cube_status(name)},
            "budget": self.budget(name),
        } | ({"growth": self._growth_status(name)} if spec.growth is not None else {})

    # -- budgets and the ledger ----------------------------------------------------------------------------
    def budget(self, name: str) -> dict[str, Any]:
        """The budget of the table's id space: shared by every table over the same
        population or source, retired ones' spend included."""
        spec = self.ws.record(name).spec
        space = ledger.space_of(self.ws.db, name)
        out = _space_budget(self.ws.db, space) | {
            "id_space": ledger.public_space(self.ws.db, space),
            "tables_in_space": catalog.space_tables(self.ws.db, space),
        }
        if spec.growth is not None and spec.growth.model == "period":  # parallel composition
            grain = growing.period_dimension(spec).granularity
            out |= {
                "composition": f"per {grain}",
                "note": f"every {grain}'s rows get the total: the releases of different {grain}s read disjoint rows, "
                f"so spent is what the most-charged {grain} has spent, and each new {grain} has the total "
                "minus the spend that covers every period",
            }
        return out

    def set_budget(
        self, name: str, epsilon: float | None = None, rho: float | None = None, delta: float | None = None
    ) -> dict[str, Any]:
        """Set the space's total, in the currency it is declared in (``epsilon`` or ``rho``); a ρ space
        declared as (ε, δ) takes its new total as ``epsilon`` with ``delta`` too, kept as its ρ."""
        self.ws.writable("change a budget")
        self.ws.record(name)
        if (epsilon is None) == (rho is None):
            raise Invalid('give the new total as "epsilon" or as "rho", the currency the table is budgeted in')
        if delta is not None:
            if epsilon is None:
                raise Invalid('"delta" goes with "epsilon": an (ε, δ) total, kept as its ρ')
            if self.budget(name)["currency"] != "rho":
                raise Invalid('this table is budgeted in pure ε: give "epsilon" alone')
            try:
                rho = rho_for(epsilon, delta)
                epsilon = None
            except ValueError as exc:
                raise Invalid(str(exc)) from None
        try:
            amount = epsilon if rho is None else rho
            assert amount is not None  # exactly one was given (checked above)
            catalog.set_total(self.ws.db, name, amount, "epsilon" if rho is None else "rho")
        except catalog.BudgetBelowSpent as exc:
            raise Conflict(str(exc)) from None
        except ValueError as exc:
            raise Invalid(str(exc)) from None
        self.ws.publish()
        return self.budget(name)

    def ledger_entries(self, name: str) -> list[dict[str, Any]]:
        """A table's entries: a live table's, or a retired one's (its ledger stays)."""
        entries = ledger.entries(self.ws.db, name)
        if not entries:
            self.ws.record(name)  # NotFound for a name that was never registered or charged
        return [_entry_json(e) for e in entries]

    def spaces(self) -> list[dict[str, Any]]:
        """Every id space with its total, spend, live tables and registered sources (admin)."""
        out = []
        for space in ledger.space_names(self.ws.db):
            out.append(
                {"id_space": space, "shown_as": ledger.public_space(self.ws.db, space)}
                | _space_budget(self.ws.db, space)
                | {
                    "tables": catalog.space_tables(self.ws.db, space),
                    "sources": catalog.space_sources(self.ws.db, space),
                }
            )
        return out

    def space_ledger(self, space: str) -> list[dict[str, Any]]:
        """Every entry charged to one id space, retired tables' included (admin): named as stored, or
        as analysts see it."""
        real = ledger.space_named(self.ws.db, space)
        if real is None:
            raise NotFound(f"unknown id space {space!r}")
        space = real
        return [_entry_json(e) | {"table": t} for e, t in ledger.space_entries(self.ws.db, space)]


def _entry_json(e: ledger.Entry) -> dict[str, Any]:
    return {
        "id": e.id,
        "at": e.at.isoformat(timespec="seconds") + "Z",
        "epsilon": e.epsilon,
        "rho": e.rho,
        "purpose": e.purpose,
        "status": e.status,
        "build_id": e.build_id,
    } | ({"period": e.period, "parallel": e.parallel} if e.period is not None else {})


COMPARISON_DELTA = 1e-9  # the δ a ρ is shown at as (ε, δ) when the space declared none (AIM's, MST's)


def _space_budget(db: Database, space: str) -> dict[str, Any]:
    """An id space's budget in its currency (``total``/``spent``/``remaining``, also under the
    currency's own names, e.g. ``epsilon_total``) and, for comparison, the other: the tight ρ every
    entry adds up to, and for a ρ space the (ε, δ) its total and spend mean."""
    currency, delta = ledger.space_currency(db, space)
    total, spent = ledger.space_budget(db, space)
    remaining = max(total - spent, 0.0)
    out: dict[str, Any] = {
        "currency": currency,
        "total": total,
        "spent": spent,
        "remaining": remaining,
        f"{currency}_total": total,
        f"{currency}_spent": spent,
        f"{currency}_remaining": remaining,
    }
    if currency == "epsilon":
        out["rho_spent"] = ledger.space_rho(db, space)
        return out
    shown = delta or COMPARISON_DELTA
    out |= {
        "delta": delta,
        "as_epsilon_delta": {
            "delta": shown,
            "epsilon_total": round(epsilon_for(total, shown), 6),
            "epsilon_spent": round(epsilon_for(spent, shown), 6) if spent > 0 else 0.0,
            "conversion": "Canonne, Kamath & Steinke 2020, Corollary 13",
        },
    }
    return out


EXACT_SUM_LIMIT = 2.0**53  # float64 adds integers exactly up to here


KEPT_OUTSIDE_WARNING = 0.05  # a kept dimension's outside share worth a word (its ranges cannot resolve them)


def _fit_warnings(spec: TableSpec, report: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What the preflight says about rows outside the domains and missing measures —
    warnings: any row an "exclude" dimension drops, a large share in a kept dimension's outside
    cells, NULLs under a measure declared never NULL; suggestions: the ε a never-NULL measure saves."""
    rows, out, suggestions = max(report["rows"], 1), [], []
    for d, n in report["outside_domain"].items():
        dim = spec.declared_dimension(d)
        share = f"{n:,} of {report['rows']:,} rows ({n / rows:.1%})"
        if n and dim.outside == "exclude":
            out.append(
                f"{share} fall outside the declared domain of {d!r} (or are NULL) and are excluded from every "
                'answer ("outside": "exclude"); check its values, case and surrounding text, or keep them'
            )
        elif n / rows >= KEPT_OUTSIDE_WARNING:
            out.append(
                f"{share} fall outside the declared domain of {d!r} (or are NULL): answers count them in its "
                "outside cells, but no range or group can tell them apart; check its values, case and "
                "surrounding text"
            )
    for m, n in report["measure_missing"].items():
        measure = spec.declared_measure(m)
        if n and not measure.nullable:
            out.append(
                f'{n:,} rows ({n / rows:.1%}) have no numeric value of {m!r}, declared "nullable": false: '
                "AVG would divide by rows without it; declare it nullable (the default)"
            )
        elif not n and measure.nullable:
            suggestions.append(
                f'every row has a numeric {m!r}: if that always holds, "nullable": false saves '
                f"the ε of COUNT({m}) (AVG then divides by COUNT(*))"
            )
    return out, suggestions


def _registration_refusal(spec: TableSpec, preflight: dict[str, Any], force: bool) -> str | None:
    """Why a registration is refused from its preflight (admin-only exact counts), or None.

    * No row inside every declared domain: a build would spend the budget on an empty cube
      (an analyst's first query once did exactly that); ``force`` registers anyway.
    * |bound| × rows beyond 2^53: float64 sums of the clipped values would no longer be exact, so one
      row could move a sum by more than the sensitivity the noise is calibrated to. Not forcible."""
    rows = preflight.get("rows")
    if rows is None:  # the preflight could not read the source: its error is in the preflight
        return None
    widest = max((max(abs(m.lo), abs(m.hi)) for m in spec.measures), default=0.0)
    if widest * rows > EXACT_SUM_LIMIT:
        return (
            f"measure bounds up to {widest:g} over {rows:,} rows can sum past 2^53, where float64 sums stop "
            "being exact and a row could move a sum by more than its declared bound; declare the measure in "
            "larger units (thousands, millions) or narrower bounds"
        )
    if (
        preflight.get("rows_in_every_domain") == 0 and not force and spec.growth is None
    ):  # (a growing table's rows come later)
        return (
            "no row of the source falls inside every declared domain, so a build would spend the budget on "
            "an empty cube; check the preflight below (values, case, separators) and register corrected "
            "metadata, or register with force=true if rows will arrive later"
        )
    return None


def _no_preview(spec: TableSpec, stored: int) -> None:
    """`Tables.register` without a preview: nothing to plan."""
    return None
