"""The yardsticks of privacy/strategies/optimum.py: ResidualPlanner's closed form checked against
explicit matrices, and the per-query split as the optimum's one-query case."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privacy.strategies.optimum import AggregateQuery, _closure, _energy, opt_m_ratios, residual_planner_ratios


def _contrasts(n: int) -> np.ndarray:
    """An orthonormal basis (rows) of the mean-free vectors of length n."""
    q, _ = np.linalg.qr(np.eye(n) - 1.0 / n)
    basis = q[:, : n - 1].T
    return basis


def _residual_matrix(shape: tuple[int, ...], t: frozenset[int]) -> np.ndarray:
    out = np.ones((1, 1))
    for i, n in enumerate(shape):
        out = np.kron(out, _contrasts(n) if i in t else np.ones((1, n)))
    return out


def _query(shape: tuple[int, ...], lengths: tuple[int, ...]) -> np.ndarray:
    out = np.ones(1)
    for length, n in zip(lengths, shape):
        out = np.kron(out, (np.arange(n) < length).astype(float))
    return out


def test_the_closed_form_is_what_explicit_residual_measurements_give() -> None:
    """Measure each residual of a (3, 4, 2) table's workload with the closed form's noise, as explicit
    matrices: the stacked measurement's squared L2 sensitivity (the largest column norm after whitening)
    is Σ p_T/σ_T², the same for every record, and each query's least-squares variance qᵀ(AᵀA)⁺q is the
    closed form's V_q; at the optimum, V_q/B_q summed equals (Σ√(a_T p_T))² for C = 1."""
    shape = (3, 4, 2)
    queries = [
        AggregateQuery((3, 4, 2), False, 0.25),  # the total
        AggregateQuery((1, 4, 2), False, 0.25),  # GROUP BY axis 0
        AggregateQuery((1, 1, 2), False, 0.25),  # GROUP BY axes 0, 1
        AggregateQuery((3, 2, 1), False, 0.25),  # a range of 2 on axis 1, GROUP BY axis 2
    ]
    ratios = residual_planner_ratios(shape, queries)
    residuals = _closure(shape, queries)
    p = {t: math.prod(1 - 1 / shape[i] for i in t) for t in residuals}
    a = {t: sum(_energy(shape, q.lengths, t) * q.share for q in queries if t <= q.support(shape)) for t in residuals}
    scale = sum(math.sqrt(a[t] * p[t]) for t in residuals if a[t] > 0)
    sigma2 = {t: math.sqrt(p[t] / a[t]) * scale for t in residuals if a[t] > 0}
    whitened = np.vstack([_residual_matrix(shape, t) / math.sqrt(s) for t, s in sigma2.items()])
    column_norms = np.sum(whitened**2, axis=0)
    assert np.allclose(column_norms, 1.0), column_norms  # C = 1: the budget, spent exactly, for every record
    precision = np.linalg.pinv(whitened.T @ whitened)
    for q, ratio in zip(queries, ratios):
        vector = _query(shape, q.lengths)
        assert math.isclose(vector @ precision @ vector * q.share, ratio, rel_tol=1e-9)
    assert math.isclose(sum(ratios), scale**2, rel_tol=1e-9)


@pytest.mark.parametrize("optimum", [residual_planner_ratios, opt_m_ratios])
def test_one_query_alone_is_the_per_query_engine(optimum) -> None:  # type: ignore[no-untyped-def]
    """One marginal with the whole budget: both optima release it as a per-query engine does (ratio 1)."""
    assert math.isclose(optimum((6, 4, 5), [AggregateQuery((1, 4, 1), False, 1.0)])[0], 1.0, rel_tol=1e-4)


def test_a_dashboard_beats_the_per_query_split_but_not_by_half() -> None:
    """A total + 1-column (COUNT, SUM, AVG) + 2 pairs dashboard on a (12, 2, 6) table: the optimum is
    0.5–0.85× the per-query split's stddev on every COUNT and SUM under ρ (ResidualPlanner is optimal
    among Gaussian linear mechanisms, so no synopsis beats the split by half on all of them), and
    OPT_M under ε is within the same range on average; Gaussian OPT_M equals ResidualPlanner here."""
    shape = (12, 2, 6)
    sets = [(), (0,), (1,), (2,)]
    asked = [(s, a) for s in sets for a in ("COUNT", "SUM", "AVG")] + [
        (s, a) for s in [(0, 1), (1, 2)] for a in ("COUNT", "SUM")
    ]
    queries = [
        AggregateQuery(
            tuple(1 if i in s else n for i, n in enumerate(shape)),
            a != "COUNT",
            1 / len(asked) / (2 if a == "AVG" else 1),
        )
        for s, a in asked
    ]
    rp = np.sqrt(residual_planner_ratios(shape, queries))
    plain = [r for (_, a), r in zip(asked, rp) if a != "AVG"]
    assert 0.5 < min(plain) and max(plain) < 0.85, rp
    laplace = np.sqrt(opt_m_ratios(shape, queries))
    assert 0.3 < math.exp(np.mean(np.log([r for (_, a), r in zip(asked, laplace) if a != "AVG"]))) < 0.85
    assert np.allclose(np.sqrt(opt_m_ratios(shape, queries, gaussian=True)), rp, rtol=0.02)


def test_the_closure_holds_every_sub_marginal() -> None:
    got = _closure((3, 4, 5), [AggregateQuery((1, 1, 5), False, 1.0)])
    assert set(got) == {frozenset(c) for k in range(3) for c in itertools.combinations((0, 1), k)}
