"""`pg_catalog` and `information_schema` for the wire listener, from declared metadata only.

BI drivers learn what a database holds by querying PostgreSQL's catalogs with SQL of their own:
SQLAlchemy's inspector, pgjdbc's `DatabaseMetaData`, psqlODBC's `SQLTables`/`SQLColumns`,
Npgsql's type loading, psql's `\\d`. Those statements use correlated subqueries, `ANY(ARRAY[…])`,
`::regclass` casts, `unnest`, window functions — more than a pattern table or pg-mimic's small
executor can answer. So they run on a real SQL engine: a **separate, empty, sealed, in-memory
DuckDB** that holds nothing but

* PostgreSQL 15's own catalog structure (`snapshot.json`, read off a real server by
  `snapshot.py`: every catalog table's columns, the built-in types, namespaces, access methods);
* one row per registered table and per declared column (names and types — public metadata).

It never sees a row of data: it is not the storage DuckDB, holds no source, and is sealed before
the first client statement (no file system, no extensions, configuration locked, one thread, a
memory cap, a time limit); only read-only queries over catalog relations reach it.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

SNAPSHOT = Path(__file__).with_name("snapshot.json")
SCHEMAS = {"pg_catalog": "pgc", "information_schema": "pgis"}  # PostgreSQL schema -> DuckDB schema
FIRST_OID = 16384  # PostgreSQL numbers user objects from here
OWNER = "prima"
TIME_LIMIT_S = 2.0
_OPERATOR = re.compile(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([^)\s]+)\s*\)", re.IGNORECASE)
_COLLATE = re.compile(r"\s+COLLATE\s+(pg_catalog\s*\.\s*)?(\"default\"|default|\"C\"|\"POSIX\")", re.IGNORECASE)
_KEYWORD_ALIAS = re.compile(r"\b(as)\s+(select|insert|update|delete|table|schema|user|from|where|order|group)\b(?!\s*\()",
                            re.IGNORECASE)
_TABLE_FUNCTIONS = {"unnest", "generate_series", "generate_subscripts"}
# PostgreSQL type -> DuckDB column type; anything else is text (names, "char", pg_node_tree, …).
_DUCK_TYPES = {
    "boolean": "BOOLEAN", "smallint": "SMALLINT", "integer": "INTEGER", "bigint": "BIGINT", "real": "REAL",
    "double precision": "DOUBLE", "numeric": "DOUBLE", "timestamp with time zone": "TIMESTAMPTZ",
    "information_schema.time_stamp": "TIMESTAMPTZ", "interval": "INTERVAL", "bytea": "BLOB",
    "information_schema.cardinal_number": "INTEGER",
    # oids and the reg* types are stored as the oid they are in PostgreSQL; casts to text name them
    "oid": "BIGINT", "xid": "BIGINT", "regproc": "BIGINT", "regtype": "BIGINT",
    "int2vector": "SMALLINT[]", "smallint[]": "SMALLINT[]", "oidvector": "BIGINT[]", "oid[]": "BIGINT[]",
    "regtype[]": "BIGINT[]", "real[]": "REAL[]", "double precision[]": "DOUBLE[]", "boolean[]": "BOOLEAN[]",
}
# PostgreSQL's display names (format_type) of the built-in types with SQL-standard spellings.
_FORMAT_NAMES = {
    "bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
    "float8": "double precision", "varchar": "character varying", "bpchar": "character", "char": '"char"',
    "timestamp": "timestamp without time zone", "timestamptz": "timestamp with time zone",
    "time": "time without time zone", "timetz": "time with time zone", "varbit": "bit varying",
}


class CatalogError(Exception):
    """A catalog statement this engine does not run (SQLSTATE in `code`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Column:
    name: str
    pg_type: str  # "integer" | "text" | "date" | "double precision"
    comment: str | None = None


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    comment: str | None = None


@dataclass
class Result:
    names: list[str]
    types: list[str]  # DuckDB type names, mapped to PostgreSQL oids by the wire layer
    rows: list[tuple]


@lru_cache(maxsize=1)
def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


def server_version() -> str:
    """The snapshot server's `major.minor` ("15.18")."""
    return snapshot()["server_version"].split()[0]


def is_catalog_table(table: exp.Table) -> bool:
    """A reference to a PostgreSQL catalog relation (qualified, or a bare `pg_…` name)."""
    db = table.db.lower()
    if db in SCHEMAS:
        return True
    return not db and f"pg_catalog.{table.name.lower()}" in snapshot()["columns"]


class Catalog:
    """The sealed catalog engine for one set of registered tables (rebuilt when they change)."""

    def __init__(self, tables: Iterable[Table], database: str = "prima", version: str = "") -> None:
        self.tables = tuple(tables)
        self._lock = threading.Lock()
        self._con = duckdb.connect(":memory:", config={"threads": 1, "memory_limit": "256MB",
                                                        "autoinstall_known_extensions": False,
                                                        "autoload_known_extensions": False})
        _create(self._con, self.tables, database, version)
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def run(self, sql: str, params: list[str | None] | None = None) -> Result:
        """Run one read-only catalog statement; `params` are the extended protocol's text values."""
        return self._execute(translate(sql), params)

    def describe(self, sql: str) -> Result:
        """The statement's columns before its parameters are known: it runs with NULLs under
        `LIMIT 0`, so nothing is evaluated that a NULL could break (a json key, say)."""
        return self._execute(f"SELECT * FROM ({translate(sql)}) AS described LIMIT 0", None)

    def _execute(self, duck_sql: str, params: list[str | None] | None) -> Result:
        n = _parameter_count(duck_sql)
        values = list(params or [])[:n] + [None] * max(0, n - len(params or []))
        with self._lock:
            cur = self._con.cursor()
            timer = threading.Timer(TIME_LIMIT_S, cur.interrupt)
            timer.start()
            try:
                cur.execute(duck_sql, values if n else None)
                names = [d[0] for d in cur.description]
                types = [str(d[1]) for d in cur.description]
                rows = cur.fetchall()
            except duckdb.InterruptException:
                raise CatalogError("57014", f"catalog query cancelled after {TIME_LIMIT_S:g} s") from None
            except duckdb.Error as exc:
                raise CatalogError("42601", f"catalog query not supported here: {str(exc).splitlines()[0]}") from None
            finally:
                timer.cancel()
                cur.close()
        return Result(names, types, rows)


# --- building ---------------------------------------------------------------------------------


def _duck_type(pg_type: str) -> str:
    if pg_type in _DUCK_TYPES:
        return _DUCK_TYPES[pg_type]
    return "VARCHAR[]" if pg_type.endswith("[]") else "VARCHAR"


def _create(con: duckdb.DuckDBPyConnection, tables: tuple[Table, ...], database: str, version: str) -> None:
    snap = snapshot()
    for schema in SCHEMAS.values():
        con.execute(f"CREATE SCHEMA {schema}")
    columns: dict[str, list[tuple[str, str]]] = {}
    for qualified, cols in snap["columns"].items():
        schema, name = qualified.split(".", 1)
        columns[qualified] = [(c, _duck_type(t)) for c, t in cols]
        body = ", ".join(f'"{c}" {t}' for c, t in columns[qualified])
        con.execute(f'CREATE TABLE {SCHEMAS[schema]}."{name}" ({body})')
    rows = dict(snap["rows"])
    rows |= _user_rows(tables, snap, database)
    rows["pg_database"] = [{"oid": 5, "datname": database, "datdba": 10, "encoding": 6, "datcollate": "C",
                            "datctype": "C", "datallowconn": True, "datconnlimit": -1}]
    rows["pg_roles"] = [{"oid": 10, "rolname": OWNER, "rolsuper": False, "rolinherit": True, "rolcanlogin": True}]
    rows["pg_user"] = [{"usesysid": 10, "usename": OWNER, "usesuper": False}]
    rows["pg_settings"] = [{"name": n, "setting": v} for n, v in (
        ("server_version", version), ("server_encoding", "UTF8"), ("client_encoding", "UTF8"),
        ("standard_conforming_strings", "on"), ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"),
        ("max_identifier_length", "63"), ("integer_datetimes", "on"), ("max_index_keys", "32"))]
    for table, table_rows in rows.items():
        qualified = table if "." in table else f"pg_catalog.{table}"
        _insert(con, qualified, columns[qualified], table_rows)
    _functions(con, snap, database, version)


def _user_rows(tables: tuple[Table, ...], snap: dict, database: str) -> dict[str, list[dict]]:
    """pg_class / pg_attribute / pg_description / information_schema rows of the registered tables,
    each a copy of PostgreSQL's own row for a scratch table of that shape (`templates`)."""
    t = snap["templates"]
    by_type = {a["_type"]: a for a in t["pg_attribute"]}
    col_by_type = {c["data_type"]: c for c in t["information_schema.columns"]}
    out: dict[str, list[dict]] = {"pg_class": [], "pg_attribute": [], "pg_description": [], "pg_tables": [],
                                  "information_schema.tables": [], "information_schema.columns": []}
    for i, table in enumerate(tables):
        oid = FIRST_OID + i
        out["pg_class"].append(t["pg_class"] | {"oid": oid, "relname": table.name, "relfilenode": oid,
                                                "relnatts": len(table.columns), "reltoastrelid": 0, "reltype": 0,
                                                "relhasindex": False, "reltuples": -1.0, "relpages": 0,
                                                # read-only for everyone: SELECT (r) is the only grant
                                                "relacl": [f"{OWNER}=r/{OWNER}", f"=r/{OWNER}"]})
        out["pg_tables"].append({"schemaname": "public", "tablename": table.name, "tableowner": OWNER,
                                 "hasindexes": False, "hasrules": False, "hastriggers": False, "rowsecurity": False})
        out["information_schema.tables"].append(t["information_schema.tables"] | {
            "table_catalog": database, "table_name": table.name})
        if table.comment:
            out["pg_description"].append({"objoid": oid, "classoid": 1259, "objsubid": 0, "description": table.comment})
        for num, col in enumerate(table.columns, start=1):
            out["pg_attribute"].append({k: v for k, v in by_type[col.pg_type].items() if k != "_type"}
                                       | {"attrelid": oid, "attname": col.name, "attnum": num})
            out["information_schema.columns"].append(col_by_type[col.pg_type] | {
                "table_catalog": database, "table_name": table.name, "column_name": col.name,
                "ordinal_position": num, "udt_catalog": database, "dtd_identifier": str(num)})
            if col.comment:
                out["pg_description"].append({"objoid": oid, "classoid": 1259, "objsubid": num,
                                              "description": col.comment})
    return out


def _insert(con: duckdb.DuckDBPyConnection, qualified: str, columns: list[tuple[str, str]], rows: list[dict]) -> None:
    if not rows:
        return
    schema, name = qualified.split(".", 1)
    names = [c for c, _ in columns]
    holes = ", ".join("?" for _ in names)
    con.executemany(f'INSERT INTO {SCHEMAS[schema]}."{name}" VALUES ({holes})',
                    [[_cell(row.get(c), t) for c, t in columns] for row in rows])


def _cell(value: Any, duck_type: str) -> Any:
    if value is None:
        return None
    if duck_type.endswith("[]") and isinstance(value, str):  # PostgreSQL vector text: "1 2" / "{a,b}"
        parts = value.strip("{}").replace(",", " ").split()
        return [int(p) for p in parts] if duck_type != "VARCHAR[]" else parts
    if duck_type in ("BIGINT", "INTEGER", "SMALLINT") and isinstance(value, str):
        return int(value) if value.lstrip("-").isdigit() else None
    return value


def _functions(con: duckdb.DuckDBPyConnection, snap: dict, database: str, version: str) -> None:
    """PostgreSQL's catalog functions as macros over the catalog (they shadow DuckDB's own
    pg_catalog emulation, whose oids are DuckDB's and not PostgreSQL's)."""
    names = []
    for typ in snap["rows"]["pg_type"]:
        base = typ["typname"]
        if base.startswith("_") and typ["typelem"]:
            elem = next((e["typname"] for e in snap["rows"]["pg_type"] if e["oid"] == typ["typelem"]), base[1:])
            names.append((typ["oid"], _FORMAT_NAMES.get(elem, elem) + "[]"))
        else:
            names.append((typ["oid"], _FORMAT_NAMES.get(base, base)))
    con.execute("CREATE TABLE pgc._relation_oids (relname VARCHAR, oid BIGINT)")
    con.executemany("INSERT INTO pgc._relation_oids VALUES (?, ?)", list(snap["relation_oids"].items()))
    con.execute("CREATE TABLE pgc._format_type (oid BIGINT, name VARCHAR)")
    con.executemany("INSERT INTO pgc._format_type VALUES (?, ?)", names)
    text = lambda s: "'" + s.replace("'", "''") + "'"  # noqa: E731
    macros = {
        "format_type(t, m)": "(SELECT name FROM pgc._format_type f WHERE f.oid = t)",
        # x::regclass — an oid (or its text) stays, a name is looked up ('people', 'public.people', '"people"')
        "_regclass(n)": "coalesce(TRY_CAST(n AS BIGINT), (SELECT min(oid) FROM (SELECT oid, relname FROM pgc.pg_class"
                        " UNION ALL SELECT oid, relname FROM pgc._relation_oids) c WHERE c.relname = "
                        "regexp_replace(replace(CAST(n AS VARCHAR), '\"', ''), '^(public|pg_catalog)\\.', '')))",
        "_relname(o)": "(SELECT relname FROM pgc.pg_class c WHERE c.oid = o)",
        "_regtype(n)": "coalesce(TRY_CAST(n AS BIGINT), (SELECT coalesce((SELECT min(oid) FROM pgc.pg_type t WHERE t.typname = lower(CAST(n AS VARCHAR))),"
                       " (SELECT min(oid) FROM pgc._format_type f WHERE f.name = lower(CAST(n AS VARCHAR))))))",
        "_regproc(n)": "coalesce(TRY_CAST(n AS BIGINT), (SELECT min(oid) FROM pgc.pg_proc p WHERE p.proname = "
                       "regexp_replace(CAST(n AS VARCHAR), '^pg_catalog\\.', '')))",
        "_quote_ident(s)": "CASE WHEN regexp_full_match(CAST(s AS VARCHAR), '[a-z_][a-z0-9_$]*') THEN CAST(s AS VARCHAR)"
                           " ELSE '\"' || replace(CAST(s AS VARCHAR), '\"', '\"\"') || '\"' END",
        "quote_ident(s)": "_quote_ident(s)",
        "_quote_literal(s)": "chr(39) || replace(CAST(s AS VARCHAR), chr(39), chr(39) || chr(39)) || chr(39)",
        "has_any_column_privilege(a, b, c)": "lower(c) LIKE '%select%'",
        # information_schema._pg_expandarray(a): the set of (element x, position n)
        "_pg_expandarray(a)": "unnest(list_transform(generate_series(1, len(a)), lambda i: {'x': a[i], 'n': i}))",
        "_regnamespace(n)": "coalesce(TRY_CAST(n AS BIGINT), (SELECT oid FROM pgc.pg_namespace s"
                            " WHERE s.nspname = CAST(n AS VARCHAR)))",
        "to_regtype(n)": "_regtype(n)",
        "to_regclass(n)": "_regclass(n)",
        "pg_table_is_visible(o)": "true", "pg_type_is_visible(o)": "true", "pg_function_is_visible(o)": "true",
        "pg_collation_is_visible(o)": "true",
        "pg_get_userbyid(o)": text(OWNER),
        "pg_get_expr(e, r)": "CAST(NULL AS VARCHAR)", "pg_get_constraintdef(o)": "CAST(NULL AS VARCHAR)",
        "pg_get_indexdef(o)": "CAST(NULL AS VARCHAR)", "pg_get_viewdef(o)": "CAST(NULL AS VARCHAR)",
        "pg_get_serial_sequence(t, c)": "CAST(NULL AS VARCHAR)", "pg_get_partkeydef(o)": "CAST(NULL AS VARCHAR)",
        "obj_description(o, c)": "(SELECT description FROM pgc.pg_description d WHERE d.objoid = o AND d.objsubid = 0)",
        "col_description(o, n)": "(SELECT description FROM pgc.pg_description d WHERE d.objoid = o AND d.objsubid = n)",
        "shobj_description(o, c)": "CAST(NULL AS VARCHAR)",
        # read-only: SELECT on tables, USAGE on schemas, CONNECT on the database; nothing else
        "has_database_privilege(a, b)": "true", "pg_has_role(a, b)": "false",
        "pg_encoding_to_char(e)": "'UTF8'",
        "current_database()": text(database), "current_schema()": "'public'",
        "current_schemas(b)": "['pg_catalog', 'public']",
        "version()": text(f"PostgreSQL {version}"),
        "array_lower(a, d)": "CASE WHEN len(a) > 0 THEN 1 END",
        "array_upper(a, d)": "CASE WHEN len(a) > 0 THEN len(a) END",
        "pg_get_statisticsobjdef_columns(o)": "CAST(NULL AS VARCHAR)", "pg_relation_is_publishable(o)": "false",
        "pg_get_triggerdef(o)": "CAST(NULL AS VARCHAR)", "pg_get_ruledef(o)": "CAST(NULL AS VARCHAR)",
        "pg_tablespace_location(o)": "''", "pg_get_function_arguments(o)": "''",
        "pg_get_function_result(o)": "''", "pg_get_partition_constraintdef(o)": "CAST(NULL AS VARCHAR)",
        # nobody's catalog query sleeps on purpose; a sleeping one would hold the engine (2 s cap) from others
        "pg_sleep(s)": "CAST(NULL AS VARCHAR)", "pg_sleep_for(s)": "CAST(NULL AS VARCHAR)",
        "pg_sleep_until(s)": "CAST(NULL AS VARCHAR)",
        "pg_relation_size(o)": "0", "pg_total_relation_size(o)": "0", "pg_backend_pid()": "1",
    }
    for head, body in macros.items():
        con.execute(f"CREATE MACRO {head} AS {body}")
    # the three-argument forms some drivers use
    con.execute("CREATE OR REPLACE MACRO pg_get_expr(e, r) AS CAST(NULL AS VARCHAR), (e, r, p) AS CAST(NULL AS VARCHAR)")
    con.execute("CREATE OR REPLACE MACRO pg_get_constraintdef(o) AS CAST(NULL AS VARCHAR), "
                "(o, p) AS CAST(NULL AS VARCHAR)")
    con.execute("CREATE OR REPLACE MACRO pg_get_indexdef(o) AS CAST(NULL AS VARCHAR), "
                "(o, c, p) AS CAST(NULL AS VARCHAR)")
    con.execute("CREATE OR REPLACE MACRO obj_description(o) AS (SELECT description FROM pgc.pg_description d "
                "WHERE d.objoid = o AND d.objsubid = 0), (o, c) AS (SELECT description FROM pgc.pg_description d "
                "WHERE d.objoid = o AND d.objsubid = 0)")
    for name, granted in (("has_table_privilege", "select"), ("has_schema_privilege", "usage"),
                          ("has_column_privilege", "select")):  # the privilege is always the last argument
        con.execute(f"CREATE MACRO {name}(a, b) AS lower(b) LIKE '%{granted}%', "
                    f"(a, b, c) AS lower(c) LIKE '%{granted}%', (a, b, c, d) AS lower(d) LIKE '%{granted}%'")


# --- translating PostgreSQL's catalog SQL to the catalog engine ------------------------------------


def preprocess(sql: str) -> str:
    """Spellings sqlglot does not parse: psql's `OPERATOR(pg_catalog.~)` and `COLLATE pg_catalog.default`,
    Metabase's reserved words as aliases (`… AS select`; PostgreSQL folds them to lower case)."""
    sql = _COLLATE.sub("", _OPERATOR.sub(r" \1 ", sql))
    return _KEYWORD_ALIAS.sub(lambda m: f'{m[1]} "{m[2].lower()}"', sql)


def translate(sql: str) -> str:
    """PostgreSQL catalog SQL -> the catalog engine's SQL (DuckDB), refusing anything but a
    read-only query over catalog relations."""
    sql = preprocess(sql)
    try:
        statements = [s for s in sqlglot.parse(sql, read="postgres") if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise CatalogError("42601", f"catalog query not understood: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise CatalogError("42601", "only one read-only SELECT over pg_catalog / information_schema is answered here")
    tree = normalize_identifiers(statements[0], dialect="postgres")  # unquoted names fold to lower case
    _check(tree)
    return tree.transform(_rewrite).sql(dialect="duckdb")


def _check(tree: exp.Expression) -> None:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, (exp.DDL, exp.DML, exp.Command, exp.Pragma, exp.Set, exp.Copy)):
            raise CatalogError("42601", "only read-only SELECTs are answered on the catalog")
        if isinstance(node, exp.Table):
            fn = node.this
            if isinstance(fn, exp.Func):  # a table function: only the set-returning ones PostgreSQL has
                name = (fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name()).lower()
                if name not in _TABLE_FUNCTIONS and not isinstance(fn, (exp.Unnest, exp.Explode, exp.GenerateSeries)):
                    raise CatalogError("42883", f"function {name} is not available on the catalog")
            elif node.name and not is_catalog_table(node) and node.name.lower() not in ctes:
                raise CatalogError("42P01", f'relation "{node.name}" is not a catalog relation')
        if isinstance(node, exp.Anonymous) and node.name.lower() in ("query", "query_table", "read_csv", "read_text",
                                                                       "read_blob", "read_parquet", "read_json"):
            raise CatalogError("42883", f"function {node.name} does not exist")


_REG_LOOKUP = {"REGCLASS": "_regclass", "REGTYPE": "_regtype", "REGPROC": "_regproc", "REGPROCEDURE": "_regproc",
               "REGNAMESPACE": "_regnamespace"}
_REG_NAME = {"REGCLASS": "_relname", "REGTYPE": "format_type"}


def _reg_kind(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Cast) and isinstance(node.to, exp.ObjectIdentifier):
        return node.to.name.upper()
    return None


def _rewrite(node: exp.Expression) -> exp.Expression:
    """One node's rewrite; a replacement is rewritten in turn (transform does not descend into it)."""
    new = _rewrite_node(node)
    return node if new is node else new.transform(_rewrite)


def _rewrite_node(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        node.set("db", None)  # pg_catalog.generate_series(1, 32) AS pos(n)
        return node
    if isinstance(node, exp.Table) and is_catalog_table(node):
        node.set("db", exp.to_identifier(SCHEMAS.get(node.db.lower(), "pgc")))
        node.set("catalog", None)
        return node
    if isinstance(node, exp.Column) and node.args.get("db") is not None and node.db.lower() in SCHEMAS:
        node.set("db", exp.to_identifier(SCHEMAS[node.db.lower()]))
        return node
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and node.this.name.lower() in SCHEMAS:
        return node.expression  # pg_catalog.format_type(…) -> format_type(…)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "json_build_object":
        return exp.Anonymous(this="json_object", expressions=node.expressions)
    if isinstance(node, exp.Cast):
        return _rewrite_cast(node)
    if isinstance(node, exp.Format) and isinstance(node.this, exp.Literal):
        return _format(node)
    return node


def _format(node: exp.Format) -> exp.Expression:
    """PostgreSQL's format(): %s as is, %I as a quoted identifier, %L as a quoted literal, %% a percent."""
    pieces = re.split(r"(%[sIL%])", node.this.name)
    args, out = list(node.expressions), []
    for piece in pieces:
        if piece == "%%":
            out.append(exp.Literal.string("%"))
        elif piece in ("%s", "%I", "%L") and args:
            arg = exp.cast(args.pop(0), exp.DataType.build("VARCHAR"))
            if piece == "%I":
                arg = exp.Anonymous(this="_quote_ident", expressions=[arg])
            elif piece == "%L":
                arg = exp.Anonymous(this="_quote_literal", expressions=[arg])
            out.append(arg)
        elif piece:
            out.append(exp.Literal.string(piece))
    return exp.Concat(expressions=out or [exp.Literal.string("")])


def _rewrite_cast(node: exp.Cast) -> exp.Expression:
    inner = node.this
    kind = _reg_kind(node)
    if kind is None:
        if node.to.is_type(exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR) and _reg_kind(inner) in _REG_NAME:
            name_of = _REG_NAME[_reg_kind(inner)]  # x::regclass::text -> the name x's oid stands for
            args = [_oid_expr(inner.this, _reg_kind(inner))] + ([exp.null()] if name_of == "format_type" else [])
            return exp.Anonymous(this=name_of, expressions=args)
        if node.to.is_type(exp.DataType.Type.NAME) or node.to.this == exp.DataType.Type.USERDEFINED:
            return exp.cast(inner, exp.DataType.build("VARCHAR"))  # name, "char"
        return node
    if kind in ("OID", "XID", "CID"):
        return exp.cast(inner, exp.DataType.build("BIGINT"))
    return _oid_expr(inner, kind)


def _oid_expr(value: exp.Expression, kind: str) -> exp.Expression:
    """`value::regclass` (or another reg type) as an oid: a name is looked up, an oid stays
    (the lookup macros take either)."""
    lookup = _REG_LOOKUP.get(kind)
    if lookup:
        return exp.Anonymous(this=lookup, expressions=[value])
    return exp.cast(value, exp.DataType.build("BIGINT"))


def _parameter_count(sql: str) -> int:
    found = [int(m) for m in re.findall(r"\$(\d+)", sql)]
    return max(found, default=0)


def render(value: Any) -> Any:
    """A catalog value as the wire layer sends it: arrays in PostgreSQL's `{a,b}` text form."""
    if isinstance(value, list):
        return "{" + ",".join("NULL" if v is None else str(v) for v in value) + "}"
    return value
