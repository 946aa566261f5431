"""Regenerate `snapshot.json` from a real PostgreSQL server (a developer tool, not run by Prima).

    python -m app.wire.pg_catalog.regenerate postgresql://user@127.0.0.1:5432/postgres

The snapshot holds what the wire listener's catalog needs to look like PostgreSQL to a driver,
all of it the server's own public structure — nothing of any user's data:

* the columns and types of every table and view in `pg_catalog` and `information_schema`;
* the built-in rows drivers read: namespaces, non-composite types, ranges, the functions those types
  name (input/output/receive/send), access methods, collations;
* template rows for a user table, its columns (one per type Prima declares) and their
  `information_schema` views, read off a scratch table the script creates and drops.

Prima fills the templates from the declared schema of its registered tables (app/wire/pg_catalog).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg

SNAPSHOT = Path(__file__).with_name("snapshot.json")
SCHEMAS = ("pg_catalog", "information_schema")
# The PostgreSQL types Prima declares: dimensions int4/text/date, measures float8.
COLUMN_TYPES = {"integer": "integer", "text": "text", "date": "date", "double precision": "double precision"}
_SCRATCH = "prima_snapshot_scratch"


def _rows(cur: Any, sql: str, *args: Any) -> list[dict]:
    cur.execute(sql, args)
    names = [d.name for d in cur.description]
    return [{n: _plain(v) for n, v in zip(names, row)} for row in cur.fetchall()]


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _columns(cur: Any) -> dict[str, list[list[str]]]:
    rows = _rows(
        cur,
        """
        SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, NULL) AS type
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'v') AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY n.nspname, c.relname, a.attnum""",
        list(SCHEMAS),
    )
    out: dict[str, list[list[str]]] = {}
    for r in rows:
        out.setdefault(f"{r['nspname']}.{r['relname']}", []).append([r["attname"], r["type"]])
    return out


def main(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        version = _rows(cur, "SHOW server_version")[0]["server_version"]
        types = _rows(cur, "SELECT * FROM pg_type WHERE typtype <> 'c' ORDER BY oid")
        for row in types:  # regproc columns as oids (their storage), so joins on pg_proc.oid work
            for col in (
                "typinput",
                "typoutput",
                "typreceive",
                "typsend",
                "typmodin",
                "typmodout",
                "typanalyze",
                "typsubscript",
            ):
                row[col] = None
        procs = _rows(
            cur,
            """SELECT oid, proname, pronamespace, prokind, prorettype FROM pg_proc WHERE oid IN (
            SELECT unnest(ARRAY[typinput, typoutput, typreceive, typsend, typmodin, typmodout, typanalyze,
                                typsubscript]::oid[]) FROM pg_type WHERE typtype <> 'c') ORDER BY oid""",
        )
        regprocs = _rows(
            cur,
            """SELECT oid, typinput::oid AS typinput, typoutput::oid AS typoutput,
            typreceive::oid AS typreceive, typsend::oid AS typsend, typmodin::oid AS typmodin,
            typmodout::oid AS typmodout, typanalyze::oid AS typanalyze, typsubscript::oid AS typsubscript
            FROM pg_type WHERE typtype <> 'c' ORDER BY oid""",
        )
        for row, procs_of in zip(types, regprocs):
            row.update({k: v for k, v in procs_of.items() if k != "oid"})
        cols = ", ".join(f"c{i} {t}" for i, t in enumerate(COLUMN_TYPES.values()))
        cur.execute(f"DROP TABLE IF EXISTS public.{_SCRATCH}; CREATE TABLE public.{_SCRATCH} ({cols})")
        try:
            templates = {
                "pg_class": _rows(cur, "SELECT * FROM pg_class WHERE relname = %s", _SCRATCH)[0],
                "pg_attribute": _rows(
                    cur,
                    f"""SELECT a.*, format_type(a.atttypid, NULL) AS _type FROM pg_attribute a
                    WHERE attrelid = 'public.{_SCRATCH}'::regclass AND attnum > 0 ORDER BY attnum""",
                ),
                "information_schema.tables": _rows(
                    cur, "SELECT * FROM information_schema.tables WHERE table_name = %s", _SCRATCH
                )[0],
                "information_schema.columns": _rows(
                    cur,
                    """SELECT * FROM information_schema.columns
                    WHERE table_name = %s ORDER BY ordinal_position""",
                    _SCRATCH,
                ),
            }
        finally:
            cur.execute(f"DROP TABLE public.{_SCRATCH}")
        snapshot = {
            "server_version": version,
            "columns": _columns(cur),
            "rows": {
                "pg_namespace": _rows(
                    cur,
                    "SELECT * FROM pg_namespace WHERE nspname IN "
                    "('pg_catalog', 'public', 'information_schema') ORDER BY oid",
                ),
                "pg_type": types,
                "pg_proc": procs,
                "pg_am": _rows(cur, "SELECT * FROM pg_am ORDER BY oid"),
                "pg_range": _rows(cur, "SELECT * FROM pg_range ORDER BY rngtypid"),
                "pg_collation": _rows(cur, "SELECT * FROM pg_collation WHERE collname IN ('default', 'C', 'POSIX')"),
                "information_schema.schemata": _rows(
                    cur,
                    """SELECT * FROM information_schema.schemata WHERE
                    schema_name IN ('pg_catalog', 'public', 'information_schema')""",
                ),
            },
            "templates": templates,
            # 'pg_class'::regclass and the like: the catalog relations' own oids
            "relation_oids": {
                r["relname"]: r["oid"]
                for r in _rows(
                    cur,
                    """SELECT c.relname, c.oid::int8 AS oid
                FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'pg_catalog' AND c.relkind IN ('r', 'v') ORDER BY c.relname""",
                )
            },
        }
    SNAPSHOT.write_text(json.dumps(snapshot, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT} ({SNAPSHOT.stat().st_size:,} bytes) from PostgreSQL {version}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "postgresql://127.0.0.1/postgres")
