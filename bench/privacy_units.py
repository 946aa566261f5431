"""Privacy units: error against k on an events table, and per-row vs per-cell clamping.

The table (generated, no real person): 5,000 persons with a heavy-tailed number of events over one
year (log-normal, median 4, a few with hundreds), each event with a month, a kind (4 values), a
weekday and an amount (gamma, public bound [0, 500]). One person is the unit of privacy. For each
k, a build keeps at most k events per person (the product's truncation: ``ROW_NUMBER`` over a
salted hash; here a seeded shuffle, the same thing for the statistics), releases COUNT and SUM with
every sensitivity k× (identity and the default ``pairwise``, ε = 1 split 20/80), and answers random
range queries over month × kind × weekday. Error = |answer − the truth over *all* events|: noise
(grows with k) plus truncation bias (shrinks with k).

``auto``: the product's ``"max_rows": "auto"`` — 5 % of ε on a DP histogram of rows per person
(`privacy.clipping.units`), k at its 90 % quantile, the rest of ε on the cube; compared with the best fixed k
(which no analyst knows in advance) at the whole ε.

SUM semantics compared: **per row** (each event clipped to [0, 500], at most k per person: the
product's choice) and **per cell** (ZetaSQL's per-group clamping: a person's events in one cell
summed, that sum clipped to [0, 500]; same k rows, same sensitivity k·500).

Run:     .venv/bin/python bench/privacy_units.py [--builds 5]
Results: bench/results/privacy_units.md
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from engine.synopses.cube import Cube  # noqa: E402
from privacy.clipping import units  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import get_strategy  # noqa: E402

SHAPE = (12, 4, 7)
HI = 500.0
KS = (1, 2, 5, 10, 20, 50, 100)


def events(seed: int = 1, persons: int = 5000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)  # data generation, not noise
    per = np.maximum(1, np.round(rng.lognormal(np.log(4), 1.2, persons))).astype(int)
    pid = np.repeat(np.arange(persons), per)
    n = len(pid)
    taste = rng.dirichlet(np.ones(4), persons)[pid]  # each person prefers some kinds
    kind = (rng.random(n)[:, None] > np.cumsum(taste, axis=1)).sum(axis=1)
    return {
        "pid": pid,
        "month": rng.integers(0, 12, n),
        "kind": np.minimum(kind, 3),
        "weekday": rng.integers(0, 7, n),
        "amount": rng.gamma(2.0, 40.0, n) * (1 + 3 * (rng.random(n) < 0.05)),
    }


def kept(ev: dict[str, np.ndarray], k: int, seed: int = 5) -> np.ndarray:
    """Indices of at most k events per person (a seeded shuffle stands in for the salted hash)."""
    order = np.random.default_rng(seed).permutation(len(ev["pid"]))
    pid = ev["pid"][order]
    order = order[np.argsort(pid, kind="stable")]
    pid = ev["pid"][order]
    start = np.searchsorted(pid, pid, side="left")
    rank = np.arange(len(pid)) - start
    return order[rank < k]


def cuboid(ev: dict[str, np.ndarray], idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(SHAPE)
    np.add.at(out, (ev["month"][idx], ev["kind"][idx], ev["weekday"][idx]), values)
    return out


def per_cell_sum(ev: dict[str, np.ndarray], idx: np.ndarray) -> np.ndarray:
    """ZetaSQL's per-group clamping: Σ of each person's amounts per cell, clipped to [0, HI]."""
    cell = np.ravel_multi_index((ev["month"][idx], ev["kind"][idx], ev["weekday"][idx]), SHAPE)
    key = ev["pid"][idx].astype(np.int64) * np.prod(SHAPE) + cell
    uniq, inv = np.unique(key, return_inverse=True)
    sums = np.zeros(len(uniq))
    np.add.at(sums, inv, ev["amount"][idx])
    out = np.zeros(int(np.prod(SHAPE)))
    np.add.at(out, uniq % np.prod(SHAPE), np.clip(sums, 0, HI))
    return out.reshape(SHAPE)


def queries(n: int = 400) -> list[tuple]:
    rng = np.random.default_rng(3)
    return [tuple(((int(a), int(b)),) for a, b in (sorted(rng.integers(0, s, 2)) for s in SHAPE)) for _ in range(n)]


def answers(true: np.ndarray, sens: float, eps: float, k: int, strategy: str, seed: int, qs: list) -> np.ndarray:
    m = get_strategy(strategy).measure(true, sens, eps, RandomSource(seed=seed), nonnegative=True, coordinates=k)
    cube = Cube("t", "b", {"v": prefix_sums(m.noisy)}, {"v": m.error})
    return np.array([cube.total("v", q) for q in qs])


def run(builds: int) -> list[str]:
    ev = events()
    qs = queries()
    everything = np.arange(len(ev["pid"]))
    truth_c = np.array(
        [
            Cube("t", "x", {"v": prefix_sums(cuboid(ev, everything, np.ones(len(everything))))}, {}).total("v", q)
            for q in qs
        ]
    )
    truth_s = np.array(
        [
            Cube("t", "x", {"v": prefix_sums(cuboid(ev, everything, np.clip(ev["amount"], 0, HI)))}, {}).total("v", q)
            for q in qs
        ]
    )
    rows_per = np.bincount(ev["pid"])
    lines = [
        "# Privacy units: error against k",
        "",
        f"`.venv/bin/python bench/privacy_units.py --builds {builds}` — {len(rows_per):,} persons, "
        f"{len(ev['pid']):,} events (rows per person: median {int(np.median(rows_per))}, p95 "
        f"{int(np.percentile(rows_per, 95))}, max {rows_per.max()}); 12 months × 4 kinds × 7 weekdays; "
        f"{len(qs)} random range queries; ε = 1 (COUNT 0.2, SUM 0.8); median relative error "
        "|answer − truth over all events| / truth, over builds. `bias`: the truncated data's own error "
        "(no noise).",
        "",
    ]
    for strategy in ("identity", "pairwise"):
        lines += [
            f"## {strategy}",
            "",
            "| k | rows kept | COUNT bias | COUNT error | SUM per row: bias | error | SUM per cell: bias | error |",
            "|---|---|---|---|---|---|---|---|",
        ]
        rows_per_person = np.bincount(ev["pid"])
        ns, counts = np.unique(rows_per_person, return_counts=True)
        for k in KS + ("auto",):
            eps_scale = 1.0
            if k == "auto":  # one histogram per build in the product; here one, seeded, for the table
                noisy = units.release(units.bucketed(ns, counts), 0.05, RandomSource(seed=77))
                k, eps_scale = units.choose_k(noisy, 0.9), 0.95
                label_k = f"auto → {k}"
            else:
                label_k = str(k)
            idx = kept(ev, k)
            c_true = cuboid(ev, idx, np.ones(len(idx)))
            s_row = cuboid(ev, idx, np.clip(ev["amount"][idx], 0, HI))
            s_cell = per_cell_sum(ev, idx)
            rel = {}
            for label, true, truth, sens, eps in (
                ("count", c_true, truth_c, k * 1.0, 0.2 * eps_scale),
                ("row", s_row, truth_s, k * HI, 0.8 * eps_scale),
                ("cell", s_cell, truth_s, k * HI, 0.8 * eps_scale),
            ):
                cube = Cube("t", "x", {"v": prefix_sums(true)}, {})
                bias = np.array([cube.total("v", q) for q in qs]) - truth
                errs = np.concatenate(
                    [answers(true, sens, eps, k, strategy, 100 * b + k, qs) - truth for b in range(builds)]
                )
                scale = np.tile(np.maximum(truth, 1.0), builds)
                rel[label] = (
                    float(np.median(np.abs(bias) / np.maximum(truth, 1.0))),
                    float(np.median(np.abs(errs) / scale)),
                )
            lines.append(
                f"| {label_k} | {len(idx) / len(ev['pid']):.0%} | {rel['count'][0]:.3f} | {rel['count'][1]:.3f} | "
                f"{rel['row'][0]:.3f} | {rel['row'][1]:.3f} | {rel['cell'][0]:.3f} | {rel['cell'][1]:.3f} |"
            )
            print(strategy, k, rel, flush=True)
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=5)
    args = parser.parse_args()
    publish("privacy_units.md", run(args.builds))


if __name__ == "__main__":
    main()
