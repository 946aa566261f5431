"""PRIMA double-sided clipping from a DP histogram: Φ (Thm 5), τ (Eq. 8/Thm 6), CLASP's lower bound,
and the accounting of a build that uses it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engine.builds.steps import aggregate_keys
from engine.builds.workload import workload_weights
from engine.service import Prima
from privacy.clipping import data_driven as dc
from privacy.mechanisms.sampler import RandomSource
from storage import ledger
from storage.schema import TableSpec
from tests.conftest import sales_spec


def brute_force_tau(phi: float, values: np.ndarray, weights: np.ndarray, eps: float, lo: float, hi: float) -> float:
    grid = np.linspace(0, max(hi - phi, phi - lo), 20_001)
    scores = [dc.eq8_objective(t, phi, values, weights, eps, lo, hi) for t in grid]
    return float(grid[int(np.argmin(scores))])


def test_hand_example() -> None:
    # Values 1 (x2), 2, 3, 10 on [0, 10]: Φ = 17/5 = 3.4.
    values, weights = np.array([1.0, 2.0, 3.0, 10.0]), np.array([2.0, 1.0, 1.0, 1.0])
    phi = dc.clip_axis(values, weights)
    assert phi == pytest.approx(3.4)
    for eps in (0.5, 2.0, 20.0):
        tau = dc.optimal_radius(phi, values, weights, eps, 0.0, 10.0)
        best = brute_force_tau(phi, values, weights, eps, 0.0, 10.0)
        got, want = (dc.eq8_objective(t, phi, values, weights, eps, 0.0, 10.0) for t in (tau, best))
        assert got <= want + 1e-9 and tau == pytest.approx(best, abs=1e-3), (eps, tau, best)


@pytest.mark.parametrize("seed", range(12))
def test_radius_equals_brute_force_on_random_histograms(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lo, hi = (0.0, 100.0) if seed % 2 == 0 else (-50.0, 80.0)  # signed measures too
    edges = dc.bucket_edges(lo, hi, 16)
    values = (edges[:-1] + edges[1:]) / 2
    weights = rng.poisson(rng.uniform(1, 200), 16).astype(float) * (rng.random(16) < 0.8)
    weights[0] += 1
    eps = float(rng.choice([0.01, 0.1, 1.0, 10.0]))
    phi = dc.clip_axis(values, weights)
    tau = dc.optimal_radius(phi, values, weights, eps, lo, hi)
    best = brute_force_tau(phi, values, weights, eps, lo, hi)
    assert (
        dc.eq8_objective(tau, phi, values, weights, eps, lo, hi)
        <= dc.eq8_objective(best, phi, values, weights, eps, lo, hi) + 1e-9
    )


def test_interior_optimum_is_theorem_6() -> None:
    values = np.array([2.0, 4.0, 5.0, 6.0, 8.0, 30.0])
    weights = np.array([100.0, 300.0, 400.0, 300.0, 100.0, 5.0])
    phi, eps = dc.clip_axis(values, weights), 10.0
    tau = dc.optimal_radius(phi, values, weights, eps, 0.0, 100.0)
    assert 0 < tau < phi and phi + tau < 100  # uncapped, non-negative: Eq. 9 applies verbatim
    assert tau == pytest.approx(dc.theorem6_radius(phi, values, weights, eps, tau), rel=1e-9)


def test_clasp_lower_threshold_matches_its_definition() -> None:
    edges = dc.bucket_edges(0.0, 1000.0, 64)
    values = (edges[:-1] + edges[1:]) / 2
    weights = np.where(values < 100, 500.0, 0.0) + np.where(values > 900, 20.0, 0.0)  # skewed, τ ≥ Φ
    choice = dc.choose_bounds(weights, 0.0, 1000.0, 50.0, "clasp")
    assert choice.phi - choice.tau < 0  # the one-sided case §5.3 is about
    target = float(np.dot(values, weights))
    gaps = {
        float(t): abs(float(np.dot(np.clip(values, t, choice.hi), weights)) - target) for t in edges if t <= choice.phi
    }
    assert choice.lo == min(gaps, key=lambda t: (gaps[t], t))
    assert dc.choose_bounds(weights, 0.0, 1000.0, 50.0, "sbs").lo == 0.0  # sbs keeps the public bound


def test_histogram_noise_scale() -> None:
    """Privacy rule 5: the histogram's noise has the stated Laplace scale 1/ε (before clamping)."""
    counts = np.full(200_000, 1000.0)
    noisy = dc.histogram_mechanism(counts, 0.25, RandomSource(seed=3))
    assert np.std(noisy - counts) == pytest.approx(math.sqrt(2) * 4.0, rel=0.02)


def test_clasp_build_charges_exactly_the_total_and_bounds_come_from_the_released_histogram(
    tmp_path: Path, sales_csv: Path
) -> None:
    prima = Prima(tmp_path / "data", seed=5)
    spec = sales_spec(sales_csv) | {"measures": [{"name": "amount", "lo": -100, "hi": 1000, "clipping": "clasp"}]}
    prima.register(TableSpec.model_validate(spec))
    status, built = prima.build("sales")
    entries = ledger.entries(prima.db, "sales")
    assert [e.purpose.split(":")[0] for e in entries] == ["clipping histogram (clasp)"] + [
        "cube measurement (auto)"
    ] * 3
    # the rest by the default workload's split (engine/builds/workload.py): COUNT(m) its 10 %, COUNT(*)
    # and the SUM by what a dashboard asks of them (COUNT ~48 % of the two: bench/workloads.py)
    table = TableSpec.model_validate(spec)
    weights = workload_weights(table, aggregate_keys(table), False)
    assert weights is not None and list(weights.values())[-1] == 0.1
    assert [e.epsilon for e in entries] == pytest.approx([0.1] + [0.9 * w for w in weights.values()])
    assert 0.4 < entries[1].epsilon / (entries[1].epsilon + entries[2].epsilon) < 0.5
    assert sum(e.epsilon for e in entries) == pytest.approx(1.0) == ledger.spent(prima.db, "sales")
    info = status["clipping"]["amount"]
    recomputed = dc.choose_bounds(
        np.array(info["histogram"]),
        -100.0,
        1000.0,
        0.63,
        "clasp",
        edges=dc.histogram_edges(-100.0, 1000.0),
        epsilon_histogram=0.1,
    )
    assert (info["lo"], info["hi"]) == (recomputed.lo, recomputed.hi)  # a function of released data only
    assert -100 <= info["lo"] < info["hi"] <= 1000
    assert status["aggregates"]["SUM(amount)"]["sensitivity"] == max(abs(info["lo"]), abs(info["hi"]))
    assert prima.query("SELECT SUM(amount) FROM sales")["rows"][0][0] is not None
    prima.close()


def _generous_range_histogram(seed: int, eps_hist: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The case: 2,000 values ≤ 100 under a declared [0, 10^6], released at ε_h."""
    values = np.random.default_rng(seed).uniform(0, 100, 2000)
    edges = dc.histogram_edges(0.0, 1e6)
    counts = np.histogram(np.clip(values, 0, 1e6), bins=edges)[0].astype(float)
    return values, dc.histogram_mechanism(counts, eps_hist, RandomSource(seed=seed))


def test_geometric_edges_cover_the_public_range_and_resolve_small_values() -> None:
    for lo, hi in [(0.0, 1e6), (-1e5, 1e6), (-50.0, -1.0), (10.0, 20.0)]:
        e = dc.histogram_edges(lo, hi)
        assert e[0] == lo and e[-1] == hi and np.all(np.diff(e) > 0)
    e = dc.histogram_edges(0.0, 1e6)
    assert e[1] <= 1e6 / 2**24 and np.max(e[2:] / e[1:-1]) <= 2**0.25 + 1e-12
    assert 0.0 in dc.histogram_edges(-1e5, 1e6)  # signed: both sides meet at 0


def test_noise_in_empty_buckets_no_longer_drags_the_axis() -> None:
    """With clamping alone Φ landed near 75,000 for data ≤ 100; now it is near the data."""
    for seed in range(10):
        values, noisy = _generous_range_histogram(seed)
        choice = dc.choose_bounds(
            noisy, 0.0, 1e6, 0.72, "sbs", edges=dc.histogram_edges(0.0, 1e6), epsilon_histogram=0.1
        )
        assert 20 < choice.phi < 100, choice.phi
        assert choice.hi <= 200  # nothing is clipped *up* to thousands any more


def test_support_clipping_keeps_the_rows_unclipped_on_a_generous_range() -> None:
    for seed in range(20):
        values, noisy = _generous_range_histogram(seed)
        choice = dc.choose_bounds(
            noisy, 0.0, 1e6, 0.72, "support", edges=dc.histogram_edges(0.0, 1e6), epsilon_histogram=0.1
        )
        kept = np.mean((values >= choice.lo) & (values <= choice.hi))
        assert choice.lo == 0.0 and choice.hi <= 150 and kept >= 0.9, (choice, kept)


def test_pure_noise_histogram_keeps_the_public_bounds() -> None:
    """No data: nothing is significant (the threshold's β), so the public range stands."""
    edges = dc.histogram_edges(-1e5, 1e6)
    kept_public = 0
    for seed in range(200):
        noisy = dc.histogram_mechanism(np.zeros(len(edges) - 1), 0.1, RandomSource(seed=seed))
        choice = dc.choose_bounds(noisy, -1e5, 1e6, 0.72, "support", edges=edges, epsilon_histogram=0.1)
        kept_public += (choice.lo, choice.hi) == (-1e5, 1e6)
    assert kept_public >= 190  # P(some bucket over the threshold) ≤ β = 1 %


def test_signed_support_spans_both_sides() -> None:
    edges = dc.histogram_edges(-1e5, 1e6)
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.uniform(-500, 0, 3000), rng.uniform(0, 20_000, 20_000)])
    counts = np.histogram(values, bins=edges)[0].astype(float)
    choice = dc.choose_bounds(
        dc.histogram_mechanism(counts, 0.1, RandomSource(seed=2)),
        -1e5,
        1e6,
        0.7,
        "support",
        edges=edges,
        epsilon_histogram=0.1,
    )
    assert -1000 < choice.lo < -300 and 20_000 <= choice.hi < 30_000


def test_support_build_through_the_service(tmp_path: Path, sales_csv: Path) -> None:
    prima = Prima(tmp_path / "data", seed=6)
    spec = sales_spec(sales_csv) | {"measures": [{"name": "amount", "lo": -1e5, "hi": 1e6, "clipping": "support"}]}
    prima.register(TableSpec.model_validate(spec))
    status, _ = prima.build("sales")
    info = status["clipping"]["amount"]
    # amount ~ N(200, 400): the positive side is dense enough to be significant, its top near the data's
    assert info["strategy"] == "support" and -1e5 < info["lo"] <= 0 and 500 < info["hi"] < 5000
    assert [e.purpose.split(":")[0] for e in ledger.entries(prima.db, "sales")][0] == "clipping histogram (support)"
    prima.close()
