"""The durable privacy-budget ledger: charged before a noisy result exists, never beyond the budget.

Budgets belong to *id spaces*: the tables over one population — one declared
`privacy_unit.id_space`, or one source — share a total, and every entry names its space. Every
charge is one DuckDB transaction that reads the space's total and everything already charged to it,
refuses if the new charges would exceed the total, and inserts the entries; it commits before the
caller may compute or release anything noisy. Entries are never deleted: a build that
dies after charging keeps its spend and is marked ``failed``.

Two currencies: a space's total is in pure ε or in ρ (`privacy.accounting.currencies`); every
entry records its ε (NULL for a Gaussian release) and its tight ρ, and a charge is checked in the
space's own currency.

Status of an entry: ``charged`` (committed, build in progress), ``done`` (its cube is stored),
``failed`` (the build did not complete; the budget stays spent).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage.database import Database

# Every recorded entry counts as spent, whatever its status: ε spent on a failed build is gone. Spent in
# the space's currency: ε for a pure-ε space, ρ for a zCDP space. Entries of a growing table's period
# under the "period" model (``parallel``) touch disjoint rows per period, so they compose in
# parallel: what the space has spent is every sequential entry plus the most any one period has spent.
_AMOUNTS = (
    "SELECT {amount} AS amount, l.period, COALESCE(l.parallel, false) AS parallel FROM prima.ledger l "
    "JOIN prima.spaces s ON s.name = l.id_space WHERE l.id_space = ?"
)
_COMPOSED = (
    "WITH e AS ({amounts}) SELECT COALESCE((SELECT SUM(amount) FROM e WHERE NOT parallel), 0) + "
    "COALESCE((SELECT MAX(t) FROM (SELECT SUM(amount) AS t FROM e WHERE parallel GROUP BY period) AS p), 0)"
)
SPENT_SQL = _COMPOSED.format(
    amounts=_AMOUNTS.format(amount="CASE WHEN s.currency = 'rho' THEN l.rho ELSE l.epsilon END")
)
RHO_SPENT_SQL = _COMPOSED.format(amounts=_AMOUNTS.format(amount="l.rho"))
# What a new charge for one period of a "period"-model table adds to: the sequential entries and that period's.
PERIOD_SPENT_SQL = (
    "WITH e AS ({amounts}) SELECT COALESCE(SUM(amount), 0) FROM e WHERE NOT parallel OR period = ?"
).format(amounts=_AMOUNTS.format(amount="CASE WHEN s.currency = 'rho' THEN l.rho ELSE l.epsilon END"))
SYMBOL = {"epsilon": "ε", "rho": "ρ"}
SPACE_OF_SQL = "SELECT id_space FROM prima.tables WHERE name = ?"
_TOLERANCE = 1e-12  # float slack when charges exactly exhaust the total


class BudgetExceeded(Exception):
    """The charge would take the table past its total budget."""

    def __init__(self, table: str, requested: float, remaining: float, currency: str = "epsilon") -> None:
        super().__init__(
            f"table {table!r}: charge of {currency}={requested:g} exceeds the remaining budget "
            f"{currency}={max(remaining, 0.0):g}"
        )
        self.requested = requested
        self.remaining = remaining
        self.currency = currency


@dataclass(frozen=True)
class Charge:
    """One ledger entry: its pure ε (None: a Gaussian release has none) and its tight ρ."""

    epsilon: float | None
    purpose: str
    rho: float | None = None  # None: ε²/2, the bound any ε-DP step satisfies

    @property
    def zcdp(self) -> float:
        if self.rho is not None:
            return self.rho
        if self.epsilon is None:
            raise ValueError("a charge needs an ε or a ρ")
        return self.epsilon * self.epsilon / 2.0

    def amount(self, currency: str) -> float:
        if currency == "rho":
            return self.zcdp
        if self.epsilon is None:
            raise ValueError("a Gaussian release cannot be charged to a pure-ε budget")
        return self.epsilon


@dataclass(frozen=True)
class Entry:
    id: int
    at: dt.datetime
    epsilon: float | None
    purpose: str
    status: str
    build_id: str | None
    rho: float | None = None
    period: str | None = None  # a growing table's period the entry pays for
    parallel: bool = False  # composes in parallel with other periods' entries (the "period" model)


def charge(
    db: Database, table: str, build_id: str, charges: list[Charge], period: str | None = None, parallel: bool = False
) -> list[int]:
    """Atomically check the budget and record ``charges``; returns the new entry ids. ``period``: the
    growing table's period they pay for; ``parallel``: they compose in parallel with
    other periods' (the "period" model), so they are checked against that period's spend only."""
    if any(not ((c.epsilon is None or c.epsilon > 0) and c.zcdp > 0) for c in charges):
        raise ValueError("every charge must be positive")
    with db.state.transaction() as con:
        row = con.execute(
            "SELECT s.name, s.epsilon_total, s.currency FROM prima.tables t JOIN prima.spaces s "
            "ON s.name = t.id_space WHERE t.name = ?",
            [table],
        ).fetchone()
        if row is None:
            raise KeyError(table)
        space, total, currency = row
        spent = (
            con.execute(PERIOD_SPENT_SQL, [space, period]) if parallel else con.execute(SPENT_SQL, [space])
        ).fetchone()[0]
        requested = sum(c.amount(currency) for c in charges)
        if spent + requested > total + _TOLERANCE:
            raise BudgetExceeded(table, requested, total - spent, currency)
        ids = []
        for c in charges:
            ids.append(
                con.execute(
                    "INSERT INTO prima.ledger (table_name, build_id, epsilon, rho, purpose, status, id_space, period, "
                    "parallel) VALUES (?, ?, ?, ?, ?, 'charged', ?, ?, ?) RETURNING id",
                    [table, build_id, c.epsilon, c.zcdp, c.purpose, space, period, parallel],
                ).fetchone()[0]
            )
    return ids


def set_status(db: Database, build_id: str, status: str) -> None:
    """Mark every entry of one build (``done`` or ``failed``); the amounts never change."""
    db.state.run("UPDATE prima.ledger SET status = ? WHERE build_id = ?", [status, build_id])


def space_of(db: Database, table: str) -> str:
    """The id space a registered table belongs to."""
    rows = db.state.run(SPACE_OF_SQL, [table])
    if not rows:
        raise KeyError(table)
    return rows[0][0]


def space_budget(db: Database, space: str) -> tuple[float, float]:
    """(total, spent) of an id space, in its own currency (`space_currency`)."""
    total = db.state.run("SELECT epsilon_total FROM prima.spaces WHERE name = ?", [space])
    return (float(total[0][0]) if total else 0.0), float(db.state.run(SPENT_SQL, [space])[0][0])


def space_currency(db: Database, space: str) -> tuple[str, float | None]:
    """(currency, declared δ or None) of an id space; a space never made is pure ε."""
    row = db.state.run("SELECT currency, delta FROM prima.spaces WHERE name = ?", [space])
    return (row[0][0] or "epsilon", row[0][1]) if row else ("epsilon", None)


def space_rho(db: Database, space: str) -> float:
    """The tight ρ every entry of the space adds up to (for comparison in a pure-ε space)."""
    return float(db.state.run(RHO_SPENT_SQL, [space])[0][0])


def spent(db: Database, table: str) -> float:
    """What the table's id space has spent (all its tables', retired ones included)."""
    return space_budget(db, space_of(db, table))[1]


def public_space(db: Database, space: str) -> str:
    """The name analysts see for a space: a declared ``privacy_unit.id_space`` as declared; a
    source's own space (its file digest, path or table reference) as ``source-<random id>``, an id
    that says nothing about the source's content or place (the admin's views keep the real name)."""
    if not space.startswith("source:"):
        return space
    row = db.state.run("SELECT public_id FROM prima.spaces WHERE name = ?", [space])
    return f"source-{row[0][0]}" if row and row[0][0] else "source"


def space_named(db: Database, shown: str) -> str | None:
    """The space an admin names by its real name or by what analysts see (`public_space`)."""
    if shown.startswith("source-"):
        row = db.state.run("SELECT name FROM prima.spaces WHERE public_id = ?", [shown[len("source-") :]])
        return row[0][0] if row else None
    return shown if db.state.run("SELECT 1 FROM prima.spaces WHERE name = ?", [shown]) else None


def space_names(db: Database) -> list[str]:
    """Every id space ever made (spaces are never deleted)."""
    return [r[0] for r in db.state.run("SELECT name FROM prima.spaces ORDER BY name")]


def space_entries(db: Database, space: str) -> list[tuple[Entry, str]]:
    """Every entry charged to one space, with the table it was charged for."""
    rows = db.state.run(
        'SELECT id, "at", epsilon, purpose, status, build_id, rho, period, coalesce(parallel, false), table_name '
        "FROM prima.ledger WHERE id_space = ? ORDER BY id",
        [space],
    )
    return [(Entry(*r[:9]), r[9]) for r in rows]


def entries(db: Database, table: str) -> list[Entry]:
    rows = db.state.run(
        'SELECT id, "at", epsilon, purpose, status, build_id, rho, period, coalesce(parallel, false) '
        "FROM prima.ledger WHERE table_name = ? ORDER BY id",
        [table],
    )
    return [Entry(*r) for r in rows]


def fail_unfinished(db: Database, table: str | None = None) -> list[str]:
    """Builds left ``charged`` by a crash become ``failed`` (their spend stays): at start-up, or for
    one ``table`` when a build takes its lock. A growing table's append left ``charged`` stays so:
    nothing of it was released (its releases are stored in one commit, which would have marked it
    done), so the next append of that period completes it under the same charge — each period is
    charged once. With a shared state (many servers), a table whose build lock another server holds
    is being built there, not left by a crash: its entries are left alone."""
    rows = db.state.run(
        "SELECT DISTINCT l.build_id, l.table_name FROM prima.ledger l LEFT JOIN prima.cubes c "
        "ON c.build_id = l.build_id WHERE l.status = 'charged' AND c.build_id IS NULL AND l.period IS NULL"
        + (" AND l.table_name = ?" if table is not None else ""),
        [table] if table is not None else [],
    )
    stale = [b for b, t in rows if table is not None or not (db.state.shared and db.state.build_held(t))]
    for build_id in stale:
        set_status(db, build_id, "failed")
    db.state.run(
        "UPDATE prima.ledger SET status = 'done' WHERE status = 'charged' AND period IS NULL AND build_id IN "
        "(SELECT build_id FROM prima.cubes)"
    )
    return stale


def open_append(db: Database, table: str, period: str) -> str | None:
    """The build id of ``period``'s append of ``table`` that was charged and never stored (a crash),
    or None: the next append of that period completes it without a second charge."""
    rows = db.state.run(
        "SELECT build_id FROM prima.ledger WHERE table_name = ? AND period = ? AND status = 'charged' "
        "ORDER BY id LIMIT 1",
        [table, period],
    )
    return rows[0][0] if rows else None


def periods(db: Database, table: str) -> list[tuple[str, str, str, float]]:
    """A growing table's appends since it was registered, oldest first: (period, status, build id,
    amount in the space's currency). A period has one entry, or more when an admin re-measured it.
    Appends of a retired table of the same name are not this table's: their releases went with it
    (their charges stay in the id space)."""
    rows = db.state.run(
        "SELECT l.period, l.status, l.build_id, CASE WHEN s.currency = 'rho' THEN l.rho ELSE l.epsilon END "
        "FROM prima.ledger l JOIN prima.spaces s ON s.name = l.id_space WHERE l.table_name = ? AND "
        'l.period IS NOT NULL AND l."at" >= (SELECT created_at FROM prima.tables WHERE name = ?) '
        "ORDER BY l.id",
        [table, table],
    )
    return [(period, status, build_id, float(amount)) for period, status, build_id, amount in rows]


def done_periods(db: Database, table: str) -> dict[str, str]:
    """Each measured period of a growing table → the build id of its latest completed append."""
    return {period: build_id for period, status, build_id, _ in periods(db, table) if status == "done"}
