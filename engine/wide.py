"""A wide table's synopsis in memory: measured cuboids answered directly, other queries by tree models.

`WideCube` answers the same calls as `Cube` (totals, grouped totals, variances, notes), so the answer
path, formats, clamping and memoization are shared. Routing per query (issue #17):

* the query's constrained and grouped columns lie inside a measured cuboid → the smallest such
  cuboid's own `Cube` (its consistent estimate's prefix array and the exact lattice variance);
* otherwise → a tree model over those columns (`privacy.tree_model`), with an estimated error bar:
  bootstrap noise + misfit spread (`privacy.strategies.cuboids`), and a note saying so.

SUM(m) in a model answer: the tree is fitted to the non-negative mass m − lo (lo the clip range's
lower end), Σ(m − lo) + lo·COUNT, so signed measures need nothing special.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from engine.cube import Cube, Synopsis, arrays_by_key, keyed_arrays
from privacy.cuboids import Axes
from privacy.prefix import Runs, prefix_sums, selected_cells
from privacy.strategies.cuboids import CuboidRelease, active_axes, covering
from privacy.tree_model import TreeTables, box_totals, spanning_trees
from storage.sources import COUNT_KEY, measure_of

MODEL_NOTE = ("{cols}: answered by a tree model fitted to the measured 2-way cuboids (no measured cuboid "
              "holds all of these columns); the error bar is an estimate (bootstrap noise plus the spread "
              "over alternative trees), not exact")


@dataclass
class _Model:
    """Tree tables of one aggregate's mass (count, or sum − lo·count): released and replicates."""

    main: TreeTables
    replicates: TreeTables | None  # the bootstrap replicates as one batch

    def trees(self, axes: Sequence[int]) -> list[tuple[tuple[int, int], ...]]:
        weights = {(i, j): self.main.mutual_information(i, j) for k, i in enumerate(axes) for j in axes[k + 1:]}
        return spanning_trees(axes, weights)


@dataclass
class WideCube(Synopsis):
    releases: dict[str, CuboidRelease] = field(default_factory=dict)
    _cuboids: dict[Axes, Cube] = field(default_factory=dict, repr=False)
    _models: dict[str, _Model] = field(default_factory=dict, repr=False)
    _model_answers: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _covering: dict[tuple[int, ...], Axes | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        any_release = next(iter(self.releases.values()))
        self.cuboid_list = list(any_release.cuboids)
        for s in self.cuboid_list:
            prefixes = {k: prefix_sums(r.estimates[s]) for k, r in self.releases.items()}
            errors = {k: r.lattice().error(s) for k, r in self.releases.items()}  # (one lattice per key: cheap)
            self._cuboids[s] = Cube(self.table, self.build_id, prefixes, errors, {"strategy": "cuboids"})

    # -- the Cube interface -------------------------------------------------------------------
    def error_notes(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> list[str]:
        if self._route(selection, group_axes) is not None:
            return []
        names = self.meta.get("dimension_names", [])
        axes = active_axes(self.shape, selection, group_axes)
        cols = ", ".join(names[i] if i < len(names) else str(i) for i in axes)
        return [MODEL_NOTE.format(cols=cols)]

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        routed = self._route(selection)
        if routed is not None:
            cube, sub, _ = routed
            return cube.total(key, sub)
        return float(self._model_answer(key, selection, ())[0])

    def variance(self, key: str, selection: Sequence[Runs]) -> float:
        routed = self._route(selection)
        if routed is not None:
            cube, sub, _ = routed
            return float(cube.variance(key, sub))
        return float(self._model_answer(key, selection, ())[1])

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        routed = self._route(selection, group_axes)
        if routed is not None:
            cube, sub, groups = routed
            return cube.grouped_totals(key, sub, groups)
        return self._model_answer(key, selection, tuple(group_axes))[0]

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        routed = self._route(selection, group_axes)
        if routed is not None:
            cube, sub, groups = routed
            return cube.grouped_variances(key, sub, groups)
        return self._model_answer(key, selection, tuple(group_axes))[1]

    # -- routing -----------------------------------------------------------------------------
    def _route(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()
               ) -> tuple[Cube, list[Runs], tuple[int, ...]] | None:
        """The measured cuboid that holds the query, with the selection and groups in its axes."""
        axes = active_axes(self.shape, selection, group_axes)
        if axes not in self._covering:  # at most 2^d entries in principle; queries touch few
            self._covering[axes] = covering(self.cuboid_list, self.shape, axes)
        s = self._covering[axes]
        if s is None:
            return None
        return self._cuboids[s], [selection[i] for i in s], tuple(s.index(a) for a in group_axes)

    # -- the model path ----------------------------------------------------------------------
    def _model(self, key: str) -> _Model:
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = self._fit(key)
        return model

    def _fit(self, key: str) -> _Model:
        """Tree tables of the mass of ``key``: COUNT, or SUM − lo·COUNT (non-negative for every row)."""
        lo = self._lo(key)
        release = self.releases[key]
        count = self.releases[COUNT_KEY] if lo else release

        def tables(est: dict[Axes, np.ndarray], cnt: dict[Axes, np.ndarray]) -> TreeTables:
            mass = {s: est[s] - lo * cnt[s] for s in est} if lo else est
            ones = {s[0]: a for s, a in mass.items() if len(s) == 1}
            pairs = {s: a for s, a in mass.items() if len(s) == 2}
            return TreeTables.fitted(float(next(iter(ones.values())).sum()), ones, pairs)

        low = release.low_order()
        main = tables({s: release.estimates[s] for s in low}, {s: count.estimates[s] for s in low})
        reps = [tables(b, c) for b, c in zip(release.bootstrap, count.bootstrap)]
        return _Model(main, TreeTables.stacked(reps) if reps else None)

    def _lo(self, key: str) -> float:
        if not key.startswith("sum:"):  # a COUNT (or a bare key in library use): no shift
            return 0.0
        return float((self.meta.get("clipping") or {}).get(measure_of(key), {}).get("lo", 0.0))

    def _model_answer(self, key: str, selection: Sequence[Runs], group_axes: tuple[int, ...]
                      ) -> tuple[np.ndarray, np.ndarray]:
        """(value, variance) of a model answer, cached per query: totals and variances share it."""
        cache_key = (key, tuple(selection), group_axes)
        hit = self._model_answers.get(cache_key)
        if hit is not None:
            return hit
        axes = active_axes(self.shape, selection, group_axes)
        cells = {a: selected_cells(selection[a]) for a in axes}
        value, noise, misfit = self._mass_answer(key, axes, cells, group_axes)
        lo = self._lo(key)
        if lo:  # SUM = Σ(m − lo) + lo·COUNT
            c_value, c_noise, c_misfit = self._mass_answer(COUNT_KEY, axes, cells, group_axes)
            value = value + lo * c_value
            noise = np.var(noise + lo * c_noise, axis=0, ddof=1) if len(noise) > 1 else np.zeros_like(value)
            variance = noise + misfit + lo * lo * c_misfit
        else:
            noise_var = np.var(noise, axis=0, ddof=1) if len(noise) > 1 else np.zeros_like(value)
            variance = noise_var + misfit
        if len(self._model_answers) >= 4096:
            self._model_answers.clear()
        self._model_answers[cache_key] = (value, variance)
        return value, variance

    def _mass_answer(self, key: str, axes: tuple[int, ...], cells: dict[int, np.ndarray],
                     group_axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The best tree's answer, the replicates' answers (stacked) and the misfit variance."""
        model = self._model(key)
        trees = model.trees(axes)
        best = box_totals(model.main, trees[0], axes, cells, group_axes)[0]
        alternatives = [box_totals(model.main, t, axes, cells, group_axes)[0] for t in trees[1:]]
        misfit = np.mean([(a - best) ** 2 for a in alternatives], axis=0) if alternatives else np.zeros_like(best)
        replicates = (box_totals(model.replicates, trees[0], axes, cells, group_axes) if model.replicates is not None
                      else np.zeros((0,) + np.shape(best)))
        return best, replicates, misfit


def stored_arrays(key: str, release: CuboidRelease) -> dict[str, np.ndarray]:
    """What a wide build persists per aggregate: ``<key>#estimates`` and ``<key>#bootstrap``."""
    return keyed_arrays(key, release.arrays())


def loaded(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> WideCube:
    """A persisted wide synopsis back in memory."""
    per_key = arrays_by_key(arrays)
    releases = {k: CuboidRelease.from_arrays(meta["errors"][k], per_key[k]) for k in meta["errors"]}
    return WideCube(table, build_id, tuple(meta["shape"]), meta, releases=releases)


def is_wide(meta: dict[str, Any]) -> bool:
    return meta.get("strategy") == "cuboids"


def exact(table: str, shape: Sequence[int], true: dict[str, dict[Axes, np.ndarray]], meta: dict[str, Any]) -> WideCube:
    """TEST-ONLY: a wide synopsis of the true cuboids (no noise): cuboid answers equal the source's."""
    releases = {k: CuboidRelease(tuple(shape), list(c), [1.0] * len(c), dict(c)) for k, c in true.items()}
    return WideCube(table, "exact", tuple(shape), {"strategy": "cuboids", **meta}, releases=releases)

