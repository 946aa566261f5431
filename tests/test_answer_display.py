"""What an answer shows beyond its numbers: outside groups ((other), NULL) only when their released
counts say rows are there, and a flag on every value that is noise — NULL in its place when asked
(REST here; the wire in test_wire.py, CSV/Arrow in test_faces.py, the console in test_console.py)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engine.answers.noise import NOISY_FRACTION
from engine.answers.options import AnswerOptions
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import admin_headers, registered_template, sales_spec, seeded_copy, write_sales_csv

BY_REGION = "SELECT region, COUNT(*) AS n, SUM(amount) AS total FROM sales GROUP BY region"


def _regions(answer: Any) -> list[Any]:
    return [row[0] for row in answer["rows"]]


def test_empty_outside_groups_are_left_out_and_rows_there_are_shown(tmp_path: Path) -> None:
    """20 seeded builds of a table with 5 % 'mars' regions (outside the declared four: 1,000 rows, a
    count's stddev ≈ 110 at ε = 1) and no NULL region: '(other)' shows in every build, the empty NULL group in at most one (noise beyond
    4.39σ under Laplace noise: 0.1 % a build, `engine.answers.outside_groups`), each time the note names what was left out."""
    path = write_sales_csv(tmp_path / "sales.csv", rows=20_000)
    shown_other, shown_null = 0, 0
    template = registered_template(tmp_path / "template", TableSpec.model_validate(sales_spec(path)))
    for seed in range(20):
        prima = seeded_copy(template, tmp_path / f"data{seed}", seed)
        got = prima.query(BY_REGION)
        shown_other += "(other)" in _regions(got)
        shown_null += None in _regions(got)
        if None not in _regions(got):
            assert any("groups left out: region = NULL" in n for n in got["notes"]), got["notes"]
        everything = prima.query(BY_REGION, AnswerOptions(outside_groups="all"))
        assert _regions(everything) == ["north", "south", "east", "west", "(other)", None]
        asked = prima.query("SELECT region, COUNT(*) FROM sales WHERE region IS NULL GROUP BY region")
        assert _regions(asked) == [None]  # a condition selecting only the NULL values asked for them
        prima.close()
    assert shown_other == 20 and shown_null <= 1


def test_noise_off_shows_exactly_the_groups_sql_shows(tmp_path: Path) -> None:
    """With an exact cube (noise off) an outside group shows iff it has rows — DuckDB's GROUP BY on
    the raw file has a NULL group only when some region is NULL."""
    path = write_sales_csv(tmp_path / "sales.csv", rows=2000)
    text = path.read_text().splitlines()
    head, body = text[0], text[1:]
    with_nulls = tmp_path / "nulls.csv"
    with_nulls.write_text(
        "\n".join([head, *body, *[",".join(r.split(",")[:1] + [""] + r.split(",")[2:]) for r in body[:7]]]) + "\n"
    )
    for source, nulls in ((path, False), (with_nulls, True)):
        prima = Prima(tmp_path / f"data-{nulls}", seed=1)
        prima.register(TableSpec.model_validate(sales_spec(source)))
        cube = prima.exact_cube("sales")
        got = prima.answer_with(BY_REGION, lambda _: cube)
        want = prima.db.run("SELECT COUNT(*) FROM src.sales WHERE region IS NULL")[0][0]
        assert (None in _regions(got)) == nulls == (want > 0)
        if nulls:
            assert got["rows"][-1][:2] == [None, 7.0]
        prima.close()


def test_noisy_values_are_flagged_and_suppressed_over_rest(client: Any) -> None:
    """``noisy`` marks exactly the values whose 95 % interval's half-width exceeds half the value;
    ``"noisy": "null"`` shows those as null (their stddev and interval kept) with a note;
    ``"outside_groups": "all"`` adds the empty groups; an unknown word is 422."""
    precise = "SELECT education, COUNT(*) AS n FROM people GROUP BY education"  # ~25,000 ± 100 a group
    noisy = "SELECT education, SUM(salary) AS pay, COUNT(*) AS n FROM people WHERE age = 90 AND hours = 1 GROUP BY education"
    assert not any(f[1] for f in client.post("/v1/query", json={"sql": precise}).json()["noisy"])
    flagged = client.post("/v1/query", json={"sql": noisy}).json()
    for row, cis, flags in zip(flagged["rows"], flagged["ci95"], flagged["noisy"]):
        assert flags[0] is None  # a group key
        for value, ci, flag, bounds in zip(row[1:], cis[1:], flags[1:], [(0, math.inf), (0, math.inf)]):
            at_bound = value in bounds and ci[1] > ci[0]  # clamped there: noise too
            assert flag == (None if value is None else (ci[1] - ci[0]) / 2 > NOISY_FRACTION * abs(value) or at_bound)
    assert True in [f[1] for f in flagged["noisy"]]  # a region with almost no rows: noise in every group
    assert any("values are noise" in n for n in flagged["notes"])
    hidden = client.post("/v1/query", json={"sql": noisy, "noisy": "null"}).json()
    for was, now, flags in zip(flagged["rows"], hidden["rows"], flagged["noisy"]):
        assert now == [None if f else v for v, f in zip(was, flags)]
    assert hidden["stddev"] == flagged["stddev"] and hidden["ci95"] == flagged["ci95"]
    assert any("shown as NULL" in n for n in hidden["notes"])
    groups = "SELECT region, COUNT(*) FROM people GROUP BY region"
    assert len(client.post("/v1/query", json={"sql": groups}).json()["rows"]) in (4, 5, 6)  # measured ones
    assert len(client.post("/v1/query", json={"sql": groups, "outside_groups": "all"}).json()["rows"]) == 6
    assert client.post("/v1/query", json={"sql": groups, "noisy": "hide"}).status_code == 422


@pytest.mark.parametrize("kind", ["csv", "arrow"])
def test_a_tables_default_suppresses_and_a_request_overrides_it(empty_client: Any, tmp_path: Path, kind: str) -> None:
    """``answers: {"noisy": "null", "outside_groups": "all"}`` at registration makes those the table's
    defaults on every face; a request's ``"noisy": "flag"`` shows the values again."""
    path = write_sales_csv(tmp_path / "sales.csv", rows=1500)
    spec = sales_spec(path) | {"answers": {"noisy": "null", "outside_groups": "all"}}
    assert empty_client.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
    sql = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region"
    default = empty_client.post("/v1/query", json={"sql": sql}).json()
    flags = [f[1] for f in default["noisy"]]
    assert True in flags and [r[1] is None for r in default["rows"]] == flags
    assert default["rows"][-1][0] is None  # "all": the NULL region group, though no region is NULL
    shown = empty_client.post("/v1/query", json={"sql": sql, "noisy": "flag"}).json()
    assert all(r[1] is not None for r in shown["rows"]) and shown["noisy"] == default["noisy"]
    accept = {"csv": "text/csv", "arrow": "application/vnd.apache.arrow.stream"}[kind]
    r = empty_client.post("/v1/query", json={"sql": sql}, headers={"Accept": accept})
    if kind == "csv":
        rows = list(csv.DictReader(io.StringIO(r.text)))
        assert [row["total"] == "" for row in rows] == flags
        assert [row["total_noisy"] for row in rows] == ["True" if f else "False" for f in flags]
    else:
        table = pa.ipc.open_stream(r.content).read_all()
        assert table.schema.field("total_noisy").type == pa.bool_()
        assert table.column("total_noisy").to_pylist() == flags
        assert [v is None for v in table.column("total").to_pylist()] == flags
        assert any("shown as NULL" in n for n in json.loads(table.schema.metadata[b"prima.notes"]))


@pytest.mark.parametrize("currency", ["epsilon", "rho"])
def test_an_empty_outside_group_passes_the_threshold_at_the_stated_rate(currency: str) -> None:
    """An empty cell's released count clears `threshold_z` stddevs in `EMPTY_GROUP_SHOWN` (0.1 %) of
    builds under the table's own noise (the project's samplers, 600,000 seeded draws: ±3 binomial
    sd), and a sum of four such releases (a group read from several cells) no more often. A fixed 3σ
    passed 0.7 % under Laplace noise."""
    from engine.answers.outside_groups import EMPTY_GROUP_SHOWN, threshold_z
    from privacy.mechanisms.discrete_gaussian import GridGaussian
    from privacy.mechanisms.sampler import GridLaplace, RandomSource

    n, z = 600_000, threshold_z(currency)
    mechanism = GridLaplace(1.0, 1.0) if currency == "epsilon" else GridGaussian(1.0, 0.5)
    sd = math.sqrt(mechanism.variance)
    noise = mechanism.release(np.zeros(n), RandomSource(7), public=True)
    expected, spread = n * EMPTY_GROUP_SHOWN, 3 * math.sqrt(n * EMPTY_GROUP_SHOWN)
    assert abs(int(np.sum(noise > z * sd)) - expected) <= spread, (currency, z, int(np.sum(noise > z * sd)))
    summed = mechanism.release(np.zeros((n, 4)), RandomSource(8), public=True).sum(axis=1)
    assert int(np.sum(summed > z * sd * 2)) <= expected + spread
