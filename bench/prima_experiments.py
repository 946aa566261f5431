"""PRIMA's experiments (prima-clasp-scope §6, Fig. 5–9), measured on our own, sound implementation.

Methods (each spends the same total ε on the SUM cuboid of one measure, drawn with the project's
floating-point-safe sampler; COUNT is not part of the paper's comparison):
  base      BASE = No-Clipping: Laplace per base cell at the declared bounds (`identity`, fixed clip)
  svtc      SVT truncation threshold (10 % of ε, τ_s = 10 query-noise scales; candidates b_i = i up to
            dom(M) ≤ 64, else 64 equal steps) + per-cell cube (90 %)
  r2tc      R2T per base cell (ε split over τ_j = 2^j, β = 0.1)
  prima     CLASP clip range from a DP histogram (10 %) + noisy base cuboid + SCOPE prefix cube (90 %)
  clasp+id  the same CLASP clipping + `identity` (separates clipping from SCOPE)
  clasp+mg  the same CLASP clipping + `marginals` (the service's default strategy)
SVTC/R2TC are run without the Noise Control Framework (see privacy/clipping/truncation.py).

Metric (the paper's): for λ = 2, every 2-D cuboid of the 4 dimensions; for λ = 4, the base
cuboid; MAE = mean over their cells of |noisy − true| / n (n = rows), where "true" is the
*unclipped* sum, so clipping and truncation bias count. Fig. 9: mean bias (signed) of x random
4-D box SUM queries, x ∈ {10, 100, 1000}. 10 repetitions (2 in --quick).

Datasets: synthetic Normal (multivariate normal, covariance 0.5, discretised to dom(A) / dom(M)
equal-width levels on [−3, 3]) and Random (uniform levels), d = 4, measure M ∈ 1..dom(M) with the
public bound [0, dom(M)], at full resolution; real: UCI Adult (measures hours-per-week, bound
[0, 168] = hours in a week, and capital-gain, bound [0, 99,999] = the census top-code) and Bank
Marketing (signed `balance`, declared bound [−100,000, 1,000,000] euros: a generous public guess,
not the data's range). Defaults ε = 2, dom(A) = dom(M) = 30, n = 10^5.

Reproduce:  .venv/bin/python bench/prima_experiments.py          (~25 min on 2 cores)
            .venv/bin/python bench/prima_experiments.py --quick  (< 5 min)
Writes bench/results/prima_experiments[_quick].md and prima_fig*.png.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import platform
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shared_data import SHARED, adult_rows, prima_normal, random_range  # noqa: E402

from engine.synopses.cube import Cube  # noqa: E402
from privacy.clipping import data_driven as double_clipping  # noqa: E402
from privacy.clipping import truncation  # noqa: E402
from privacy.clipping.bounds import sum_sensitivity  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import get_strategy  # noqa: E402

RESULTS = REPO / "bench" / "results"
SETUP_SHARE = 0.1  # ε share of CLASP's histogram and of SVT's threshold search
SVT_TAU_S = 10.0  # τ_s in query-noise scales (4/ε_svt): "the next bucket adds less than noise can tell"
METHODS = ["base", "svtc", "r2tc", "prima", "clasp+id", "clasp+mg"]
DEFAULTS = {"epsilon": 2.0, "dom_a": 30, "dom_m": 30, "n": 100_000}


@dataclass
class Table:
    name: str
    shape: tuple[int, ...]
    cells: np.ndarray  # flat base-cell index per row
    values: np.ndarray  # the raw (unclipped) measure per row
    lo: float  # declared public bounds of the measure
    hi: float

    @property
    def rows(self) -> int:
        return len(self.values)

    def cuboid(self, values: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
        """Σ values per base cell (rows in ``keep`` only) — bench-side aggregation of raw rows."""
        cells, vals = (self.cells, values) if keep is None else (self.cells[keep], values[keep])
        return np.bincount(cells, weights=vals, minlength=int(np.prod(self.shape))).reshape(self.shape)


# -- datasets -------------------------------------------------------------------------------------
def synthetic(kind: str, n: int, dom_a: int, dom_m: int, seed: int, d: int = 4) -> Table:
    if kind == "normal":
        attrs, measure = prima_normal(n, d, dom_a, dom_m, seed)
    else:
        rng = np.random.default_rng(seed)  # data generation, not noise
        attrs = rng.integers(0, dom_a, (d, n))
        measure = rng.integers(1, dom_m + 1, n).astype(np.float64)
    shape = (dom_a,) * d
    return Table(kind, shape, np.ravel_multi_index(tuple(attrs), shape), measure, 0.0, float(dom_m))


def adult(measure: str) -> Table:
    """Adult (data + test): age 0–119 in 5-year bins, education-num 1–16, sex, race (5 values)."""
    rows = adult_rows()
    races = ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"]
    keep = [
        r for r in rows if int(r[0]) < 120 and 1 <= int(r[4]) <= 16 and r[9] in ("Female", "Male") and r[8] in races
    ]
    idx = (
        np.array([int(r[0]) // 5 for r in keep]),
        np.array([int(r[4]) - 1 for r in keep]),
        np.array([int(r[9] == "Male") for r in keep]),
        np.array([races.index(r[8]) for r in keep]),
    )
    shape = (24, 16, 2, 5)
    col, hi = {"hours": (12, 168.0), "gain": (10, 99_999.0)}[measure]
    values = np.array([float(r[col]) for r in keep])
    return Table(f"adult-{measure}", shape, np.ravel_multi_index(idx, shape), values, 0.0, hi)


def bank() -> Table:
    """Bank Marketing: age 0–119 in 5-year bins, job (12), marital (3), education (4); signed balance."""
    jobs = [
        "admin.",
        "unknown",
        "unemployed",
        "management",
        "housemaid",
        "entrepreneur",
        "student",
        "blue-collar",
        "self-employed",
        "retired",
        "technician",
        "services",
    ]
    marital, education = ["married", "divorced", "single"], ["unknown", "secondary", "primary", "tertiary"]
    with (SHARED / "bank-full.csv").open() as f:
        rows = [
            r
            for r in csv.DictReader(f, delimiter=";")
            if int(r["age"]) < 120 and r["job"] in jobs and r["marital"] in marital and r["education"] in education
        ]
    idx = (
        np.array([int(r["age"]) // 5 for r in rows]),
        np.array([jobs.index(r["job"]) for r in rows]),
        np.array([marital.index(r["marital"]) for r in rows]),
        np.array([education.index(r["education"]) for r in rows]),
    )
    shape = (24, 12, 3, 4)
    values = np.array([float(r["balance"]) for r in rows])
    return Table("bank-balance", shape, np.ravel_multi_index(idx, shape), values, -100_000.0, 1_000_000.0)


# -- methods: each returns the zero-padded prefix cube of the SUM cuboid -------------------------
def _clasp(t: Table, eps: float, src: RandomSource) -> tuple[float, float]:
    """CLASP's clip range from a DP histogram over the public bounds (SETUP_SHARE of ε)."""
    edges = double_clipping.bucket_edges(t.lo, t.hi)
    counts = np.histogram(np.clip(t.values, t.lo, t.hi), bins=edges)[0].astype(np.float64)
    noisy = double_clipping.histogram_mechanism(counts, SETUP_SHARE * eps, src)
    c = double_clipping.choose_bounds(noisy, t.lo, t.hi, (1 - SETUP_SHARE) * eps, "clasp")
    return c.lo, c.hi


def _measure(strategy: str, t: Table, lo: float, hi: float, eps: float, src: RandomSource) -> np.ndarray:
    m = get_strategy(strategy).measure(
        t.cuboid(np.clip(t.values, lo, hi)), sum_sensitivity(lo, hi), eps, src, nonnegative=lo >= 0
    )
    return prefix_sums(m.noisy) if m.prefix is None else m.prefix


def m_base(t: Table, eps: float, src: RandomSource) -> np.ndarray:
    return _measure("identity", t, t.lo, t.hi, eps, src)


def m_svtc(t: Table, eps: float, src: RandomSource) -> np.ndarray:
    gs = max(abs(t.lo), abs(t.hi))
    steps = min(double_clipping.HISTOGRAM_BUCKETS, int(np.ceil(gs)))  # the paper's b_i = i when dom(M) ≤ 64
    candidates = np.linspace(gs / steps, gs, steps)
    mags = np.minimum(np.abs(t.values), gs)
    bucket = np.searchsorted(candidates, mags, side="left")
    increments = np.bincount(bucket, weights=mags, minlength=len(candidates))[: len(candidates)]
    eps_svt = SETUP_SHARE * eps
    tau = truncation.svt_threshold(
        increments, candidates, SVT_TAU_S * truncation.SVT_QUERY_NOISE / eps_svt, eps_svt, src
    )
    keep = np.abs(t.values) <= tau
    m = get_strategy("identity").measure(t.cuboid(t.values, keep), tau, (1 - SETUP_SHARE) * eps, src)
    return prefix_sums(m.noisy)


def m_r2tc(t: Table, eps: float, src: RandomSource) -> np.ndarray:
    taus = truncation.r2t_thresholds(max(abs(t.lo), abs(t.hi)))
    truncated = [t.cuboid(t.values, np.abs(t.values) <= tau) for tau in taus]
    return prefix_sums(truncation.r2t_release(truncated, taus, eps, src, floor=t.lo >= 0))


def _clasp_then(strategy: str) -> Callable[[Table, float, RandomSource], np.ndarray]:
    def run(t: Table, eps: float, src: RandomSource) -> np.ndarray:
        lo, hi = _clasp(t, eps, src)
        return _measure(strategy, t, lo, hi, (1 - SETUP_SHARE) * eps, src)

    return run


RUN = {
    "base": m_base,
    "svtc": m_svtc,
    "r2tc": m_r2tc,
    "prima": _clasp_then("prima"),
    "clasp+id": _clasp_then("identity"),
    "clasp+mg": _clasp_then("marginals"),
}


# -- metrics --------------------------------------------------------------------------------------
def cuboids(prefix: np.ndarray, lam: int) -> list[np.ndarray]:
    """Every λ-D cuboid, read from a zero-padded prefix cube (other axes at their full range)."""
    d = prefix.ndim
    out = []
    for axes in itertools.combinations(range(d), lam):
        index = tuple(slice(None) if a in axes else -1 for a in range(d))
        block = prefix[index]
        for k in range(block.ndim):
            block = np.diff(block, axis=k)
        out.append(block)
    return out


def mae(noisy_prefix: np.ndarray, true_prefix: np.ndarray, lam: int, rows: int) -> float:
    errs = [np.abs(a - b).ravel() for a, b in zip(cuboids(noisy_prefix, lam), cuboids(true_prefix, lam))]
    return float(np.mean(np.concatenate(errs)) / rows)


def random_boxes(shape: tuple[int, ...], count: int, rng: np.random.Generator) -> list[list]:
    return [[random_range(rng, n) for n in shape] for _ in range(count)]


def mean_bias(noisy_prefix: np.ndarray, true_prefix: np.ndarray, boxes: list[list]) -> float:
    noisy, true = Cube("t", "n", {"v": noisy_prefix}, {}), Cube("t", "t", {"v": true_prefix}, {})
    return float(np.mean([noisy.total("v", b) - true.total("v", b) for b in boxes]))


# -- the grid -------------------------------------------------------------------------------------
def run_setting(table: Table, eps: float, reps: int, seed: int, bias_counts: tuple[int, ...] = ()) -> dict:
    """Per method: MAE for λ = 2 and 4 (mean, sd over reps) and mean bias per x, plus seconds."""
    true_prefix = prefix_sums(table.cuboid(table.values))
    rng = np.random.default_rng(seed)
    boxes = {x: random_boxes(table.shape, x, rng) for x in bias_counts}
    out = {}
    for k, method in enumerate(METHODS):
        maes: dict[int, list[float]] = {2: [], 4: []}
        bias: dict[int, list[float]] = {x: [] for x in bias_counts}
        start = time.perf_counter()
        for r in range(reps):
            prefix = RUN[method](table, eps, RandomSource(seed=seed * 1000 + k * 100 + r))
            for lam in maes:
                maes[lam].append(mae(prefix, true_prefix, lam, table.rows))
            for x, b in boxes.items():
                bias[x].append(mean_bias(prefix, true_prefix, b))
        out[method] = {
            "mae": {lam: (float(np.mean(v)), float(np.std(v))) for lam, v in maes.items()},
            "bias": {x: float(np.mean(v)) for x, v in bias.items()},
            "seconds": (time.perf_counter() - start) / reps,
        }
    return out


def sweeps(quick: bool) -> dict[str, list]:
    if quick:
        return {"epsilon": [1.0, 2.0, 5.0], "dom_a": [10, 30], "dom_m": [10, 30], "n": [10_000, 100_000]}
    return {
        "epsilon": [1.0, 2.0, 3.0, 4.0, 5.0],
        "dom_a": [10, 20, 30, 40, 50],
        "dom_m": [10, 20, 30, 40, 50],
        "n": [10_000, 100_000, 1_000_000],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 2 if args.quick else 10
    started = time.time()
    cache: dict[tuple, dict] = {}
    synthetic_results: dict[str, dict[str, list[tuple]]] = {}
    for kind in ("normal", "random"):
        synthetic_results[kind] = {}
        for param, values in sweeps(args.quick).items():
            rows = []
            for value in values:
                setting = {**DEFAULTS, param: value}
                key = (kind, setting["epsilon"], setting["dom_a"], setting["dom_m"], setting["n"])
                if key not in cache:
                    table = synthetic(kind, setting["n"], setting["dom_a"], setting["dom_m"], seed=17)
                    is_default = setting == DEFAULTS
                    cache[key] = run_setting(
                        table,
                        setting["epsilon"],
                        reps,
                        seed=zlib.crc32(repr(key).encode()) % 10_000,
                        bias_counts=(10, 100, 1000) if is_default else (),
                    )
                    print(
                        f"{kind:7s} {param}={value}: "
                        + "  ".join(
                            f"{m} {cache[key][m]['mae'][2][0]:.2e}/{cache[key][m]['mae'][4][0]:.2e}" for m in METHODS
                        ),
                        flush=True,
                    )
                rows.append((value, cache[key]))
            synthetic_results[kind][param] = rows
    real_results = {}
    real_eps = [2.0] if args.quick else [1.0, 2.0, 5.0]
    for table in (adult("hours"), adult("gain"), bank()):
        real_results[table.name] = []
        for eps in real_eps:
            res = run_setting(table, eps, reps, seed=int(eps * 10) + len(table.name), bias_counts=(100,))
            real_results[table.name].append((eps, res))
            print(
                f"{table.name:13s} ε={eps}: "
                + "  ".join(f"{m} {res[m]['mae'][2][0]:.2e}/{res[m]['mae'][4][0]:.2e}" for m in METHODS),
                flush=True,
            )
    elapsed = time.time() - started
    suffix = "_quick" if args.quick else ""
    write_report(synthetic_results, real_results, cache, reps, elapsed, args.quick, suffix)
    plot(synthetic_results, real_results, cache, suffix)
    print(
        f"\n{elapsed:.0f} s. Reproduce: .venv/bin/python bench/prima_experiments.py{' --quick' if args.quick else ''}"
    )


def _fmt(mean_sd: tuple[float, float]) -> str:
    return f"{mean_sd[0]:.2e}"


def write_report(synth: dict, real: dict, cache: dict, reps: int, elapsed: float, quick: bool, suffix: str) -> None:
    lines = [
        f"# PRIMA experiments{' (quick)' if quick else ''}",
        "",
        f"`.venv/bin/python bench/prima_experiments.py{' --quick' if quick else ''}` — {reps} repetitions, "
        f"{elapsed:.0f} s on {platform.machine()} / {platform.python_version()} "
        f"({__import__('os').cpu_count()} cores). Metric: MAE of λ-D cuboid cells / n (rows), vs the "
        "unclipped truth. Lower is better. Method definitions: see the script's docstring.",
        "",
    ]
    for kind, by_param in synth.items():
        for param, rows in by_param.items():
            for lam in (2, 4):
                lines += [
                    f"## {kind}: vary {param}, λ = {lam} (others at ε=2, dom(A)=30, dom(M)=30, n=10^5, d=4)",
                    "",
                    f"| {param} | " + " | ".join(METHODS) + " | best |",
                    "|---" * (len(METHODS) + 2) + "|",
                ]
                for value, res in rows:
                    best = min(METHODS, key=lambda m: res[m]["mae"][lam][0])
                    lines.append(
                        f"| {value:g} | " + " | ".join(_fmt(res[m]["mae"][lam]) for m in METHODS) + f" | {best} |"
                    )
                lines.append("")
    lines += [
        "## Fig. 9: mean bias (signed, absolute units) of x random 4-D box SUM queries, defaults",
        "",
        "| dataset | x | " + " | ".join(METHODS) + " |",
        "|---" * (len(METHODS) + 2) + "|",
    ]
    for kind in synth:
        res = cache[(kind, *DEFAULTS.values())]
        for x in (10, 100, 1000):
            lines.append(f"| {kind} | {x} | " + " | ".join(f"{res[m]['bias'][x]:+.1f}" for m in METHODS) + " |")
    lines += [
        "",
        "## Real datasets (d = 4, their own n), MAE λ=2 / λ=4, and mean bias of 100 random boxes",
        "",
        "| dataset | ε | " + " | ".join(METHODS) + " |",
        "|---" * (len(METHODS) + 2) + "|",
    ]
    for name, rows in real.items():
        for eps, res in rows:
            lines.append(
                f"| {name} | {eps:g} | "
                + " | ".join(
                    f"{res[m]['mae'][2][0]:.2e} / {res[m]['mae'][4][0]:.2e} (bias {res[m]['bias'][100]:+.3g})"
                    for m in METHODS
                )
                + " |"
            )
    lines += [
        "",
        "Seconds per build at the defaults (normal): "
        + ", ".join(f"{m} {cache[('normal', *DEFAULTS.values())][m]['seconds']:.2f}" for m in METHODS),
        "",
    ]
    (RESULTS / f"prima_experiments{suffix}.md").write_text("\n".join(lines))


def plot(synth: dict, real: dict, cache: dict, suffix: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {"epsilon": "fig5_epsilon", "dom_a": "fig6_dom_a", "dom_m": "fig7_dom_m", "n": "fig8_n"}
    for param, fig_name in figures.items():
        fig, axes = plt.subplots(2, 2, figsize=(11, 8), squeeze=False)
        for i, kind in enumerate(synth):
            for j, lam in enumerate((2, 4)):
                ax = axes[i][j]
                rows = synth[kind][param]
                for m in METHODS:
                    ax.plot([v for v, _ in rows], [r[m]["mae"][lam][0] for _, r in rows], marker="o", label=m)
                ax.set_yscale("log")
                if param == "n":
                    ax.set_xscale("log")
                ax.set_title(f"{kind}, λ={lam}")
                ax.set_xlabel(param)
                ax.set_ylabel("MAE / n")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(RESULTS / f"prima_{fig_name}{suffix}.png", dpi=90)
        plt.close(fig)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, kind in zip(axes, synth):
        res = cache[(kind, *DEFAULTS.values())]
        xs = (10, 100, 1000)
        for m in METHODS:
            ax.plot(xs, [res[m]["bias"][x] for x in xs], marker="o", label=m)
        ax.set_xscale("log")
        ax.set_yscale("symlog")
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(f"{kind}: mean bias of x box queries")
        ax.set_xlabel("x")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"prima_fig9_bias{suffix}.png", dpi=90)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(real), figsize=(5 * len(real), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], real.items()):
        eps_values = [e for e, _ in rows]
        for m in METHODS:
            ax.plot(eps_values, [r[m]["mae"][2][0] for _, r in rows], marker="o", label=m)
        ax.set_yscale("log")
        ax.set_title(f"{name}, λ=2")
        ax.set_xlabel("ε")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"prima_real{suffix}.png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
