"""OpenDP's per-query quantile for bench/quantiles.py — run in a bench-only environment, never by Prima.

    python -m venv /tmp/opendp-venv && /tmp/opendp-venv/bin/pip install -r bench/requirements-opendp.txt
    /tmp/opendp-venv/bin/python bench/quantiles_opendp.py IN.npz OUT.json

IN.npz holds, per dataset d and group g, the group's values (``d|g``), the public candidate grid
(``candidates|d``) and the runs: ``ns`` (queries sharing ε = 1) and ``trials``. Each query is
OpenDP's `make_private_quantile` (Smith 2011's exponential mechanism over the candidates, the
library's own calibration) at ε/N, pure DP (max divergence), on one group's rows — groups are
disjoint, so the whole GROUP BY is one query of ε/N by parallel composition.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import opendp.prelude as dp

dp.enable_features("contrib")


def median_at(values: np.ndarray, candidates: list[float], alpha: float, epsilon: float, trials: int) -> list[float]:
    space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance())

    def make(scale: float) -> dp.Measurement:
        return dp.m.make_private_quantile(*space, dp.max_divergence(), candidates=candidates, alpha=alpha, scale=scale)

    scale = dp.binary_search_param(make, d_in=1, d_out=epsilon)
    release = make(scale)
    data = [float(v) for v in values]
    return [float(release(data)) for _ in range(trials)]


def main(src: str, out: str) -> None:
    z = np.load(src)
    ns, trials, alpha = [int(n) for n in z["ns"]], int(z["trials"]), float(z["alpha"])
    result: dict[str, dict[str, dict[str, list[float]]]] = {}
    for key in z.files:
        if "|" not in key or key.startswith("candidates|"):
            continue
        dataset, group = key.split("|", 1)
        candidates = [float(c) for c in z[f"candidates|{dataset}"]]
        per_n = result.setdefault(dataset, {}).setdefault(group, {})
        for n in ns:
            per_n[str(n)] = median_at(z[key], candidates, alpha, 1.0 / n, trials)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
