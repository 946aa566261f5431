"""Every face says the same: for the whole docs/sql.md surface, the REST JSON answer,
its CSV and Arrow forms and the PostgreSQL wire answer (psycopg, `prima.ci95` and `prima.flags` on)
carry the same values, stddevs, 95 % intervals, noise flags and notes."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest
import yaml

from tests.conftest import ADMIN_TOKEN, REPO, TLS, LiveServer
from tests.wire_server import ANALYST_TOKEN, dsn, rest, wire  # noqa: F401 — the module's server fixture

GUIDE = (REPO / "docs" / "sql.md").read_text()
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _guide_queries() -> list[str]:
    """Every full SELECT of the guide's surface table and its measure-axis section."""
    inline = [q for q in re.findall(r"`((?:SELECT|WITH) [^`]+)`", GUIDE) if re.search(r" FROM (people|staff)\b", q)]
    section = GUIDE[GUIDE.index("## Conditions on measures") :]
    block = re.search(r"```sql\n(.*?)```", section, re.S).group(1).strip().splitlines()  # type: ignore[union-attr]
    return list(dict.fromkeys(inline + block))


QUERIES = _guide_queries()
# The measure-axis examples again on a wide synopsis of the same table (`cuboids`): quantiles,
# measure conditions and their model answers say the same on every face.
QUERIES += [
    q.replace("FROM pay", "FROM pay_wide")
    for q in QUERIES
    if " FROM pay " in q + " "
    and any(word in q for word in ("MEDIAN", "PERCENTILE", "QUANTILE", "bonus >", "GROUP BY region"))
]


@pytest.fixture(scope="module")
def faces(wire: tuple[LiveServer, int]) -> Iterator[tuple[LiveServer, int]]:  # noqa: F811
    """The wire server with the guide's other tables: the tour's `staff` and the axis section's `pay`."""
    server, port = wire
    shutil.copy(REPO / "examples" / "staff.csv", server.import_dir / "staff.csv")
    staff = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    staff["source"]["csv"] = str(server.import_dir / "staff.csv")
    section = GUIDE[GUIDE.index("## Conditions on measures") :]
    pay = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    rng = np.random.default_rng(4)  # data, not noise
    bonus = np.where(rng.random(3000) < 0.6, 0.0, np.round(np.exp(rng.normal(8, 1.2, 3000)), 2))
    rows = zip(rng.integers(18, 91, 3000), rng.choice(["north", "south", "east", "west", "n/a"], 3000), bonus)
    (server.import_dir / "pay.csv").write_text("age,region,bonus\n" + "".join(f"{a},{r},{b}\n" for a, r, b in rows))
    pay["source"]["csv"] = str(server.import_dir / "pay.csv")
    lines = (server.import_dir / "pay.csv").read_text().splitlines()  # the rows reversed: another file, its own budget
    (server.import_dir / "pay_wide.csv").write_text("\n".join(lines[:1] + lines[:0:-1]) + "\n")
    pay_wide = dict(
        pay, name="pay_wide", cube={"strategy": "cuboids"}, source={"csv": str(server.import_dir / "pay_wide.csv")}
    )
    for spec in (staff, pay, pay_wide):
        r = httpx.post(
            server.url + "/v1/admin/tables",
            content=json.dumps(spec, default=str),
            headers=ADMIN | {"Content-Type": "application/json"},
            timeout=120,
            verify=TLS,
        )
        assert r.status_code == 201, r.text
        assert (
            httpx.post(
                f"{server.url}/v1/admin/tables/{spec['name']}/cube", headers=ADMIN, timeout=120, verify=TLS
            ).status_code
            == 201
        )
    yield server, port


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-9)
    return str(a) == str(b)


def _expected(answer: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """REST's answer as the columns every tabular face shows: each value, then (aggregates only)
    its stddev and interval ends."""
    keys = set(answer["group_columns"])
    names, rows = [], []
    for j, name in enumerate(answer["columns"]):
        names += (
            [name] if name in keys else [name, f"{name}_stddev", f"{name}_ci95_lo", f"{name}_ci95_hi", f"{name}_noisy"]
        )
    for row, sds, cis, flags in zip(answer["rows"], answer["stddev"], answer["ci95"], answer["noisy"]):
        out = []
        for j, name in enumerate(answer["columns"]):
            out += [row[j]] if name in keys else [row[j], sds[j], *(cis[j] or [None, None]), flags[j]]
        rows.append(out)
    return names, rows


def _csv(server: LiveServer, sql: str) -> tuple[list[str], list[list[Any]], str]:
    r = httpx.post(
        server.url + "/v1/query",
        json={"sql": sql},
        timeout=120,
        headers={"Authorization": f"Bearer {ANALYST_TOKEN}", "Accept": "text/csv"},
        verify=TLS,
    )
    assert r.status_code == 200, r.text
    header, *body = list(csv.reader(io.StringIO(r.text)))
    notes = body[0][-1] if body else ""
    return header[:-1], [[None if v == "" else v for v in row[:-1]] for row in body], notes


def _arrow(server: LiveServer, sql: str) -> tuple[list[str], list[list[Any]], list[str]]:
    r = httpx.post(
        server.url + "/v1/query",
        json={"sql": sql},
        timeout=120,
        headers={"Authorization": f"Bearer {ANALYST_TOKEN}", "Accept": "application/vnd.apache.arrow.stream"},
        verify=TLS,
    )
    assert r.status_code == 200, r.text
    table = pa.ipc.open_stream(r.content).read_all()
    notes = json.loads(table.schema.metadata[b"prima.notes"])
    return table.column_names, [list(row.values()) for row in table.to_pylist()], notes


@pytest.mark.slow
def test_rest_csv_arrow_and_the_wire_say_the_same(faces: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    server, port = faces
    assert len(QUERIES) >= 25
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        heard: list[str] = []
        conn.add_notice_handler(lambda d: heard.append(d.message_primary))
        conn.execute("SET prima.ci95 = on")
        conn.execute("SET prima.flags = on")
        for sql in QUERIES:
            answer = rest(server, sql)
            names, want = _expected(answer)
            for face, (got_names, got, notes) in (("csv", _csv(server, sql)), ("arrow", _arrow(server, sql))):
                assert got_names == names, (face, sql)
                if face == "csv" and not want and got == [[None] * len(names)]:
                    got = []  # an answer without rows writes one row for its notes
                assert len(got) == len(want) and all(_same(a, b) for g, w in zip(got, want) for a, b in zip(g, w)), (
                    face,
                    sql,
                    got[:3],
                    want[:3],
                )
                expected_notes = (
                    " | ".join(" ".join(n.split()) for n in answer["notes"]) if face == "csv" else answer["notes"]
                )
                assert notes == expected_notes, (face, sql)
            heard.clear()
            cur = conn.execute(sql)
            rows = cur.fetchall()
            assert heard == answer["notes"], sql
            wire_names = [d.name for d in cur.description]
            by_name = [dict(zip(wire_names, row)) for row in rows]
            assert len(rows) == len(want), sql
            for got_row, want_row in zip(by_name, want):
                for name, value in zip(names, want_row):
                    assert name in got_row, (sql, name, wire_names)
                    assert _same(got_row[name], value), (sql, name, got_row[name], value)


def test_truncation_is_the_tables_choice_and_a_connections_setting(faces: tuple[LiveServer, int]) -> None:
    """A measure axis's SUM is untruncated unless asked (`pay` does not declare it): `SET
    prima.truncate = on` answers as REST's `"truncate": true`, `= off` / `DEFAULT` as the default."""
    psycopg = pytest.importorskip("psycopg")
    server, port = faces
    sql = "SELECT region, SUM(bonus) AS b FROM pay GROUP BY region"
    plain, cut = rest(server, sql), rest(server, sql, truncate=True)
    assert "truncation" not in plain and "truncation" in cut and plain["rows"] != cut["rows"]
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        conn.execute("SET prima.stddev = off")
        assert [list(r) for r in conn.execute(sql).fetchall()] == plain["rows"]
        conn.execute("SET prima.truncate = on")
        assert [list(r) for r in conn.execute(sql).fetchall()] == cut["rows"]
        conn.execute("SET prima.truncate = DEFAULT")
        assert [list(r) for r in conn.execute(sql).fetchall()] == plain["rows"]
