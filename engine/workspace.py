"""A data directory as one process holds it: its database (or a reader's snapshot of the writer's),
the tables' declared metadata and loaded synopses cached in memory, and the locks around them.

Every collaborator of `engine.service.Prima` shares one `Workspace`: the catalog is read here, once
per table (a spec never changes after registration), and `generation` counts the changes of what is
in memory so that callers memoizing answers can tell in one comparison that an answer is current.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from engine.errors import NotFound, Unavailable
from engine.plan import QueryPlan
from storage import catalog, object_store, snapshot
from storage.database import Database, StorageError
from storage.schema import TableSpec

log = logging.getLogger("prima.engine")

SNAPSHOT_CHECK_SECONDS = 0.25  # a reader (or a server of a shared state) looks for changes at most this often
ROLES = ("single", "writer", "reader", "shared")


class Workspace:
    """One data directory's state in this process. Thread-safe; one per process (DuckDB's rule)."""

    def __init__(
        self,
        data_dir: Path,
        import_dir: Path | None,
        max_cube_bytes: int,
        role: str,
        state: str | None = None,
        cube_dir: str | Path | None = None,
    ) -> None:
        """``role``: ``"single"`` owns the data dir alone; ``"writer"`` owns it and publishes a snapshot
        after every change (`storage.snapshot`); ``"reader"`` serves from the writer's snapshot;
        ``"shared"`` is one of many servers on the PostgreSQL ``state`` (`storage.shared_state`),
        reading and writing cubes in ``cube_dir`` (a directory every server mounts, or an object
        store's ``s3://bucket/prefix``, copied to this data dir's ``cubes/`` as it is read)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        if (role == "shared") != (state is not None):
            raise ValueError("a shared state needs role 'shared', and role 'shared' a state URL")
        self.data_dir = Path(data_dir)
        self.cube_remote = object_store.ObjectStore(str(cube_dir)) if object_store.is_remote(cube_dir) else None
        local = cube_dir is None or self.cube_remote is not None
        self.cube_root = self.data_dir / "cubes" if local else Path(cube_dir or "")
        self.import_dir = import_dir  # None: any absolute path (library use); the server sets one
        self.max_cube_bytes = max_cube_bytes
        self.role = role
        self._stamp: str | None = None
        self._next_check = 0.0
        self._seen = 0  # a shared state's change counter as this process last read it
        if role == "reader":
            self.db = self._open_snapshot()
        elif role == "shared":
            from storage.shared_state import SharedState  # psycopg: only where a shared state is used

            self.db = Database(self.data_dir / "store.duckdb", state=SharedState(state or ""))
            self._seen = self.db.state.changes()
        else:
            self.db = Database(self.data_dir / "store.duckdb")
        self.lock = threading.Lock()
        self._table_locks: dict[str, threading.Lock] = {}
        self.building: set[str] = set()  # tables whose build or append runs in this process
        self.cubes: dict[str, Any] = {}  # table → its loaded synopsis
        self.specs: dict[str, TableSpec] = {}
        self.plans: collections.OrderedDict[str, QueryPlan] = collections.OrderedDict()
        # Bumped whenever the set of in-memory synopses changes: lets a caller that memoizes answers
        # (the HTTP fast path) check in one comparison that a remembered answer is still current.
        self.generation = 0

    def close(self) -> None:
        self.db.close()

    # -- serving workers ---------------------------------------------------------------------
    def publish(self) -> None:
        """A writer's snapshot of its catalog, ledger and cube index for the readers; with a shared
        state, the change announced to every server (`storage.shared_state.SharedState.bump`)."""
        if self.role == "writer":
            snapshot.publish(self.db, self.data_dir)
        elif self.role == "shared":
            self.db.state.bump()

    @contextlib.contextmanager
    def exclusive(self, name: str) -> Iterator[None]:
        """Hold ``name`` against every other build, append and retirement: this process's table lock
        and, with a shared state, the table's lock across all servers (waiting while one runs elsewhere)."""
        with self.table_lock(name):
            if self.role != "shared":
                yield
                return
            with self.db.state.build_lock(name):
                self.refresh(force=True)  # what the last holder stored, before deciding anything
                yield

    def busy_elsewhere(self, name: str) -> bool:
        """Whether another server of a shared state is building or appending ``name`` now."""
        return self.role == "shared" and name not in self.building and self.db.state.build_held(name)

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
        if self.role not in ("reader", "shared"):
            return
        now = time.monotonic()
        if not force and now < self._next_check:
            return
        self._next_check = now + SNAPSHOT_CHECK_SECONDS
        if self.role == "shared":
            self._follow_shared_state()
            return
        stamp = snapshot.stamp(self.data_dir)
        if stamp is None or stamp == self._stamp:
            return
        try:
            fresh = Database(snapshot.open_path(self.data_dir, stamp), read_only=True)
        except StorageError:  # replaced again while opening: the next check takes the newest
            return
        with self.lock:
            self.db, self._stamp = fresh, stamp
            self.cubes.clear()
            self.specs.clear()
            self.plans.clear()
            self.generation += 1

    def _follow_shared_state(self) -> None:
        """A server of a shared state drops what it cached when any server announced a change: a
        cube built, a period appended or a table retired elsewhere is answered here within
        `SNAPSHOT_CHECK_SECONDS`. If PostgreSQL is unreachable, answers go on from what is cached."""
        try:
            seen = self.db.state.changes()
        except Exception as exc:  # the type only: a driver's message may name the host
            log.warning("shared state unreachable (%s); serving what is cached", type(exc).__name__)
            return
        if seen == self._seen:
            return
        with self.lock:
            self._seen = seen
            self.cubes.clear()
            self.specs.clear()
            self.plans.clear()
            self.generation += 1

    def current_generation(self) -> int:
        """`generation` after a reader has looked for the writer's newest snapshot: a caller that
        memoizes answers by it (the HTTP fast path) never serves one across an append, rebuild or
        retirement for longer than `SNAPSHOT_CHECK_SECONDS`."""
        self.refresh()
        return self.generation

    def writable(self, what: str) -> None:
        """Readers change nothing themselves: their admin requests go to the writer (`app.workers`)."""
        if self.role == "reader":
            self.refuse(what)

    @staticmethod
    def refuse(what: str) -> NoReturn:
        raise Unavailable(
            f"this serving worker cannot {what}: send it to the writer (the admin API is "
            "forwarded there; with the library, open the data dir itself)",
            retry_after=1,
        )

    def table_lock(self, name: str) -> threading.Lock:
        with self.lock:
            return self._table_locks.setdefault(name, threading.Lock())

    # -- the catalog, read once per table ------------------------------------------------------
    def table_names(self) -> list[str]:
        self.refresh()
        return catalog.names(self.db)

    def record(self, name: str) -> catalog.TableRecord:
        """A table's catalog record (its source table too); NotFound for an unknown name."""
        self.refresh()
        record = catalog.get(self.db, name)
        if record is None:
            raise NotFound(f"unknown table {name!r}")
        return record

    def spec_or_none(self, name: str, case_insensitive: bool = False) -> TableSpec | None:
        """Declared metadata, cached: it never changes after registration. ``case_insensitive``:
        an unquoted SQL name, which matches a registered name in any case."""
        self.refresh()
        spec = self.specs.get(name)  # an exact name first, in memory or in the catalog
        if spec is None and (record := catalog.get(self.db, name)) is not None:
            spec = self.specs.setdefault(name, record.spec)
        if spec is None and case_insensitive:
            match = next((n for n in self.table_names() if n.lower() == name.lower()), None)
            spec = None if match is None else self.spec_or_none(match)
        return spec

    def spec(self, name: str) -> TableSpec:
        spec = self.spec_or_none(name)
        if spec is None:
            raise NotFound(f"unknown table {name!r}")
        return spec

    def spec_in_memory(self, name: str, case_insensitive: bool = False) -> TableSpec | None:
        """A spec already cached under exactly this name, else None (NotFound upstream): any other
        case — a name in another case, a table not yet read — takes the ordinary path, which looks
        in the catalog the way `spec_or_none` does."""
        return self.specs.get(name)

    def forget(self, name: str) -> None:
        """A table retired: its synopsis and spec leave memory, and with them every answer of it."""
        with self.lock:
            self.cubes.pop(name, None)
            self.specs.pop(name, None)
            self.generation += 1  # the fast path's remembered answers of this table are void

    def forget_plans(self) -> None:
        with self.lock:
            self.plans.clear()
