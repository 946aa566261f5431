"""A synopsis with its time rollups: the cube's answers, combined with the released month and year
totals wherever a selection is made of whole blocks (`privacy.strategies.time_rollups`).

Everything is the inner synopsis's (it is delegated), except a scalar total and its variance over a
selection that covers the whole of every axis but one date axis, and whole months or years of that
one: there the cube's estimate and the blocks' sum are two independent unbiased estimates, weighted
by their inverse variances. With no error model (an exact test cube) nothing is combined.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from engine.answers.classes import classes_of_cube
from privacy.estimation.prefix import Runs, selected_cells
from privacy.strategies.time_rollups import combine
from storage.sources import measure_of

_OWN = ("inner", "blocks", "values", "block_variance", "shape", "_memo")


class RolledUp:
    """The inner synopsis and its rollups (``arrays``: `engine.builds.rollups.stored`'s, without
    their prefix; ``facts``: the build meta's "time_rollups")."""

    def __init__(self, inner: Any, arrays: dict[str, np.ndarray], facts: dict[str, Any]) -> None:
        self.inner = inner
        self.shape = tuple(inner.meta.get("shape") or ())
        self.blocks: dict[int, list[tuple[str, np.ndarray]]] = {}
        for a, info in facts["axes"].items():  # coarsest grain first: a year is one block, not twelve
            self.blocks[int(a)] = [(g, arrays[f"blocks#{a}#{g}"]) for g in reversed(info["grains"])]
        self.values = {name: a for name, a in arrays.items() if not name.startswith("blocks#")}
        self.block_variance = {name: float(r["block_variance"]) for name, r in facts["releases"].items()}
        self._memo: dict[tuple[str, tuple], tuple[float, float] | None] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:  # the builder sets `public` and `answer_meta` on the loaded cube
            setattr(self.inner, name, value)

    # -- the protocol: the inner synopsis's, except a scalar total and variance over whole blocks ----
    def remember(self, plan: Any, result: Mapping[str, Any], encoded: bytes) -> None:
        self.inner.remember(plan, result, encoded)

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        return self.inner.grouped_totals(key, selection, group_axes)

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray | None:
        return self.inner.grouped_variances(key, selection, group_axes)

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float | None:
        return self.inner.class_variance(key, selection, normalised)

    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]:
        return self.inner.error_notes(selection, group_axes, reads)

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        both = self._combined(key, selection)
        return self.inner.total(key, selection) if both is None else both[0]

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None:
        both = self._combined(key, selection)
        return self.inner.variance(key, selection) if both is None else both[1]

    def _combined(self, key: str, selection: Sequence[Runs]) -> tuple[float, float] | None:
        memo_key = (key, tuple(tuple(map(tuple, r)) for r in selection))
        if memo_key not in self._memo:
            if len(self._memo) > 4096:
                self._memo.clear()
            self._memo[memo_key] = self._combine(key, selection)
        return self._memo[memo_key]

    def _combine(self, key: str, selection: Sequence[Runs]) -> tuple[float, float] | None:
        found = self._rollup(key, selection)
        if found is None:
            return None
        cube_variance = self.inner.variance(key, selection)
        if cube_variance is None:
            return None
        return combine(self.inner.total(key, selection), cube_variance, *found)

    def _rollup(self, key: str, selection: Sequence[Runs]) -> tuple[float, float] | None:
        """The rollups' (value, variance) of a selection of whole blocks on one date axis and the
        whole of every other axis (and of every class, for a SUM released per class), else None."""
        if not self.shape or not self._every_class(key, selection[len(self.shape) :]):
            return None
        cut = [a for a in range(len(self.shape)) if not _whole(selection[a], self.shape[a])]
        if len(cut) != 1 or cut[0] not in self.blocks:
            return None
        axis = cut[0]
        cells = selected_cells(selection[axis])
        for grain, ids in self.blocks[axis]:
            values = self.values.get(f"{key}#{axis}#{grain}")
            if values is None or cells.size == 0 or (ids[cells] < 0).any():
                continue
            chosen = np.unique(ids[cells])
            if int(np.isin(ids, chosen).sum()) != cells.size:
                continue  # a block only partly selected: this grain does not tile the selection
            variance = self.block_variance.get(f"{key}#{axis}")
            if variance is None:
                return None
            return float(values[chosen].sum()), chosen.size * variance
        return None

    def _every_class(self, key: str, extra: Sequence[Runs]) -> bool:
        """No entry past the dimensions, or (a SUM per class) the runs cover every class."""
        if not extra:
            return True
        if len(extra) != 1 or not key.startswith("sum:"):
            return False
        classes = classes_of_cube(self.inner.meta, measure_of(key))
        return classes is not None and _whole(extra[0], classes.count)


def _whole(runs: Runs, length: int) -> bool:
    """Whether cell runs cover 0 … length−1."""
    return selected_cells(runs).size == length
