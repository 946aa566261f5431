"""Tables that grow: appends per closed period, the ledger per period and over a lifetime,
answers over any range of periods checked against DuckDB's SQL on the raw files, and the refusals."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from engine.answers.options import AnswerOptions
from engine.builds import growing
from engine.errors import Conflict, Invalid, QueryError
from engine.service import Prima
from storage import cube_store, ledger
from storage.schema import TableSpec
from tests.conftest import TLS, registered_template, seeded_copy

DAYS = 24  # rows on 2025-01-01 .. 2025-01-24, plus some dated before the horizon and some undated
HORIZON = ("2025-01-01", "2025-03-31")


def write_events(root: Path, days: int = DAYS, seed: int = 3, whole: bool = False) -> Path:
    """A hive-partitioned events directory (``day=YYYY-MM-DD/``): persons with many events, a
    heavy-tailed amount with NULLs, two category dimensions (one value undeclared), rows outside the
    horizon. ``whole``: amounts in whole numbers (so every engine's float sums are exact and equal).
    Also written as one Parquet file and one CSV file beside the directory, for SQL truth and loading."""
    con = duckdb.connect()
    con.execute(f"""CREATE TABLE ev AS SELECT
        CASE WHEN i % 97 = 0 THEN DATE '2024-12-31' ELSE DATE '2025-01-01' + CAST(i % {days} AS INTEGER) END AS day,
        ['web', 'app', 'store', 'kiosk'][1 + (hash(i + {seed}) % 4)::INT] AS channel,
        ['a', 'b', 'c'][1 + (hash(i * 7 + {seed}) % 3)::INT] AS cat,
        (hash(i * 13 + {seed}) % 300)::INT AS person,
        CASE WHEN hash(i * 31 + {seed}) % 25 = 0 THEN NULL
             ELSE round(exp((hash(i * 17 + {seed}) % 1000) / 150.0), {0 if whole else 2}) END AS amount
        FROM range({days * 200}) t(i)""")
    out = root / "events"
    con.execute(f"COPY ev TO '{out}' (FORMAT parquet, PARTITION_BY (day))")
    con.execute(f"COPY (SELECT * FROM ev) TO '{root / 'events.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT * FROM ev) TO '{root / 'events.csv'}' (FORMAT csv, HEADER true)")
    return out


def events_spec(path: Path, name: str = "events", releases: str = "flat", **extra: Any) -> TableSpec:
    spec: dict[str, Any] = {
        "name": name,
        "source": {"parquet": str(path)},
        "dimensions": [
            {"name": "day", "type": "date", "lo": HORIZON[0], "hi": HORIZON[1], "outside": "exclude"},
            {"name": "channel", "type": "category", "values": ["web", "app", "store"]},
            {"name": "cat", "type": "category", "values": ["a", "b", "c"]},
        ],
        "measures": [{"name": "amount", "lo": 0, "hi": 800}],
        "epsilon": 1.0,
        "growth": {"period": "day", "releases": releases},
    }
    for key, value in extra.items():
        spec[key] = {**spec[key], **value} if key == "growth" else value
    return TableSpec.model_validate(spec)


@pytest.fixture(scope="module")
def events_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_events(tmp_path_factory.mktemp("growing"))


def _sql_truth(
    events_dir: Path, where: str, select: str = "COUNT(*), SUM(LEAST(GREATEST(amount, 0), 800)), COUNT(amount)"
) -> tuple:
    raw = events_dir.parent / "events.parquet"
    return duckdb.sql(
        f"SELECT {select} FROM '{raw}' WHERE day BETWEEN DATE '2025-01-01' AND DATE '2025-03-31' AND {where}"
    ).fetchall()[0]


@pytest.mark.parametrize("releases", ["flat", "dyadic"])
def test_answers_over_measured_periods_equal_sql_on_the_raw_files(
    tmp_path: Path, events_dir: Path, releases: str
) -> None:
    """Exact releases (no noise): every answer is DuckDB's SQL on the raw rows of the measured days —
    NULL amounts, undeclared channels, rows outside the horizon (excluded, and said) included."""
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(events_spec(events_dir, releases=releases))
    prima.append("events", through=dt.date(2025, 1, 19))
    exact = prima.exact_cube
    through = "day <= DATE '2025-01-19'"
    got = prima.answer_with("SELECT COUNT(*), SUM(amount), COUNT(amount) FROM events", exact)
    assert got["rows"][0] == pytest.approx(list(_sql_truth(events_dir, through)), rel=1e-12)
    assert any("2025-01-01 to 2025-01-19" in n and "2025-01-20 onwards is not measured" in n for n in got["notes"])
    for lo, hi in [
        ("2025-01-02", "2025-01-17"),
        ("2025-01-05", "2025-01-05"),
        ("2025-01-08", "2025-03-01"),
        ("2025-01-02", "2025-01-16"),
    ]:  # (dyadic: the block of days 1-16 minus day 1)
        where = f"day BETWEEN '{lo}' AND '{hi}'"
        got = prima.answer_with(f"SELECT COUNT(*), SUM(amount), COUNT(amount) FROM events WHERE {where}", exact)
        want = _sql_truth(events_dir, f"{through} AND day BETWEEN DATE '{lo}' AND DATE '{hi}'")
        assert got["rows"][0] == pytest.approx(list(want), rel=1e-12), (lo, hi)
    signed = prima.answer_with("SELECT COUNT(*) FROM events WHERE day BETWEEN '2025-01-02' AND '2025-01-16'", exact)
    assert any(f"summed from {2 if releases == 'dyadic' else 15} release" in n for n in signed["notes"])
    got = prima.answer_with(
        "SELECT channel, COUNT(*), AVG(amount) FROM events WHERE day >= '2025-01-03' GROUP BY channel ORDER BY channel",
        exact,
    )
    raw = events_dir.parent / "events.parquet"
    want = duckdb.sql(
        f"SELECT CASE WHEN channel IN ('web', 'app', 'store') THEN channel ELSE '(other)' END AS c, "
        f"COUNT(*), AVG(CASE WHEN amount IS NOT NULL THEN LEAST(GREATEST(amount, 0), 800) END) FROM '{raw}' WHERE day BETWEEN "
        "DATE '2025-01-03' AND DATE '2025-01-19' GROUP BY c ORDER BY c"
    ).fetchall()
    rows = {r[0]: r[1:] for r in got["rows"] if r[1]}
    assert rows == {c: pytest.approx([n, avg], rel=1e-12) for c, n, avg in want}
    got = prima.answer_with("SELECT day, SUM(amount) FROM events WHERE day < '2025-01-04' GROUP BY day", exact)
    want = duckdb.sql(
        f"SELECT CAST(day AS VARCHAR), SUM(LEAST(GREATEST(amount, 0), 800)) FROM '{raw}' WHERE day "
        "BETWEEN DATE '2025-01-01' AND DATE '2025-01-03' GROUP BY day ORDER BY day"
    ).fetchall()
    assert [tuple(r) for r in got["rows"]] == [(d, pytest.approx(v, rel=1e-12)) for d, v in want]
    got = prima.answer_with("SELECT DATE_TRUNC('month', day) AS m, COUNT(*) FROM events GROUP BY m", exact)
    assert got["rows"] == [["2025-01-01", _sql_truth(events_dir, through)[0]]]
    with pytest.raises(QueryError, match="no measured period"):
        prima.answer_with("SELECT COUNT(*) FROM events WHERE day > '2025-02-01'", exact)
    prima.close()


def test_each_append_reads_only_its_day_and_charges_exactly_its_epsilon(tmp_path: Path) -> None:
    """Flat releases: with every other day's file made unreadable, the next day still appends (so
    nothing else was opened); each period is charged ε once, and the space's spend stays ε (the
    periods' rows are disjoint: parallel composition)."""
    events = write_events(tmp_path, days=6)
    prima = Prima(tmp_path / "data", seed=2)
    prima.register(events_spec(events))
    folders = sorted(p for p in events.iterdir() if p.name.startswith("day=2025"))
    for k, folder in enumerate(folders):
        saved = {}
        for other in folders:
            if other != folder:
                target = next(other.glob("*.parquet"))
                saved[target] = target.read_bytes()
                target.write_bytes(b"not a parquet file")
        try:
            result = prima.append("events", limit=1)
        finally:
            for target, data in saved.items():
                target.write_bytes(data)
        assert result["appended"] == [folder.name.split("=")[1]]
    entries = ledger.periods(prima.db, "events")
    assert [e[0] for e in entries] == [f.name.split("=")[1] for f in folders]
    assert all(status == "done" and amount == 1.0 for _, status, _, amount in entries)
    budget = prima.budget("events")
    assert budget["spent"] == pytest.approx(1.0) and budget["composition"] == "per day"
    prima.close()


def test_refusals_say_what_to_do(tmp_path: Path, events_dir: Path) -> None:
    prima = Prima(tmp_path / "data", seed=3)
    prima.register(events_spec(events_dir))
    with pytest.raises(Conflict, match="no period of 'events' is measured yet"):
        prima.query("SELECT COUNT(*) FROM events")
    prima.append("events", period="2025-01-01")
    with pytest.raises(Conflict, match="already measured"):
        prima.append("events", period="2025-01-01")
    with pytest.raises(Conflict, match="append periods in order"):
        prima.append("events", period="2025-01-05")
    with pytest.raises(Conflict, match="not closed yet"):
        prima.append("events", period="2025-01-02", today=dt.date(2025, 1, 2))
    with pytest.raises(Conflict, match="no period of .events. to append.*not closed yet"):
        prima.append("events", today=dt.date(2025, 1, 2))
    with pytest.raises(Invalid, match="not a period"):
        prima.append("events", period="2025-13-01")
    with pytest.raises(Conflict, match="grows by periods"):
        prima.build("events")
    spent = prima.budget("events")["spent"]
    assert spent == pytest.approx(1.0)  # no refusal charged anything
    (tmp_path / "empty").mkdir()
    with pytest.raises(Invalid, match=r"no \*.parquet file under .* yet"):
        prima.register(events_spec(tmp_path / "empty", name="later"))
    for bad, match in [
        ({"growth": {"period": "channel"}}, "date dimension"),
        (
            {
                "dimensions": [
                    {"name": "day", "type": "date", "lo": "2025-01-01", "hi": "2025-03-31"},
                    {"name": "cat", "type": "category", "values": ["a"]},
                ]
            },
            "exclude",
        ),
        ({"growth": {"period": "day", "model": "lifetime"}}, "per_period"),
        ({"measures": [{"name": "amount", "lo": 0, "hi": 800, "clipping": "clasp"}]}, "fixed clipping"),
    ]:
        with pytest.raises(ValueError, match=match):
            events_spec(events_dir, name="bad", **bad)
    prima.close()


def test_lifetime_cap_is_shared_refused_before_reading_and_shows_a_runway(tmp_path: Path) -> None:
    """Person-level: two tables over the same people share one lifetime ε; the append that would pass
    it is refused before any row is read (the next day's file is unreadable: the refusal is the
    budget's, not a read error), and the runway counts the periods left."""
    events = write_events(tmp_path, days=4)
    prima = Prima(tmp_path / "data", seed=4)
    unit = {"column": "person", "max_rows": 3, "id_space": "people"}
    growth = {"period": "day", "model": "lifetime", "per_period": 0.25}
    first = prima.register(events_spec(events, "visits", privacy_unit=unit, growth=growth))
    assert first["preview"]["growth"]["model"] == "lifetime"
    prima.register(events_spec(events, "spend", privacy_unit=unit, growth=growth))
    assert prima.growth_status("visits")["runway_periods"] == 4
    prima.append("visits", limit=2)
    prima.append("spend", limit=1)
    assert prima.growth_status("spend")["runway_periods"] == 1
    assert prima.budget("visits")["spent"] == pytest.approx(0.75)
    prima.append("spend", limit=1)
    assert prima.growth_status("visits")["runway_periods"] == 0
    target = next((events / "day=2025-01-03").glob("*.parquet"))
    target.write_bytes(b"unreadable")
    with pytest.raises(Conflict, match="exceeds the remaining budget.*nothing was read: the lifetime cap"):
        prima.append("visits", limit=1)
    assert prima.budget("spend")["spent"] == pytest.approx(1.0)
    answer = prima.query("SELECT COUNT(*) FROM visits")
    assert any("contributes at most 3 rows" in n for n in answer["notes"])
    prima.close()


def test_period_and_lifetime_tables_cannot_share_a_space(tmp_path: Path, events_dir: Path) -> None:
    prima = Prima(tmp_path / "data")
    unit = {"column": "person", "max_rows": 3, "id_space": "people"}
    prima.register(events_spec(events_dir, "per_day", privacy_unit=unit))
    with pytest.raises(Invalid, match="composes"):
        prima.register(
            events_spec(
                events_dir,
                "lifetime",
                privacy_unit=unit,
                growth={"period": "day", "model": "lifetime", "per_period": 0.1},
            )
        )
    prima.close()


def test_bars_are_calibrated_over_seeded_appends(tmp_path: Path) -> None:
    """Noise scale: over many seeded tables (fresh noise each), range answers of a 4-ary tree miss the
    exact answer by what their stddev says (z-scores of unit variance) and their 95 % intervals cover."""
    events = write_events(tmp_path, days=8)
    z, covered = [], []
    exact_prima = Prima(tmp_path / "exact")
    exact_prima.register(events_spec(events, rho=0.5, epsilon=None))
    exact_prima.append("events", through=dt.date(2025, 1, 8))
    queries = [
        "SELECT COUNT(*), SUM(amount) FROM events WHERE day BETWEEN '2025-01-02' AND '2025-01-08'",
        "SELECT COUNT(*), SUM(amount) FROM events WHERE day BETWEEN '2025-01-01' AND '2025-01-04'",
    ]
    truth = [exact_prima.answer_with(q, exact_prima.exact_cube)["rows"][0] for q in queries]
    spec = events_spec(events, rho=0.5, epsilon=None, growth={"period": "day", "releases": "dyadic"})
    template = registered_template(tmp_path / "template", spec)
    for seed in range(25):
        prima = seeded_copy(template, tmp_path / f"d{seed}", 100 + seed)
        prima.append("events", through=dt.date(2025, 1, 8))
        for q, want in zip(queries, truth):
            got = prima.query(q, AnswerOptions(clamp=False))
            for value, sd, ci, true in zip(got["rows"][0], got["stddev"][0], got["ci95"][0], want):
                z.append((value - true) / sd)
                covered.append(ci[0] <= true <= ci[1])
        prima.close()
        shutil.rmtree(tmp_path / f"d{seed}")
    z_arr = np.array(z)
    assert 0.75 < float(np.std(z_arr)) < 1.25 and abs(float(np.mean(z_arr))) < 0.4  # 25 seeds: SE of the mean ~0.15
    assert 0.88 <= float(np.mean(covered)) <= 1.0


def test_the_cli_appends_and_the_status_lists_periods(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    events = write_events(tmp_path, days=3)
    Prima(tmp_path / "data").register(events_spec(events, releases="dyadic"))
    runner = CliRunner()
    result = runner.invoke(cli, ["append", "events", "--next", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "appended 1 period(s) of events: 2025-01-01" in text and "next 2025-01-02" in text
    result = runner.invoke(cli, ["append", "events", "--through", "2025-01-03", "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 0 and "2025-01-02 … 2025-01-03" in " ".join(result.output.split()), result.output
    prima = Prima(tmp_path / "data")
    info = prima.table_info("events")
    growth = info["growth"]
    assert growth["measured"] == 3 and growth["next"] == "2025-01-04" and growth["releases"] == "dyadic"
    assert [e["period"] for e in growth["ledger"]] == ["2025-01-01", "2025-01-02", "2025-01-03"]
    stored = cube_store.load_prefixed(prima.db, prima.cube_root, "events~")
    assert sorted(stored) == ["events~0+1", "events~0+2", "events~1+1", "events~2+1"]
    prima.retire("events")
    assert not cube_store.load_prefixed(prima.db, prima.cube_root, "events~")
    assert not list((tmp_path / "data" / "cubes").glob("events~*"))
    prima.close()


KILL_POINTS = (
    "append_before_charge",
    "append_after_charge",
    "append_after_aggregate",
    "append_during_persist",
    "append_before_done",
    None,
)  # None: SIGKILL at a random moment instead


def _check_appends(data: Path, days: int) -> int:
    """After any kill: no period charged twice, every done period has all its releases stored under
    its charge, at most one period charged and not yet done (the next append completes it); returns
    the periods measured."""
    prima = Prima(data)
    try:
        counts = prima.db.run("SELECT period, COUNT(*) FROM prima.ledger WHERE table_name = 'events' GROUP BY period")
        assert all(n == 1 for _, n in counts), counts
        spec = prima.spec("events")
        scheme, measured = growing.releases_of(spec), prima.measured_through("events")
        appended = {
            period: (status, build, amount) for period, status, build, amount in ledger.periods(prima.db, "events")
        }
        labels = [(dt.date(2025, 1, 1) + dt.timedelta(days=d)).isoformat() for d in range(days)]
        for t, label in enumerate(labels):
            status = appended.get(label, (None, None, 0.0))
            if t <= measured:
                assert status[0] == "done"
                for node in scheme.closing(t):
                    assert cube_store.stored_build(prima.db, f"events~{node[0]}+{node[1]}") == status[1]
            elif t == measured + 1:
                assert status[0] in (None, "charged")
            else:
                assert status[0] is None
        assert prima.budget("events")["spent"] == pytest.approx(1.0 if appended else 0.0)
        return measured + 1
    finally:
        prima.close()


@pytest.mark.slow
def test_appends_killed_anywhere_charge_each_period_once(tmp_path: Path) -> None:
    """SIGKILL during `prima append --next` (at every fault point in turn, and at random moments), 24 runs:
    after each, every period is measured and charged once, or charged and completed by the next
    append under that charge, or neither; a final append measures them all, each charged once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    days = 32
    events = write_events(tmp_path, days=days)
    data = tmp_path / "data"
    prima = Prima(data)
    prima.register(events_spec(events, releases="dyadic"))
    prima.close()
    prima_append = [sys.executable, "-m", "app.cli", "append", "events", "--data-dir", str(data)]
    command = prima_append + ["--next"]
    rng = np.random.default_rng(5)  # when to kill, not noise
    repo = Path(__file__).resolve().parents[1]
    kinds, proc_errors = [], []
    for run in range(24):
        point = KILL_POINTS[run % len(KILL_POINTS)]
        env = dict(os.environ, PRIMA_FAULT_KILL_AT=point or "")
        proc = subprocess.Popen(command, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if point is None:
            time.sleep(float(rng.uniform(0.8, 1.8)))
            proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
        kinds.append("killed" if proc.returncode == -signal.SIGKILL else f"exit {proc.returncode}")
        proc_errors.append(err[-300:])
        _check_appends(data, days)
    assert kinds.count("killed") >= 20, "; ".join(f"{k} {e!r}" for k, e in zip(kinds, proc_errors))
    done = subprocess.run(
        prima_append + ["--through", f"2025-02-{days - 31:02d}"],
        cwd=repo,
        env=dict(os.environ, PRIMA_FAULT_KILL_AT=""),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0 or b"no period of" in done.stderr, done.stderr[-500:]
    assert _check_appends(data, days) == days


def test_units_are_bounded_per_period_in_every_release(tmp_path: Path, events_dir: Path) -> None:
    """Person-period: a block's release keeps each person's k rows per day, the very rows each day's
    own release keeps — so a range answers the same from a block as from its days (exact releases),
    and the note names the unit as a person per day."""
    prima = Prima(tmp_path / "data")
    prima.register(events_spec(events_dir, releases="dyadic", privacy_unit={"column": "person", "max_rows": 1}))
    prima.append("events", through=dt.date(2025, 1, 8))
    exact = prima.exact_cube
    block = prima.answer_with(
        "SELECT COUNT(*), SUM(amount) FROM events WHERE day BETWEEN '2025-01-01' AND '2025-01-08'", exact
    )
    days = prima.answer_with(
        "SELECT day, COUNT(*), SUM(amount) FROM events WHERE day <= '2025-01-08' GROUP BY day", exact
    )
    assert any("summed from 1 release" in n for n in block["notes"])
    assert block["rows"][0] == pytest.approx(
        [sum(r[1] for r in days["rows"]), sum(r[2] for r in days["rows"])], rel=1e-12
    )
    persons_days = duckdb.sql(
        f"SELECT COUNT(DISTINCT (person, day)) FROM '{events_dir.parent / 'events.parquet'}' "
        "WHERE day BETWEEN DATE '2025-01-01' AND DATE '2025-01-08'"
    ).fetchall()[0][0]
    assert block["rows"][0][0] == persons_days  # one row per person-day (k = 1), every person-day kept
    noisy = prima.query("SELECT COUNT(*) FROM events")
    assert any("'person per day' (the privacy unit) contributes at most 1 rows" in n for n in noisy["notes"])
    prima.close()


def test_a_served_growing_table_appends_over_http_and_answers_with_its_periods_on_the_wire(tmp_path: Path) -> None:
    """The real server: the admin registers and appends over HTTP; REST and psycopg over the wire
    answer alike, and the wire's notices carry which days the answer covers."""
    import httpx

    from tests.conftest import LiveServer, admin_headers, free_port

    psycopg = pytest.importorskip("psycopg")
    events = write_events(tmp_path, days=5)
    pg_port = free_port()
    server = LiveServer(
        tmp_path / "data", demo=False, extra_args=("--pg-port", str(pg_port)), env={"PRIMA_ANALYST_TOKENS": "analyst-1"}
    )
    server.start()
    try:
        body = events_spec(events).model_dump(mode="json", exclude_none=True)
        r = httpx.post(server.url + "/v1/admin/tables", json=body, headers=admin_headers(), timeout=60, verify=TLS)
        assert r.status_code == 201, r.text
        assert r.json()["preview"]["growth"]["releases"] == "flat"
        r = httpx.post(
            server.url + "/v1/admin/tables/events/append",
            json={"through": "2025-01-04"},
            headers=admin_headers(),
            timeout=120,
            verify=TLS,
        )
        assert r.status_code == 200 and r.json()["appended"] == [f"2025-01-0{d}" for d in range(1, 5)], r.text
        r = httpx.post(
            server.url + "/v1/admin/tables/events/append",
            json={"period": "2025-01-02"},
            headers=admin_headers(),
            timeout=60,
            verify=TLS,
        )
        assert r.status_code == 409 and "already measured" in r.json()["detail"]
        sql = "SELECT channel, COUNT(*) FROM events WHERE day >= '2025-01-02' GROUP BY channel ORDER BY channel"
        rest = httpx.post(
            server.url + "/v1/query",
            json={"sql": sql},
            headers={"Authorization": "Bearer analyst-1"},
            timeout=60,
            verify=TLS,
        ).json()
        notices: list[str] = []
        with psycopg.connect(
            f"host=127.0.0.1 port={pg_port} user=bi password=analyst-1 dbname=prima sslmode=disable connect_timeout=10"
        ) as conn:
            conn.add_notice_handler(lambda d: notices.append(d.message_primary))
            rows = conn.execute(sql).fetchall()
        assert [list(r[:2]) for r in rows] == [[c, pytest.approx(n)] for c, n in rest["rows"]]  # (then its bars)
        covered = [n for n in notices if "covers the measured days of 'day'" in n]
        assert covered and "2025-01-02 to 2025-01-04" in covered[0] and "2025-01-05 onwards" in covered[0]
        assert covered[0] in rest["notes"]
    finally:
        server.stop()


def test_the_server_appends_scheduled_tables_by_itself(tmp_path: Path) -> None:
    """`"schedule": true`: the running server appends every closed period on its timer
    (PRIMA_APPEND_EVERY), charging each once; a table without it is left alone."""
    import time

    import httpx

    from tests.conftest import LiveServer, admin_headers

    events = write_events(tmp_path, days=4)
    short = events_spec(events, growth={"schedule": True})
    dims = [d.model_copy(update={"hi": dt.date(2025, 1, 6)}) if d.name == "day" else d for d in short.dimensions]
    server = LiveServer(tmp_path / "data", demo=False, env={"PRIMA_APPEND_EVERY": "0.5"})
    server.start()
    try:
        for name, schedule in (("scheduled", True), ("manual", False)):
            body = short.model_copy(
                update={
                    "name": name,
                    "dimensions": dims,
                    "growth": short.growth.model_copy(update={"schedule": schedule}),
                }
            )
            if name == "manual":  # its own copy of the rows: a table over the same source shares its budget
                shutil.copytree(events, tmp_path / "events_manual")
                body = body.model_copy(
                    update={"source": body.source.model_copy(update={"parquet": str(tmp_path / "events_manual")})}
                )
            r = httpx.post(
                server.url + "/v1/admin/tables",
                json=body.model_dump(mode="json", exclude_none=True),
                headers=admin_headers(),
                timeout=60,
                verify=TLS,
            )
            assert r.status_code == 201, r.text
        deadline, growth = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            growth = httpx.get(server.url + "/v1/tables/scheduled", headers=admin_headers(), verify=TLS).json()[
                "growth"
            ]
            if growth["measured"] == 6:
                break
            time.sleep(0.25)
        assert growth["measured"] == 6 and growth["next"] is None
        assert [e["epsilon"] for e in growth["ledger"]] == [1.0] * 6
        assert (
            httpx.get(server.url + "/v1/tables/manual", headers=admin_headers(), verify=TLS).json()["growth"][
                "measured"
            ]
            == 0
        )
    finally:
        server.stop()


def test_a_period_is_replaced_only_by_an_explicit_charged_remeasure(tmp_path: Path) -> None:
    """Late rows never enter a measured period by themselves; `remeasure` reads the period again and is
    charged again (the period's budget is spent: refused until the admin raises it), flat releases only."""
    events = write_events(tmp_path, days=3)
    prima = Prima(tmp_path / "data", seed=8)
    prima.register(events_spec(events))
    prima.append("events", through=dt.date(2025, 1, 3))
    before = prima.query("SELECT COUNT(*) FROM events WHERE day = '2025-01-02'")["rows"][0][0]
    late = events / "day=2025-01-02" / "late.parquet"
    duckdb.sql(
        f"COPY (SELECT 'web' AS channel, 'a' AS cat, 1 AS person, 5.0 AS amount FROM range(3000)) TO '{late}' "
        "(FORMAT parquet)"
    )
    with pytest.raises(Conflict, match="already measured"):
        prima.append("events", period="2025-01-02")
    with pytest.raises(Conflict, match="has spent its budget; raise the total"):
        prima.append("events", period="2025-01-02", remeasure=True)
    prima.set_budget("events", epsilon=2.0)
    prima.append("events", period="2025-01-02", remeasure=True)
    after = prima.query("SELECT COUNT(*) FROM events WHERE day = '2025-01-02'")["rows"][0][0]
    assert after - before > 2000  # the 3,000 late rows are in the new release
    entries = [e for e in ledger.periods(prima.db, "events") if e[0] == "2025-01-02"]
    assert [e[1] for e in entries] == ["done", "done"] and prima.budget("events")["spent"] == pytest.approx(2.0)
    assert "re-measure 2025-01-02" in prima.ledger_entries("events")[-1]["purpose"]
    with pytest.raises(Conflict, match="not measured yet"):
        prima.append("events", period="2025-01-05", remeasure=True)
    tree = Prima(tmp_path / "tree")
    tree.register(events_spec(events, releases="dyadic", source={"parquet": str(tmp_path / "events.parquet")}))
    tree.append("events", through=dt.date(2025, 1, 2))
    with pytest.raises(Conflict, match="re-measure is offered for flat releases"):
        tree.append("events", period="2025-01-01", remeasure=True)
    prima.close()
    tree.close()


def test_a_growing_table_groups_by_week_and_says_what_works_for_quantiles(tmp_path: Path, events_dir: Path) -> None:
    """The default BI grain works on a daily growing table; MEDIAN and conditions on a measure are refused
    (0A000) without advising an axis, which registration refuses for a growing table."""
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(events_spec(events_dir))
    prima.append("events", through=dt.date(2025, 1, 20), today=dt.date(2025, 2, 1))
    weeks = prima.query("SELECT DATE_TRUNC('week', day) AS w, COUNT(*) FROM events GROUP BY 1")["rows"]
    assert [r[0] for r in weeks][:3] == ["2024-12-30", "2025-01-06", "2025-01-13"]
    for sql in ("SELECT MEDIAN(amount) FROM events", "SELECT SUM(amount) FROM events WHERE amount > 10"):
        with pytest.raises(QueryError) as refused:
            prima.query(sql)
        assert refused.value.sqlstate == "0A000" and "growing table releases no measure axis" in refused.value.detail
        assert "declare" not in refused.value.detail
    prima.close()
