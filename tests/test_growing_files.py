"""How a growing table's files are read at each append: no one row decides whether an append
completes (a line that does not parse is read leniently, the same way whatever it holds), only
the period's folders are opened, and the files stay under the import directory (no link out, no
glob pattern in a name). Answers are checked against DuckDB's SQL on the well-formed rows."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import duckdb
import pytest

from engine.errors import PrimaError
from engine.service import Prima
from storage import ledger
from storage.schema import TableSpec

HEADER = "channel,cat,person,amount\n"
DAY1 = "web,a,1,5\napp,b,2,7\nstore,a,3,9\n"
DAY2 = 'web,a,4,5\napp,a,5,11\n "web" , c ,6,13\r\nstore,"b",7,2\n'  # quoted, padded, CRLF: the same rows

# Lines one row of a day's CSV file may be: each used to fail the append after its charge.
MALFORMED = {
    "an extra field": b"999,web,5,7\n",
    "a missing field": b"web,a\n",
    "invalid UTF-8": b"\xff\xfe,a,8,3\n",
    "a line over 2 MB": b"web,a,9," + b"7" * 2_500_000 + b"\n",
    "tab-separated": b"web\ta\t10\t4\n",
    "an unterminated quote": b'app,"b,11,6\n',
    "binary junk": bytes(b for b in range(256) if b not in b"\r\n") + b"\n",  # one line: no line break inside
}


def csv_spec(path: Path, name: str = "ev", source: str = "csv") -> TableSpec:
    return TableSpec.model_validate(
        {
            "name": name,
            "source": {source: str(path)},
            "dimensions": [
                {"name": "day", "type": "date", "lo": "2025-01-01", "hi": "2025-01-31", "outside": "exclude"},
                {"name": "channel", "type": "category", "values": ["web", "app", "store"]},
                {"name": "cat", "type": "category", "values": ["a", "b", "c"]},
            ],
            "measures": [{"name": "amount", "lo": 0, "hi": 100}],
            "epsilon": 1.0,
            "growth": {"period": "day"},
        }
    )


def write_days(root: Path, day2_extra: bytes = b"") -> Path:
    """``root/ev/day=2025-01-0N/part.csv`` for days 1-3, day 2 with ``day2_extra`` in its middle."""
    events = root / "ev"
    cut = DAY2.index("\n", 10) + 1  # after the second row
    for day, body in (
        (1, DAY1.encode()),
        (2, DAY2.encode()[:cut] + day2_extra + DAY2.encode()[cut:]),
        (3, DAY1.encode()),
    ):
        folder = events / f"day=2025-01-0{day}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part.csv").write_bytes(HEADER.encode() + body)
    return events


def day_answers(prima: Prima, day: str) -> tuple[float, float, float]:
    got = prima.answer_with(
        f"SELECT COUNT(*), SUM(amount), COUNT(amount) FROM ev WHERE day = '{day}'", prima.exact_cube
    )["rows"][0]
    return tuple(float(v or 0) for v in got)


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_line_never_fails_an_append_and_moves_at_most_one_row(tmp_path: Path, kind: str) -> None:
    """The neighbouring streams differ in one line of day 2's file: both append days 1-3 and end
    "done"; day 2's exact answers differ by at most one row (its clipped amount at most the bound);
    days 1 and 3 are equal to DuckDB's SQL on the well-formed rows in both."""
    results = {}
    for side, extra in (("without", b""), ("with", MALFORMED[kind])):
        events = write_days(tmp_path / side, extra)
        prima = Prima(tmp_path / side / "data", import_dir=tmp_path / side, seed=1)
        prima.register(csv_spec(events))
        for _ in range(3):
            prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
        assert [(p, s) for p, s, _, _ in ledger.periods(prima.db, "ev")] == [
            ("2025-01-01", "done"),
            ("2025-01-02", "done"),
            ("2025-01-03", "done"),
        ]
        results[side] = {d: day_answers(prima, d) for d in ("2025-01-01", "2025-01-02", "2025-01-03")}
        prima.close()
    for side in results:
        assert results[side]["2025-01-01"] == results[side]["2025-01-03"] == (3.0, 21.0, 3.0)
    assert results["without"]["2025-01-02"] == (4.0, 31.0, 4.0)
    n, s, c = (abs(a - b) for a, b in zip(results["with"]["2025-01-02"], results["without"]["2025-01-02"]))
    assert n <= 1 and c <= 1 and s <= 100


def test_a_parquet_day_with_text_in_a_numeric_column_appends(tmp_path: Path) -> None:
    """A day whose file types ``amount`` as text ("n/a" in one row) appends; "n/a" is a NULL amount."""
    events = tmp_path / "ev"
    con = duckdb.connect()
    for day, select in (
        (1, "SELECT 'web' AS channel, 'a' AS cat, 1 AS person, 5 AS amount"),
        (2, "SELECT 'web' AS channel, 'a' AS cat, 2 AS person, 'n/a' AS amount UNION ALL SELECT 'app', 'b', 3, '7'"),
    ):
        (events / f"day=2025-01-0{day}").mkdir(parents=True)
        con.execute(f"COPY ({select}) TO '{events}/day=2025-01-0{day}/part.parquet' (FORMAT parquet)")
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(events, source="parquet"))
    prima.append("ev", today=dt.date(2025, 1, 5))
    assert day_answers(prima, "2025-01-02") == (2.0, 7.0, 1.0)
    assert day_answers(prima, "2025-01-01") == (1.0, 5.0, 1.0)
    prima.close()


def test_a_day_with_no_file_appends_as_empty(tmp_path: Path) -> None:
    """A closed day without any file is a day without rows: it appends, and counts 0."""
    events = write_days(tmp_path)
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(events))
    prima.append("ev", today=dt.date(2025, 1, 6))
    assert [p for p, s, _, _ in ledger.periods(prima.db, "ev") if s == "done"][-1] == "2025-01-05"
    assert day_answers(prima, "2025-01-05") == (0.0, 0.0, 0.0)
    prima.close()


def test_an_append_never_opens_an_earlier_days_csv(tmp_path: Path) -> None:
    """Day 1's file replaced by a directory of the same name (nothing a CSV reader can open) after it
    was appended: day 2 still appends."""
    events = write_days(tmp_path)
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(events))
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    first = events / "day=2025-01-01" / "part.csv"
    first.unlink()
    (events / "day=2025-01-01" / "zz.csv").write_bytes(b"\x00" * 64)
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    assert day_answers(prima, "2025-01-02") == (4.0, 31.0, 4.0)
    prima.close()


def _refused(prima: Prima) -> str:
    with pytest.raises(PrimaError) as err:
        prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    return str(err.value.detail)


def test_links_out_of_the_import_directory_are_refused(tmp_path: Path) -> None:
    """A file symlink inside the directory, or the directory swapped for a symlink after
    registration, pointing outside the import directory: refused, nothing of it read."""
    imports, outside = tmp_path / "imports", tmp_path / "outside"
    events = write_days(imports)
    secret = write_days(outside)
    prima = Prima(tmp_path / "data", import_dir=imports, seed=1)
    prima.register(csv_spec(events))
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    os.symlink(secret / "day=2025-01-02" / "part.csv", events / "day=2025-01-02" / "more.csv")
    assert "links outside the configured import directory" in _refused(prima)
    (events / "day=2025-01-02" / "more.csv").unlink()
    moved = imports / "ev-old"
    events.rename(moved)
    os.symlink(secret, events)
    assert "outside the configured import directory" in _refused(prima)
    events.unlink()
    moved.rename(events)
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    assert day_answers(prima, "2025-01-02") == (4.0, 31.0, 4.0)
    prima.close()


def test_a_folder_name_is_a_name_not_a_glob_pattern(tmp_path: Path) -> None:
    """A growing table over a folder named ``e*`` reads that folder only, not ``ev``'s files."""
    write_days(tmp_path)
    star = tmp_path / "e*"
    (star / "day=2025-01-01").mkdir(parents=True)
    (star / "day=2025-01-01" / "part.csv").write_text(HEADER + "web,a,1,50\n")
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(star))
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    assert day_answers(prima, "2025-01-01") == (1.0, 50.0, 1.0)
    prima.close()


def test_a_growing_table_retired_and_registered_again_answers_clearly(tmp_path: Path) -> None:
    """The name registered again over the same files is a new table: no period measured (a clear
    409, not an internal error on every query), and its periods' budget stays spent (the retired
    table's releases went with it; its charges did not)."""
    events = write_days(tmp_path)
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(events))
    prima.append("ev", today=dt.date(2025, 1, 3))
    assert prima.query("SELECT COUNT(*) FROM ev")["rows"]
    prima.retire("ev")
    prima.register(csv_spec(events))
    assert prima.growth_status("ev")["measured"] == 0
    with pytest.raises(PrimaError, match="no period of 'ev' is measured yet") as err:
        prima.query("SELECT COUNT(*) FROM ev")
    assert err.value.status == 409
    with pytest.raises(PrimaError, match="has charged period 2025-01-01 already"):
        prima.append("ev", today=dt.date(2025, 1, 3))
    prima.close()


def _with(spec: TableSpec, **changes: object) -> TableSpec:
    return TableSpec.model_validate(spec.model_dump(mode="json", exclude_none=True) | changes)


def test_a_parent_folder_joins_its_childs_budget(tmp_path: Path) -> None:
    """A lifetime-capped table over ``imports/all/ev``; registering ``imports/all`` (its parent, the
    same rows and more) joins that id space and its spend — it used to get a fresh cap."""
    events = write_days(tmp_path / "all")
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    growth = {"period": "day", "model": "lifetime", "per_period": 0.25}
    prima.register(_with(csv_spec(events), growth=growth))
    prima.append("ev", limit=2, today=dt.date(2025, 2, 1))
    spent = prima.budget("ev")["spent"]
    assert spent == pytest.approx(0.5)
    out = prima.register(_with(csv_spec(events.parent, name="everything"), growth=growth))
    assert out["budget"]["id_space"] == prima.budget("ev")["id_space"] and out["budget"]["spent"] == pytest.approx(
        spent
    )
    assert any("joins the id space" in n for n in out["notes"])
    prima.close()


def test_a_spent_space_keeps_its_period_grain_after_retirement(tmp_path: Path) -> None:
    """A day-grain table appended and retired; a month-grain table over the same folder would
    release January again per month at a fresh ε: refused while the day-grain spend stands."""
    events = write_days(tmp_path)
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    prima.register(csv_spec(events))
    prima.append("ev", limit=1, today=dt.date(2025, 2, 1))
    prima.retire("ev")
    monthly = csv_spec(events, name="monthly").model_dump(mode="json", exclude_none=True)
    monthly["dimensions"][0]["granularity"] = "month"
    with pytest.raises(PrimaError, match="composed per day"):
        prima.register(TableSpec.model_validate(monthly))
    prima.register(csv_spec(events, name="daily"))  # the same grain joins, and finds day 1 spent
    assert prima.budget("daily")["spent"] == pytest.approx(1.0)
    prima.close()


def test_a_three_year_daily_tree_registers_and_lists_in_moments(tmp_path: Path) -> None:
    """Growth facts of a dyadic day-grain table over a 3-year horizon (1,095 periods): registering it
    took 95-160 s and each analyst table listing 49-260 s of CPU (the tree-vs-flat crossover was
    scanned length by length over every start). Generous bounds: minutes before, under a second now."""
    import time

    events = write_days(tmp_path)
    spec = csv_spec(events).model_dump(mode="json", exclude_none=True)
    spec["dimensions"][0]["hi"] = "2027-12-31"
    spec["growth"] = {"period": "day", "releases": "dyadic"}
    prima = Prima(tmp_path / "data", import_dir=tmp_path, seed=1)
    start = time.perf_counter()
    out = prima.register(TableSpec.model_validate(spec))
    for _ in range(20):
        facts = prima.table_info("ev")["growth"]
    took = time.perf_counter() - start
    assert facts["periods"] == 1095 and facts["levels"] == 12
    assert facts["tree_beats_flat_from"] == out["growth"]["tree_beats_flat_from"]
    assert took < 20, took
    prima.close()


def test_the_crossover_is_the_first_length_the_tree_wins_on_small_horizons() -> None:
    """Bisection finds what a scan of every length finds wherever the comparison flips once."""
    from privacy.accounting.periods import Releases, crossover

    for periods in (7, 24, 31, 60, 120):
        for branching in (2, 4):
            for currency in ("epsilon", "rho"):
                tree, flat = Releases(periods, branching), Releases(periods)
                wins = [
                    tree.relative_variance(n, currency) < flat.relative_variance(n, currency)
                    for n in range(1, periods + 1)
                ]
                first = wins.index(True) + 1 if any(wins) else None
                if first is None or all(wins[first - 1 :]):
                    assert crossover(tree, currency) == first, (periods, branching, currency)
