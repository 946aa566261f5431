"""Bench-only: MST and AIM from Private-PGM on a table `bench/zcdp.py` wrote, answering its queries.

Runs in its own environment (JAX and the `mbi` package are not Prima dependencies), started by
bench/zcdp.py as `$PGM_PYTHON bench/zcdp_pgm.py IN.npz OUT.json`, with $PGM_SRC a checkout of
github.com/ryan112358/private-pgm (its src/ and mechanisms/ are imported, nothing is copied).

Each mechanism runs at the ρ it is given (MST: its own steps — 1-way marginals, compression,
spanning-tree selection by the exponential mechanism, tree marginals, mirror descent — with ρ in
place of its cdp_rho(ε, δ); AIM: its class with `rho` set). Queries are answered from the fitted
model's marginals (what its synthetic data estimates, without sampling error); MST's compressed
values ("other" for the ones its 1-way marginals could not see) are spread evenly over the values
they stand for, as its decompression does.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import sys
import time

import numpy as np
import opt_einsum
import pandas as pd
from scipy.special import logsumexp

sys.path.insert(0, os.path.join(os.environ["PGM_SRC"], "src"))
sys.path.insert(0, os.path.join(os.environ["PGM_SRC"], "mechanisms"))

import mst as mst_module  # noqa: E402
from aim import AIM  # noqa: E402
from mbi import Dataset, Domain, estimation  # noqa: E402
from mbi.markov_random_field import MarkovRandomField  # noqa: E402


def identity_maps(domain: Domain) -> dict[str, np.ndarray]:
    return {a: np.eye(domain[a]) for a in domain.attrs}


def run_mst(data: Dataset, rho: float) -> tuple[object, dict[str, np.ndarray]]:
    sigma = np.sqrt(3 / (2 * rho))
    log1 = mst_module.measure(data, [(col,) for col in data.domain], sigma)
    supports = {m.clique[0]: np.asarray(m.noisy_measurement) >= 3 * m.stddev for m in log1}
    small, log1, _ = mst_module.compress_domain(data, log1)
    cliques = mst_module.select(small, rho / 3.0, log1)
    log2 = mst_module.measure(small, cliques, sigma)
    model = estimation.mirror_descent(small.domain, log1 + log2, iters=10000)
    maps = {}
    for a, sup in supports.items():  # original value → compressed index (the "other" spread evenly)
        kept = int(sup.sum())
        width = kept + (1 if kept < sup.size else 0)
        w = np.zeros((sup.size, width))
        w[np.flatnonzero(sup), np.arange(kept)] = 1.0
        if kept < sup.size:
            w[~sup, kept] = 1.0
        maps[a] = w
    return model, maps


def run_aim(data: Dataset, rho: float, max_iters: int) -> tuple[object, dict[str, np.ndarray]]:
    # AIM.run ends by sampling synthetic rows, which this pandas version refuses (a groupby KeyError);
    # the answers here read the model itself, so the sampling is skipped.
    MarkovRandomField.synthetic_data = lambda self, rows=None, method="round": None  # type: ignore[method-assign]
    workload = [(cl, 1.0) for cl in itertools.combinations(data.domain.attrs, 2)]
    mech = AIM(1.0, 1e-9, max_iters=max_iters)
    mech.rho = rho
    model, _ = mech.run(data, workload)
    return model, identity_maps(data.domain)


class Marginals:
    """The model's marginals by contracting its potentials in log space, each attribute set once.

    p(x) ∝ exp(Σ_C θ_C(x_C)) over the model's cliques; a marginal is a contraction of those factors
    along opt_einsum's (greedy) path, each step a log-sum-exp so that AIM's potentials (ranges of
    hundreds) do not underflow, then scaled to the model's total. (The model's own `project`
    compiles one JAX function per attribute set: thousands of sets for a 15-column workload
    exhausted memory.)"""

    def __init__(self, cliques: list[tuple[tuple[str, ...], np.ndarray]], total: float) -> None:
        attrs = sorted({a for cl, _ in cliques for a in cl})
        self.letter = {a: opt_einsum.get_symbol(i) for i, a in enumerate(attrs)}
        self.factors = [(v, "".join(self.letter[a] for a in cl)) for cl, v in cliques]
        self.total = total
        self.kept: dict[tuple[str, ...], np.ndarray] = {}
        self.log_z: float | None = None

    def __call__(self, names: tuple[str, ...]) -> np.ndarray:
        if names not in self.kept:
            log_marginal = self._contract("".join(self.letter[a] for a in names))
            self.kept[names] = np.exp(log_marginal - logsumexp(log_marginal)) * self.total
        return self.kept[names]

    def range_total(self, weights: dict[str, np.ndarray]) -> float:
        """Σ_x p(x)·Π_a w_a(x_a) × total: each ranged column's weights as one more (log) factor, the
        whole model contracted to a number (cheaper than the ranged columns' joint marginal)."""
        if self.log_z is None:
            self.log_z = float(self._contract(""))
        extra = [(np.log(np.maximum(w, 1e-300)), self.letter[a]) for a, w in weights.items()]
        return float(np.exp(self._contract("", extra) - self.log_z)) * self.total

    def _contract(self, out: str, extra: list[tuple[np.ndarray, str]] = ()) -> np.ndarray:  # type: ignore[assignment]
        factors = self.factors + list(extra)
        spec = ",".join(sub for _, sub in factors) + "->" + out
        path, _ = opt_einsum.contract_path(spec, *[v.shape for v, _ in factors], shapes=True, optimize="greedy")
        ops = list(factors)
        for step in path:
            picked = [ops[i] for i in step]
            ops = [op for i, op in enumerate(ops) if i not in step]
            union = "".join(dict.fromkeys("".join(sub for _, sub in picked)))
            keep = "".join(c for c in union if c in out or any(c in sub for _, sub in ops))
            summed = sum(_aligned(v, sub, union) for v, sub in picked)
            drop = tuple(i for i, c in enumerate(union) if c not in keep)
            ops.append((logsumexp(summed, axis=drop) if drop else summed, keep))
        ((value, sub),) = ops
        return np.transpose(value, [sub.index(c) for c in out])


def _aligned(values: np.ndarray, sub: str, union: str) -> np.ndarray:
    """``values`` (axes named by ``sub``) laid out along ``union``, size 1 where it has no axis."""
    order = sorted(range(len(sub)), key=lambda i: union.index(sub[i]))
    moved = np.transpose(values, order)
    shape = [values.shape[sub.index(c)] if c in sub else 1 for c in union]
    return moved.reshape(shape)


def potentials(model: object) -> tuple[list[tuple[tuple[str, ...], np.ndarray]], float]:
    """The fitted model as plain arrays: (clique attributes, log-potential) pairs and the total."""
    return (
        [(tuple(f.domain.attrs), np.asarray(f.values, dtype=np.float64)) for f in model.potentials.arrays.values()],
        float(model.total),
    )


def answer(
    marginals: Marginals,
    maps: dict[str, np.ndarray],
    attrs: list[str],
    sel: np.ndarray,
    cells: list[int],
    cell_of: dict[int, np.ndarray],
    sum_attr: int | None = None,
    values: np.ndarray | None = None,
) -> float:
    """A range COUNT (or, with ``sum_attr``, a SUM of ``values`` over that attribute's values): the
    model's mass inside the ranges, weighted per original value. Ranges are over Prima's ``cells``
    per attribute; ``cell_of[i]``: Prima's cell of each value of attribute i where the model sees a
    finer domain (the exact measure behind a binned dimension)."""
    weights = {}
    for i, (a, (lo, hi)) in enumerate(zip(attrs, sel)):
        w = None
        if lo > 0 or hi < cells[i] - 1:
            cell = cell_of.get(i, np.arange(maps[a].shape[0]))
            w = ((cell >= lo) & (cell <= hi)).astype(float)
        if i == sum_attr:
            w = values if w is None else w * values
        if w is not None:
            weights[a] = (w @ maps[a]) / np.maximum(maps[a].sum(axis=0), 1e-12)
    return marginals.range_total(weights)


def group(marginals: Marginals, maps: dict[str, np.ndarray], a: str) -> list[float]:
    marginal = marginals((a,))
    per_value = maps[a] / np.maximum(maps[a].sum(axis=0), 1e-12)
    return (per_value @ marginal).tolist()


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    z = np.load(src, allow_pickle=False)
    cells, shape = z["cells"], [int(n) for n in z["shape"]]
    # a COUNT+SUM run: the model's domain has the measure exactly (``domain``), Prima's cells its bins
    domain = [int(n) for n in z["domain"]] if "domain" in z else shape
    sum_attr = int(z["sum_attr"]) if "sum_attr" in z else None
    cell_of = {sum_attr: z["sum_cells"]} if sum_attr is not None else {}
    attrs = [f"a{i}" for i in range(len(shape))]
    data = Dataset(pd.DataFrame(cells, columns=attrs), Domain(attrs, domain))
    out: dict[str, dict] = {}
    for mechanism in [m for m in str(z["mechanisms"]).split(",") if m]:
        for rho in z["rhos"]:
            for seed in range(int(z["builds"])):
                kept = f"{dst}.{mechanism}.{float(rho):.6g}.{seed}.pkl"  # a fit survives a failed answering step
                if os.path.exists(kept):
                    with open(kept, "rb") as f:
                        cliques, total, maps, seconds = pickle.load(f)
                else:
                    np.random.seed(1000 + seed)
                    start = time.perf_counter()
                    model, maps = (
                        run_mst(data, float(rho))
                        if mechanism == "mst"
                        else run_aim(data, float(rho), int(z["aim_iters"]))
                    )
                    seconds = time.perf_counter() - start
                    cliques, total = potentials(model)
                    with open(kept, "wb") as f:
                        pickle.dump((cliques, total, maps, seconds), f)
                row: dict[str, object] = {"seconds": seconds}
                marginals = Marginals(cliques, total)
                for k in (1, 2, 3, 4):
                    if f"q{k}" in z:
                        row[f"k{k}"] = [answer(marginals, maps, attrs, q, shape, cell_of) for q in z[f"q{k}"]]
                        if sum_attr is not None:
                            row[f"sum_k{k}"] = [
                                answer(marginals, maps, attrs, q, shape, cell_of, sum_attr, z["sum_values"])
                                for q in z[f"q{k}"]
                            ]
                if sum_attr is None:
                    row["groups"] = [group(marginals, maps, a) for a in attrs]
                out.setdefault(f"{mechanism}@{float(rho):.6g}", {})[str(seed)] = row
                print(f"{mechanism} ρ={float(rho):.4g} build {seed}: {seconds:.1f} s", file=sys.stderr, flush=True)
    with open(dst, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
