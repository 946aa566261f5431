"""Faithfulness check of `privacy.mechanisms.hdpview_partition` against the authors' control flow.

A bench-only port of the authors' public code (FumiyukiKato/HDPView, `src/hdpview.py`), kept as
they wrote it where it differs from our implementation — *not DP as persisted there* and never
used by the service:
  * numpy RandomState float Laplace and float exponential-mechanism sampling;
  * the root block is cut first and never tested for convergence; children are tested right after
    each cut (a block of one cell converges at once);
  * beyond depth κ a random axis (of width ≥ 2) then a random point;
  * depth starts at 1 for the root's children.
AE and the cut qualities use the same exact formulas as ours (`privacy.mechanisms.hdpview_partition`), so any
difference in accuracy comes from those control-flow and sampler differences.

Same data, same random range COUNT queries, ε = 1 (ours: the product's `privacy.mechanisms.hdpview_partition`):
RMSE per k = 1..4 over several builds, and their ratio (acceptance: within 20 %).

Run:  .venv/bin/python bench/hdpview_reference.py [--builds 5] [--table adult]
Results: bench/results/hdpview_reference_<table>.md
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import wide_tables  # noqa: E402
from privacy.mechanisms import hdpview_partition as hdpview  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def reference_partition(
    points: np.ndarray, counts: np.ndarray, shape: tuple[int, ...], p: hdpview.Parameters, prng: np.random.RandomState
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The authors' RECURSIVEBISECTION loop (root cut first, children tested after each cut)."""
    d = len(shape)
    queue = collections.deque([(np.zeros(d, np.int64), np.asarray(shape, np.int64) - 1, np.arange(len(counts)), 0)])
    out_lo, out_hi, members = [], [], []
    while queue:
        lo, hi, idx, depth = queue.popleft()
        size = float(np.prod((hi - lo + 1).astype(float)))
        values = counts[idx]
        if depth > p.kappa:
            axes = [a for a in range(d) if hi[a] > lo[a]]
            axis = axes[prng.choice(len(axes))]
            cut = int(lo[axis]) + prng.choice(int(hi[axis] - lo[axis]))
        else:
            candidates = [(a, j) for a in range(d) for j in range(int(lo[a]), int(hi[a]))]
            scores = np.concatenate(
                [
                    -hdpview._cut_errors(points[idx, a], values, int(lo[a]), int(hi[a]), size)
                    for a in range(d)
                    if hi[a] > lo[a]
                ]
            )
            sens = 2 * (2 - 2 / size)
            weights = np.exp(p.epsilon_cut * (scores - scores.max()) / (2 * sens))
            cum = np.cumsum(weights) / weights.sum()
            axis, cut = candidates[int(min(cum.searchsorted(prng.rand()), len(cum) - 1))]
        left = points[idx, axis] <= cut
        hi_l, lo_r = hi.copy(), lo.copy()
        hi_l[axis], lo_r[axis] = cut, cut + 1
        for c_lo, c_hi, c_idx in ((lo, hi_l, idx[left]), (lo_r, hi, idx[~left])):
            c_size = float(np.prod((c_hi - c_lo + 1).astype(float)))
            ae = hdpview.absolute_error(counts[c_idx], c_size)
            b = max(ae - p.delta * (depth + 1), p.theta + 2 - p.delta)
            capped = len(out_lo) + len(queue) >= hdpview.MAX_BLOCKS
            if capped or c_size == 1 or b + prng.laplace(0.0, p.lam) <= p.theta:
                out_lo.append(c_lo)
                out_hi.append(c_hi)
                members.append(c_idx)
            else:
                queue.append((c_lo, c_hi, c_idx, depth + 1))
    return np.array(out_lo), np.array(out_hi), members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=5)
    parser.add_argument("--table", default="adult")
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--epsilon", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        prima, spec, cells, measure = wide_tables.load_table(args.table, Path(tmp) / "data")
        prima.close()
    points, counts = np.unique(cells, axis=0, return_counts=True)
    counts = counts.astype(float)
    rng = np.random.default_rng(7)  # queries, not noise
    workloads = {k: wide_tables.random_queries(rng, spec.shape, k, args.queries) for k in (1, 2, 3, 4)}
    truth = {k: wide_tables.truths(cells, measure, q)[0] for k, q in workloads.items()}
    params = hdpview.Parameters.of(spec.shape, args.epsilon)
    rmse: dict[str, dict[int, list[float]]] = {
        "ours": collections.defaultdict(list),
        "reference": collections.defaultdict(list),
    }
    blocks: dict[str, list[int]] = {"ours": [], "reference": []}
    for b in range(args.builds):
        part = hdpview.partition(points, counts, spec.shape, params, RandomSource(seed=100 + b))
        ours = hdpview.PView(
            part.lo,
            part.hi,
            {
                "n": hdpview.perturb(
                    hdpview.block_totals(part, counts), 1.0, params.epsilon_p, RandomSource(seed=200 + b)
                )[0]
            },
            {"n": 0.0},
        )
        prng = np.random.RandomState(300 + b)
        lo, hi, members = reference_partition(points, counts, spec.shape, params, prng)
        totals = np.array([counts[m].sum() for m in members]) + prng.laplace(0.0, 1 / params.epsilon_p, len(members))
        ref = hdpview.PView(lo, hi, {"n": totals}, {"n": 0.0})
        for name, view in (("ours", ours), ("reference", ref)):
            blocks[name].append(len(view.lo))
            for k, qs in workloads.items():
                values = np.array([view.total("n", q) for q in qs])
                rmse[name][k].append(float(np.sqrt(np.mean((values - truth[k]) ** 2))))
    cmd = (
        f".venv/bin/python bench/hdpview_reference.py --builds {args.builds} --table {args.table} "
        f"--queries {args.queries} --epsilon {args.epsilon}"
    )
    lines = [
        f"# HDPView: ours vs the authors' control flow ({args.table}, ε = {args.epsilon})",
        "",
        f"`{cmd}` — {args.builds} builds each, {args.queries} random range COUNTs per k.",
        "",
        "| k | ours RMSE | reference RMSE | ours / reference |",
        "|---|---|---|---|",
    ]
    for k in workloads:
        o, r = np.mean(rmse["ours"][k]), np.mean(rmse["reference"][k])
        lines.append(f"| {k} | {o:,.1f} | {r:,.1f} | {o / r:.3f} |")
    lines += ["", f"Blocks: ours {np.mean(blocks['ours']):,.0f}, reference {np.mean(blocks['reference']):,.0f} (mean)."]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / f"hdpview_reference_{args.table}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
