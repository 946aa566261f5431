"""The durable privacy-budget ledger (SPEC §1, DEVELOPERS privacy rule 2).

Budgets belong to *id spaces* (issue #20): the tables over one population — one declared
`privacy_unit.id_space`, or one source — share a total, and every entry names its space. Every
charge is one DuckDB transaction that reads the space's total and everything already charged to it,
refuses if the new charges would exceed the total, and inserts the entries; it commits before the
caller may compute or release anything noisy. Entries are never deleted: a build that
dies after charging keeps its spend and is marked ``failed``.

Status of an entry: ``charged`` (committed, build in progress), ``done`` (its cube is stored),
``failed`` (the build did not complete; the budget stays spent).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from storage.database import Database

# Every recorded entry counts as spent, whatever its status: ε spent on a failed build is gone.
SPENT_SQL = "SELECT COALESCE(SUM(epsilon), 0) FROM prima.ledger WHERE id_space = ?"
SPACE_OF_SQL = "SELECT id_space FROM prima.tables WHERE name = ?"
_TOLERANCE = 1e-12  # float slack when charges exactly exhaust the total


class BudgetExceeded(Exception):
    """The charge would take the table past its total budget."""

    def __init__(self, table: str, requested: float, remaining: float) -> None:
        super().__init__(
            f"table {table!r}: charge of epsilon={requested:g} exceeds the remaining budget "
            f"epsilon={max(remaining, 0.0):g}"
        )
        self.requested = requested
        self.remaining = remaining


@dataclass(frozen=True)
class Charge:
    epsilon: float
    purpose: str


@dataclass(frozen=True)
class Entry:
    id: int
    at: dt.datetime
    epsilon: float
    purpose: str
    status: str
    build_id: str | None


def charge(db: Database, table: str, build_id: str, charges: list[Charge]) -> list[int]:
    """Atomically check the budget and record ``charges``; returns the new entry ids."""
    if any(not c.epsilon > 0 for c in charges):
        raise ValueError("every charge must be positive")
    with db.transaction() as con:
        row = con.execute("SELECT s.name, s.epsilon_total FROM prima.tables t JOIN prima.spaces s "
                          "ON s.name = t.id_space WHERE t.name = ?", [table]).fetchone()
        if row is None:
            raise KeyError(table)
        space, total = row
        spent = con.execute(SPENT_SQL, [space]).fetchone()[0]
        requested = sum(c.epsilon for c in charges)
        if spent + requested > total + _TOLERANCE:
            raise BudgetExceeded(table, requested, total - spent)
        ids = []
        for c in charges:
            ids.append(
                con.execute(
                    "INSERT INTO prima.ledger (table_name, build_id, epsilon, purpose, status, id_space) "
                    "VALUES (?, ?, ?, ?, 'charged', ?) RETURNING id",
                    [table, build_id, c.epsilon, c.purpose, space],
                ).fetchone()[0]
            )
    return ids


def set_status(db: Database, build_id: str, status: str) -> None:
    """Mark every entry of one build (``done`` or ``failed``); the amounts never change."""
    db.run("UPDATE prima.ledger SET status = ? WHERE build_id = ?", [status, build_id])


def space_of(db: Database, table: str) -> str:
    """The id space a registered table belongs to."""
    rows = db.run(SPACE_OF_SQL, [table])
    if not rows:
        raise KeyError(table)
    return rows[0][0]


def space_budget(db: Database, space: str) -> tuple[float, float]:
    """(total, spent) of an id space."""
    total = db.run("SELECT epsilon_total FROM prima.spaces WHERE name = ?", [space])
    return (float(total[0][0]) if total else 0.0), float(db.run(SPENT_SQL, [space])[0][0])


def spent(db: Database, table: str) -> float:
    """What the table's id space has spent (all its tables', retired ones included)."""
    return space_budget(db, space_of(db, table))[1]


def space_names(db: Database) -> list[str]:
    """Every id space ever made (spaces are never deleted)."""
    return [r[0] for r in db.run("SELECT name FROM prima.spaces ORDER BY name")]


def space_entries(db: Database, space: str) -> list[tuple[Entry, str]]:
    """Every entry charged to one space, with the table it was charged for."""
    rows = db.run("SELECT id, \"at\", epsilon, purpose, status, build_id, table_name FROM prima.ledger "
                  "WHERE id_space = ? ORDER BY id", [space])
    return [(Entry(*r[:6]), r[6]) for r in rows]


def entries(db: Database, table: str) -> list[Entry]:
    rows = db.run(
        "SELECT id, \"at\", epsilon, purpose, status, build_id FROM prima.ledger "
        "WHERE table_name = ? ORDER BY id",
        [table],
    )
    return [Entry(*r) for r in rows]


def fail_unfinished(db: Database) -> list[str]:
    """At start-up: builds left ``charged`` by a crash become ``failed`` (their spend stays)."""
    rows = db.run(
        "SELECT DISTINCT l.build_id FROM prima.ledger l LEFT JOIN prima.cubes c "
        "ON c.build_id = l.build_id WHERE l.status = 'charged' AND c.build_id IS NULL"
    )
    stale = [r[0] for r in rows]
    for build_id in stale:
        set_status(db, build_id, "failed")
    db.run(
        "UPDATE prima.ledger SET status = 'done' WHERE status = 'charged' AND build_id IN "
        "(SELECT build_id FROM prima.cubes)"
    )
    return stale
