"""SQL as analysts first write it: table names in any case, literals matching no declared value,
error messages in SQL's terms (not the parser's), a quoting hint for dashed names."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.service import Prima
from storage.schema import TableSpec


@pytest.fixture
def demo(tmp_path: Path) -> Prima:
    prima = Prima(tmp_path / "data", seed=1)
    prima.ensure_demo()
    yield prima
    prima.close()


def test_unquoted_table_names_are_case_insensitive_quoted_exact(demo: Prima) -> None:
    assert demo.query("SELECT COUNT(*) FROM PEOPLE")["rows"] == demo.query("SELECT COUNT(*) FROM people")["rows"]
    with pytest.raises(Exception) as err:
        demo.query('SELECT COUNT(*) FROM "PEOPLE"')
    assert getattr(err.value, "status", None) == 404


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("SELECT COUNT(*) FROM people WHERE education = 'PhD'", "did you mean 'phd'?"),
        ("SELECT COUNT(*) FROM people WHERE education IN ('phd', 'BSC')", "did you mean 'bsc'?"),
        ("SELECT COUNT(*) FROM people WHERE age = 30.5", "whole numbers only"),
        ("SELECT COUNT(*) FROM people WHERE region = 'atlantis'", "its values are"),
    ],
)
def test_literals_matching_no_declared_value_say_so(demo: Prima, sql: str, expected: str) -> None:
    notes = demo.query(sql)["notes"]
    assert any(expected in n for n in notes), notes
    assert not any(literal in n for n in notes for literal in ("PhD", "BSC", "30.5", "atlantis"))  # literals not echoed


@pytest.mark.parametrize(
    "sql,expected,leak",
    [
        ("SELECT COUNT(*) FROM people GROUP BY age/10", "a division 'age / 10'", "DIV"),
        ("SELECT COUNT(*) FROM people WHERE age BETWEEN 2 AND 5E", "malformed number at line 1", "5E"),
        ("SELECT COUNT(*) FROM people WHERE age = nan", "the column 'nan'", "COLUMN"),
        ("SELECT COUNT(*) FROM people WHERE age BETWEEN 1 AND", "syntax error", "<class"),
    ],
)
def test_errors_speak_sql_not_parser_internals(demo: Prima, sql: str, expected: str, leak: str) -> None:
    with pytest.raises(Exception) as err:
        demo.query(sql)
    detail = getattr(err.value, "detail", "")
    assert getattr(err.value, "status", None) == 400 and expected in detail and leak not in detail, detail


def test_an_unquoted_dashed_column_gets_a_quoting_hint(tmp_path: Path) -> None:
    csv_path = tmp_path / "w.csv"
    csv_path.write_text("age,hours-per-week\n30,40\n40,50\n")
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(
        TableSpec.model_validate(
            {
                "name": "w",
                "source": {"csv": str(csv_path)},
                "epsilon": 1.0,
                "dimensions": [{"name": "age", "type": "int", "lo": 0, "hi": 120}],
                "measures": [{"name": "hours-per-week", "lo": 0, "hi": 99}],
                "cube": {"build": "on_first_query"},
            }
        )
    )
    with pytest.raises(Exception) as err:
        prima.query("SELECT SUM(hours-per-week) FROM w")
    assert 'quote it: "hours-per-week"' in err.value.detail
    assert prima.query('SELECT SUM("hours-per-week") FROM w')["rows"][0][0] is not None
    prima.close()
