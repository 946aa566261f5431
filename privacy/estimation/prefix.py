"""Prefix sums of a (noisy) cuboid: the build's last step, the cube the 2^λ-corner identity reads.

P has one extra leading zero slice on every axis, so for cell ranges [l_i, r_i] (inclusive)
    Σ_{x ∈ box} C[x] = Σ_{s ∈ {0,1}^λ} (−1)^{λ−|s|} P[c(s)],  c_i = r_i + 1 if s_i else l_i
(the inclusion–exclusion identity of prefix-sum cubes, Ho et al. 1997, used by PRIMA §3).
Pure post-processing of released values: no privacy cost.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_SLAB = 8  # inner elements per step from which adding whole slabs beats numpy's strided cumsum


def prefix_sums(cuboid: np.ndarray) -> np.ndarray:
    """Zero-padded cumulative sums along every axis (float64).

    Along an axis with many cells inside it, slab i += slab i − 1 runs over contiguous memory;
    ``np.cumsum`` there strides by the inner size (the CPS test table's 5.7 M-cell, 7-axis class cube:
    0.67 s → 0.22 s; 0.88 M cells: 0.16 s → 0.04 s; the same additions in the same order, so the
    same bits)."""
    padded = np.zeros(tuple(n + 1 for n in cuboid.shape), dtype=np.float64)
    padded[tuple(slice(1, None) for _ in cuboid.shape)] = cuboid
    for axis in range(cuboid.ndim):
        n = padded.shape[axis]
        slabs = padded.reshape(int(np.prod(padded.shape[:axis])), n, -1)
        if slabs.shape[2] < _SLAB:
            np.cumsum(slabs, axis=1, out=slabs)
            continue
        for i in range(1, n):
            np.add(slabs[:, i], slabs[:, i - 1], out=slabs[:, i])
    return padded


Runs = Sequence[tuple[int, int]]  # disjoint inclusive cell runs on one axis


def selected_cells(runs: Runs) -> np.ndarray:
    """The cell indices a run list covers, ascending."""
    if not runs:
        return np.zeros(0, dtype=np.intp)
    return np.concatenate([np.arange(lo, hi + 1, dtype=np.intp) for lo, hi in runs])


def cell_runs(cells: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """The runs of consecutive cells a set of cell indices makes (the inverse of `selected_cells`)."""
    out: list[tuple[int, int]] = []
    for k in sorted(set(int(c) for c in cells)):
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return tuple(out)


def corner_weights(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    """Prefix indices and ±1 weights of one axis: −1 at l, +1 at r+1 for every run [l, r]."""
    idx = np.empty(2 * len(runs), dtype=np.intp)
    weights = np.empty(2 * len(runs), dtype=np.float64)
    idx[0::2] = [lo for lo, _ in runs]
    idx[1::2] = [hi + 1 for _, hi in runs]
    weights[0::2] = -1.0
    weights[1::2] = 1.0
    return idx, weights


MAX_FLAT_CORNERS = 4096  # beyond this many corner terms, gather a block instead


_CACHED_TERMS = 256  # selections with at most this many corner terms are cached (≤ 4 KB each)
_CACHE_ENTRIES = 16_384  # so the cache holds at most ~64 MB, typically far less (a 4-D box: 16 terms)
_corner_cache: dict[tuple, tuple[np.ndarray, np.ndarray] | None] = {}


def corner_offsets(selection: Sequence[Runs], shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Flat (C-order) offsets into a prefix array of ``shape`` and ±1 signs of every corner term of
    a selection: its total is ``flat[offsets] @ signs`` — 2^λ terms for a box, the cross product of
    the runs' boundaries for IN-lists. None when there would be over `MAX_FLAT_CORNERS` terms.
    Small results are cached (an answer reads the same selection's value and its error; callers
    must not modify them: they are read-only)."""
    key = (tuple(tuple(runs) for runs in selection), tuple(shape))
    cached = _corner_cache.get(key)
    if cached is not None:
        return cached
    terms = _corner_offsets(*key)
    if terms is not None and terms[0].size <= _CACHED_TERMS:
        if len(_corner_cache) >= _CACHE_ENTRIES:
            _corner_cache.clear()
        _corner_cache[key] = terms
    return terms


def _corner_offsets(selection: tuple[Runs, ...], shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    if any(len(runs) == 0 for runs in selection):
        return np.zeros(0, dtype=np.intp), np.zeros(0)
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    offsets, signs = [0], [1.0]
    for runs, stride in zip(selection, strides):
        # P[…, 0, …] is the zero padding: a run starting at cell 0 has no lower corner on this axis,
        # so an unconstrained axis adds one term, not two (the 2^λ of the identity counts constrained axes).
        if len(runs) == 1 and runs[0][0] == 0:  # one upper corner, sign +1: shift every term
            upper = (runs[0][1] + 1) * stride
            offsets = [o + upper for o in offsets]
            continue
        steps, weights = [], []
        for lo, hi in runs:
            if lo > 0:
                steps.append(lo * stride)
                weights.append(-1.0)
            steps.append((hi + 1) * stride)
            weights.append(1.0)
        if len(offsets) * len(steps) > MAX_FLAT_CORNERS:
            return None
        offsets = [o + t for o in offsets for t in steps]
        signs = [s * w for s in signs for w in weights]
    out = np.array(offsets, dtype=np.intp), np.array(signs)
    out[0].flags.writeable = out[1].flags.writeable = False
    return out


def selection_sums(
    prefix: np.ndarray, selection: Sequence[Runs], group_axes: Sequence[int] = (), lead: int = 0
) -> np.ndarray:
    """Σ of the cells in a selection, per group: an array over the selected cells of ``group_axes``
    (in that order), after ``lead`` leading batch axes of ``prefix`` that are kept as they are.

    Without groups, one gather of the corner terms (`corner_offsets`). Grouped axes contribute
    first differences (P[c+1] − P[c] for every selected cell c) instead of run boundaries, so a
    whole breakdown is one gather and λ small tensor contractions.
    """
    batch = prefix.shape[:lead]
    if not group_axes and prefix.flags.c_contiguous:
        corners = corner_offsets(selection, prefix.shape[lead:])
        if corners is not None:
            offsets, signs = corners
            flat = prefix.view(np.ndarray).reshape(batch + (-1,))
            return np.asarray(flat[..., offsets] @ signs, dtype=np.float64)
    axes = []
    for axis, runs in enumerate(selection):
        if axis in group_axes:
            cells = selected_cells(runs)
            diff = np.zeros((cells.size, 2 * cells.size))
            diff[np.arange(cells.size), np.arange(cells.size)] = -1.0
            diff[np.arange(cells.size), cells.size + np.arange(cells.size)] = 1.0
            axes.append((np.concatenate([cells, cells + 1]), diff))
        else:
            axes.append(corner_weights(runs))
    if any(idx.size == 0 for idx, _ in axes):
        return np.zeros(batch + tuple(selected_cells(selection[a]).size for a in group_axes))
    block = np.asarray(prefix[(slice(None),) * lead + np.ix_(*(idx for idx, _ in axes))], dtype=np.float64)
    for _, weights in axes:
        if weights.ndim == 1:
            block = np.tensordot(block, weights, axes=(lead, 0))
        else:  # keep the group axis, rotated to the back so axis ``lead`` is always the next one
            block = np.tensordot(block, weights, axes=(lead, 1))
    # Contracted axes vanished; group axes were appended at the back in cube order.
    in_cube_order = sorted(group_axes)
    return np.transpose(block, list(range(lead)) + [lead + in_cube_order.index(a) for a in group_axes])
