"""The catalog snapshot serving workers read (one writer, many stateless readers).

DuckDB lets one process open a file for writing, or many for reading, never both. So with
``prima serve --workers N`` one process (the writer) owns ``store.duckdb`` — registrations, budgets,
builds, the ledger — and after every change it publishes the ``prima`` schema (catalog, spaces,
ledger, cube index: a few kB to MB, never a source row): written to a new file under
``snapshots/``, fsynced, then the ``serving.duckdb`` symlink is renamed over to point at it. Readers open it read-only and reopen when the link names another file (a new
name per snapshot: DuckDB keeps one instance per path in a process, so reopening one path would
return the old file); the cubes it points at are immutable ``.npy`` files every
process memory-maps, so the page cache holds one copy whatever the worker count. The same split —
one writer, readers of a published snapshot and cube files — is the path to replicas on other
machines (ship the snapshot and the cube directories).

The tables' secret salts stay in the writer's file: readers never read rows, so they never rank them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

from storage.cube_store import fsync
from storage.database import Database

SNAPSHOT = "serving.duckdb"
KEEP = 4  # snapshot files kept: readers move to the newest within a second, the older ones go


def path_in(data_dir: Path) -> Path:
    """The link to the newest snapshot."""
    return Path(data_dir) / SNAPSHOT


_PUBLISHING = threading.Lock()  # one publish at a time: the link never goes back to an older copy


def publish(db: Database, data_dir: Path) -> Path:
    """Copy the ``prima`` schema into a new snapshot file and point the link at it (atomic)."""
    with _PUBLISHING:
        return _publish(db, data_dir)


def _publish(db: Database, data_dir: Path) -> Path:
    folder = Path(data_dir) / "snapshots"
    folder.mkdir(exist_ok=True)
    name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.duckdb"
    target = folder / name
    alias = f"snap_{uuid.uuid4().hex[:12]}"
    tables = [
        r[0]
        for r in db.run(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'prima' "
            "AND table_catalog = current_database() ORDER BY table_name"
        )
    ]
    quoted = str(target).replace("'", "''")  # a path Prima made itself; ATTACH takes no parameters
    try:
        with db.transaction() as con:  # one consistent view of the catalog and ledger
            con.execute(f"ATTACH '{quoted}' AS {alias}")
            con.execute(f"CREATE SCHEMA {alias}.prima")
            for table in tables:
                select = "* REPLACE (NULL::VARCHAR AS salt)" if table == "tables" else "*"
                con.execute(f'CREATE TABLE {alias}.prima."{table}" AS SELECT {select} FROM prima."{table}"')
        db.run(f"DETACH {alias}")
    except BaseException:
        db.run(f"DETACH DATABASE IF EXISTS {alias}")
        target.unlink(missing_ok=True)
        raise
    fsync(target)
    link = path_in(data_dir)
    tmp = link.with_name(f".{SNAPSHOT}.{uuid.uuid4().hex}")
    os.symlink(Path("snapshots") / name, tmp)
    os.replace(tmp, link)
    fsync(Path(data_dir))
    for old in sorted(folder.glob("*.duckdb"))[:-KEEP]:
        old.unlink(missing_ok=True)  # a reader still on it keeps its open file (POSIX)
    return target


def stamp(data_dir: Path) -> str | None:
    """The newest snapshot's file name, None before the first one: changes with each publish."""
    try:
        return os.readlink(path_in(data_dir))
    except (FileNotFoundError, OSError):
        return None


def open_path(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / name
