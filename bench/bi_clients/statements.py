"""The statements every driver sends (bench/bi_clients/run.py): the SQL issue #55 saw break, written
as the client writes it, with its parameters bound by the driver itself.

Each entry: a name, the SQL with `$n` placeholders (drivers that use `%s` or `?` get them rewritten),
its parameters as tagged JSON (`{"date": "2021-01-01"}`, `{"int[]": [30, 31]}`, …: each session turns
them into its driver's own types), and what must come back — REST's answer to `rest` (the same SQL
with the values written in), or a refusal with its SQLSTATE and words that say what to do.

Sessions only run them and report rows or (sqlstate, message); the harness compares (`compare`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

D = lambda s: {"date": s}  # noqa: E731 — a date parameter (pgjdbc's setDate, JS Date, datetime.date)

STATEMENTS: list[dict[str, Any]] = [
    # 1. Superset's time-series chart of an axis measure, and its scalar form on a cut class
    {"name": "DATE_TRUNC year of an axis SUM", "sql": "SELECT DATE_TRUNC('year', order_date) AS y, SUM(amount) AS s "
     "FROM orders GROUP BY 1 ORDER BY 1", "params": []},
    {"name": "DATE_TRUNC quarter with a bound WHERE", "sql": "SELECT DATE_TRUNC('quarter', order_date) AS q, "
     "SUM(amount) AS s FROM orders WHERE category = $1 GROUP BY 1 ORDER BY 1", "params": ["toys"],
     "rest": "SELECT DATE_TRUNC('quarter', order_date) AS q, SUM(amount) AS s FROM orders WHERE category = 'toys' "
     "GROUP BY 1 ORDER BY 1"},
    {"name": "a cut class of an axis without counts", "sql": "SELECT SUM(balance) FROM accounts WHERE balance "
     "BETWEEN 0 AND 4999", "params": [], "refused": ["0A000", "class"]},
    # 2. bound parameters leave the client's PostgreSQL as written
    {"name": "PERCENTILE_CONT WITHIN GROUP, bound date", "sql": "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY "
     "amount) AS p90 FROM orders WHERE order_date >= $1", "params": [D("2021-01-01")],
     "rest": "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount) AS p90 FROM orders WHERE order_date >= "
     "'2021-01-01'"},
    {"name": "TO_DATE beside a bound parameter", "sql": "SELECT COUNT(*) AS n FROM orders WHERE order_date >= "
     "TO_DATE('01/03/2020', 'DD/MM/YYYY') AND category = $1", "params": ["games"],
     "rest": "SELECT COUNT(*) AS n FROM orders WHERE order_date >= DATE '2020-03-01' AND category = 'games'"},
    # 3. arrays
    {"name": "= ANY(text[])", "sql": "SELECT COUNT(*) AS n FROM orders WHERE category = ANY($1)",
     "params": [{"text[]": ["toys", "games"]}], "rest": "SELECT COUNT(*) AS n FROM orders WHERE category IN ('toys', "
     "'games')"},
    {"name": "= ANY(int[])", "sql": "SELECT COUNT(*) AS n FROM people WHERE age = ANY($1)",
     "params": [{"int[]": [30, 31]}], "rest": "SELECT COUNT(*) AS n FROM people WHERE age IN (30, 31)"},
    {"name": "= ANY(date[])", "sql": "SELECT COUNT(*) AS n FROM orders WHERE order_date = ANY($1)",
     "params": [{"date[]": ["2021-03-01", "2021-03-02"]}],
     "rest": "SELECT COUNT(*) AS n FROM orders WHERE order_date IN ('2021-03-01', '2021-03-02')"},
    # 4. a date parameter (pgjdbc's setDate once arrived as '2021-01-01 +00')
    {"name": "a date parameter", "sql": "SELECT COUNT(*) AS n FROM staff WHERE hired >= $1", "params": [D("2020-01-01")],
     "rest": "SELECT COUNT(*) AS n FROM staff WHERE hired >= '2020-01-01'"},
    {"name": "two date parameters, weekly grain", "sql": "SELECT DATE_TRUNC('week', order_date) AS w, COUNT(*) AS n "
     "FROM orders WHERE order_date BETWEEN $1 AND $2 GROUP BY 1 ORDER BY 1", "params": [D("2021-03-01"),
                                                                                      D("2021-04-30")],
     "rest": "SELECT DATE_TRUNC('week', order_date) AS w, COUNT(*) AS n FROM orders WHERE order_date BETWEEN "
     "'2021-03-01' AND '2021-04-30' GROUP BY 1 ORDER BY 1"},
    # 5. what ibis sends: an outer ORDER BY on a computed key
    {"name": "outer ORDER BY a computed key", "sql": "SELECT t.y, t.s FROM (SELECT DATE_TRUNC('year', order_date) AS y, "
     "SUM(amount) AS s FROM orders GROUP BY 1) AS t ORDER BY t.y", "params": []},
    # 9. the smaller items
    {"name": "Grafana $__timeGroupAlias + $__timeFilter", "sql": "SELECT floor(extract(epoch from order_date)/604800)"
     "*604800 AS \"time\", SUM(amount) AS s FROM orders WHERE order_date BETWEEN '2021-01-01T00:00:00Z' AND "
     "'2021-03-01T00:00:00Z' GROUP BY 1 ORDER BY 1", "params": []},
    {"name": "Grafana $__timeFrom() as to_timestamp", "sql": "SELECT COUNT(*) AS n FROM orders WHERE order_date >= "
     "to_timestamp(1609459200) AND order_date < to_timestamp(1612137600)", "params": [],
     "rest": "SELECT COUNT(*) AS n FROM orders WHERE order_date >= '2021-01-01' AND order_date < '2021-02-01'"},
    {"name": "a linear axis's zero class", "sql": "SELECT COUNT(*) AS n, SUM(work) AS s FROM hours WHERE work = 0",
     "params": []},
    {"name": "MEDIAN of an axis measure", "sql": "SELECT category, MEDIAN(amount) AS m FROM orders GROUP BY 1 ORDER BY 1",
     "params": []},
    {"name": "COUNT(DISTINCT) refused 0A000", "sql": "SELECT COUNT(DISTINCT category) FROM orders", "params": [],
     "refused": ["0A000", "DISTINCT"]},
    {"name": "a raw column refused 42501", "sql": "SELECT amount FROM orders", "params": [],
     "refused": ["42501", "SUM(amount)"]},
    {"name": "a week of a month-grain date refused 0A000", "sql": "SELECT DATE_TRUNC('week', hired) AS w, COUNT(*) "
     "FROM staff GROUP BY 1", "params": [], "refused": ["0A000", "declared by day"]},
]


def placeholders(sql: str, style: str) -> str:
    """`$n` → `%s` (psycopg, SQLAlchemy's exec_driver_sql) or `?` (JDBC, ODBC): the statements bind in order."""
    return re.sub(r"\$\d+", {"pyformat": "%s", "qmark": "?"}[style], sql)


def python_value(value: Any) -> Any:
    """A tagged parameter as Python's driver-neutral value (datetime.date, list)."""
    if isinstance(value, dict):
        (tag, v), = value.items()
        if tag == "date":
            return dt.date.fromisoformat(v)
        if tag == "date[]":
            return [dt.date.fromisoformat(x) for x in v]
        return list(v)
    return value


def _key(value: Any) -> Any:
    """A cell as comparable text or number: dates and midnight timestamps as 'YYYY-MM-DD' (REST labels
    a month '2021-03' and a year '2021': padded to the first day), numbers as floats."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()[:10]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if re.fullmatch(r"\d{4}(-\d{2}){0,2}([ T]00:00:00(\.0+)?([+-]00(:00)?|Z)?)?", text):
        parts = text[:10].split("-")
        return "-".join(parts + ["01"] * (3 - len(parts)))
    try:
        return float(text)
    except ValueError:
        return text


def _same(a: Any, b: Any) -> bool:
    a, b = _key(a), _key(b)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-6 * max(1.0, abs(b))
    return a == b


def compare(outcome: dict[str, Any], statement: dict[str, Any], want: dict[str, Any]) -> list:
    """[got, ok, detail] for one session's outcome of one statement: its rows against REST's (the
    first columns: a wire answer may add `_stddev` columns), or its refusal against the expected one."""
    if "refused" in statement:
        state, words = statement["refused"]
        if "error" not in outcome:
            return [repr(outcome.get("rows"))[:160], False, "answered: expected a refusal"]
        got_state, message = outcome["error"]
        ok = (got_state in (state, None)) and words.lower() in message.lower()
        return [None, ok, f"refused {got_state or ''}: {message[:200]}"]
    if "error" in outcome:
        return [None, False, f"{outcome['error'][0] or ''} {outcome['error'][1][:300]}"]
    rows, expected = outcome["rows"], want["rows"]
    width = len(want["columns"])
    ok = len(rows) == len(expected) and all(
        len(r) >= width and all(_same(a, b) for a, b in zip(r[:width], e)) for r, e in zip(rows, expected)
    )
    return [repr(rows)[:160], ok, "" if ok else f"REST: {repr(expected)[:200]}"]
