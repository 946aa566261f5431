"""The catalog of registered tables: declared public metadata and each table's total budget."""

from __future__ import annotations

import json
import logging
import secrets
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage import ledger, sources
from storage.database import Database, StorageError
from storage.object_store import ObjectStore
from storage.schema import TableSpec

log = logging.getLogger("prima.storage")


FILES_SPACE = "source:files:"  # a growing file source's space: its resolved folder (or file)


class TableExists(Exception):
    pass


class PopulationConflict(Exception):
    """The source is already in another id space: registering it here would give its rows a fresh budget."""

    def __init__(self, source: str, spaces: list[str], space: str) -> None:
        super().__init__(
            f"this source's rows are already in the id space(s) {spaces}; registering them in "
            f"{space!r} would give them a second, fresh budget. Declare privacy_unit.id_space as "
            f"{spaces[0]!r} (or leave it out for the source's own space) to share the budget, or, if "
            "this really is another population, acknowledge it with new_population=true (logged)"
        )
        self.source, self.spaces = source, spaces


class BudgetBelowSpent(Exception):
    def __init__(self, spent: float, currency: str = "epsilon") -> None:
        super().__init__(f"the new total is below the {currency} already spent ({spent:g})")
        self.spent = spent


@dataclass(frozen=True)
class TableRecord:
    spec: TableSpec
    source_table: str
    epsilon_total: float  # the id space's total, in its currency (ε or ρ)
    currency: str = "epsilon"

    @property
    def name(self) -> str:
        return self.spec.name


def register(
    db: Database,
    spec: TableSpec,
    import_dir: Path | None = None,
    new_population: bool = False,
    vet: Callable[[TableRecord], None] | None = None,
    budget: tuple[str, float] | None = None,
) -> TableRecord:
    """Load the source (if a file), check the declared columns bind, and record the metadata. The
    table joins its id space (its declared ``privacy_unit.id_space``, else `source_space`): a space
    with live tables keeps its total (they share it); a new space, or one whose tables were all
    retired, takes the spec's ε (never below what it has spent). A source already registered in another space is refused (`PopulationConflict`)
    unless ``new_population`` acknowledges that these rows are another population.
    ``vet`` sees the loaded source before anything is recorded; whatever it raises leaves no trace.
    ``budget``: (currency, total) of the declaration (`privacy.accounting.currencies.declared_total`; default the
    spec's pure ε). A space keeps one currency: a table budgeted in the other one is refused."""
    if budget is None and spec.epsilon is not None and spec.delta is None:
        budget = ("epsilon", spec.epsilon)
    if budget is None:
        raise ValueError("a ρ or (ε, δ) budget needs its converted total: pass budget=(currency, total)")
    currency, total = budget
    if get(db, spec.name) is not None:
        raise TableExists(spec.name)
    qualified, source = _loaded(db, spec, import_dir)
    try:  # the checks that need the source come after its copy; any refusal drops the copied table
        record = _record(db, spec, qualified, source, currency, total, new_population, vet)
        if db.state.shared and _copied(spec):
            _loaded_here(db, spec.name, source)
        return record
    except Exception:
        if _copied(spec):
            sources.drop_loaded(db, spec.name)
        raise


def _copied(spec: TableSpec) -> bool:
    """Whether the source is a CSV/Parquet file copied into this server's DuckDB (``src.<name>``):
    not a table read where it is (DuckDB, PostgreSQL, Spark), not a growing table's files."""
    src = spec.source
    return not (src.duckdb_table or src.remote or spec.growth is not None)


def _loaded(db: Database, spec: TableSpec, import_dir: Path | None) -> tuple[str, str]:
    """(the loaded or referenced source, its `source_space` key). The file's digest (a full read)
    runs beside its copy into DuckDB (another full read): hashlib releases the GIL, so this takes
    one pass's time, not two. A failed digest drops the copy."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prima-digest") as pool:
        digest = pool.submit(source_space, spec, import_dir)
        qualified = (
            sources.growing_rows(db, spec.source, import_dir)
            if spec.growth is not None
            else sources.load_source(db, spec.name, spec.source, import_dir)
        )
        try:
            return qualified, digest.result()
        except Exception:
            if _copied(spec):
                sources.drop_loaded(db, spec.name)
            raise


def _record(
    db: Database,
    spec: TableSpec,
    qualified: str,
    source: str,
    currency: str,
    total: float,
    new_population: bool,
    vet: Callable[[TableRecord], None] | None,
) -> TableRecord:
    """`register`'s checks and catalog rows, once the source is loaded (``qualified``)."""
    declared = spec.privacy_unit.id_space if spec.privacy_unit is not None else None
    overlapping = _overlapping_spaces(db, source)
    # Files already registered under another folder of this one (a parent, a child): the same rows,
    # so the same budget — joined as the same file registered twice is.
    space = declared or (overlapping[0] if overlapping else source)
    elsewhere = [
        r[0]
        for r in db.state.run(
            "SELECT id_space FROM prima.source_spaces WHERE source = ? AND id_space <> ? ORDER BY created_at",
            [source, space],
        )
    ]
    elsewhere += [s for s in overlapping if s != space and s not in elsewhere]
    if elsewhere and not new_population:
        raise PopulationConflict(source, elsewhere, space)
    held = db.state.run(
        "SELECT s.currency FROM prima.spaces s WHERE s.name = ? AND EXISTS "
        "(SELECT 1 FROM prima.tables t WHERE t.id_space = s.name)",
        [space],
    )
    if held and (held[0][0] or "epsilon") != currency:
        raise ValueError(
            f"the id space {space!r} is budgeted in {held[0][0]}; a table joining it cannot declare its "
            f"budget in {currency} (one population has one ledger currency: declare "
            f"{'rho' if held[0][0] == 'rho' else 'epsilon'})"
        )
    _check_composition(db, spec, space)
    if elsewhere:
        log.warning(
            "table %s: a source already in id space(s) %s registered into %s as a new population "
            "(acknowledged by the admin)",
            spec.name,
            elsewhere,
            space,
        )
    salt = secrets.token_hex(16) if spec.privacy_unit is not None else None
    spec = with_salt(spec, salt)
    sources.check_columns(db, spec.source, qualified, spec)
    if vet is not None:
        vet(TableRecord(spec, qualified, total, currency))
    with db.state.transaction() as con:
        if con.execute("SELECT 1 FROM prima.tables WHERE name = ?", [spec.name]).fetchone():
            raise TableExists(spec.name)  # registered meanwhile (by another server of a shared state)
        live = con.execute("SELECT COUNT(*) FROM prima.tables WHERE id_space = ?", [space]).fetchone()[0]
        if live == 0:  # a new space, or one whose tables were all retired: this spec sets its total
            spent = float(con.execute(ledger.SPENT_SQL, [space]).fetchone()[0])
            if (
                spent
                and con.execute("SELECT currency FROM prima.spaces WHERE name = ?", [space]).fetchone()[0] != currency
            ):
                raise ValueError(
                    f"the id space {space!r} has spent budget in another currency; register this "
                    "population with the currency it was measured in"
                )
            con.execute(
                "INSERT INTO prima.spaces (name, epsilon_total, currency, delta, public_id, composition) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET epsilon_total = excluded.epsilon_total, "
                "currency = excluded.currency, delta = excluded.delta, composition = excluded.composition",
                [space, max(total, spent), currency, spec.delta, secrets.token_hex(8), _composition(spec)],
            )
        con.execute(
            "INSERT INTO prima.source_spaces (source, id_space) VALUES (?, ?) ON CONFLICT DO NOTHING", [source, space]
        )
        con.execute(
            "INSERT INTO prima.tables (name, spec, source_table, epsilon_total, salt, id_space, source) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [spec.name, spec.model_dump_json(), qualified, total, salt, space, source],
        )
    return TableRecord(spec, qualified, total, currency)


def _composition(spec: TableSpec) -> str:
    """How a table's releases compose: per period (the "period" growth model, at the period's grain)
    or sequentially (every other table)."""
    if spec.growth is not None and spec.growth.model == "period":
        dim = spec.dimension(spec.growth.period)
        return f"per {dim.granularity}"
    return "sequential"


def _overlapping_spaces(db: Database, source: str) -> list[str]:
    """The spaces of growing file sources whose folder holds this one's files or lies inside its
    folder: the same rows under another path (a parent directory registered after its child would
    otherwise give the child's rows a fresh budget)."""
    if not source.startswith(FILES_SPACE):
        return []
    mine = Path(source[len(FILES_SPACE) :])
    out = []
    for other, space in db.state.run(
        "SELECT source, id_space FROM prima.source_spaces WHERE starts_with(source, ?) ORDER BY created_at",
        [FILES_SPACE],
    ):
        path = Path(other[len(FILES_SPACE) :])
        if other != source and (mine.is_relative_to(path) or path.is_relative_to(mine)) and space not in out:
            out.append(space)
    return out


def _check_composition(db: Database, spec: TableSpec, space: str) -> None:
    """One id space, one meaning of its budget: a "period"-model table's budget is per
    person-period, every other table's per person over all time; they cannot share a space. The
    meaning stays with the space once anything is charged in it, after its tables are retired too:
    a month-grain table over a spent day-grain space would release January again at a fresh ε."""
    mine = _composition(spec)
    held = db.state.run("SELECT composition FROM prima.spaces WHERE name = ?", [space])
    if held and held[0][0] and held[0][0] != mine and float(db.state.run(ledger.SPENT_SQL, [space])[0][0] or 0) > 0:
        raise ValueError(
            f"the id space {space!r} has spent budget composed {held[0][0]}; this table's composes "
            f"{mine}: one budget cannot mean both. Declare another privacy_unit.id_space (or the same "
            "growth model and period grain)"
        )
    for (other_json,) in db.state.run("SELECT spec FROM prima.tables WHERE id_space = ?", [space]):
        other = TableSpec.model_validate(_upgraded(json.loads(other_json)))
        if _composition(other) != mine:
            raise ValueError(
                f"the id space {space!r} holds {other.name!r}, whose budget composes {_composition(other)}; "
                f"this table's composes {mine}: one budget cannot mean both. Declare another "
                "privacy_unit.id_space (or the same growth model and period grain)"
            )


def with_salt(spec: TableSpec, salt: str | None) -> TableSpec:
    """The spec with its privacy unit's secret salt attached (never serialised with the spec)."""
    if spec.privacy_unit is None:
        return spec
    return spec.model_copy(update={"privacy_unit": spec.privacy_unit.model_copy(update={"salt": salt})})


def source_space(spec: TableSpec, import_dir: Path | None = None) -> str:
    """A source's own space: a file by the SHA-256 of its content (so one file registered under two
    names shares one budget), a DuckDB/PostgreSQL/Spark table by its reference. A file whose bytes
    change (a re-export, a Parquet copy of the same rows) is another source: docs/privacy-model.md."""
    src = spec.source
    if spec.growth is not None and (src.csv or src.parquet):  # files that grow: their place, not their bytes
        return f"{FILES_SPACE}{sources.files_location(src, import_dir)}"
    if src.csv or src.parquet:
        return "source:file:" + sources.file_digest(src.csv or src.parquet or "", import_dir)
    if src.postgres is not None:
        return f"source:postgres:{src.postgres.dsn}:{src.postgres.table}"
    if src.spark is not None:
        return f"source:spark:{src.spark.table or src.spark.parquet}"
    return f"source:duckdb:{src.duckdb_table}"


def get(db: Database, name: str) -> TableRecord | None:
    rows = db.state.run(
        "SELECT spec, source_table, salt, s.epsilon_total, s.currency FROM prima.tables t JOIN prima.spaces s "
        "ON s.name = t.id_space WHERE t.name = ?",
        [name],
    )
    if not rows:
        return None
    spec_json, source_table, salt, total, currency = rows[0]
    spec = TableSpec.model_validate(_upgraded(json.loads(spec_json)))
    return TableRecord(with_salt(spec, salt), source_table, total, currency or "epsilon")


def _upgraded(spec: dict) -> dict:
    """A spec recorded by an earlier version keeps the semantics its cube was built with: dimensions
    without an "outside" entry exclude out-of-domain rows (re-register to keep them). (Measures are
    nullable by default: a cube built before has no COUNT(m), and its AVG answers say so.)"""
    dims = [d if "outside" in d else {**d, "outside": "exclude"} for d in spec.get("dimensions", [])]
    return {**spec, "dimensions": dims}


def space_tables(db: Database, space: str) -> list[str]:
    return [r[0] for r in db.state.run("SELECT name FROM prima.tables WHERE id_space = ? ORDER BY name", [space])]


def space_sources(db: Database, space: str) -> list[str]:
    """The sources ever registered in a space (file digests, table references)."""
    return [
        r[0]
        for r in db.state.run("SELECT source FROM prima.source_spaces WHERE id_space = ? ORDER BY created_at", [space])
    ]


def names(db: Database) -> list[str]:
    return [r[0] for r in db.state.run("SELECT name FROM prima.tables ORDER BY name")]


def set_total(db: Database, name: str, epsilon: float, currency: str = "epsilon") -> float:
    """Set the total budget of the table's id space (an amount in ``currency``, which must be the
    space's) in one transaction with the spent check; returns what the space has spent."""
    with db.state.transaction() as con:
        space = con.execute(ledger.SPACE_OF_SQL, [name]).fetchone()[0]
        held = con.execute("SELECT currency FROM prima.spaces WHERE name = ?", [space]).fetchone()[0] or "epsilon"
        if held != currency:
            raise ValueError(f"the id space {space!r} is budgeted in {held}: set its total as {held}, not {currency}")
        spent = float(con.execute(ledger.SPENT_SQL, [space]).fetchone()[0])
        if epsilon + 1e-12 < spent:
            raise BudgetBelowSpent(spent, currency)
        con.execute("UPDATE prima.spaces SET epsilon_total = ? WHERE name = ?", [epsilon, space])
        con.execute("UPDATE prima.tables SET epsilon_total = ? WHERE id_space = ?", [epsilon, space])
    return spent


def retire(db: Database, name: str, cube_root: Path, remote: ObjectStore | None = None) -> None:
    """Remove a table: its catalog row, its cube (index row and files) and, for a file source,
    the copy loaded into Prima's DuckDB. The ledger and the id space stay: what was spent on these
    rows stays spent, and the same source (or id space) registered again starts from it."""
    record = get(db, name)
    with db.state.transaction() as con:
        con.execute("DELETE FROM prima.cubes WHERE table_name = ? OR starts_with(table_name, ?)", [name, name + "~"])
        con.execute("DELETE FROM prima.tables WHERE name = ?", [name])
    if record is not None and _copied(record.spec):
        sources.drop_loaded(db, name)
        db.run("DELETE FROM prima.local_sources WHERE name = ?", [name])
    shutil.rmtree(cube_root / name, ignore_errors=True)
    for release in cube_root.glob(f"{name}~*") if cube_root.exists() else ():  # a growing table's releases
        shutil.rmtree(release, ignore_errors=True)
    if remote is not None:
        for stored in [name, *remote.tables_with_prefix(name + "~")]:
            remote.remove(stored)


def ensure_local_source(db: Database, record: TableRecord, import_dir: Path | None) -> None:
    """Shared state (`storage.shared_state`): before a build reads a file source on this server, make
    sure this server's DuckDB holds the copy of the registration's file. A table registered on
    another server — or retired and registered again there under the same name — is loaded here
    from its declared path, and refused unless its bytes are the ones registered: the budget was
    set for those rows. Remote tables and growing files are read where they are: nothing to copy."""
    if not (db.state.shared and _copied(record.spec)):
        return
    rows = db.state.run("SELECT source FROM prima.tables WHERE name = ?", [record.name])
    registered = rows[0][0] if rows else None
    loaded = db.run("SELECT source FROM prima.local_sources WHERE name = ?", [record.name])
    if registered is not None and loaded and loaded[0][0] == registered:
        return
    sources.drop_loaded(db, record.name)
    here = _loaded(db, record.spec, import_dir)[1]
    if registered is not None and here != registered:
        sources.drop_loaded(db, record.name)
        raise StorageError(
            f"the source file of {record.name!r} is not the one registered (its content changed, or this "
            "server's import directory holds another file at its path): every server must read the same "
            "file; re-register the table if its rows changed"
        )
    _loaded_here(db, record.name, here)


def _loaded_here(db: Database, name: str, source: str) -> None:
    """Note which source this server's copy ``src.<name>`` holds (`ensure_local_source`)."""
    db.run(
        "INSERT INTO prima.local_sources (name, source) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET "
        "source = excluded.source",
        [name, source],
    )
