"""engine/sql/templates.py: a query planned from a kept parse tree of its shape equals the full parse.

Every statement of the SQL-surface and fuzz suites (and mutations of them) is planned twice: once
from scratch (`plan_query`) and once through `PlanShapes` after a *sibling* — the same text with
other constants — has left its parse tree behind. Plans, or the errors raised, must be identical.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.errors import PrimaError
from engine.service import Prima
from engine.sql.bind import plan_query
from engine.sql.templates import PlanShapes, shape_of
from storage.schema import TableSpec
from tests.conftest import sales_spec, write_sales_csv
from tests.test_fuzz import SEEDS, mutate
from tests.test_sql_surface import SUPPORTED, UNSUPPORTED

_VALUES = ["'north'", "'south'", "'it''s'", "'a\"b'", "'2020-06'", "'2021-01-01'", "'x''y'", "'NORTH'", "''", "'a'"]
_NUMBERS = ["0", "1", "2", "5", "24", "30", "40", "90", "1000", "0.5", "1e3", "-3", "17", "2.5e1", "12"]


@pytest.fixture(scope="module")
def prima(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prima]:
    tmp = tmp_path_factory.mktemp("shapes")
    service = Prima(tmp / "data", seed=3)
    spec = sales_spec(write_sales_csv(tmp / "sales.csv", rows=50))
    spec["dimensions"][1]["values"] = ["north", "south", "it's", 'a"b']  # quotes inside declared values
    service.register(TableSpec.model_validate(spec))
    yield service
    service.close()


def _outcome(plan: Any) -> Any:
    try:
        return plan()
    except PrimaError as exc:
        return type(exc).__name__, exc.status, exc.detail


def _sibling(sql: str, rng: random.Random) -> str:
    """``sql`` with every literal the shape expression finds replaced by another of its kind."""
    shaped = shape_of(sql)
    if shaped is None:
        return sql
    _, spans, texts = shaped
    out, last = [], 0
    for (a, b), text in zip(spans, texts):
        out += [sql[last:a], rng.choice(_VALUES if text.startswith("'") else _NUMBERS)]
        last = b
    return "".join(out + [sql[last:]])


def _statements() -> list[str]:
    rng = random.Random(11)
    base = (
        [s[0] for s in SUPPORTED]
        + [u[0] for u in UNSUPPORTED]
        + SEEDS
        + [
            "SELECT COUNT(*) FROM sales WHERE age BETWEEN 30 AND 30 AND score BETWEEN 30 AND 3",
            "SELECT COUNT(*) FROM sales WHERE day = DATE '2020-03-01' AND region IN ('it''s', 'north')",
            "SELECT COUNT(*) FROM sales WHERE region = 'it''s' OR region = 'a\"b'",
            "SELECT COUNT(*) FROM sales WHERE -age < 5",
            "SELECT region, COUNT(*) FROM sales GROUP BY 1 ORDER BY 2 DESC LIMIT 2 OFFSET 1",
            "SELECT DATE_TRUNC('year', day) AS y, COUNT(*) FROM sales GROUP BY 1",
            "SELECT COUNT(*) FROM sales WHERE 1 <> 1",
            "SELECT COUNT(*) FROM sales WHERE age BETWEEN -(5) AND (40)",
            'SELECT COUNT(*) FROM "sales" WHERE "age" > 4 AND region = \'a"b\'',
        ]
    )
    return base + [mutate(rng.choice(base), rng) for _ in range(300)]


def test_a_kept_parse_tree_plans_like_a_fresh_parse(prima: Prima) -> None:
    lookup = prima.spec_or_none
    rng = random.Random(5)
    reused = 0
    for sql in _statements():
        shapes = PlanShapes()
        _outcome(lambda: shapes.plan(sql, lookup))  # the statement's tree, reused by its siblings
        for sibling in (_sibling(sql, rng) for _ in range(3)):
            assert _outcome(lambda: shapes.plan(sibling, lookup)) == _outcome(lambda: plan_query(sibling, lookup)), (
                sibling
            )
        shapes = PlanShapes()
        for _ in range(3):  # a sibling first (keeps the tree), then the statement itself
            _outcome(lambda: shapes.plan(_sibling(sql, rng), lookup))
        expected = _outcome(lambda: plan_query(sql, lookup))
        shaped = shape_of(sql)
        reused += shaped is not None and shaped[0] in shapes._shapes and not isinstance(expected, tuple)
        assert _outcome(lambda: shapes.plan(sql, lookup)) == expected, sql
    assert reused > 50  # answered statements really went through a kept tree


def test_equal_constants_are_not_swapped_and_fixed_literals_are_kept(prima: Prima) -> None:
    lookup, shapes = prima.spec_or_none, PlanShapes()
    first = "SELECT COUNT(*) FROM sales WHERE age BETWEEN 30 AND 30 AND score >= 5"
    shapes.plan(first, lookup)
    for sql in (
        "SELECT COUNT(*) FROM sales WHERE age BETWEEN 20 AND 60 AND score >= 7",
        "SELECT COUNT(*) FROM sales WHERE age BETWEEN 61 AND 19 AND score >= 0",
    ):
        assert shapes.plan(sql, lookup) == plan_query(sql, lookup)
    grouped = "SELECT region, COUNT(*) FROM sales GROUP BY 1"
    shapes.plan(grouped, lookup)
    # GROUP BY 2 has the same shape but its literal is fixed: planned afresh, and refused as it should be
    with pytest.raises(PrimaError) as refused:
        shapes.plan("SELECT region, COUNT(*) FROM sales GROUP BY 2", lookup)
    assert "GROUP BY" in refused.value.detail


def test_texts_the_shape_expression_cannot_read_are_parsed_in_full() -> None:
    for sql in (
        "SELECT COUNT(*) FROM t -- 5",
        "SELECT COUNT(*) FROM t /* 'x' */",
        "SELECT 'a\\'b'",
        "SELECT $1",
        "SELECT 1\0",
    ):
        assert shape_of(sql) is None
    key, spans, texts = shape_of("SELECT COUNT(*) FROM \"t 1\" WHERE \"a2\" = 5e3 AND b IN ('x''y', 7)")
    assert texts == ["5e3", "'x''y'", "7"] and '"t 1"' in key and '"a2"' in key


def test_a_long_session_of_new_queries_keeps_a_bounded_number_of_shapes(prima: Prima, tmp_path: Path) -> None:
    shapes = PlanShapes(capacity=8)
    for i in range(40):
        shapes.plan(f"SELECT COUNT(*) FROM sales WHERE age > {i}" + " AND score > 1" * (i % 20), prima.spec_or_none)
    assert len(shapes._shapes) == 8


def test_remembered_conjuncts_bind_like_fresh_ones(prima: Prima) -> None:
    """Many siblings through one PlanShapes: most of their conjuncts were bound before (the memo
    answers them), including ones that raise notes and several conjuncts on one dimension."""
    lookup, shapes, rng = prima.spec_or_none, PlanShapes(), random.Random(8)
    templates = [
        "SELECT COUNT(*), SUM(amount) FROM sales WHERE age BETWEEN {n} AND {n} AND region IN ({v}, {v}) AND score > {n}",
        "SELECT COUNT(*) FROM sales WHERE age > {n} AND age < {n} AND region <> {v} AND NOT region = {v}",
        "SELECT region, AVG(amount) FROM sales WHERE day BETWEEN {v} AND {v} AND score = {n} GROUP BY region",
        "SELECT COUNT(*) FROM sales WHERE {n} = {n} AND (age < {n} OR age > {n}) AND region = {v}",
    ]
    hits = 0
    for template in templates:
        for _ in range(60):
            sql = template.replace("{n}", "\0").replace("{v}", "\1")
            sql = "".join(
                rng.choice(_NUMBERS[:6]) if c == "\0" else rng.choice(_VALUES[:3] + _VALUES[7:8]) if c == "\1" else c
                for c in sql
            )
            before = len(shapes._conjuncts._bound)
            assert _outcome(lambda: shapes.plan(sql, lookup)) == _outcome(lambda: plan_query(sql, lookup)), sql
            hits += len(shapes._conjuncts._bound) == before
    assert hits > 40  # the memo answered whole queries' conjuncts


def test_a_remembered_conjunct_is_not_reused_for_another_declaration(prima: Prima) -> None:
    """The same text against a table declared again with other values (retired and registered
    under the same name) binds against the new declaration."""
    old = prima.spec_or_none("sales")
    new = old.model_copy(
        update={
            "dimensions": [
                old.dimensions[0],
                old.dimensions[1].model_copy(update={"values": ["south", "north", "it's", 'a"b']}),
                *old.dimensions[2:],
            ]
        }
    )
    shapes = PlanShapes()
    sql = "SELECT COUNT(*) FROM sales WHERE region = 'north' AND age > 30"
    first = shapes.plan(sql, lambda name, _: old)
    second = shapes.plan(sql.replace("30", "31"), lambda name, _: new)
    third = shapes.plan(sql.replace("30", "32"), lambda name, _: new)
    assert first.selection[1] == ((0, 0),) and second.selection[1] == third.selection[1] == ((1, 1),)
