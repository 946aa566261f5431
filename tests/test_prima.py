"""SCOPE (PRIMA §5.4) and the ``prima`` strategy: fits, Eq. 14, consistency, error model, accounting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.service import Prima
from privacy.clipping import data_driven as dc
from privacy.estimation import scope
from privacy.estimation.error import ScaledPrefixError
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies import get_strategy
from storage import ledger
from storage.schema import TableSpec
from tests.conftest import sales_spec, select_total, write_sales_csv


def _expected_counts(family: str, params: tuple, n: int = 30, total: float = 1e5) -> np.ndarray:
    """Noise-free marginal: the exact discretised distribution times a row count."""
    return total * scope.discretised_pmf(family, params, n)


def test_scope_picks_normal_and_its_prefix_sums_are_within_2_percent() -> None:
    x = _expected_counts("norm", (12.0, 6.0))
    fit = scope.fit_axis(x)
    assert fit.family == "norm"
    assert fit.params == pytest.approx((12.0, 6.0), rel=1e-3)
    prefix, _ = scope.scope_prefix(x, [fit])
    true = np.cumsum(x)
    assert np.max(np.abs(prefix[1:] - true) / true) < 0.02


def test_scope_on_a_sampled_normal_column() -> None:
    rng = np.random.default_rng(7)  # data generation, not noise
    v = np.rint(rng.normal(15.5, 5, 3_000_000))
    x = np.bincount(v[(v >= 1) & (v <= 30)][:1_000_000].astype(int), minlength=31)[1:].astype(float)
    prefix, (fit,) = scope.scope_prefix(x)
    true = np.cumsum(x)
    assert fit.family == "norm"
    assert np.mean(np.abs(prefix[1:] - true) / true) < 0.02


@pytest.mark.parametrize(
    "family,params",
    [
        ("gamma", (3.0, 0.0, 3.0)),
        ("expon", (0.0, 6.0)),
        ("lognorm", (0.5, 0.0, 10.0)),
        ("weibull_min", (2.0, 0.0, 12.0)),
    ],
)
def test_the_selected_fit_is_at_least_as_good_as_the_true_family(family: str, params: tuple) -> None:
    x = _expected_counts(family, params)
    fit = scope.fit_axis(x)
    truth_ks = np.max(np.abs(np.cumsum(scope.discretised_pmf(family, params, 30)) - np.cumsum(x / x.sum())))
    assert fit.ks <= truth_ks + 1e-3  # the KS choice (Eq. 12) finds the generating shape or an equal one
    assert fit.ks < 5e-3


def test_consistency_is_monotone_on_every_axis_and_within_0_and_total() -> None:
    rng = np.random.default_rng(3)
    raw = rng.normal(50, 40, (6, 7, 5))
    out = scope.consistent(raw, 120.0)
    assert out.min() >= 0 and out.max() <= 120.0
    for axis in range(3):
        assert np.all(np.diff(out, axis=axis) >= -1e-9)
    ordered = np.cumsum(np.cumsum(np.ones((4, 5)), 0), 1)
    assert np.allclose(scope.consistent(ordered, 100.0), ordered)  # already consistent: unchanged


def test_scaled_prefix_error_matches_the_spread_of_eq14() -> None:
    """Privacy rule 5 for `prima`: base-cell noise at scale Δ/ε, carried through Eq. 14 as stated."""
    shape, sens, eps = (8, 6, 5), 30.0, 1.0
    truth = np.random.default_rng(4).poisson(20.0, shape) * 7.5
    fits = scope.fit_axes(truth)
    ratios = tuple((0.0, *f.ratio) for f in fits)
    selections = [
        [((1, 5),), ((0, 5),), ((2, 2),)],
        [((0, 7),), ((3, 4),), ((0, 1), (3, 4))],
        [((2, 2),), ((1, 1),), ((4, 4),)],
    ]
    true_prefix = scope.eq14(truth, fits)
    draws = np.empty((600, len(selections)))
    cell_errors = []
    for k in range(600):
        m = get_strategy("identity").measure(truth, sens, eps, RandomSource(seed=900 + k))
        cell_errors.append((m.noisy - truth).ravel()[:50])
        noisy_prefix = scope.eq14(m.noisy, fits)
        draws[k] = [select_total(noisy_prefix, s) - select_total(true_prefix, s) for s in selections]
    model = ScaledPrefixError(m.error.cell_variance, ratios)
    ratio = draws.var(axis=0) / np.array([model.variance(s) for s in selections])
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    assert np.std(np.concatenate(cell_errors)) == pytest.approx(np.sqrt(2) * sens / eps, rel=0.03)


def test_grouped_variance_equals_per_cell_variance() -> None:
    model = ScaledPrefixError(2.0, ((0.0, 1.0, 2.0, 3.0), (0.0, 0.5, 4.0)))
    sel = [((0, 2),), ((0, 0), (1, 1))]
    grouped = model.grouped_variance(sel, [np.arange(3)], [0])
    assert grouped == pytest.approx([model.variance([((i, i),), sel[1]]) for i in range(3)])


def _nonnegative_spec(csv: Path, name: str = "sales") -> dict:
    return sales_spec(csv, name) | {
        "measures": [{"name": "amount", "lo": 0, "hi": 1000}],
        "cube": {"build": "on_first_query", "strategy": "prima"},
    }


def test_prima_build_charges_exactly_the_declared_total(tmp_path: Path, sales_csv: Path) -> None:
    prima = Prima(tmp_path / "data", seed=5)
    spec = TableSpec.model_validate(_nonnegative_spec(sales_csv))
    assert spec.measures[0].clipping == "clasp"  # the strategy's default clipping
    prima.register(spec)
    status, built = prima.build("sales")
    entries = ledger.entries(prima.db, "sales")
    assert [e.purpose.split(":")[0] for e in entries] == ["clipping histogram (clasp)"] + [
        "cube measurement (prima)"
    ] * 3
    assert [e.epsilon for e in entries] == pytest.approx([0.1, 0.18, 0.63, 0.09])  # COUNT 20%, SUM 70%, COUNT(m) 10%
    assert ledger.spent(prima.db, "sales") == pytest.approx(1.0)
    assert status["strategy"] == "prima"
    assert {a["family"] for a in status["aggregates"]["SUM(amount)"]["scope"]} <= set(scope.FAMILIES)
    result = prima.query("SELECT SUM(amount), COUNT(*) FROM sales WHERE age BETWEEN 30 AND 50")
    assert all(v is not None for v in result["rows"][0]) and all(sd > 0 for sd in result["stddev"][0])
    assert any("distribution-fit" in n for n in result["notes"])
    grouped = prima.query("SELECT region, COUNT(*) FROM sales GROUP BY region")
    regions = [r[0] for r in grouped["rows"]]  # 4 regions, then (other) ('mars') if its noisy count shows it
    assert regions[:4] == ["north", "south", "east", "west"] and None not in regions
    assert all(r[1] >= 0 for r in grouped["rows"])
    prima.close()


def test_bounds_depend_on_the_data_only_through_the_released_histogram(tmp_path: Path) -> None:
    """Two tables that differ only inside one histogram bucket, built with the same noise seed,
    get the same clip range: no code path reads raw measure values to choose a bound."""
    edges = dc.histogram_edges(0.0, 1000.0)  # the buckets the service's histogram uses
    statuses = []
    for k, shift in enumerate((0.0, 0.4)):
        csv = write_sales_csv(tmp_path / f"s{k}.csv")
        lines = csv.read_text().splitlines()
        header, rows = lines[0].split(","), [line.split(",") for line in lines[1:]]
        col = header.index("amount")
        for r in rows:  # move every value within its own bucket
            v = float(r[col])
            if 0 <= v < 1000:
                i = np.searchsorted(edges, v, side="right") - 1
                r[col] = str(edges[i] + shift * (edges[i + 1] - edges[i]))
        csv.write_text("\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n")
        prima = Prima(tmp_path / f"data{k}", seed=11)
        prima.register(TableSpec.model_validate(_nonnegative_spec(csv)))
        statuses.append(prima.build("sales")[0]["clipping"]["amount"])
        prima.close()
    assert statuses[0] == statuses[1]


def test_signed_measures_keep_plain_prefix_sums(tmp_path: Path, sales_csv: Path) -> None:
    """SCOPE's consistency assumes non-negative sums: a signed clip range keeps identity's prefixes."""
    prima = Prima(tmp_path / "data", seed=6)
    signed = {
        "measures": [{"name": "amount", "lo": -100, "hi": 1000, "clipping": "fixed"}],
        "cube": {"build": "on_first_query", "strategy": "prima"},
    }
    prima.register(TableSpec.model_validate(sales_spec(sales_csv) | signed))
    status, _ = prima.build("sales")
    assert status["aggregates"]["SUM(amount)"]["scope"].startswith("skipped")
    assert isinstance(status["aggregates"]["COUNT(*)"]["scope"], list)
    one = prima.query("SELECT SUM(amount) FROM sales WHERE age = 30")["stddev"][0][0]
    ten = prima.query("SELECT SUM(amount) FROM sales WHERE age BETWEEN 30 AND 39")["stddev"][0][0]
    assert ten == pytest.approx(one * np.sqrt(10))  # identity's uniform per-cell noise, not Eq. 14's
    prima.close()
