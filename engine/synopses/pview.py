"""An HDPView p-view in memory, answering like `Cube` (Eq. 10 of the paper: Σ_B |q ∩ B|/|B| · value_B).

Its error bar is the perturbation noise only (exact: Σ w_B²·Var); the error of spreading a block's
total evenly over its cells depends on the data and is not in it — every answer says so.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.synopses.cube import arrays_by_key
from engine.synopses.protocol import SynopsisBase
from privacy.estimation.prefix import Runs, selected_cells
from privacy.mechanisms.hdpview_partition import overlap
from privacy.strategies.hdpview import BlockRelease

NOTE = (
    "hdpview: the error bar covers the perturbation noise only; the error of spreading each block's total "
    "evenly over its cells depends on the data and is not in it (bench/results/wide_tables.md shows the coverage "
    "it really gets)"
)


@dataclass
class PViewCube(SynopsisBase):
    releases: dict[str, BlockRelease] = field(default_factory=dict)
    exact: bool = False  # TEST-ONLY views of the true non-empty cells

    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]:
        return [] if self.exact else [NOTE]

    def _any(self) -> BlockRelease:
        return next(iter(self.releases.values()))

    def _weights(self, selection: Sequence[Runs], skip: Sequence[int] = ()) -> np.ndarray:
        r = self._any()
        return overlap(r.lo, r.hi, selection, skip)

    def _cell_weights(self, axis: int, cells: np.ndarray) -> np.ndarray:
        """(blocks, cells): 1/|B_axis| where the cell lies in the block's range on ``axis``."""
        r = self._any()
        lo, hi = r.lo[:, axis][:, None], r.hi[:, axis][:, None]
        return ((cells[None, :] >= lo) & (cells[None, :] <= hi)) / (hi - lo + 1)

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        return float(self._weights(selection) @ self.releases[key].values)

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float | None:
        """None: a p-view releases no class axis (HDPView refuses measure axes, `axis_refusal`)."""
        return None

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None:
        if self.exact:
            return None
        w = self._weights(selection)
        return float(w @ w * self.releases[key].block_variance)

    def _grouped(
        self, vector: np.ndarray, selection: Sequence[Runs], group_axes: Sequence[int], power: int
    ) -> np.ndarray:
        base = self._weights(selection, skip=group_axes) ** power
        operands, letters = [base, vector], string.ascii_letters[1 : len(group_axes) + 1]
        for axis in group_axes:
            operands.append(self._cell_weights(axis, selected_cells(selection[axis])) ** power)
        spec = "a,a," + ",".join(f"a{c}" for c in letters) + "->" + letters
        return np.einsum(spec, *operands)

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray:
        return self._grouped(self.releases[key].values, selection, group_axes, 1)

    def grouped_variances(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray | None:
        if self.exact:
            return None
        r = self.releases[key]
        return self._grouped(np.full(len(r.lo), r.block_variance), selection, group_axes, 2)


def loaded(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> PViewCube:
    per_key = arrays_by_key(arrays)
    releases = {
        k: BlockRelease(
            per_key[k]["lo"], per_key[k]["hi"], per_key[k]["values"], float(meta["errors"][k]["block_variance"])
        )
        for k in meta["errors"]
    }
    return PViewCube(table, build_id, tuple(meta["shape"]), meta, releases=releases)


def exact_view(
    table: str, shape: Sequence[int], coords: np.ndarray, values: dict[str, np.ndarray], meta: dict[str, Any]
) -> PViewCube:
    """TEST-ONLY: every non-empty cell its own block with its true total (answers equal the source's)."""
    releases = {k: BlockRelease(coords, coords, v, 0.0) for k, v in values.items()}
    return PViewCube(table, "exact", tuple(shape), {"strategy": "hdpview", **meta}, releases=releases, exact=True)
