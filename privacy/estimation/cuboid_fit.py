"""Measured cuboids for wide tables: 1-way and 2-way cuboids, made consistent by least squares.

A table with 8–32 dimensions has far too many cells for a dense cube, but a range query almost
always constrains few columns. So instead of the base cuboid we release, per aggregate, a set of
small cuboids — by default every 1-way and every 2-way cuboid, plus 3-way ones an admin names —
and answer a query whose columns lie inside one of them from that cuboid alone.

Mechanism. For each measured cuboid S we release y_S = M_S x + Lap(Δ/ε_S) per cell with the grid
sampler, where M_S x is the true cuboid (sums of the base over the axes outside S). One row lands in
exactly one cell of every cuboid and moves it by at most Δ: each release has L1 sensitivity Δ over
one coordinate, so it is ε_S-DP, and sequential composition over the cuboids gives Σ ε_S = ε (under
a ρ budget: discrete Gaussian noise, ρ_S-zCDP each, Σ ρ_S = ρ). The shares ∝ cells(S)^(1/3), 1-way
cuboids `ONE_WAY_BOOST` times more (or, with pairs shrunk toward independence, `ONE_WAY_SHARE` of
the budget), depend on the public shape only (`shares`).

Least squares without the base. The normal matrix of the marginal lattice is diagonal on the ANOVA
subspaces E_T (`privacy.estimation.lattice`, Eq. 1). Only components T inside some measured S are identified,
and the estimate of the T-marginal's component T (mean-free along every axis of T) is the
precision-weighted mean of what each measured S ⊇ T says about it:

    z_T = Σ_{S⊇T} a_S · C_T(Σ_{S∖T} y_S) / Σ_{S⊇T} a_S,     a_S = w_S / Π_{i∈S∖T} n_i     (2)

(w_S = 1/σ_S², C_T the centring along T; summing Π n_i cells multiplies the noise variance by Π
n_i). The consistent estimate of every measured cuboid is then x̂_S = Σ_{T⊆S} z_T / Π_{i∈S∖T} n_i,
which equals the marginal over S of the full least-squares solution with unidentified components
left at zero (tests check this against `lattice.reconstruct` on enumerable shapes). Its error is
exact: Cov(z_T) = v_T·C_T with v_T = 1/Σ_{S⊇T} a_S, so a selection of L_i cells per axis inside S
has variance

    Σ_{T⊆S} v_T Π_{i∈T} (L_i − L_i²/n_i) Π_{i∈S∖T} (L_i/n_i)²,                                   (3)

i.e. a `MarginalLatticeError` over S's own shape with coefficients v_T / Π_{i∈S∖T} n_i.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from privacy.accounting.currencies import Budget, Mechanism, mechanism, release_all
from privacy.estimation.error import MarginalLatticeError
from privacy.estimation.lattice import centred, identified
from privacy.estimation.nonnegative import fit_to_margins, simplex_projection
from privacy.estimation.shrinkage import shrink_pair
from privacy.mechanisms.sampler import RandomSource

Axes = tuple[int, ...]  # sorted axis positions of a cuboid


def default_cuboids(d: int, named: Iterable[Sequence[int]] = ()) -> list[Axes]:
    """Every 1-way and 2-way cuboid over d axes, then the named ones (sorted, without repeats)."""
    out: list[Axes] = [(i,) for i in range(d)] + list(itertools.combinations(range(d), 2))
    for axes in named:
        key = tuple(sorted(set(axes)))
        if key and key not in out:
            out.append(key)
    return out


def cells(shape: Sequence[int], axes: Axes) -> int:
    return math.prod(shape[i] for i in axes)


# Budget shares of the measured cuboids (public shape only). cells(S)^(1/3) is the closed form that
# minimises the summed variance of random ranges answered each from its own cuboid under Laplace
# noise; it starves the 1-way cuboids, which serve the commonest queries — 1-column
# ranges and GROUP BYs — and hold the most rows per cell (5.5 % of the budget on
# Adult-15; a 3-value column's GROUP BY had ±457 against ±57 for a 1,458-value one). Measured on
# Adult-15 (bench/zcdp.py, results in bench/results/zcdp.md): the 1-way cuboids at 2.5× their share
# cut 1-column MAE by 13–19 % and GROUP BY MAE by 13–20 % while 2–4-column ranges moved +2–5 %, under
# pure ε and under ρ alike; flattening the power instead (cells^0.15, or equal shares as MST does)
# cost 2–4-column ranges more for less. Under ρ the L2 closed form would be cells^(1/2); measured,
# 1/3 was 13 % / 4 % better on 1 / 2 columns, equal on 3 and 5 % worse on 4, so both currencies use it.
#
# Pairs shrunk toward independence (`privacy.estimation.shrinkage`, the default estimator) change the balance: a
# nearly independent pair's 2-column answers then come from the 1-way cuboids, whose noise becomes most
# of their error, so the 1-way cuboids get a fixed fraction of the budget instead, split among them
# ∝ cells^(1/3) (the rest likewise among the others). How much depends on how dependent the table's
# pairs are, which no public fact says, and on what the workload asks. The default workload
# (1- and 2-column ranges and 1-column GROUP BYs, equally likely) has its smallest mean MAE on
# Adult-15 between fractions 0.45 and 0.65 under ε = 1 and ρ = 0.015 alike (bench/zcdp.py's queries;
# docs/benchmarks.md). `.venv/bin/python bench/one_way_share.py` (RMSE of COUNT ranges on 1 / 2 / 3 /
# 4 columns, bench/results/one_way_share.md), at ε = 1: Adult least squares 172 / 396 / 320 / 189,
# fraction 0.35: 93 / 191 / 168 / 93, 0.55: 62 / 243 / 210 / 110, 0.7: 50 / 322 / 269 / 134; Traffic
# least squares 74 / 166 / 214 / 107, 0.35: 55 / 77 / 57 / 45, 0.55: 37 / 99 / 68 / 56. Every
# fraction up to 0.7 is below least squares on every k of both tables at ε = 0.3, 1 and 3 (with the
# DCT prior alone, session 19, 0.5 was not, and 0.35 was the default). So 0.55 is the default, and the
# admin moves it for 1-column-heavy or 2–4-column-heavy workloads (`cube.one_way_share`).
SHARE_POWER = 1 / 3
ONE_WAY_BOOST = 2.5  # least squares: the 1-way cuboids' weight, times their cells^(1/3)
ONE_WAY_SHARE = 0.55  # shrunk pairs: the 1-way cuboids' fraction of the budget (`cube.one_way_share`)


def shares(
    shape: Sequence[int],
    cuboids: Sequence[Axes],
    power: float = SHARE_POWER,
    one_way_boost: float = ONE_WAY_BOOST,
    one_way_share: float | None = None,
) -> list[float]:
    """Budget shares ∝ cells(S)^power, with 1-way cuboids weighted ``one_way_boost`` times more, or
    (``one_way_share``) given that fraction of the budget between them (see above)."""
    raw = np.array([cells(shape, s) ** power for s in cuboids], dtype=np.float64)
    one = np.array([len(s) == 1 for s in cuboids])
    if one_way_share is not None and one.any() and not one.all():
        return np.where(one, one_way_share * raw / raw[one].sum(), (1 - one_way_share) * raw / raw[~one].sum()).tolist()
    raw = raw * np.where(one, one_way_boost, 1.0)
    return (raw / raw.sum()).tolist()


def mechanisms(
    cuboid_shares: Sequence[float], sensitivity: float, epsilon: float | Budget, coordinates: int = 1
) -> list[Mechanism]:
    """One mechanism per cuboid: L1 (and L2) sensitivity Δ — a row lands in one cell of each cuboid;
    a privacy unit of k rows in at most k, all possibly in one cell — budget·share each; Σ shares = 1,
    so the set is ε-DP (Laplace) or ρ-zCDP (Gaussian) by sequential composition."""
    return [mechanism(sensitivity, epsilon * share, coordinates) for share in cuboid_shares]


def release(
    true: dict[Axes, np.ndarray],
    cuboids: Sequence[Axes],
    mechs: Sequence[Mechanism],
    source: RandomSource,
    *,
    public: bool = False,
) -> list[np.ndarray]:
    """Noisy cuboids y_S = M_S x + Lap(Δ/ε_S) (or discrete Gaussian noise under ρ, all cuboids drawn in
    one batch: `privacy.accounting.currencies.release_all`). ``public``: a simulation (bootstrap), not a release."""
    return release_all(mechs, [true[s] for s in cuboids], source, public=public)


def _closure(cuboids: Sequence[Axes]) -> list[Axes]:
    """Every subset of a measured cuboid (the identified ANOVA components, `identified`), smallest
    first, as sorted tuples."""
    return [tuple(sorted(t)) for t in identified([frozenset(s) for s in cuboids])]


class CuboidLattice:
    """The least-squares combination (Eq. 2) of one aggregate's measured cuboids and its error (Eq. 3)."""

    def __init__(self, shape: Sequence[int], cuboids: Sequence[Axes], variances: Sequence[float]) -> None:
        self.shape = tuple(int(n) for n in shape)
        self.cuboids = [tuple(s) for s in cuboids]
        self.weights = [1.0 / v for v in variances]
        self.components = _closure(self.cuboids)
        self._assembly: dict[Axes, list[tuple[Axes, list[int], int]]] = {}
        self.v = {t: 1.0 / sum(w / self._between(s, t) for s, w in self._above(t)) for t in self.components}

    def _above(self, t: Axes) -> list[tuple[Axes, float]]:
        ts = set(t)
        return [(s, w) for s, w in zip(self.cuboids, self.weights) if ts <= set(s)]

    def _between(self, s: Axes, t: Axes) -> int:
        """Π n_i over the axes of S outside T."""
        return math.prod(self.shape[i] for i in s if i not in t)

    def estimate(
        self,
        noisy: Sequence[np.ndarray],
        shrink: bool = False,
        factors: dict[Axes, tuple[np.ndarray, str, float]] | None = None,
    ) -> dict[Axes, np.ndarray]:
        """The consistent estimate of every measured cuboid from its noisy releases (Eq. 2); ``shrink``
        (a nonnegative aggregate): with the 1-way margins projected onto nonnegative counts and every
        2-way interaction shrunk toward independence (`shrunk`, which fills ``factors`` if given)."""
        z = self.components_of(noisy)
        return self.assemble(self.shrunk(z, factors) if shrink else z, self.cuboids)

    def projected(self, z: dict[Axes, np.ndarray]) -> dict[Axes, np.ndarray]:
        """The components with every 1-way margin projected onto the nonnegative histograms of the
        (clipped) total (`privacy.estimation.nonnegative`, Eq. 1): the change keeps the total, so it lives in the
        margin's own component and every cuboid assembled from the result stays consistent."""
        out = dict(z)
        total = max(float(z[()]), 0.0)
        out[()] = np.asarray(total)
        for t in self.components:
            if len(t) == 1:
                n = self.shape[t[0]]
                out[t] = simplex_projection(z[()] / n + z[t], total) - total / n
        return out

    def shrunk(
        self, z: dict[Axes, np.ndarray], factors: dict[Axes, tuple[np.ndarray, str, float]] | None = None
    ) -> dict[Axes, np.ndarray]:
        """The nonnegative estimator: 1-way margins `projected`, then each pair's interaction replaced
        by its empirical-Bayes posterior mean (`privacy.estimation.shrinkage.shrink_pair`, noise variance v_T),
        whose independence target reads the projected margins, and the pair clipped at 0 and fitted
        back to those margins (`privacy.estimation.nonnegative.fit_to_margins`): post-processing of released
        values. Only each pair's interaction component changes, so the margins stay the 1-way ones; a
        3-way cuboid named by the admin is assembled from the shrunk pairs, so all stay consistent.
        ``factors``: filled with each shrunk pair's posterior factors, their basis and its prior's
        upper limit over the fitted one (`privacy.estimation.shrinkage.PairFit`), for its bar."""
        z = self.projected(z)
        out = dict(z)
        for t in self.components:
            if len(t) == 2:
                pair = self._assemble(t, z)
                fit = shrink_pair(pair, self.v[t])
                out[t] = centred(fit_to_margins(fit.estimate))  # its interaction (margins: z's own)
                if factors is not None and fit.factors is not None:
                    factors[t] = (fit.factors, fit.basis, fit.upper)
        return out

    def components_of(self, noisy: Sequence[np.ndarray]) -> dict[Axes, np.ndarray]:
        """z_T of Eq. 2 for every identified component T."""
        y = dict(zip(self.cuboids, noisy))
        z: dict[Axes, np.ndarray] = {}
        for t in self.components:
            num: Any = 0.0
            den = 0.0
            for s, w in self._above(t):
                a = w / self._between(s, t)
                drop = tuple(k for k, i in enumerate(s) if i not in t)
                num = num + a * centred(y[s].sum(axis=drop) if drop else y[s])
                den += a
            z[t] = num / den
        return z

    def assemble(self, z: dict[Axes, np.ndarray], cuboids: Sequence[Axes]) -> dict[Axes, np.ndarray]:
        return {s: self._assemble(s, z) for s in cuboids}

    def _assemble(self, s: Axes, z: dict[Axes, np.ndarray]) -> np.ndarray:
        out = np.zeros([self.shape[i] for i in s])
        for t, shape, between in self._parts(s):
            out = out + np.reshape(z[t], shape) / between
        return out

    def _parts(self, s: Axes) -> list[tuple[Axes, list[int], int]]:
        """The components inside S with their broadcast shape over S and Π n_i of S∖T (cached: every
        estimate and refit assembles the same cuboids)."""
        parts = self._assembly.get(s)
        if parts is None:
            parts = self._assembly[s] = [
                (t, [self.shape[i] if i in t else 1 for i in s], self._between(s, t))
                for t in self.components
                if set(t) <= set(s)
            ]
        return parts

    def error(self, s: Axes) -> MarginalLatticeError:
        """The exact error model (Eq. 3) of selections inside the measured cuboid S."""
        terms = []
        for t in self.components:
            if set(t) <= set(s):
                relative = tuple(k for k, i in enumerate(s) if i in t)
                terms.append((relative, self.v[t] / self._between(s, t)))
        return MarginalLatticeError(tuple(self.shape[i] for i in s), tuple(terms))


def true_marginals(base: np.ndarray, cuboids: Sequence[Axes]) -> dict[Axes, np.ndarray]:
    """TEST/BENCH helper: the cuboids of a dense base (sources aggregate them with GROUPING SETS)."""
    d = base.ndim
    return {s: base.sum(axis=tuple(i for i in range(d) if i not in s)) for s in cuboids}
