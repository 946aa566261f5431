"""Constants as clients write them, folded to literals before a condition is bound.

BI tools and drivers rarely send a bare literal: Superset and Grafana send `NOW() - INTERVAL '5
year'` and `TIMESTAMP '2020-01-01 00:00:00'`, SQLAlchemy `CAST('30' AS INTEGER)`, psycopg
`'2020-01-01'::date`, node-postgres a JS Date as `'2020-01-01T00:00:00.000Z'`, reports
`TO_DATE('01/02/2020', 'MM/DD/YYYY')` or `MAKE_DATE(2020, 1, 2)`. Each is a constant: this module
evaluates it (PostgreSQL's semantics, the session time zone UTC) and puts a literal in its place,
so the binder sees what it always saw — a number, a string, `DATE 'x'`, or `TIMESTAMP 'x'` (a
date dimension compares those exactly, `engine.sql.bind`). Nothing here reads data.

The current time (`NOW()`, `CURRENT_DATE`, …) is read when a query is planned, so such plans are
never cached (`time_dependent`).
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from engine.errors import QueryError

_TIME_WORDS = re.compile(
    r"\b(now|current_date|current_timestamp|localtimestamp|transaction_timestamp|"
    r"statement_timestamp|clock_timestamp|today)\b",
    re.IGNORECASE,
)
_INTEGER_TYPES = {
    getattr(exp.DataType.Type, t)
    for t in ("INT", "BIGINT", "SMALLINT", "TINYINT", "MEDIUMINT", "INT128", "UBIGINT", "UINT", "USMALLINT", "UTINYINT")
}
_NUMBER_TYPES = _INTEGER_TYPES | {
    getattr(exp.DataType.Type, t) for t in ("DECIMAL", "DOUBLE", "FLOAT", "BIGDECIMAL", "UDECIMAL", "UDOUBLE")
}
_TEXT_TYPES = {
    exp.DataType.Type.TEXT,
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.CHAR,
    exp.DataType.Type.NCHAR,
    exp.DataType.Type.NVARCHAR,
}
_TIMESTAMP_TYPES = {
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.DATETIME,
}


# SQL's comparisons: the operator each sqlglot node stands for, the same with its sides swapped, and
# the Python function that evaluates it (the binder's conditions, HAVING, constant probes).
NUMERIC = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # a number as SQL writes it (no inf/nan)
COMPARISONS = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=", exp.EQ: "=", exp.NEQ: "<>"}
FLIPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "=": "=", "<>": "<>"}
OPERATORS = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
    "<>": operator.ne,
}
_ARRAY_ITEM = re.compile(r'"(?:[^"\\]|\\.)*"|[^,]+')


def array_literal(text: str) -> list[tuple[str, bool]] | None:
    """PostgreSQL's text form of a one-dimensional array ('{a,"b c",3}', how drivers send an array
    parameter) as (item, quoted) pairs, each unquoted and unescaped; None for other text."""
    text = text.strip()
    if text[:1] != "{" or text[-1:] != "}":
        return None
    out = []
    for item in _ARRAY_ITEM.findall(text[1:-1]) if text[1:-1].strip() else []:
        item = item.strip()
        quoted = item.startswith('"')
        out.append((re.sub(r"\\(.)", r"\1", item[1:-1]) if quoted else item, quoted))
    return out


@dataclass(frozen=True)
class Interval:
    """A PostgreSQL interval: months, days and seconds apart (a month is not a fixed number of days)."""

    months: int = 0
    days: int = 0
    seconds: float = 0.0

    def times(self, sign: int) -> Interval:
        return Interval(sign * self.months, sign * self.days, sign * self.seconds)


class _NotConstant(Exception):
    """The expression reads a column (or something this module does not evaluate)."""


def time_dependent(sql: str) -> bool:
    """Whether the text may read the current time: its plan holds today's date and is not cached."""
    return bool(_TIME_WORDS.search(sql))


def fold(node: exp.Expr) -> exp.Expr:
    """``node`` with every constant sub-expression that is not a plain literal replaced by one."""

    def visit(n: exp.Expr) -> exp.Expr:
        if isinstance(n, (exp.Literal, exp.Column, exp.Null, exp.Boolean)) or not _could_fold(n):
            return n
        try:
            value = evaluate(n)
        except _NotConstant:
            return n
        return as_literal(value, n)

    return node.transform(visit, copy=False)


def _could_fold(n: exp.Expr) -> bool:
    """Only expressions that can be constants and that the binder does not read as they are."""
    if isinstance(n, exp.Cast) and isinstance(n.this, exp.Literal) and n.to.this == exp.DataType.Type.DATE:
        return False  # DATE 'x': the binder's own form
    inner = n
    while isinstance(inner, (exp.Neg, exp.Paren)):
        inner = inner.this
    if inner is not n and isinstance(inner, exp.Literal):
        return False  # -5, (5): read as they are (and their literals keep their places, engine.sql.templates)
    return isinstance(
        n,
        (
            exp.Cast,
            exp.TryCast,
            exp.Anonymous,
            exp.Func,
            exp.Add,
            exp.Sub,
            exp.Mul,
            exp.Div,
            exp.Paren,
            exp.Neg,
            exp.Interval,
        ),
    ) and not isinstance(n, exp.AggFunc)


def as_literal(value: Any, node: exp.Expr) -> exp.Expr:
    """The literal the binder reads for a folded value."""
    if isinstance(value, bool) or value is None:
        raise QueryError(f"expected a number, text or date, got {node.sql()[:60]!r}")
    if isinstance(value, (int, float)):
        return exp.Neg(this=exp.Literal.number(-value)) if value < 0 else exp.Literal.number(value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, dt.datetime):
        if value.time() == dt.time(0):
            return exp.Cast(this=exp.Literal.string(value.date().isoformat()), to=exp.DataType.build("date"))
        return exp.Cast(this=exp.Literal.string(value.isoformat(sep=" ")), to=exp.DataType.build("timestamp"))
    if isinstance(value, dt.date):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("date"))
    raise QueryError(f"an interval is not a value to compare with: {node.sql()[:60]!r}")


def number(n: exp.Expr) -> float | None:
    """The value of a constant numeric expression (`evaluate`); None for anything else (a column, a
    string, a boolean, a parameter left unbound)."""
    try:
        value = evaluate(n)
    except Exception:
        return None
    return None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)


NUMERIC_OUT_OF_RANGE, DATETIME_OUT_OF_RANGE = "22003", "22008"  # PostgreSQL's SQLSTATEs for them
INT64 = 2**63


def evaluate(n: exp.Expr) -> Any:
    """The value of a constant expression (PostgreSQL semantics); _NotConstant otherwise. Values
    beyond what their type holds are refused as PostgreSQL refuses them (22003 numbers, 22008
    dates and times), never left to fail later as an internal error."""
    try:
        return _evaluate(n)
    except OverflowError:
        raise QueryError(f"a constant is out of range: {n.sql()[:60]!r}", NUMERIC_OUT_OF_RANGE) from None


def _evaluate(n: exp.Expr) -> Any:
    if isinstance(n, exp.Paren):
        return evaluate(n.this)
    if isinstance(n, exp.Literal):
        return n.this if n.is_string else _number(n.this)
    if isinstance(n, exp.Neg):
        v = evaluate(n.this)
        if isinstance(v, (int, float)):
            return -v
        raise _NotConstant
    if isinstance(n, (exp.Cast, exp.TryCast)):
        return _cast(evaluate(n.this), n.to)
    if isinstance(n, exp.Interval):
        return _interval(n)
    if isinstance(n, (exp.Add, exp.Sub)):
        return _plus(evaluate(n.this), evaluate(n.expression), 1 if isinstance(n, exp.Add) else -1, n)
    if isinstance(n, (exp.Mul, exp.Div)):
        a, b = evaluate(n.this), evaluate(n.expression)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            raise _NotConstant
        if isinstance(n, exp.Mul):
            return a * b
        if b == 0:
            raise QueryError("division by zero in a constant")
        return int(a / b) if isinstance(a, int) and isinstance(b, int) else a / b  # PostgreSQL: int / int truncates
    return _function(n)


def _function(n: exp.Expr) -> Any:
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    if isinstance(n, exp.CurrentTimestamp) or (
        isinstance(n, exp.Anonymous)
        and n.name.lower()
        in ("now", "localtimestamp", "transaction_timestamp", "statement_timestamp", "clock_timestamp")
    ):
        return now
    if isinstance(n, exp.CurrentDate) or (isinstance(n, exp.Anonymous) and n.name.lower() == "today"):
        return now.date()
    if isinstance(n, exp.DateFromParts):  # MAKE_DATE(y, m, d)
        try:
            return dt.date(*(int(evaluate(n.args[k])) for k in ("year", "month", "day")))
        except (TypeError, ValueError) as exc:
            raise QueryError(f"MAKE_DATE: {exc}") from None
    if (
        isinstance(n, exp.UnixToTime) and isinstance(n.args.get("scale"), exp.Literal) and n.args["scale"].is_string
    ):  # TO_TIMESTAMP(text, format), as the duckdb reader spells it
        return _parse_with(evaluate(n.this), n.args["scale"].this, "TO_TIMESTAMP")
    if (
        isinstance(n, exp.UnixToTime) and n.args.get("scale") is None
    ):  # TO_TIMESTAMP(epoch seconds): Grafana's $__timeFrom()
        seconds = evaluate(n.this)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise QueryError(f"TO_TIMESTAMP takes seconds since 1970 or a text and a format; got {seconds!r}")
        try:
            return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)
        except OverflowError:
            raise QueryError(f"TO_TIMESTAMP({seconds!r}) is outside the dates a query can name") from None
    if isinstance(n, exp.Anonymous) and n.name.lower() == "to_date" and len(n.expressions) == 2:
        return _parse_with(evaluate(n.expressions[0]), evaluate(n.expressions[1]), "TO_DATE").date()
    if isinstance(n, exp.Anonymous) and n.name.lower() == "to_timestamp" and len(n.expressions) == 2:
        return _parse_with(evaluate(n.expressions[0]), evaluate(n.expressions[1]), "TO_TIMESTAMP")
    if isinstance(n, (exp.TimestampTrunc, exp.DateTrunc)) and isinstance(n.args.get("unit"), (exp.Var, exp.Literal)):
        return _truncate(evaluate(n.this), n.args["unit"].name.lower())
    raise _NotConstant


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:  # the tokenizer's pieces of a malformed literal such as 0E-A
        raise QueryError(f"not a number: {text[:40]!r}") from None


def _cast(value: Any, to: exp.DataType) -> Any:
    kind = to.this
    if kind in _NUMBER_TYPES:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = _number(str(value).strip())
            except ValueError:
                raise QueryError(f"invalid input for {to.sql()}: {value!r}") from None
        if kind not in _INTEGER_TYPES:
            return float(number)
        if not (math.isfinite(number) and -INT64 <= round(number) < INT64):
            raise QueryError(f"{value!r} is out of range for {to.sql()}", NUMERIC_OUT_OF_RANGE)
        return round(number)
    if kind in _TEXT_TYPES:
        return value.isoformat() if isinstance(value, dt.date) else str(value)
    if kind == exp.DataType.Type.DATE:
        return (
            (value.date() if isinstance(value, dt.datetime) else value)
            if isinstance(value, dt.date)
            else _timestamp(str(value)).date()
        )
    if kind in _TIMESTAMP_TYPES:
        if isinstance(value, dt.datetime):
            return value
        if isinstance(value, dt.date):
            return dt.datetime.combine(value, dt.time(0))
        return _timestamp(str(value))
    if kind == exp.DataType.Type.INTERVAL:
        return _interval_text(str(value))
    raise _NotConstant


def timestamp_or_none(text: str) -> dt.datetime | None:
    """An ISO date-time ('2020-01-01T00:00:00.000Z', '2020-01-01 10:30:00+02:00'), as naive UTC; None
    for anything else (plain dates included: the caller reads those itself)."""
    if len(text) <= 10:
        return None
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _timestamp(text: str) -> dt.datetime:
    value = timestamp_or_none(text)
    if value is not None:
        return value
    try:
        return dt.datetime.combine(dt.date.fromisoformat(text.strip()), dt.time(0))
    except ValueError:
        raise QueryError(f"invalid date/time {text!r}: write 'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM:SS'") from None


_UNITS = {
    "year": (12, 0, 0),
    "years": (12, 0, 0),
    "y": (12, 0, 0),
    "yr": (12, 0, 0),
    "yrs": (12, 0, 0),
    "month": (1, 0, 0),
    "months": (1, 0, 0),
    "mon": (1, 0, 0),
    "mons": (1, 0, 0),
    "week": (0, 7, 0),
    "weeks": (0, 7, 0),
    "w": (0, 7, 0),
    "day": (0, 1, 0),
    "days": (0, 1, 0),
    "d": (0, 1, 0),
    "hour": (0, 0, 3600),
    "hours": (0, 0, 3600),
    "h": (0, 0, 3600),
    "hr": (0, 0, 3600),
    "minute": (0, 0, 60),
    "minutes": (0, 0, 60),
    "min": (0, 0, 60),
    "mins": (0, 0, 60),
    "m": (0, 0, 60),
    "second": (0, 0, 1),
    "seconds": (0, 0, 1),
    "sec": (0, 0, 1),
    "secs": (0, 0, 1),
    "s": (0, 0, 1),
    "quarter": (3, 0, 0),
    "quarters": (3, 0, 0),
    "decade": (120, 0, 0),
    "decades": (120, 0, 0),
}
_INTERVAL_PART = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)


def _interval_text(text: str) -> Interval:
    """'5 years', '1 year 2 mons', '-3 days', '90 minutes' (PostgreSQL's verbose form)."""
    months, days, seconds, at = 0, 0, 0.0, 0
    text = text.strip()
    while at < len(text):
        m = _INTERVAL_PART.match(text, at)
        unit = None if m is None else _UNITS.get(m.group(2).lower())
        if m is None or unit is None:
            raise QueryError(f"invalid interval {text!r}: write e.g. '5 years', '3 months', '7 days', '2 hours'")
        n = float(m.group(1))
        if unit[0] and n != int(n):
            raise QueryError(f"invalid interval {text!r}: months and years must be whole")
        months, days, seconds = months + int(n) * unit[0], days + int(n) * unit[1], seconds + n * unit[2]
        if unit[1] and n != int(n):  # fractional days: the remainder in seconds
            seconds += (n - int(n)) * 86400 * unit[1]
        at = m.end()
    return Interval(months, days, seconds)


def _interval(n: exp.Interval) -> Interval:
    amount = evaluate(n.this)
    unit = n.args.get("unit")
    return _interval_text(f"{amount} {unit.name}" if unit is not None else str(amount))


def _plus(a: Any, b: Any, sign: int, n: exp.Expr) -> Any:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a + sign * b
    if isinstance(b, Interval) and isinstance(a, dt.date):
        return _shift(a, b.times(sign))
    if isinstance(a, Interval) and isinstance(b, dt.date) and sign == 1:
        return _shift(b, a)
    if isinstance(a, dt.date) and not isinstance(a, dt.datetime) and isinstance(b, int):  # date ± days
        return _shift(a, Interval(0, sign * b, 0))
    if isinstance(a, Interval) and isinstance(b, Interval):
        return Interval(a.months + sign * b.months, a.days + sign * b.days, a.seconds + sign * b.seconds)
    if isinstance(a, str) and isinstance(b, Interval):
        return _shift(_timestamp(a), b.times(sign))
    raise _NotConstant


def _shift(d: dt.date, by: Interval) -> dt.date:
    """date/timestamp + interval as PostgreSQL adds it: months first (the day clamped to the month's
    last), then days, then seconds; a date with a time part becomes a timestamp."""
    try:
        return _shifted(d, by)
    except (OverflowError, ValueError):  # past year 9999 (or before 1): Python's dates end there
        raise QueryError(
            "date/time out of range in a constant (dates run from 0001-01-01 to 9999-12-31)", DATETIME_OUT_OF_RANGE
        ) from None


def _shifted(d: dt.date, by: Interval) -> dt.date:
    months = d.year * 12 + (d.month - 1) + by.months
    year, month = divmod(months, 12)
    day = min(d.day, calendar.monthrange(year, month + 1)[1])
    moved = d.replace(year=year, month=month + 1, day=day) + dt.timedelta(days=by.days)
    if by.seconds:
        start = moved if isinstance(moved, dt.datetime) else dt.datetime.combine(moved, dt.time(0))
        return start + dt.timedelta(seconds=by.seconds)
    return moved


def _truncate(value: Any, unit: str) -> Any:
    if not isinstance(value, dt.date):
        raise _NotConstant
    stamp = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time(0))
    if unit in ("year", "years"):
        return stamp.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if unit in ("quarter", "quarters"):
        return stamp.replace(month=(stamp.month - 1) // 3 * 3 + 1, day=1, hour=0, minute=0, second=0, microsecond=0)
    if unit in ("month", "months"):
        return stamp.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    if unit in ("week", "weeks"):
        day = stamp - dt.timedelta(days=stamp.weekday())
        return day.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit in ("day", "days"):
        return stamp.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit in ("hour", "hours"):
        return stamp.replace(minute=0, second=0, microsecond=0)
    raise QueryError(f"DATE_TRUNC unit {unit!r} is not supported on a constant")


# PostgreSQL template patterns (TO_DATE / TO_TIMESTAMP) → strptime directives, longest first.
_PATTERNS = [
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("YYYY", "%Y"),
    ("MONTH", "%B"),
    ("Month", "%B"),
    ("month", "%B"),
    ("MON", "%b"),
    ("Mon", "%b"),
    ("mon", "%b"),
    ("US", "%f"),
    ("MS", "%f"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("YY", "%y"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("am", "%p"),
    ("pm", "%p"),
    ("TZ", "%Z"),
    ("OF", "%z"),
]


def _parse_with(text: Any, template: Any, name: str) -> dt.datetime:
    if not isinstance(text, str) or not isinstance(template, str):
        raise _NotConstant
    fmt, at = "", 0
    while at < len(template):
        for pattern, directive in _PATTERNS:
            if template.startswith(pattern, at):
                fmt, at = fmt + directive, at + len(pattern)
                break
        else:
            fmt, at = fmt + template[at].replace("%", "%%"), at + 1
    try:
        return dt.datetime.strptime(text.strip(), fmt)
    except ValueError:
        raise QueryError(f"{name}({text!r}, {template!r}): the text does not match the format") from None
