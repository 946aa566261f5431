"""A wide table's synopsis in memory: measured cuboids answered directly, other queries by pair models.

`WideCube` answers the same calls as `Cube` (totals, grouped totals, variances, notes), so the answer
path, formats, clamping and memoization are shared. Routing per query:

* the query's constrained and grouped columns lie inside a measured cuboid → the smallest such
  cuboid's own `Cube` (its consistent estimate's prefix array and the exact lattice variance);
* otherwise → a model of those columns' measured pairs collapsed to the query
  (`privacy.estimation.tree_model.collapsed_totals`), with an estimated error bar: bootstrap noise + the spread
  of the tree models around it (`privacy.strategies.cuboids`), and a note saying so.

SUM(m) in a model answer: the model is fitted to the non-negative mass m − lo (lo the clip range's
lower end), Σ(m − lo) + lo·COUNT, so signed measures need nothing special.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.answers.classes import classes_of_cube
from engine.synopses.cube import Cube, arrays_by_key
from engine.synopses.protocol import SynopsisBase
from privacy.estimation.cuboid_fit import Axes
from privacy.estimation.error import ClassAxisError, ErrorModel, note_for
from privacy.estimation.prefix import Runs, prefix_sums, selected_cells
from privacy.estimation.shrinkage import mostly_signal, shrink_interaction, supported
from privacy.estimation.tree_model import TreeTables, box_totals, collapsed_totals, spanning_trees
from privacy.strategies.cuboid_selection import maxent_triple
from privacy.strategies.cuboids import CuboidRelease, active_axes, covering, shape_of
from storage.sources import COUNT_KEY, class_count_key, measure_of

MODEL_NOTE = (
    "{cols}: answered by a model fitted to the measured 2-way cuboids of these columns (every pair, "
    "and any measured 3-way one, collapsed to the query's cells; no measured cuboid holds all of them); "
    "the error bar is an estimate (bootstrap noise plus the spread of tree models around it), not exact"
)
# what a model answer's interval adds, but for a class-axis SUM's (`WideCube.model_axes`)
BOUNDED_NOTE = (
    ", and the 95 % interval spans what the measured pairs allow whatever the data's higher-order "
    "interactions; name these columns in the table's cube.cuboids to measure them, with an exact bar"
)


@dataclass
class _Model:
    """Tree tables of one aggregate's mass (count, or sum − lo·count): released and replicates."""

    main: TreeTables
    replicates: TreeTables | None  # the bootstrap replicates as one batch
    _trees: dict[tuple[int, ...], list[tuple[tuple[int, int], ...]]] = field(default_factory=dict, repr=False)

    def trees(self, axes: Sequence[int]) -> list[tuple[tuple[int, int], ...]]:
        """The spanning trees over ``axes`` (their mutual information in the released tables, so the
        same for every query on them: a quantile asks ~16 boxes over the same axes)."""
        key = tuple(axes)
        if key not in self._trees:
            weights = {(i, j): self.main.mutual_information(i, j) for k, i in enumerate(axes) for j in axes[k + 1 :]}
            self._trees[key] = spanning_trees(axes, weights)
        return self._trees[key]


@dataclass
class WideCube(SynopsisBase):
    releases: dict[str, CuboidRelease] = field(default_factory=dict)
    _cuboids: dict[tuple[str, Axes], Cube] = field(default_factory=dict, repr=False)
    _lists: dict[str, list[Axes]] = field(default_factory=dict, repr=False)
    _models: dict[str, _Model] = field(default_factory=dict, repr=False)
    _model_answers: dict[tuple, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)
    _covering: dict[tuple, Axes | None] = field(default_factory=dict, repr=False)
    _bounds: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # class-axis SUM key → u_k

    def __post_init__(self) -> None:
        """One `Cube` per aggregate and measured cuboid — each aggregate has its own list, as each
        picks its own triples (`privacy.strategies.cuboid_selection`) — for the table's shape, and
        (dimensions…, class) for a measure's class axis, whose SUM cuboids holding the class axis are
        kept in the measure's units (u_k per class) with a class-axis error model."""
        for k, r in self.releases.items():
            classes = classes_of_cube(self.meta, measure_of(k)) if k.startswith("sum:") else None
            if classes is not None and len(r.shape) > len(self.shape):
                self._bounds[k] = classes.bounds
            lattice = r.lattice()
            self._lists[k] = [s for s in r.cuboids if s not in r.picked or _direct(r, s, lattice)]
            u = self._class_bounds(k)
            for s in r.cuboids:
                estimate = r.estimates[s]
                error: ErrorModel = r.error(s, lattice)
                if u is not None and self._class_axis(k) in s:
                    estimate = estimate * u  # the class axis is last: broadcasts along it
                    error = ClassAxisError(error, tuple(u.tolist()))
                self._cuboids[(k, s)] = Cube(
                    self.table, self.build_id, {k: prefix_sums(estimate)}, {k: error}, {"strategy": "cuboids"}
                )

    def _support(self, release: CuboidRelease, s: Axes) -> list[np.ndarray]:
        """Per axis of cuboid ``s``, the cells rows are in: those whose released 1-way COUNT clears
        `privacy.estimation.shrinkage.SUPPORT_Z` standard deviations of its noise (a class axis: every
        cell). What the model shrinks a picked triple's 3-way interaction over (`shrink_interaction`):
        an axis's empty cells — a category's other and NULL, a number's values nobody has — would
        count as interaction. Post-processing of released values."""
        count = self.releases.get(COUNT_KEY)
        if count is None:  # (library use without a COUNT: no margins to read)
            return [np.ones(release.shape[a], dtype=bool) for a in s]
        masks = []
        for a in s:
            margin = count.estimates.get((a,)) if a < len(self.shape) else None
            if margin is None:
                masks.append(np.ones(release.shape[a], dtype=bool))
            else:
                masks.append(supported(margin, float(np.sqrt(max(count.lattice().v[(a,)], 0.0)))))
        return masks

    # -- class axes ----------------------------------------------------------------------------
    def _class_axis(self, key: str) -> int | None:
        """The class axis of a key released over one (axis d, after the dimensions), else None."""
        return len(self.shape) if len(self.releases[key].shape) > len(self.shape) else None

    def _class_bounds(self, key: str) -> np.ndarray | None:
        """u_k of a SUM released over its measure's class axis (None: a COUNT, or no axis)."""
        return self._bounds.get(key)

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float:
        """A class-axis SUM's variance (last entry: class runs); ``normalised``: of its mass Σ_k (box
        in class k), what truncation tests (`engine.answers.classes`)."""
        routed = self._route(key, selection)
        if routed is not None:
            cube, sub, _ = routed
            variance = cube.class_variance(key, sub, normalised=normalised)
            assert variance is not None  # a released cuboid over the class axis has its class-axis model
            return float(variance)
        return float(self._model_answer(key, selection, (), normalised)[1])

    def read_axes(self, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> tuple[int, ...]:
        """The axes whose cells an answer's noise sums over: those it constrains or groups on (and a
        class axis), never the ones the measured cuboid leaves out (`engine.answers.classes.noise_terms`)."""
        axes = set(active_axes(self.shape, selection[: len(self.shape)], group_axes))
        return tuple(sorted(axes | ({len(self.shape)} if len(selection) > len(self.shape) else set())))

    # -- the Cube interface -------------------------------------------------------------------
    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]:
        """The model note when a read (key, selection) the answer makes goes to a model: each
        aggregate picks its own triples, so a COUNT(*) read from a picked triple has an exact bar
        even where the table's SUM over the same columns is modelled. Without ``reads`` (library
        use) every aggregate of the table's shape is checked."""
        names = list(self.meta.get("dimension_names", []))
        notes = []
        plain = [(k, selection) for k, r in self.releases.items() if tuple(r.shape) == tuple(self.shape)]
        read = [(k, s) for k, s in reads if k in self.releases]
        for key, sel in read or plain:
            shape = self.releases[key].shape
            label = names + ([f"class of {measure_of(key)}"] if self._class_axis(key) is not None else [])
            routed = self._route(key, sel, group_axes)
            if routed is None:
                templates = [MODEL_NOTE + ("" if self._class_axis(key) is not None else BOUNDED_NOTE)]
            else:  # a measured cuboid: its error models say whether the bar is an estimate
                cube, sub, groups = routed
                templates = [t for m in cube.errors.values() if (t := note_for(m, sub, groups))]
            axes = self._active(key, shape, sel, group_axes)
            for template in templates:
                note = template.format(cols=", ".join(label[i] if i < len(label) else str(i) for i in axes))
                if note not in notes:
                    notes.append(note)
        return notes

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        routed = self._route(key, selection)
        if routed is not None:
            cube, sub, _ = routed
            return cube.total(key, sub)
        return float(self._model_answer(key, selection, ())[0])

    def variance(self, key: str, selection: Sequence[Runs]) -> float:
        routed = self._route(key, selection)
        if routed is not None:
            cube, sub, _ = routed
            variance = cube.variance(key, sub)
            assert variance is not None  # a released cuboid states its noise
            return float(variance)
        return float(self._model_answer(key, selection, ())[1])

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        routed = self._route(key, selection, group_axes)
        if routed is not None:
            cube, sub, groups = routed
            return cube.grouped_totals(key, sub, groups)
        return self._model_answer(key, selection, tuple(group_axes))[0]

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray | None:
        routed = self._route(key, selection, group_axes)
        if routed is not None:
            cube, sub, groups = routed
            return cube.grouped_variances(key, sub, groups)
        return self._model_answer(key, selection, tuple(group_axes))[1]

    def model_axes(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int] = ()) -> list[int] | None:
        """The axes of an answer the model fills in — a COUNT, or a SUM with no class axis: a
        signed measure's through its non-negative mass (`shift`) — which the measured pairs bound
        whatever the data's higher-order interactions (`engine.answers.model_bounds`); else None (a
        measured cuboid holds it, or it is a class-axis SUM, answered per class)."""
        if self._class_axis(key) is not None or self._route(key, selection, group_axes) is not None:
            return None
        return list(self._active(key, self.releases[key].shape, selection, group_axes))

    def sizes(self, key: str) -> tuple[int, ...]:
        """Cells per axis of ``key``'s release."""
        return tuple(self.releases[key].shape)

    # -- routing -----------------------------------------------------------------------------
    def _active(
        self, key: str, shape: Sequence[int], selection: Sequence[Runs], group_axes: Sequence[int]
    ) -> tuple[int, ...]:
        """The axes a query reads; a class-axis SUM always reads its class axis (its other cuboids hold
        normalised sums, which no class bound rescales)."""
        axes = set(active_axes(shape, selection, group_axes))
        if self._class_bounds(key) is not None:
            axes.add(len(self.shape))
        return tuple(sorted(axes))

    def _route(
        self, key: str, selection: Sequence[Runs], group_axes: Sequence[int] = ()
    ) -> tuple[Cube, list[Runs], tuple[int, ...]] | None:
        """The measured cuboid of ``key`` that holds the query, with the selection and groups in its axes."""
        shape = tuple(self.releases[key].shape)
        axes = self._active(key, shape, selection, group_axes)
        memo = (key, axes)
        if memo not in self._covering:  # at most 2^d entries in principle; queries touch few
            self._covering[memo] = covering(self._lists[key], shape, axes)
        s = self._covering[memo]
        if s is None:
            return None
        return self._cuboids[(key, s)], [selection[i] for i in s], tuple(s.index(a) for a in group_axes)

    # -- the model path ----------------------------------------------------------------------
    def _model(self, key: str) -> _Model:
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = self._fit(key)
        return model

    def shift(self, key: str) -> tuple[float, str]:
        """(lo, the COUNT key) such that SUM − lo·COUNT is ≥ 0 row by row: the clip range's lower end and
        COUNT(*); for a class-axis SUM, −1 and the measure's COUNT per class (v/u_k ≥ −1)."""
        if not key.startswith("sum:"):  # a COUNT (or a bare key in library use): no shift
            return 0.0, COUNT_KEY
        lo = float((self.meta.get("clipping") or {}).get(measure_of(key), {}).get("lo", 0.0))
        if self._class_axis(key) is None:
            return lo, COUNT_KEY
        if lo >= 0:
            return 0.0, COUNT_KEY
        return -1.0, class_count_key(measure_of(key))

    def _fit(self, key: str) -> _Model:
        """Tree tables of the mass of ``key``: COUNT, or SUM − lo·COUNT (non-negative for every row)."""
        lo, count_key = self.shift(key)
        release = self.releases[key]
        count = self.releases[count_key] if lo else release

        v = release.lattice().v
        v_count = count.lattice().v if lo else {}
        support = {s: self._support(release, s) for s in release.cuboids if len(s) == 3}

        def tables(est: dict[Axes, np.ndarray], cnt: dict[Axes, np.ndarray]) -> TreeTables:
            mass = {s: est[s] - lo * cnt[s] for s in est if s in cnt} if lo else est
            ones = {s[0]: a for s, a in mass.items() if len(s) == 1}
            pairs = {s: a for s, a in mass.items() if len(s) == 2}
            # picked or named 3-way cuboids: the model matches them, their 3-way interaction shrunk
            # toward none by its own noise (a pick measured with a small share is mostly noise)
            triples = {
                s: shrink_interaction(a, v[s] + lo * lo * v_count.get(s, 0.0), support[s])
                for s, a in mass.items()
                if len(s) == 3
            }
            return TreeTables.fitted(float(next(iter(ones.values())).sum()), ones, pairs, triples)

        upto3 = [s for s in release.cuboids if len(s) <= 3]
        main = tables({s: release.estimates[s] for s in upto3}, count.estimates)
        reps = [tables(b, c) for b, c in zip(release.bootstrap, count.bootstrap)]
        return _Model(main, TreeTables.stacked(reps) if reps else None)

    def _model_answer(
        self, key: str, selection: Sequence[Runs], group_axes: tuple[int, ...], normalised: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """(value, variance) of a model answer, cached per query: totals and variances share it. A
        class-axis SUM is answered per class and summed with weights u_k (1 when ``normalised``)."""
        cache_key = (key, tuple(selection), group_axes, normalised)
        hit = self._model_answers.get(cache_key)
        if hit is not None:
            return hit
        axes = self._active(key, self.releases[key].shape, selection, group_axes)
        cells = {a: selected_cells(selection[a]) for a in axes}
        u, c = self._class_bounds(key), self._class_axis(key)
        per_class = u is not None and c is not None and c not in group_axes
        groups = group_axes + ((c,) if per_class and c is not None else ())

        def weigh(x: np.ndarray) -> np.ndarray:  # per class → the measure's units (summed unless grouped on)
            if u is None or c is None:
                return x
            w = np.ones(len(cells[c])) if normalised else u[cells[c]]
            if per_class:
                return x @ w
            shape = [1] * len(groups)
            shape[groups.index(c)] = len(w)
            return x * w.reshape(shape)  # (broadcasts over a leading axis of replicates too)

        value, noise, misfit = self._mass_answer(key, axes, cells, groups, weigh)
        misfit = misfit + self._sampling(key, value, normalised)
        lo, count_key = self.shift(key)
        if lo:  # SUM = Σ(m − lo) + lo·COUNT
            c_value, c_noise, c_misfit = self._mass_answer(count_key, axes, cells, groups, weigh)
            value = value + lo * c_value
            noise = noise + lo * c_noise
            misfit = misfit + lo * lo * c_misfit
        noise_var = np.var(noise, axis=0, ddof=1) if len(noise) > 1 else np.zeros_like(value)
        variance = noise_var + misfit
        floor = self._model_floor(key, selection, group_axes, axes, normalised)
        if floor is not None:
            variance = np.maximum(variance, floor)
        if len(self._model_answers) >= 4096:
            self._model_answers.clear()
        self._model_answers[cache_key] = (value, variance)
        return value, variance

    def _sampling(self, key: str, mass: np.ndarray, normalised: bool) -> np.ndarray:
        """What no model of the measured cuboids can pin down, however exact: a table of N rows drawn
        from a population its pairs describe exactly still deviates from it cell by cell, by about a
        multinomial's spread. A box holding mass S of a measure whose rows each add at most w to it
        (w = 1 for a COUNT, hi − lo for a SUM's shifted mass, per class u_k ≤ max u for a class-axis
        one) varies by at most w·S (Σ m² ≤ w·Σ m over its rows). Post-processing of the model's own
        answer; measured on a generated table of 10⁶ rows, 3-/4-column bars without it covered 0.74–0.89."""
        if normalised:
            return np.zeros_like(mass)
        w = 1.0
        if key.startswith("sum:"):
            bounds = (self.meta.get("clipping") or {}).get(measure_of(key), {})
            u = self._class_bounds(key)
            w = (
                float(np.max(np.abs(u)))
                if u is not None
                else float(bounds.get("hi", 0.0)) - float(bounds.get("lo", 0.0))
            )
        return w * np.maximum(mass, 0.0)

    def _model_floor(
        self, key: str, selection: Sequence[Runs], group_axes: tuple[int, ...], axes: tuple[int, ...], normalised: bool
    ) -> np.ndarray | float | None:
        """The smallest exact noise variance of the same box read inside one measured cuboid over the
        query's axes (holding its groups and, for a class-axis SUM, the class): a model answer is never
        reported surer than that. Where the tree tables put no mass (their non-negative projection
        zeroes it in every replicate) the bootstrap sees no spread at all, and a truncated SUM of a
        16-dimension table came back 0 ± 0 (Bank by month where y = 'yes')."""
        needs_class = self._class_bounds(key) is not None
        best = None
        for s in self._lists[key]:
            if not set(s) <= set(axes) or not set(group_axes) <= set(s) or (needs_class and len(self.shape) not in s):
                continue
            cube, sub = self._cuboids[(key, s)], [selection[i] for i in s]
            groups = tuple(s.index(a) for a in group_axes)
            v: Any
            if normalised:
                if groups:
                    continue
                v = cube.class_variance(key, sub, normalised=True)
            else:
                v = cube.grouped_variances(key, sub, groups) if groups else cube.variance(key, sub)
            if v is not None:
                best = v if best is None else np.minimum(best, v)
        return best

    def _mass_answer(
        self, key: str, axes: tuple[int, ...], cells: dict[int, np.ndarray], group_axes: tuple[int, ...], weigh: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The model's answer, the replicates' answers (stacked) and the misfit variance, each through
        the linear map ``weigh``. The answer is the all-pairs model collapsed to the query
        (`privacy.estimation.tree_model.collapsed_totals`); the misfit is the mean square of the spanning trees'
        answers around it — each tree drops some of the pairs, so their spread says how much the
        pairs (and whatever they do not pin down) move the answer. Measured on Adult-15 against the
        best tree alone (Adult-15 COUNT, 1-way share 0.7): 3- / 4-column MAE 74 / 59 → 64 / 39 at
        ρ = 0.015, 139 / 112 → 111 / 80 at ε = 1, with 95 % intervals covering 0.94–0.97 of answers."""
        model = self._model(key)
        best = weigh(collapsed_totals(model.main, axes, cells, group_axes)[0])
        trees = [weigh(box_totals(model.main, t, axes, cells, group_axes)[0]) for t in model.trees(axes)]
        misfit = np.mean([(t - best) ** 2 for t in trees], axis=0)
        replicates = (
            weigh(collapsed_totals(model.replicates, axes, cells, group_axes))
            if model.replicates is not None
            else np.zeros((0,) + np.shape(best))
        )
        return best, replicates, misfit


def _direct(release: CuboidRelease, s: Axes, lattice: Any) -> bool:
    """Whether queries inside picked triple ``s`` read it directly (least squares, exact bar): only
    where its 3-way interaction is mostly signal (`privacy.estimation.shrinkage.mostly_signal`);
    otherwise the model, which matches it shrunk, answers instead (an estimated bar).
    Post-processing of released values."""
    model = maxent_triple({p: release.estimates[p] for p in itertools.combinations(s, 2)}, s)
    return mostly_signal(release.estimates[s], lattice.v[s], model)


def loaded(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> WideCube:
    """A persisted wide synopsis back in memory."""
    per_key = arrays_by_key(arrays)
    releases = {k: CuboidRelease.from_arrays(meta["errors"][k], per_key[k]) for k in meta["errors"]}
    return WideCube(table, build_id, tuple(meta["shape"]), meta, releases=releases)


def exact(table: str, shape: Sequence[int], true: dict[str, dict[Axes, np.ndarray]], meta: dict[str, Any]) -> WideCube:
    """TEST-ONLY: a wide synopsis of the true cuboids (no noise): cuboid answers equal the source's."""
    releases = {k: CuboidRelease(shape_of(c), list(c), [1.0] * len(c), dict(c)) for k, c in true.items()}
    return WideCube(table, "exact", tuple(shape), {"strategy": "cuboids", **meta}, releases=releases)
