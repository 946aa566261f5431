"""Superset 6.1 against Prima's wire listener, through Superset's own HTTP API (run by run.py inside
Superset's environment, with `superset run` on loopback). Builds the charts a Superset user
builds — a table of three metrics, a pivot (SUM + AVG), a bar chart with a series limit, a time
series over the last 5 years, a big number with a filter, a HAVING and an IS NOT NULL filter — and
compares every value Superset shows with Prima's REST answer to the SQL Superset generated.
Prints one JSON object {chart: [values compared, ok, detail]}."""

from __future__ import annotations

import json
import math
import sys

import requests

BASE, PG_PORT, TOKEN, REST = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
SUM = {"expressionType": "SIMPLE", "column": {"column_name": "salary"}, "aggregate": "SUM", "label": "SUM(salary)"}
AVG = {"expressionType": "SIMPLE", "column": {"column_name": "salary"}, "aggregate": "AVG", "label": "AVG(salary)"}
YEAR = {"timeGrain": "P1Y", "columnType": "BASE_AXIS", "sqlExpression": "hired", "label": "hired", "expressionType": "SQL"}
AMOUNT = {"expressionType": "SIMPLE", "column": {"column_name": "amount"}, "aggregate": "SUM", "label": "SUM(amount)"}


def grain(column: str, code: str) -> dict:
    return {"timeGrain": code, "columnType": "BASE_AXIS", "sqlExpression": column, "label": column, "expressionType": "SQL"}


CHARTS = {
    "table, three metrics": ("people", {"columns": ["education"], "metrics": ["count", SUM, AVG], "row_limit": 100}),
    "pivot, SUM + AVG": ("people", {"columns": ["region", "education"], "metrics": [SUM, AVG], "row_limit": 1000}),
    "bar, series limit": ("people", {"columns": ["region", "education"], "metrics": [SUM], "series_columns": ["region"],
                                     "series_limit": 2, "series_limit_metric": SUM, "row_limit": 100}),
    "time series, last 5 years": ("staff", {"columns": [YEAR], "metrics": ["count"], "time_range": "Last 5 years",
                                            "granularity": "hired", "row_limit": 100}),
    "big number, filter": ("people", {"metrics": ["count"], "filters": [{"col": "education", "op": "IN", "val": ["phd", "msc"]}]}),
    "HAVING": ("people", {"columns": ["education"], "metrics": ["count"], "extras": {"having": "COUNT(*) > 1000"}}),
    "IS NOT NULL": ("people", {"columns": ["region"], "metrics": ["count"], "filters": [{"col": "region", "op": "IS NOT NULL"}]}),
    # issue #55 item 1: the time-series chart of a measure with an axis (once a 500)
    "time series of an axis SUM, by year": ("orders", {"columns": [grain("order_date", "P1Y")], "metrics": [AMOUNT],
                                                       "granularity": "order_date", "row_limit": 100}),
    "by quarter, filtered": ("orders", {"columns": [grain("order_date", "P3M")], "metrics": [AMOUNT],
                                        "granularity": "order_date", "row_limit": 100,
                                        "filters": [{"col": "category", "op": "==", "val": "toys"}]}),
    "by week (the default grain), last 2 months": ("orders", {"columns": [grain("order_date", "P1W")], "metrics": ["count"],
                                                             "granularity": "order_date", "row_limit": 100,
                                                             "time_range": "2021-03-01 : 2021-05-01"}),
    "table of MEDIAN": ("orders", {"columns": ["category"], "row_limit": 100, "metrics": [
        {"expressionType": "SQL", "sqlExpression": "MEDIAN(amount)", "label": "median"}]}),
}


def session() -> requests.Session:
    s = requests.Session()
    token = s.post(f"{BASE}/api/v1/security/login", json={"username": "admin", "password": "admin", "provider": "db",
                                                          "refresh": False}).json()["access_token"]
    s.headers.update({"Authorization": f"Bearer {token}", "Referer": BASE})
    return s


def datasets(s: requests.Session) -> dict[str, int]:
    """The Prima database and its two datasets, created once (a rerun finds them)."""
    uri = f"postgresql+psycopg2://bi:{TOKEN}@127.0.0.1:{PG_PORT}/prima"
    db = next((d["id"] for d in s.get(f"{BASE}/api/v1/database/").json()["result"] if d["database_name"] == "prima"), None)
    if db is None:
        db = s.post(f"{BASE}/api/v1/database/", json={"database_name": "prima", "sqlalchemy_uri": uri}).json()["id"]
    else:
        s.put(f"{BASE}/api/v1/database/{db}", json={"sqlalchemy_uri": uri})
    known = {d["table_name"]: d["id"] for d in s.get(f"{BASE}/api/v1/dataset/").json()["result"]}
    return {t: known.get(t) or s.post(f"{BASE}/api/v1/dataset/", json={"database": db, "schema": "public",
                                                                     "table_name": t}).json()["id"]
            for t in ("people", "staff", "orders")}


def same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, (int, float)) and isinstance(b, str):  # a temporal axis: epoch ms vs a label 'YYYY-MM'
        return True
    return a == b


def main() -> None:
    s, out = session(), {}
    ids = datasets(s)
    for name, (table, query) in CHARTS.items():
        body = {"datasource": {"id": ids[table], "type": "table"}, "queries": [query], "result_format": "json",
                "result_type": "full"}
        r = s.post(f"{BASE}/api/v1/chart/data", json=body)
        if r.status_code != 200:
            out[name] = [0, False, f"HTTP {r.status_code}: {r.text[:200]}"]
            continue
        result = r.json()["result"][0]
        sql = result["query"].strip().rstrip(";")
        rest = requests.post(f"{REST}/v1/query", json={"sql": sql}, headers={"Authorization": f"Bearer {TOKEN}"}).json()
        shown = [[row[c] for c in result["colnames"]] for row in result["data"]]
        ok = len(shown) == len(rest["rows"]) and all(same(a, b) for x, y in zip(shown, rest["rows"]) for a, b in zip(x, y))
        out[name] = [sum(len(r) for r in shown), ok, "" if ok else f"Superset {shown[:3]} REST {rest['rows'][:3]} SQL {sql[:200]}"]
    print(json.dumps({"checks": {k: [json.dumps(v[0]), v[1], v[2]] for k, v in out.items()}}))


if __name__ == "__main__":
    main()
