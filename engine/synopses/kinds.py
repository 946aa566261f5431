"""What serves a strategy's releases in memory, by the kind it states (`MeasurementStrategy.synopsis`).

A build persists each release's arrays and the meta names its synopsis kind; loading a cube (and the
test-only exact cube) looks the kind up here, never the strategy's class: a new strategy
that releases dense arrays, measured cuboids or blocks needs nothing in the engine.

* ``dense`` — `Cube`: one prefix array per aggregate and its error model (`privacy.estimation.error`);
* ``cuboids`` — `engine.synopses.wide.WideCube`: measured cuboids, least squares, tree models;
* ``blocks`` — `engine.synopses.pview.PViewCube`: HDPView's p-view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from engine.synopses import pview, wide
from engine.synopses.cube import ARRAY_SEPARATOR, Cube, arrays_by_key
from engine.synopses.protocol import Synopsis
from privacy.clipping.measure_axis import MeasureClasses
from privacy.estimation.error import from_json as error_from_json
from privacy.estimation.prefix import prefix_sums
from storage.sources import sum_key

# Cubes built before the meta named its synopsis (data dirs of earlier versions): by strategy name.
_LEGACY = {"cuboids": "cuboids", "hdpview": "blocks"}


def kind_of(meta: dict[str, Any]) -> str:
    return meta.get("synopsis") or _LEGACY.get(meta.get("strategy", ""), "dense")


def _dense_loaded(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Cube:
    prefixes = {k: a for k, a in arrays.items() if ARRAY_SEPARATOR not in k}
    kept = arrays_by_key(arrays)
    errors = {k: error_from_json(v, kept.get(k)) for k, v in meta["errors"].items()}
    return Cube(table, build_id, prefixes, errors, meta)


def _dense_exact(
    table: str, shape: Sequence[int], true: dict[str, Any], meta: dict[str, Any], axes: dict[str, MeasureClasses]
) -> Cube:
    out = dict(true)
    for name, classes in axes.items():  # the class SUMs are normalised: back to the measure's units
        out[sum_key(name)] = out[sum_key(name)] * classes.bounds
    return Cube(table, "exact", {k: prefix_sums(v) for k, v in out.items()}, {}, {"strategy": "exact", **meta})


def _blocks_exact(
    table: str, shape: Sequence[int], true: dict[str, Any], meta: dict[str, Any], axes: dict[str, MeasureClasses]
) -> Synopsis:
    cells = next(iter(true.values())).coords
    return pview.exact_view(table, shape, cells, {k: v.values for k, v in true.items()}, meta)


def _cuboids_exact(
    table: str, shape: Sequence[int], true: dict[str, Any], meta: dict[str, Any], axes: dict[str, MeasureClasses]
) -> Synopsis:
    return wide.exact(table, shape, true, meta)


Loader = Callable[[str, str, dict[str, np.ndarray], dict[str, Any]], Any]
Exact = Callable[[str, Sequence[int], dict[str, Any], dict[str, Any], dict[str, MeasureClasses]], Any]
SYNOPSES: dict[str, tuple[Loader, Exact]] = {
    "dense": (_dense_loaded, _dense_exact),
    "cuboids": (wide.loaded, _cuboids_exact),
    "blocks": (pview.loaded, _blocks_exact),
}


def loaded(table: str, build_id: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> Synopsis:
    """A persisted cube back in memory, served by the synopsis its meta names."""
    return SYNOPSES[kind_of(meta)][0](table, build_id, arrays, meta)


def exact(
    kind: str,
    table: str,
    shape: Sequence[int],
    true: dict[str, Any],
    meta: dict[str, Any],
    axes: dict[str, MeasureClasses],
) -> Synopsis:
    """TEST-ONLY: the synopsis of the true aggregates (no noise)."""
    return SYNOPSES[kind][1](table, shape, true, meta, axes)
