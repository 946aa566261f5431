"""With noise off (the true cube), every range query equals DuckDB's own answer on the raw file
(measures clipped): out-of-domain and NULL rows included, as SQL counts them."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import sales_spec

DOMAIN = (
    "age BETWEEN 18 AND 90 AND region IN ('north','south','east','west') "
    "AND CAST(day AS DATE) BETWEEN DATE '2020-01-01' AND DATE '2021-12-31' AND score BETWEEN 0 AND 24"
)
CLIPPED_SUM = "COALESCE(SUM(LEAST(GREATEST(amount, -100), 1000)), 0)"
REGIONS = ["north", "south", "east", "west"]


def duckdb_truth(prima: Prima, where: str, domain: bool = False) -> tuple[float, int]:
    """SQL's answer on the raw rows (``domain``: only the rows inside every declared domain)."""
    cond = " AND ".join(c for c in (DOMAIN if domain else "", where) if c) or "TRUE"
    s, n = prima.db.run(f"SELECT {CLIPPED_SUM}, COUNT(*) FROM src.sales WHERE {cond}")[0]
    return float(s), int(n)


def _month_start(rng: random.Random) -> dt.date:
    k = rng.randrange(24)
    return dt.date(2020 + k // 12, k % 12 + 1, 1)


def _month_end(d: dt.date) -> dt.date:
    return dt.date(d.year + d.month // 12, d.month % 12 + 1, 1) - dt.timedelta(days=1)


def random_condition(rng: random.Random, dim: str) -> tuple[str, str]:
    """(Prima condition, DuckDB condition) for one dimension; bin/month-aligned so both agree."""
    op = rng.choice(["between", ">=", ">", "<", "<=", "="])
    if dim == "age":  # literals inside the domain: a range past it reaches the below/above cells whole
        a, b = sorted(rng.sample(range(18, 91), 2))
        cond = {"between": f"age BETWEEN {a} AND {b}", "=": f"age = {a}"}.get(op, f"age {op} {a}")
        return cond, cond
    if dim == "score":  # bins of 5 over 0..24: aligned bounds only
        lo, hi = sorted(rng.sample(range(5), 2))
        cond = {
            "between": f"score BETWEEN {5 * lo} AND {5 * hi + 4}",
            ">=": f"score >= {5 * lo}",
            ">": f"score > {5 * lo + 4}",
            "<": f"score < {5 * hi}",
            "<=": f"score <= {5 * hi + 4}",
            "=": f"score BETWEEN {5 * lo} AND {5 * lo + 4}",
        }[op]
        return cond, cond
    if dim == "region":
        i, j = sorted(rng.sample(range(4), 2))
        if op == "=":
            return f"region = '{REGIONS[i]}'", f"region = '{REGIONS[i]}'"
        inside = REGIONS[i : j + 1] if op == "between" else REGIONS[i:] if op in (">=", ">") else REGIONS[: j + 1]
        if op == ">":
            inside = REGIONS[i + 1 :]
        if op == "<":
            inside = REGIONS[:j]
        prima_cond = {
            "between": f"region BETWEEN '{REGIONS[i]}' AND '{REGIONS[j]}'",
            ">=": f"region >= '{REGIONS[i]}'",
            ">": f"region > '{REGIONS[i]}'",
            "<": f"region < '{REGIONS[j]}'",
            "<=": f"region <= '{REGIONS[j]}'",
        }[op]
        ref = "region IN (" + ",".join(f"'{r}'" for r in inside) + ")" if inside else "FALSE"
        return prima_cond, ref
    d1, d2 = sorted([_month_start(rng), _month_start(rng)])
    e2 = _month_end(d2)
    col = "CAST(day AS DATE)"
    pairs = {
        "between": (f"day BETWEEN '{d1}' AND '{e2}'", f"{col} BETWEEN DATE '{d1}' AND DATE '{e2}'"),
        ">=": (f"day >= DATE '{d1}'", f"{col} >= DATE '{d1}'"),
        ">": (f"day > '{_month_end(d1)}'", f"{col} > DATE '{_month_end(d1)}'"),
        "<": (f"day < '{d2}'", f"{col} < DATE '{d2}'"),
        "<=": (f"day <= '{e2}'", f"{col} <= DATE '{e2}'"),
        "=": (f"day = '{d1.strftime('%Y-%m')}'", f"{col} BETWEEN DATE '{d1}' AND DATE '{_month_end(d1)}'"),
    }
    return pairs[op]


@pytest.mark.parametrize("outside", ["keep", "exclude"])
def test_random_range_queries_equal_duckdb_on_the_true_cube(prima: Prima, sales_csv: Path, outside: str) -> None:
    """Kept (the default), out-of-domain rows count wherever SQL counts them; excluded, the answers
    are SQL's over the rows inside every domain, and say so."""
    spec = sales_spec(sales_csv)
    spec["dimensions"] = [d | {"outside": outside} for d in spec["dimensions"]]
    sales = prima
    sales.register(TableSpec.model_validate(spec))
    cube = sales.exact_cube("sales")
    rng = random.Random(2024)
    checked = 0
    for _ in range(300):
        dims = [d for d in ("age", "region", "day", "score") if rng.random() < 0.6]
        pairs = [random_condition(rng, d) for d in dims]
        where = " AND ".join(p for p, _ in pairs)
        ref_where = " AND ".join(r for _, r in pairs)
        sql = "SELECT SUM(amount), COUNT(*) FROM sales" + (f" WHERE {where}" if where else "")
        result = sales.answer_with(sql, lambda _: cube)
        got_sum, got_count = result["rows"][0]
        want_sum, want_count = duckdb_truth(sales, ref_where, domain=outside == "exclude")
        assert got_count == want_count, sql
        assert got_sum == pytest.approx(want_sum, rel=1e-9, abs=1e-6), sql
        assert len(result["notes"]) == (outside == "exclude"), sql
        checked += 1
    assert checked == 300


def test_empty_and_out_of_domain_ranges(sales: Prima) -> None:
    """An empty range answers 0; a value past the declared domain is among the below/above/other
    rows, so its answer lies between 0 and theirs, and the interval says so."""
    cube = sales.exact_cube("sales")
    result = sales.answer_with("SELECT SUM(amount), COUNT(*) FROM sales WHERE age BETWEEN 50 AND 40", lambda _: cube)
    assert result["rows"] == [[0.0, 0.0]]
    for where, bin_ in (
        ("age > 95", "age > 90"),
        ("region = 'mars'", "region NOT IN ('north','south','east','west')"),
        ("day < '2019-06-01'", "day < '2020-01-01'"),
        ("age = 12", "age < 18"),
    ):
        result = sales.answer_with(f"SELECT COUNT(*) FROM sales WHERE {where}", lambda _: cube)
        truth, whole = duckdb_truth(sales, where)[1], duckdb_truth(sales, bin_)[1]
        assert result["ci95"][0][0] == [0.0, whole] and 0 <= truth <= whole, where
        assert result["notes"], where


def test_null_and_other_groups_and_is_null(prima: Prima, sales_csv: Path) -> None:
    """GROUP BY shows the NULL group and the other values' group as SQL shows NULL groups; IS NULL /
    IS NOT NULL select them; COUNT(*) with no WHERE is the file's row count."""
    lines = sales_csv.read_text().splitlines()
    lines += [
        f"{a},{r},{d},3,10"
        for a, r, d in (("", "north", "2020-02-02"), ("40", "", "2020-03-03"), ("50", "south", ""), ("", "", ""))
    ]
    sales_csv.write_text("\n".join(lines) + "\n")
    prima.register(TableSpec.model_validate(sales_spec(sales_csv)))
    cube = prima.exact_cube("sales")
    ask = lambda sql: prima.answer_with(sql, lambda _: cube)  # noqa: E731
    assert ask("SELECT COUNT(*) FROM sales")["rows"] == [[5004.0]]
    got = {r[0]: r[1] for r in ask("SELECT region, COUNT(*) FROM sales GROUP BY region")["rows"]}
    want = dict(prima.db.run("SELECT region, COUNT(*) FROM src.sales GROUP BY region"))
    assert got[None] == want[None] == 2 and got["(other)"] == want["mars"]
    assert all(got[r] == want[r] for r in REGIONS)
    for where in (
        "age IS NULL",
        "age IS NOT NULL",
        "region IS NULL AND age IS NULL",
        "NOT day IS NULL",
        "age IS NULL OR age > 60",
        "region <> 'north'",
        "region NOT IN ('north', 'south')",
    ):
        assert ask(f"SELECT COUNT(*) FROM sales WHERE {where}")["rows"] == [[duckdb_truth(prima, where)[1]]], where


@pytest.mark.parametrize(
    "where, inner, cover",
    [
        ("score BETWEEN 3 AND 11", "score BETWEEN 5 AND 9", "score BETWEEN 0 AND 14"),
        ("score >= 7", "score >= 10", "score >= 5"),
        ("score = 3", "FALSE", "score BETWEEN 0 AND 4"),
        ("score < 12 AND age >= 30", "score < 10 AND age >= 30", "score < 15 AND age >= 30"),
    ],
)
def test_unaligned_bins_are_answered_between_the_inner_and_covering_bins(
    sales: Prima, where: str, inner: str, cover: str
) -> None:
    """A condition cutting bins is answered between the bins wholly inside it and the
    covering bins (interpolated by the share it keeps), and its interval spans both — so DuckDB's
    answer on the raw rows lies inside it, for COUNT, a signed SUM and AVG alike."""
    cube = sales.exact_cube("sales")
    result = sales.answer_with(f"SELECT COUNT(*), SUM(amount), AVG(amount) FROM sales WHERE {where}", lambda _: cube)
    n, (n_ci, s_ci, a_ci) = result["rows"][0][0], result["ci95"][0]
    truth_s, truth_n = duckdb_truth(sales, where)
    in_n, cov_n = duckdb_truth(sales, inner)[1], duckdb_truth(sales, cover)[1]
    assert n_ci == [in_n, cov_n] and in_n <= n <= cov_n and in_n <= truth_n <= cov_n
    assert s_ci[0] <= truth_s <= s_ci[1] and a_ci[0] <= truth_s / truth_n <= a_ci[1]
    assert abs(n - truth_n) < abs(cov_n - truth_n) or n == truth_n  # nearer than the covering bins
    assert any("covering bins" in note for note in result["notes"])


def _with_missing_amounts(path: Path, share: float = 0.12) -> Path:
    """sales.csv with a share of its amounts blank (NULL) or 'n/a' (not a number), as real files have."""
    rng = random.Random(11)
    lines = path.read_text().splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        head, _, amount = line.rpartition(",")
        out.append(f"{head},{rng.choice(['', 'n/a']) if rng.random() < share else amount}")
    path.write_text("\n".join(out) + "\n")
    return path


def test_avg_and_count_of_a_nullable_measure_are_sqls(prima: Prima, sales_csv: Path) -> None:
    """AVG(m) = SUM(m)/COUNT(m) over the rows where m is present, COUNT(m) counts them:
    equal to DuckDB's own AVG/COUNT on the raw file, NULL and 'n/a' amounts included."""
    _with_missing_amounts(sales_csv)
    prima.register(TableSpec.model_validate(sales_spec(sales_csv)))
    cube = prima.exact_cube("sales")
    got = prima.answer_with(
        "SELECT region, AVG(amount), COUNT(amount), COUNT(*) FROM sales GROUP BY region", lambda _: cube
    )
    v = "TRY_CAST(amount AS DOUBLE)"  # (DuckDB's GREATEST skips a NULL operand: clip only known values)
    clipped = f"CASE WHEN {v} IS NOT NULL THEN LEAST(GREATEST({v}, -100), 1000) END"
    want = {
        r if r in REGIONS else "(other)": (a, c, n)
        for r, a, c, n in prima.db.run(
            f"SELECT region, AVG({clipped}), COUNT({clipped}), COUNT(*) FROM src.sales GROUP BY region"
        )
    }
    # four regions and the other values ('mars'); no NULL group: no row has a NULL region (as in SQL)
    assert [r[0] for r in got["rows"]] == [*REGIONS, "(other)"] and None not in want
    for region, avg, count_m, count in got["rows"]:
        a, c, n = want[region]
        assert count_m == c < n
        assert avg == pytest.approx(a, rel=1e-9)
    assert not any("COUNT(*)" in note for note in got["notes"])


def test_a_measure_declared_never_null_says_its_avg_counts_every_row(prima: Prima, sales_csv: Path) -> None:
    spec = sales_spec(sales_csv)
    spec["measures"][0]["nullable"] = False
    prima.register(TableSpec.model_validate(spec))
    cube = prima.exact_cube("sales")
    got = prima.answer_with("SELECT AVG(amount), COUNT(amount), SUM(amount) FROM sales", lambda _: cube)
    avg, count_m, _ = got["rows"][0]
    count = prima.answer_with("SELECT COUNT(*) FROM sales", lambda _: cube)["rows"][0][0]
    assert count_m == count
    assert sum("declared never NULL" in n for n in got["notes"]) == 2
    assert prima.answer_with("SELECT SUM(amount) FROM sales", lambda _: cube)["notes"] == []
