"""How many bootstrap replicates `pairwise` needs for honest 3+-axis error bars.

`pairwise` stores K float32 prefix cubes of bootstrap errors per aggregate — 4·K bytes per cell
beside the 8-byte estimate, the bulk of its footprint. A bar from K mean-zero replicates is a
σ̂ with K degrees of freedom; the error over σ̂ is then t-distributed, with variance σ̂²·K/(K−2).
This compares, over many seeded builds, the coverage of value ± 1.96·stddev and the mean width for

* K = 16, plain mean square (the stored default before),
* K = 16 and K = 8 with the factor K/(K−2) in the stated variance (K = 8: today's default; the
  K = 8 bar reads the first 8 of the same build's 16 replicates, which are distributed as 8 fresh ones),
* K = 8 with each bootstrap refit stopped after 30, 10 or 5 L-BFGS iterations (the refits
  were most of a 10⁶-row build's time; 5 is the default since). The same seed gives the same estimate, so these
  bars are compared on the very same errors,

on boxes constraining 3 and 4 axes of (a) log-linear cubes (what the model represents: the bootstrap
is valid, only the noise counts; a small one and one of `bench/scale.py`'s dense shape) and (b) Adult's age/5 × education × hours/10 × sex COUNT cube
(real data: the model's misfit is not in any bar). ε = 1, Δ = 1 (COUNT).

Run: .venv/bin/python bench/bootstrap_replicates.py [--builds 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _pool in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # one BLAS thread: the refits
    os.environ.setdefault(_pool, "1")  # run on the build's threads

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import adult_rows  # noqa: E402
from privacy.estimation.error import BootstrapModelError  # noqa: E402
from privacy.estimation.lattice import marginal  # noqa: E402
from privacy.estimation.prefix import prefix_sums, selection_sums  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies.pairwise import PairwiseStrategy, pairs  # noqa: E402

Z95 = 1.959963984540054
# name → (replicates K, variance factor K/(K−2), refit iterations)
VARIANTS = {
    "K=16, mean square (before)": (16, False, 30),
    "K=16, ×K/(K−2)": (16, True, 30),
    "K=8, ×K/(K−2), 30 refit iterations": (8, True, 30),
    "K=8, ×K/(K−2), 10 refit iterations": (8, True, 10),
    "K=8, ×K/(K−2), 5 refit iterations (default)": (8, True, 5),
}


def loglinear(shape: tuple[int, ...], seed: int = 5, scale: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    log = np.zeros(shape)
    for c in pairs(len(shape)):
        log = log + rng.normal(0, 0.5, marginal(np.zeros(shape), c).shape)
    return scale * np.exp(log)


def adult_cube() -> np.ndarray:
    """COUNT over age/5 (0–119) × education-num (1–16) × hours/10 (0–99) × sex, from adult.data+test."""
    x = np.zeros((24, 16, 10, 2))
    for r in adult_rows():
        age, edu, hours = int(r[0]), int(r[4]), int(r[12])
        x[min(age // 5, 23), edu - 1, min(hours // 10, 9), 0 if r[9] == "Female" else 1] += 1
    return x


def boxes(shape: tuple[int, ...], rng: np.random.Generator, n: int) -> list[list[tuple[tuple[int, int]]]]:
    """Random boxes constraining 3 or 4 axes (the bootstrapped bars)."""
    out = []
    for i in range(n):
        free = set() if i % 2 else {int(rng.integers(len(shape)))}
        box = []
        for a, size in enumerate(shape):
            if a in free:
                box.append(((0, size - 1),))
            else:
                lo, hi = sorted(rng.integers(0, size, 2))
                if lo == 0 and hi == size - 1:
                    hi = size - 2
                box.append(((int(lo), int(hi)),))
        out.append(box)
    return out


def run(x: np.ndarray, builds: int, n_boxes: int) -> dict[str, tuple[float, float]]:
    prefix_true = prefix_sums(x)
    sel = boxes(x.shape, np.random.default_rng(11), n_boxes)
    truth = np.array([selection_sums(prefix_true, s) for s in sel])
    covered = {v: [] for v in VARIANTS}
    width = {v: [] for v in VARIANTS}
    for b in range(builds):
        builds_by_refit = {}
        for n in sorted({v[2] for v in VARIANTS.values()}, reverse=True):
            k = max(v[0] for v in VARIANTS.values() if v[2] == n)
            builds_by_refit[n] = PairwiseStrategy(replicates=k, refit_iterations=n).measure(
                x, 1.0, 1.0, RandomSource(seed=90_000 + b), nonnegative=True
            )
        m = builds_by_refit[30]
        err = np.array([selection_sums(prefix_sums(m.noisy), s) for s in sel]) - truth
        for name, (k, t, n) in VARIANTS.items():
            same = builds_by_refit[n]
            assert np.array_equal(same.noisy, m.noisy)  # the same seed: the same release and estimate
            model = BootstrapModelError(same.error.linear, same.error.replicates[:k])
            var = np.array([model.variance(s) for s in sel]) / (1.0 if t else model.predictive)
            sd = np.sqrt(var)
            covered[name].append(np.abs(err) <= Z95 * sd)
            width[name].append(2 * Z95 * sd)
    return {v: (float(np.mean(covered[v])), float(np.mean(width[v]))) for v in VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=100)
    parser.add_argument("--boxes", type=int, default=60)
    parser.add_argument("--cubes", type=int, default=3, help="the first N cubes only")
    args = parser.parse_args()
    lines = [
        "# Bootstrap replicates for `pairwise` bars",
        "",
        f"`.venv/bin/python bench/bootstrap_replicates.py --builds {args.builds} --boxes {args.boxes}` — "
        f"{args.builds} seeded builds, {args.boxes} random boxes on 3–4 axes each, COUNT at ε = 1; coverage of "
        "value ± 1.96·stddev and mean interval width (relative to the K = 16 mean-square bar). Stored "
        "replicate bytes per cell: 4·K.",
        "",
        "| cube | bar | coverage | width | replicate bytes/cell |",
        "|---|---|---|---|---|",
    ]
    cubes = (
        ("log-linear 12×10×8×6 (model holds)", loglinear((12, 10, 8, 6))),
        ("log-linear 10×50×36×8, 7 rows/cell (scale.py's dense shape)", loglinear((10, 50, 36, 8), scale=7.0)),
        ("Adult age/5 × education × hours/10 × sex", adult_cube()),
    )
    for name, x in cubes[: args.cubes]:
        start = time.perf_counter()
        res = run(x, args.builds, args.boxes)
        base = res["K=16, mean square (before)"][1]
        for v, (cov, w) in res.items():
            lines.append(f"| {name} | {v} | {cov:.3f} | {w / base:.3f} | {4 * VARIANTS[v][0]} |")
        lines.append(f"| {name} | (seconds for all its builds) | {time.perf_counter() - start:.0f} s | | |")
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
    text = "\n".join(lines) + "\n"
    (Path(__file__).resolve().parent / "results" / "bootstrap_replicates.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
