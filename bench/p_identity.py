"""Would an HDMM-style optimised strategy per axis beat plain identity at our domain sizes?

HDMM's p-Identity strategy (McKenna et al., "Optimizing error of high-dimensional statistical
queries under differential privacy", VLDB 2018, §5) measures the identity plus p extra
non-negative query rows, every column scaled to L1 norm 1 (so its sensitivity equals identity's);
its expected total squared error on a workload W is tr(WᵀW (AᵀA)⁻¹) (the paper's Eq. for the
least-squares error, up to the noise variance). This script optimises the p rows (scipy L-BFGS,
a few random starts) for the workload of all ranges over n values and prints the error relative
to identity. With a Kronecker strategy a 2-D range's variance is the product of the per-axis
ones, so the 2-D gain is the square of the printed ratio. Larger p can only help at the optimum;
where it prints worse, the optimiser stopped in a local minimum and the smaller p is the answer.

Reproduce:  .venv/bin/python bench/p_identity.py     (~1 min)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privacy.estimation.hierarchy import all_ranges_gram  # noqa: E402


def p_identity_error(theta: np.ndarray, gram: np.ndarray, p: int) -> float:
    n = gram.shape[0]
    a = np.vstack([np.eye(n), np.abs(theta.reshape(p, n))])
    a = a / a.sum(axis=0)  # every column's L1 norm is 1: same sensitivity as identity
    return float(np.trace(gram @ np.linalg.inv(a.T @ a)))


def best_ratio(n: int, p: int, starts: int = 3) -> float:
    gram = all_ranges_gram(n)
    best = min(
        minimize(p_identity_error, np.random.default_rng(s).random(p * n), args=(gram, p), method="L-BFGS-B").fun
        for s in range(starts)
    )
    return best / float(np.trace(gram))


def main() -> None:
    for n in (10, 30):
        for p in (1, 2, 4):
            r = best_ratio(n, p)
            print(
                f"n = {n:3d}, p = {p}: p-Identity / identity expected squared error = {r:.3f} per axis, "
                f"{r * r:.3f} for a 2-D range"
            )
    print("Reproduce: .venv/bin/python bench/p_identity.py")


if __name__ == "__main__":
    main()
