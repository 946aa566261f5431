"""Intervals that hold where ``pairwise`` — or a wide table's ``cuboids`` — fills an answer in from
its model.

``pairwise`` releases every 2-D marginal; an answer that constrains (or groups by) 3 or more axes
also reads the maximum-entropy model's higher-order interactions, and its bootstrap bar states the
noise only, not the model's misfit: on a held-out 4-dimension table 4-column boxes covered 83 %,
and on Adult-5 at ε = 0.4 5-column boxes covered 65 % (bench/dense_bars.py --low). A wide table
measures every pair too, and its model answers' estimated bar (bootstrap, trees' spread, sampling:
`engine.synopses.wide`) missed the shrunk pairs' bias: answers of ≥ 100 rows on Adult-15 covered
0.79–0.90 (bench/wide_bars.py), 0.97–1.00 with these bounds.

The released marginals bound every such answer whatever the data's interactions (Fréchet bounds;
cells are nonnegative: ``pairwise`` models only COUNTs and SUMs of a measure clipped to [lo ≥ 0,
hi]). With A_a the answer's condition on axis a ∈ C and T(·) the true total under the named
conditions only,

    T(∩_C A_a) ≤ min_{i<j} T(A_i ∩ A_j)
    T(∩_C A_a) ≥ max_{i<j} [T(A_i ∩ A_j) − Σ_{k ∈ C∖{i,j}} min(T(A_i ∩ ¬A_k), T(A_j ∩ ¬A_k))]

(the rows of A_i ∩ A_j outside the box fail some A_k, and those failing A_k are at most the rows
of A_i, or of A_j, that do), with T(A_i ∩ ¬A_k) = T(A_i) − T(A_i ∩ A_k). Every term is a total on
one or two axes, which the cube answers from its least-squares part with an exact error
(`BootstrapModelError.linear`); each is moved by its own z·stddev towards the safe side. An
answer's interval spans these bounds and its bootstrap interval. Post-processing of released
values and public error models only: no privacy cost.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.synopses.cube import Cube
from engine.synopses.protocol import Synopsis
from engine.synopses.wide import WideCube
from privacy.estimation.error import modelled_axes
from privacy.estimation.prefix import Runs, selected_cells

Totals = tuple[np.ndarray, np.ndarray]  # (totals, stddevs), shaped to broadcast over the groups


def _modelled(cube: Synopsis, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> Any:
    inner = getattr(cube, "inner", cube)  # (under its time rollups, `engine.synopses.rolled`)
    if isinstance(inner, WideCube):  # its routing says what its model fills in
        return inner.model_axes(key, selection, group_axes)
    errors = getattr(cube, "errors", None)
    return modelled_axes(errors.get(key), selection, group_axes) if errors else None


def reads_model(cube: Synopsis, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> bool:
    """Whether an answer of ``key`` over ``selection`` reads the model (`total_bounds` is not None)."""
    return _modelled(cube, key, selection, group_axes) is not None


def total_bounds(
    cube: Synopsis, key: str, selection: Sequence[Runs], group_axes: Sequence[int], z: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per group (row-major, flat), the module docstring's [lower, upper] for one aggregate key's
    total, each term at its own z·stddev; None when the answer does not read the model. A wide
    table's SUM of a signed measure is Σ(m − lo) + lo·COUNT, each a total of non-negative cells:
    bounded apart (the mass from the SUM's and COUNT's pairs, released independently), then
    mass_lower + lo·count_upper ≤ SUM ≤ mass_upper + lo·count_lower (lo < 0)."""
    axes = _modelled(cube, key, selection, group_axes)
    if axes is None:
        return None
    cube = getattr(cube, "inner", cube)  # time rollups combine one-axis selections only: the cube's own
    if isinstance(cube, WideCube):  # every pair measured: one- and two-axis totals read its cuboids
        sizes = list(cube.sizes(key))
        lo, count_key = cube.shift(key)
        if lo < 0:
            mass = _frechet(cube, [(key, 1.0), (count_key, -lo)], axes, sizes, selection, group_axes, z)
            count = _frechet(cube, [(count_key, 1.0)], axes, sizes, selection, group_axes, z)
            return mass[0] + lo * count[1], mass[1] + lo * count[0]
    else:
        assert isinstance(cube, Cube)  # a dense cube's pairwise model (`_modelled`)
        sizes = [n - 1 for n in cube.prefix[key].shape]
    return _frechet(cube, [(key, 1.0)], axes, sizes, selection, group_axes, z)


def _frechet(
    cube: Any,
    terms: Sequence[tuple[str, float]],
    axes: Sequence[int],
    sizes: Sequence[int],
    selection: Sequence[Runs],
    group_axes: Sequence[int],
    z: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The bounds on Σ w·(key's total) over ``terms`` (released independently, so variances add),
    whose cells are non-negative, from its one- and two-axis totals."""
    groups = [selected_cells(selection[a]).size for a in group_axes]

    def on(kept: tuple[int, ...]) -> Totals:
        """Totals over the selection's conditions on ``kept`` only, per group."""
        sel = tuple(runs if a in kept else ((0, n - 1),) for a, (runs, n) in enumerate(zip(selection, sizes)))
        grouped = [a for a in group_axes if a in kept]
        total: Any = 0.0
        variance: Any = 0.0
        for key, w in terms:
            v: Any
            if grouped:
                t, v = cube.grouped_totals(key, sel, grouped), cube.grouped_variances(key, sel, grouped)
            else:
                t, v = np.array(cube.total(key, sel)), cube.variance(key, sel)
            total = total + w * np.asarray(t, dtype=float)
            variance = variance + (0.0 if v is None else w * w * np.maximum(np.asarray(v, dtype=float), 0.0))
        shape = [n if a in kept else 1 for a, n in zip(group_axes, groups)]
        sd = np.sqrt(np.broadcast_to(variance, np.shape(total)))
        return np.reshape(total, shape), np.reshape(sd, shape)

    one = {a: on((a,)) for a in axes}
    two = {frozenset(p): on(p) for p in itertools.combinations(axes, 2)}

    def outside(i: int, k: int) -> np.ndarray:
        """An upper bound on T(A_i ∩ ¬A_k)."""
        (t_i, sd_i), (t_ik, sd_ik) = one[i], two[frozenset((i, k))]
        return t_i - t_ik + z * (sd_i + sd_ik)

    upper = functools.reduce(np.minimum, [t + z * sd for t, sd in two.values()])
    lower = functools.reduce(
        np.maximum,
        [
            two[frozenset((i, j))][0]
            - z * two[frozenset((i, j))][1]
            - sum((np.minimum(outside(i, k), outside(j, k)) for k in axes if k not in (i, j)), 0.0)
            for i, j in itertools.combinations(axes, 2)
        ],
    )
    return np.broadcast_to(lower, groups).ravel(), np.broadcast_to(upper, groups).ravel()


def interval(
    cube: Synopsis,
    key: str,
    selection: Sequence[Runs],
    group_axes: Sequence[int],
    values: Any,
    sds: Any,
    z: float,
    z_bounds: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The hull of value ± z·stddev and the marginals' bounds (at ``z_bounds`` per term), shaped like
    ``values``; None when the answer does not read the model."""
    bounds = total_bounds(cube, key, selection, group_axes, z_bounds)
    if bounds is None:
        return None
    v = np.asarray(values, dtype=float)
    sd = np.asarray(sds, dtype=float) if sds is not None else np.zeros_like(v)
    return np.minimum(bounds[0].reshape(v.shape), v - z * sd), np.maximum(bounds[1].reshape(v.shape), v + z * sd)


def widened(
    cube: Synopsis,
    key: str,
    selection: Sequence[Runs],
    group_axes: Sequence[int],
    values: Any,
    sds: Any,
    z: float,
    z_bounds: float,
) -> list[list[float] | None] | None:
    """`interval` per group as [lo, hi] (row-major); withheld values (None/NaN) stay None."""
    hull = interval(cube, key, selection, group_axes, values, sds, z, z_bounds)
    if hull is None:
        return None
    out = np.stack([np.ravel(hull[0]), np.ravel(hull[1])], axis=1).tolist()
    for i in np.flatnonzero(np.isnan(np.ravel(np.asarray(values, dtype=float)))).tolist():
        out[i] = None
    return out
