"""Tree models over a query's columns, fitted to released 2-way cuboids (post-processing only).

A query on 3 or more columns that no measured cuboid contains is answered from a graphical model
of those columns alone (issue #17; the estimation idea of Private-PGM, McKenna et al. 2019, on the
simplest graphs): a spanning tree T over the query's columns A gives the distribution

    P(x_A) = P_r(x_r) · Π_{(p→c) ∈ T} P_pc(x_p, x_c) / P_p(x_p)                         (Chow–Liu)

which reproduces the 2-way tables on its edges exactly. The tree is the maximum spanning tree by
mutual information of the (noisy, consistent) 2-way tables — Chow & Liu (1968), computed from
released values only. A box total is N·Σ_{x ∈ box} P(x), summed leaf-to-root (variable
elimination), so its cost is Σ_edges L_p·L_c, not Π L_i.

The tables are projected onto the non-negative tables with the released total first (Euclidean
projection onto the scaled simplex, "norm-sub"): clipping noise at zero instead would add the
positive part of the noise of thousands of empty cells. Everything here is post-processing of
released values; nothing reads data.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

Pair = tuple[int, int]
Tree = tuple[Pair, ...]  # undirected edges (i < j)


def simplex_projection(v: np.ndarray, total: float) -> np.ndarray:
    """The closest (Euclidean) array ≥ 0 summing to ``total`` (Duchi et al. 2008); zeros if ≤ 0."""
    flat = np.asarray(v, dtype=np.float64).ravel()
    if total <= 0 or flat.size == 0:
        return np.zeros_like(v, dtype=np.float64)
    u = np.sort(flat)[::-1]
    css = np.cumsum(u) - total
    k = np.arange(1, flat.size + 1)
    rho = np.nonzero(u - css / k > 0)[0][-1]
    theta = css[rho] / (rho + 1)
    return np.maximum(flat - theta, 0.0).reshape(np.shape(v))


@dataclass
class TreeTables:
    """Non-negative 1- and 2-way tables of one aggregate (a count, or a shifted sum) and their total."""

    total: float
    ones: dict[int, np.ndarray]  # axis → P_i (sums to 1)
    pairs: dict[Pair, np.ndarray]  # (i, j), i < j → P_ij (sums to 1)
    _cond: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _mi: dict[Pair, float] = field(default_factory=dict, repr=False)

    @classmethod
    def fitted(cls, total: float, ones: dict[int, np.ndarray], pairs: dict[Pair, np.ndarray]) -> TreeTables:
        """Project the released consistent tables (any sign) onto distributions with mass ``total``."""
        total = max(float(total), 0.0)

        def dist(a: np.ndarray) -> np.ndarray:
            p = simplex_projection(a, total)
            s = p.sum()
            return p / s if s > 0 else np.full(np.shape(a), 1.0 / max(np.size(a), 1))

        return cls(total, {i: dist(a) for i, a in ones.items()}, {k: dist(a) for k, a in pairs.items()})

    def joint(self, i: int, j: int) -> np.ndarray:
        """P(x_i, x_j) with axis order (i, j)."""
        return self.pairs[(i, j)] if i < j else self.pairs[(j, i)].T

    def conditional(self, parent: int, child: int) -> np.ndarray:
        """P(x_child | x_parent) as a (parent, child) matrix; rows without mass fall back to P_child."""
        key = (parent, child)
        c = self._cond.get(key)
        if c is None:
            j = self.joint(parent, child)
            rows = j.sum(axis=1, keepdims=True)
            marginal_child = j.sum(axis=0)
            c = np.where(rows > 0, j / np.where(rows > 0, rows, 1.0), marginal_child[None, :])
            self._cond[key] = c
        return c

    def mutual_information(self, i: int, j: int) -> float:
        key = (min(i, j), max(i, j))
        mi = self._mi.get(key)
        if mi is None:
            p = self.pairs[key]
            outer = p.sum(axis=1, keepdims=True) * p.sum(axis=0, keepdims=True)
            nz = p > 0
            mi = self._mi[key] = float(np.sum(p[nz] * np.log(p[nz] / outer[nz])))
        return mi

    def root_marginal(self, axis: int, neighbour: int) -> np.ndarray:
        """P(x_axis) as implied by the pair table the tree uses at the root (consistent with it)."""
        return self.joint(axis, neighbour).sum(axis=1)


def spanning_trees(axes: Sequence[int], weight: dict[Pair, float], limit: int = 16) -> list[Tree]:
    """The maximum spanning tree over ``axes`` (Kruskal), then trees one edge swap away from it,
    best first, at most ``limit`` in all (all 3 trees for 3 columns; for 4, the best and its 6 neighbours)."""
    edges = sorted(itertools.combinations(sorted(axes), 2), key=lambda e: -weight[e])
    best = _kruskal(axes, edges)
    out = [best]
    seen = {frozenset(best)}
    for removed in best:
        rest = [e for e in best if e != removed]
        for added in edges:
            if added in best:
                continue
            candidate = tuple(sorted(rest + [added]))
            if frozenset(candidate) not in seen and _connected(axes, candidate):
                seen.add(frozenset(candidate))
                out.append(candidate)
    out[1:] = sorted(out[1:], key=lambda t: -sum(weight[e] for e in t))
    return out[:limit]


def _kruskal(axes: Sequence[int], sorted_edges: Sequence[Pair]) -> Tree:
    parent = {a: a for a in axes}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    tree = []
    for i, j in sorted_edges:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[ri] = rj
            tree.append((i, j))
    return tuple(sorted(tree))


def _connected(axes: Sequence[int], tree: Sequence[Pair]) -> bool:
    return len(_kruskal(axes, list(tree))) == len(axes) - 1


def box_total(tables: TreeTables, tree: Tree, axes: Sequence[int], cells: dict[int, np.ndarray],
              group_axes: Sequence[int] = ()) -> np.ndarray:
    """N · Σ_{x ∈ box} P(x) under the tree model, per group (an array over the selected cells of
    ``group_axes``, in that order; a 0-d array without groups). ``cells``: selected cells per axis."""
    root = group_axes[0] if group_axes else axes[0]
    children: dict[int, list[int]] = {a: [] for a in axes}
    order, parent_of = [root], {root: -1}
    adjacency = {a: [b for e in tree for b in e if a in e and b != a] for a in axes}
    for a in order:  # breadth-first orientation from the root
        for b in adjacency[a]:
            if b not in parent_of:
                parent_of[b] = a
                children[a].append(b)
                order.append(b)

    def message(node: int, parent: int) -> tuple[np.ndarray, list[int]]:
        """Σ over the subtree below ``node`` of P(subtree | x_parent): (L_parent, *groups), groups."""
        m = tables.conditional(parent, node)[np.ix_(cells[parent], cells[node])]
        groups: list[int] = []
        m, groups = _absorb_children(m, groups, node, children, message)
        if node in group_axes:
            return m, [node] + groups  # keep x_node as a group dimension (axis 1 → after parent)
        return m.sum(axis=1), groups

    neighbour = children[root][0] if children[root] else None
    p_root = (tables.root_marginal(root, neighbour) if neighbour is not None else tables.ones[root])[cells[root]]
    result, groups = _absorb_children(p_root, [], root, children, message, at_root=True)
    if root in group_axes:
        groups = [root] + groups
    else:
        result = result.sum(axis=0)
    result = tables.total * result
    if group_axes:
        result = np.transpose(result, [groups.index(a) for a in group_axes])
    return result


def _absorb_children(m: np.ndarray, groups: list[int], node: int, children: dict[int, list[int]], message,
                     at_root: bool = False) -> tuple[np.ndarray, list[int]]:
    """Multiply each child's message into ``m`` along x_node (axis 0 at the root, else axis 1),
    appending the child's group dimensions at the end."""
    axis = 0 if at_root else 1
    for child in children[node]:
        cm, cg = message(child, node)  # (L_node, *cg)
        shape = [1] * m.ndim + [1] * (cm.ndim - 1)
        shape[axis] = cm.shape[0]
        shape[m.ndim:] = cm.shape[1:]
        m = m.reshape(m.shape + (1,) * (cm.ndim - 1)) * cm.reshape(shape)
        groups = groups + cg
    return m, groups
