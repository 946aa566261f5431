"""A built cube in memory: noisy prefix arrays per aggregate, read with the 2^λ-corner identity.

A selection is one list of disjoint cell runs per axis; its total is the prefix array contracted
with one sparse ±1 vector per axis (+1 at r+1, −1 at l for every run [l, r]). For a single box that
is exactly the inclusion–exclusion sum over the 2^λ corners (`privacy.estimation.prefix` docstring); for
IN-lists it is the sum over all boxes of the runs' cross product, computed with one gather.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.synopses.protocol import remember
from privacy.estimation.error import ClassAxisError, ErrorModel, note_for
from privacy.estimation.prefix import Runs, corner_offsets, selected_cells, selection_sums

_CORNER_CACHE_SIZE = 65_536  # bound of the variance cache (selections)


ARRAY_SEPARATOR = "#"  # "<aggregate key>#<name>": the arrays a synopsis persists beside (or instead of) a prefix


def keyed_arrays(key: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One aggregate's named arrays under persisted names ``<key>#<name>``."""
    return {f"{key}{ARRAY_SEPARATOR}{name}": a for name, a in arrays.items()}


def arrays_by_key(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Persisted ``<key>#<name>`` arrays grouped back by aggregate key."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, a in arrays.items():
        if ARRAY_SEPARATOR in name:
            key, part = name.split(ARRAY_SEPARATOR, 1)
            out.setdefault(key, {})[part] = a
    return out


@dataclass
class Cube:
    table: str
    build_id: str
    prefix: dict[str, np.ndarray]  # aggregate key → zero-padded prefix array
    errors: Mapping[str, ErrorModel]  # aggregate key → error model (None: exact, tests only)
    meta: dict[str, Any] = field(default_factory=dict)
    public: dict[str, Any] = field(default_factory=dict)  # the build's public facts (cube status)
    answer_meta: dict[str, Any] = field(default_factory=dict)  # the part every answer carries
    _flat: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _variances: dict[tuple, float] = field(default_factory=dict, repr=False)
    answers: dict[Any, bytes] = field(default_factory=dict, repr=False)  # plan → its answer as JSON

    def __post_init__(self) -> None:
        # Flat plain-ndarray views (no copy: C-contiguous, memory-mapped or not); viewing a memmap
        # as ndarray avoids numpy's memmap bookkeeping on every gather.
        self._flat = {k: np.ravel(v.view(np.ndarray)) for k, v in self.prefix.items()}

    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]:
        """What this selection's error bars leave out, stated by the error models themselves (e.g.
        SCOPE's fit error; a pairwise bar bootstrapped because 3 or more axes are constrained) — of
        the aggregates the answer reads (``reads``; without them, every one): a COUNT read from a
        triple its build picked has an exact bar where the table's SUM, which picks none, is modelled."""
        read = {k for k, _ in reads if k in self.errors}
        models = [m for k, m in self.errors.items() if not read or k in read]
        return sorted({n for m in models if (n := note_for(m, selection, group_axes))})

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float | None:
        """A class-axis SUM's variance (last entry: class runs); ``normalised``: of its mass Σ_k (box in
        class k), what truncation tests. None without a class-axis error model (an exact cube)."""
        model = self.errors.get(key)
        return model.variance(selection, normalised=normalised) if isinstance(model, ClassAxisError) else None

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        """Σ of the (noisy) cells in the selection."""
        corners = corner_offsets(selection, self.prefix[key].shape)
        if corners is not None:  # the hot path: one gather of (cached) flat offsets
            offsets, signs = corners
            return float(self._flat[key].take(offsets) @ signs)
        return float(selection_sums(self.prefix[key], selection))

    def remember(self, plan: Any, result: Mapping[str, Any], encoded: bytes) -> None:
        remember(self.answers, plan, result, encoded)

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        """Totals per group: an array over the selected cells of ``group_axes`` (in that order)."""
        return selection_sums(self.prefix[key], selection, group_axes)

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None:
        """Variance of the total's noise, as the mechanism states it (None when exact); cached."""
        model = self.errors.get(key)
        if model is None:
            return None
        cache_key = (key, tuple(selection))
        var = self._variances.get(cache_key)
        if var is None:
            if len(self._variances) >= _CORNER_CACHE_SIZE:
                self._variances.clear()
            var = self._variances[cache_key] = model.variance(selection)
        return var

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray | None:
        """Noise variance of every group's total (same shape as `grouped_totals`)."""
        model = self.errors.get(key)
        if model is None:
            return None
        return model.grouped_variance(selection, [selected_cells(selection[a]) for a in group_axes], group_axes)
