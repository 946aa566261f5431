"""Persisted cubes: noisy prefix arrays as memory-mappable ``.npy`` files plus an index row.

Layout: ``<data>/cubes/<table>/<build_id>/<k>.npy`` with the index row in ``prima.cubes``
holding the metadata (strategy, ε per aggregate, error model, which file is which aggregate).
Write order makes a crash harmless: files go to a temporary directory, are fsynced and renamed
into place, and only then is the index row committed. A directory without an index row is an
orphan and is removed at start-up; an index row always points at complete files.
Only noisy (already charged) arrays ever reach this module.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage.database import Database
from storage.object_store import ObjectStore


@dataclass(frozen=True)
class StoredCube:
    build_id: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]  # read-only memory maps


def fsync(path: Path) -> None:
    """Flush a file's or a directory's entries to disk (after a write or a rename into it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(
    db: Database,
    root: Path,
    table: str,
    build_id: str,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
    on_file_written: Callable[[], None] | None = None,
    on_committed: Callable[[], None] | None = None,
    remote: ObjectStore | None = None,
) -> None:
    """Write the arrays durably, then commit the index row (replacing an older cube). ``on_committed``
    runs between the commit and the older cube's removal (a writer publishes its snapshot there, so
    no reader's newest snapshot names a removed cube). ``remote``: the object store the cube is
    uploaded to before its row commits (`storage.object_store`)."""
    table_dir = root / table
    tmp = table_dir / f".tmp-{build_id}"
    final = table_dir / build_id
    tmp.mkdir(parents=True, exist_ok=False)
    files = {}
    for i, (key, array) in enumerate(arrays.items()):
        name = f"{i}.npy"
        np.save(tmp / name, np.ascontiguousarray(array))
        fsync(tmp / name)
        files[key] = name
        if on_file_written is not None:
            on_file_written()
    os.rename(tmp, final)
    fsync(table_dir)
    if remote is not None:
        remote.upload(final, table, build_id)
    full_meta = {**meta, "files": files}
    with db.state.transaction() as con:
        old = con.execute("SELECT build_id FROM prima.cubes WHERE table_name = ?", [table]).fetchone()
        con.execute("DELETE FROM prima.cubes WHERE table_name = ?", [table])
        con.execute(
            "INSERT INTO prima.cubes (table_name, build_id, meta) VALUES (?, ?, ?)",
            [table, build_id, json.dumps(full_meta)],
        )
    if on_committed is not None:
        on_committed()
    if old and old[0] != build_id:
        shutil.rmtree(table_dir / old[0], ignore_errors=True)
        if remote is not None:
            remote.remove(table, old[0])


def _opened(root: Path, table: str, build_id: str, meta_json: str, remote: ObjectStore | None) -> StoredCube:
    """One stored cube memory-mapped from ``root`` (fetched there first from ``remote`` if missing)."""
    meta = json.loads(meta_json)
    folder = root / table / build_id
    if remote is not None and not folder.exists():
        remote.download(table, build_id, folder)
    return StoredCube(build_id, meta, {k: _mapped(folder / n) for k, n in meta["files"].items()})


def _mapped(path: Path) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, once more if it raises SystemError. Under load, with eight
    first queries racing over two workers, numpy's parse of a complete ``.npy`` header
    (``ast.literal_eval`` → ``compile``) raised SystemError in ~1 of 15 runs of
    `tests/test_workers.py` on a busy 2-core machine, a 500 to the client. Files are complete by
    construction (written to a temporary directory, fsynced, renamed, and only then indexed), so the
    error is the interpreter's state at that call, not the file; a second parse has read it."""
    try:
        return np.load(path, mmap_mode="r")
    except SystemError:
        return np.load(path, mmap_mode="r")


def load(db: Database, root: Path, table: str, remote: ObjectStore | None = None) -> StoredCube | None:
    rows = db.state.run("SELECT build_id, meta FROM prima.cubes WHERE table_name = ?", [table])
    return _opened(root, table, *rows[0], remote) if rows else None


def load_prefixed(db: Database, root: Path, prefix: str, remote: ObjectStore | None = None) -> dict[str, StoredCube]:
    """Every stored cube whose name starts with ``prefix`` (a growing table's releases), in one query."""
    rows = db.state.run("SELECT table_name, build_id, meta FROM prima.cubes WHERE starts_with(table_name, ?)", [prefix])
    return {table: _opened(root, table, build_id, meta, remote) for table, build_id, meta in rows}


def stored_build(db: Database, table: str) -> str | None:
    """The build id of the stored cube ``table`` names, None without one."""
    rows = db.state.run("SELECT build_id FROM prima.cubes WHERE table_name = ?", [table])
    return rows[0][0] if rows else None


def remove_orphans(db: Database, root: Path, table: str | None = None, remote: ObjectStore | None = None) -> list[Path]:
    """Delete cube directories that no index row points at (left by a crash mid-write): every
    table's, or only ``table``'s (a shared cube dir, whose other tables may be mid-write elsewhere;
    with an object store, its objects of that table too)."""
    live = {(t, b) for t, b in db.state.run("SELECT table_name, build_id FROM prima.cubes")}
    if remote is not None and table is not None:
        for build_id in remote.builds(table) - {b for t, b in live if t == table}:
            remote.remove(table, build_id)
    removed: list[Path] = []
    if not root.exists():
        return removed
    for table_dir in root.iterdir() if table is None else [root / table]:
        if not table_dir.is_dir():
            continue
        for build_dir in table_dir.iterdir():
            if (table_dir.name, build_dir.name) not in live:
                shutil.rmtree(build_dir, ignore_errors=True)
                removed.append(build_dir)
    return removed
