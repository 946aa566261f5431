"""Translating a driver's PostgreSQL catalog SQL into the catalog engine's SQL (DuckDB), refusing
anything but one read-only query over catalog relations."""

from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

from app.wire.pg_catalog.common import SCHEMAS, CatalogError, is_catalog_table
from engine.sql import constants

_OPERATOR = re.compile(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([^)\s]+)\s*\)", re.IGNORECASE)
_COLLATE = re.compile(r"(?<!\s)\s++COLLATE\s+(pg_catalog\s*\.\s*)?(\"default\"|default|\"C\"|\"POSIX\")", re.IGNORECASE)
# `proargtypes::regtype[]` (pgcli's function completion): sqlglot does not parse a reg-type array
# cast; the oids as a bigint array read the same rows (a client gets oids where PostgreSQL gives names)
_REG_ARRAY = re.compile(r"::\s*(?:reg(?:type|class|proc|namespace)|oid)\s*\[\s*\]", re.IGNORECASE)
_KEYWORD_ALIAS = re.compile(
    r"\b(as)\s+(select|insert|update|delete|table|schema|user|from|where|order|group)\b(?!\s*\()", re.IGNORECASE
)
_TABLE_FUNCTIONS = {"unnest", "generate_series", "generate_subscripts"}
# Functions whose output grows with a numeric argument, and which of their arguments size it (None:
# all). `range(0, 10^8)` ran 34 s in 7 GB, past the engine's time and memory limits, which
# do not interrupt a scalar function. A size argument must be a literal within MAX_SIZE, or a
# catalog column (bounded by the catalog's own content), possibly through an array-length function.
_SIZED = {
    "generate_series": None,
    "range": None,
    "repeat": (1,),
    "lpad": (1,),
    "rpad": (1,),
    "list_resize": (1,),
    "array_resize": (1,),
}
_LENGTHS = {"array_upper", "array_lower", "array_length", "cardinality", "len", "length", "array_ndims"}
_REFUSED_FUNCTIONS = {
    "printf",
    "format",
    "query",
    "query_table",
    "read_csv",
    "read_text",
    "read_blob",
    "read_parquet",
    "read_json",
    "glob",
    "getenv",
}
MAX_SIZE = 10_000


def preprocess(sql: str) -> str:
    """Spellings sqlglot does not parse: psql's `OPERATOR(pg_catalog.~)` and `COLLATE pg_catalog.default`,
    Metabase's reserved words as aliases (`… AS select`; PostgreSQL folds them to lower case)."""
    sql = _REG_ARRAY.sub("::bigint[]", _COLLATE.sub("", _OPERATOR.sub(r" \1 ", sql)))
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
        if isinstance(node, exp.Anonymous) and node.name.lower() in _REFUSED_FUNCTIONS:
            raise CatalogError("42883", f"function {node.name} does not exist")
        if isinstance(node, exp.Func):
            _check_size(node)


def _function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


# sqlglot's own nodes for the growing functions, and the arguments that size them
_SIZED_NODES: tuple[tuple[type, tuple[str, ...]], ...] = (
    (exp.GenerateSeries, ("start", "end", "step")),
    (exp.ExplodingGenerateSeries, ("start", "end", "step")),
    (exp.Pad, ("expression",)),
    (exp.Repeat, ("times",)),
)


def _size_arguments(node: exp.Func) -> list[exp.Expression]:
    for kind, keys in _SIZED_NODES:
        if isinstance(node, kind):
            return [node.args[k] for k in keys if isinstance(node.args.get(k), exp.Expression)]
    if isinstance(node, exp.Anonymous) and node.name.lower() in _SIZED:
        positions = _SIZED[node.name.lower()]
        args = list(node.expressions)
        return args if positions is None else [args[i] for i in positions if i < len(args)]
    return []


def _check_size(node: exp.Func) -> None:
    """A growing function's size arguments: a literal within MAX_SIZE, or a catalog column; and no
    growing function inside another (repeat(repeat('x', 10⁴), 10⁴) is 10⁸ characters)."""
    sized = _size_arguments(node)
    if not sized and not isinstance(node, tuple(k for k, _ in _SIZED_NODES)):
        return
    name = {"exploding_generate_series": "generate_series", "pad": "lpad/rpad"}.get(
        _function_name(node), _function_name(node)
    )
    nested = any(_size_arguments(inner) for inner in node.find_all(exp.Func) if inner is not node)
    if nested or not all(_bounded(arg) for arg in sized):
        raise CatalogError(
            "54000",
            f"{name}() is limited to sizes within {MAX_SIZE:,}, given as literals or catalog "
            "columns, and to one level (not inside another such function) on the catalog",
        )


def _bounded(arg: exp.Expression) -> bool:
    if isinstance(arg, exp.Paren):
        return _bounded(arg.this)
    if isinstance(arg, exp.Neg):
        return _bounded(arg.this)
    if isinstance(arg, exp.Literal):
        try:
            return arg.is_string or abs(float(arg.this)) <= MAX_SIZE
        except ValueError:
            return False
    if isinstance(arg, (exp.Column, exp.Null)):
        return True
    if isinstance(arg, exp.Cast):
        return _bounded(arg.this)
    if isinstance(arg, exp.Dot):  # pg_catalog.array_upper(…)
        return _bounded(arg.expression)
    if isinstance(arg, exp.Func) and _function_name(arg) in _LENGTHS:
        return all(_column_like(a) for a in arg.iter_expressions())
    return False


def _column_like(arg: exp.Expression) -> bool:
    """A catalog column, a literal, or one of them cast (`pr.prattrs::int2[]`)."""
    if isinstance(arg, (exp.Cast, exp.Paren)):
        return _column_like(arg.this)
    if isinstance(arg, exp.Dot):  # pg_catalog.current_schemas(false)
        return _column_like(arg.expression)
    if isinstance(arg, exp.Func) and _function_name(arg) == "current_schemas":  # two names at most (pgjdbc)
        return True
    return isinstance(arg, (exp.Column, exp.Literal, exp.DataType))


_REG_LOOKUP = {
    "REGCLASS": "_regclass",
    "REGTYPE": "_regtype",
    "REGPROC": "_regproc",
    "REGPROCEDURE": "_regproc",
    "REGNAMESPACE": "_regnamespace",
}
_REG_NAME = {"REGCLASS": "_relname", "REGTYPE": "format_type"}


def _reg_kind(node: exp.Expression) -> str | None:
    if isinstance(node, exp.Cast) and isinstance(node.to, exp.ObjectIdentifier):
        return node.to.name.upper()
    return None


def _rewrite(node: exp.Expression) -> exp.Expression:
    """One node's rewrite; a replacement is rewritten in turn (transform does not descend into it)."""
    new = _rewrite_node(node)
    return node if new is node else new.transform(_rewrite)


def _text_array(node: exp.Expression) -> exp.Expression | None:
    """`'{r,p}'` (PostgreSQL's text form of an array) as a list the catalog engine compares with."""
    inner = node.this if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.Cast):
        inner = inner.this
    items = constants.array_literal(inner.this) if isinstance(inner, exp.Literal) and inner.is_string else None
    return None if items is None else exp.Array(expressions=[exp.Literal.string(text) for text, _ in items])


def _rewrite_node(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Any) and (listed := _text_array(node.this)) is not None:
        return exp.Any(this=listed)  # `typtype = ANY('{b,p}')` (psql's \dT, pgcli's type completion)
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
