"""Every in-memory synopsis implements `engine.synopses.protocol.Synopsis`, the interface answers read:
each kind a strategy can state, built and loaded for real, plus a growing table's releases."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from engine.answer import Answer
from engine.builds.growing import GrowingCube
from engine.service import Prima
from engine.synopses import kinds
from engine.synopses.protocol import Synopsis
from storage.schema import TableSpec
from tests.conftest import sales_spec

METHODS = [n for n, v in vars(Synopsis).items() if inspect.isfunction(v) and not n.startswith("_")]


def _conforms(synopsis: object) -> None:
    assert isinstance(synopsis, Synopsis)  # every attribute and method is there
    for name in METHODS:
        wanted = inspect.signature(getattr(Synopsis, name))
        got = inspect.signature(getattr(type(synopsis), name))
        assert list(got.parameters) == list(wanted.parameters), f"{type(synopsis).__name__}.{name}"
        assert [p.default for p in got.parameters.values()] == [p.default for p in wanted.parameters.values()]


def test_the_protocol_names_what_answers_read() -> None:
    assert set(METHODS) == {
        "remember",
        "total",
        "variance",
        "grouped_totals",
        "grouped_variances",
        "class_variance",
        "error_notes",
    }


@pytest.mark.parametrize("strategy, kind", [("identity", "dense"), ("cuboids", "cuboids"), ("hdpview", "blocks")])
def test_every_synopsis_kind_implements_the_protocol(prima: Prima, sales_csv: Path, strategy: str, kind: str) -> None:
    raw = sales_spec(sales_csv)
    raw["cube"] = {"build": "on_first_query", "strategy": strategy}
    prima.register(TableSpec.model_validate(raw))
    answer = prima.query("SELECT region, SUM(amount) FROM sales GROUP BY region")
    assert isinstance(answer, Answer) and answer.cube is not None and answer.cube["strategy"] == strategy
    built, exact = prima.cube_for_query("sales"), prima.exact_cube("sales")
    assert kinds.kind_of(built.meta) == kind
    _conforms(built)
    _conforms(exact)
    assert set(kinds.SYNOPSES) == {"dense", "cuboids", "blocks"}  # a new kind joins the parametrisation above


def test_a_cube_with_time_rollups_implements_the_protocol(prima: Prima, sales_csv: Path) -> None:
    """A table declared by day is loaded with its month and year blocks (`engine.synopses.rolled`)."""
    raw = sales_spec(sales_csv)
    raw["dimensions"][2]["granularity"] = "day"
    prima.register(TableSpec.model_validate(raw))
    prima.query("SELECT COUNT(*) FROM sales")
    built = prima.cube_for_query("sales")
    assert type(built).__name__ == "RolledUp" and "time_rollups" in built.meta
    _conforms(built)


def test_a_growing_tables_releases_implement_the_protocol() -> None:
    _conforms(GrowingCube(table="events", build_id="x", shape=(3,)))


def test_an_answer_reads_as_its_json_and_compares_equal_to_a_dict(sales: Prima) -> None:
    answer = sales.query("SELECT COUNT(*) AS n FROM sales WHERE age < 30")
    as_json = answer.as_dict()
    assert answer == as_json and list(answer) == list(as_json) and answer["rows"] == answer.rows
    assert list(as_json)[:7] == ["columns", "rows", "stddev", "ci95", "noisy", "group_columns", "notes"]
    assert list(as_json)[-2:] == ["table", "cube"]
    assert Answer.of(as_json) == answer and answer.to_json() == sales.cached_query_json(
        "SELECT COUNT(*) AS n FROM sales WHERE age < 30"
    )
