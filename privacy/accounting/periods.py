"""Releases over periods for tables that grow: which blocks of periods are released when,
how a range of periods is tiled by them, and what each costs.

Periods are numbered 0..T−1 over the declared horizon. ``flat`` releases each period alone. A tree
(``dyadic``, after its binary case) is the tree mechanism for continual release (Dwork, Naor, Pitassi
& Rothblum, STOC 2010, §4; Chan, Shi & Song, TISSEC 2011, "binary mechanism"), here b-ary: every
aligned block [j·b^k, (j+1)·b^k) of periods, k = 0..L−1 with L = ⌈log_b T⌉ + 1, is released once,
when its last period closes. A period's rows are in exactly one block per level, so in L releases:
each gets 1/L of the period's amount (basic composition: ε-DP and ρ-zCDP both add up), and one
neighbour moves each release by one row's (unit's) contribution, as in a single period's release.

A range of r periods is tiled by at most 2(b−1)⌈log_b r⌉ released blocks (greedy: the largest aligned
block that starts at the cursor and fits), or fewer as an enclosing block minus the rest
(`Releases.signed_tiling`), against r flat. With variance v(a) per release at amount a
— Laplace ∝ 1/a², the Gaussian of ρ-zCDP ∝ 1/a — flat gives r·v(a), the tree tiles·v(a/L) =
tiles·L²·v(a) in pure ε and tiles·L·v(a) in ρ (`relative_variance`). Binary trees have the fewest
tiles but the most levels; in pure ε the L² factor makes wider trees (b = 4…16, fewer levels) win, so
`choose` picks b too, from the horizon and a public typical range. Consistency by least squares
across levels (Hay et al., VLDB 2010) would cut the variance further; it is not applied (each answer
sums its tiles, so its variance is exactly tiles × one release's).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

Node = tuple[int, int]  # (first period, number of periods): one released block
BRANCHINGS = (2, 4, 8, 16)


@dataclass(frozen=True)
class Releases:
    """How a growing table releases its periods: ``branching`` None is flat (each period alone)."""

    periods: int  # T, the horizon's periods
    branching: int | None = None

    @property
    def name(self) -> str:
        return "flat" if self.branching is None else "dyadic" if self.branching == 2 else f"{self.branching}-ary tree"

    @property
    def levels(self) -> int:
        """L: the releases each period's rows end up in (1 flat; ⌈log_b T⌉ + 1 for a tree)."""
        if self.branching is None or self.periods <= 1:
            return 1
        return _ceil_log(self.periods, self.branching) + 1

    @property
    def top(self) -> int:
        """The largest block released: b^(L−1) periods."""
        return 1 if self.branching is None else self.branching ** (self.levels - 1)

    def node_amount(self, amount: float) -> float:
        """The ε (or ρ) one release gets when each period's rows may spend ``amount`` in all."""
        return amount / self.levels

    def closing(self, t: int) -> list[Node]:
        """The blocks released when period ``t`` closes (every earlier period measured): its own,
        and each aligned block of b, b², … periods that ``t`` ends."""
        nodes: list[Node] = [(t, 1)]
        size = self.branching or 0
        while self.branching is not None and size <= self.top and (t + 1) % size == 0:
            nodes.append((t + 1 - size, size))
            size *= self.branching
        return nodes

    def released(self, through: int) -> list[Node]:
        """Every block released once periods 0..``through`` are measured, in release order."""
        return [n for t in range(through + 1) for n in self.closing(t)]

    def tiling(self, lo: int, hi: int) -> list[Node]:
        """The fewest released blocks that exactly cover periods lo..hi (all measured): the largest
        aligned block at the cursor that fits. With equal variance per release, also the least."""
        out, at = [], lo
        while at <= hi:
            size = 1
            while (
                self.branching is not None
                and size * self.branching <= self.top
                and at % (size * self.branching) == 0
                and at + size * self.branching - 1 <= hi
            ):
                size *= self.branching
            out.append((at, size))
            at += size
        return out

    def signed_tiling(self, lo: int, hi: int, through: int | None = None) -> list[tuple[Node, int]]:
        """The fewest released blocks, each added (+1) or subtracted (−1), whose sum is exactly periods
        lo..hi: the greedy tiling, or an enclosing block (ending by period ``through``, the last
        measured) minus the greedy tilings of what it holds beyond the range — periods 1..62 of a 4-ary
        tree are the block 0..63 minus periods 0 and 63 (3 releases, not 14). The releases' noises are
        independent, so the variance is the number of releases × one's, whatever the signs."""
        through = self.periods - 1 if through is None else through
        best = [(n, 1) for n in self.tiling(lo, hi)]
        size = self.branching or 0
        while self.branching is not None and size <= self.top:
            start = lo - lo % size
            end = start + size - 1
            if end >= hi and end <= through:
                outside = self.tiling(start, lo - 1) + self.tiling(hi + 1, end)
                if 1 + len(outside) < len(best):
                    best = [((start, size), 1)] + [(n, -1) for n in outside]
            size *= self.branching
        return best

    def mean_tiles(self, length: int) -> float:
        """The average number of releases a range of ``length`` periods sums, over every start."""
        return _mean_tiles(self, length)

    def relative_variance(self, length: int, currency: str) -> float:
        """A range's noise variance in units of one full-amount release's: releases summed × the
        variance factor of 1/L of the amount (L² for Laplace, L for the Gaussian of ρ-zCDP)."""
        return self.mean_tiles(length) * (self.levels**2 if currency == "epsilon" else self.levels)


def _ceil_log(n: int, b: int) -> int:
    k, size = 0, 1
    while size < n:
        size *= b
        k += 1
    return k


MEAN_STARTS = 256  # starts a range's mean release count is averaged over, past which they are sampled


@lru_cache(maxsize=4096)
def _mean_tiles(releases: Releases, length: int) -> float:
    """Exact over every start up to `MEAN_STARTS` of them; beyond, over that many starts drawn by a
    fixed generator (the horizon and length seed it: public, repeatable). Every start of a 3-year
    daily horizon, for every length, cost minutes per table listing; a sample of 256 starts puts the
    mean within a few percent, which the displayed comparisons need, and keeps its alignment mix
    (evenly spaced starts would alias with the tree's powers)."""
    count = max(releases.periods - length, 0) + 1
    starts: range | list[int] = range(count)
    if count > MEAN_STARTS:
        starts = random.Random(releases.periods * 1_000_003 + length).sample(range(count), MEAN_STARTS)
    return sum(len(releases.signed_tiling(s, s + length - 1)) for s in starts) / len(starts)


def choose(declared: str, periods: int, typical_range: int | None, currency: str) -> Releases:
    """The releases a table declares (``flat``; ``dyadic``: binary), or for ``auto`` the flat or
    b-ary scheme with the least variance at the typical range (public: declared, else a quarter of
    the horizon) — from public facts only."""
    if declared == "flat":
        return Releases(periods)
    if declared == "dyadic":
        return Releases(periods, 2)
    length = typical_range_of(periods, typical_range)
    options = [Releases(periods)] + [Releases(periods, b) for b in BRANCHINGS if b < max(periods, 2)]
    return min(options, key=lambda r: (r.relative_variance(length, currency), r.levels))


def typical_range_of(periods: int, typical_range: int | None) -> int:
    return min(typical_range or max(periods // 4, 1), periods)


@lru_cache(maxsize=256)
def crossover(tree: Releases, currency: str) -> int | None:
    """The range length from which on ``tree`` beats flat releases (None: not within the horizon).
    A tree's variance grows with the logarithm of the length and flat releases' with the length, so
    "the tree wins" holds from one length on — up to a few lengths near it on 8-ary trees, where it
    may go either way — and bisection finds it (a length-by-length scan of a 3-year daily horizon
    took minutes per table listing)."""
    flat = Releases(tree.periods)

    def wins(length: int) -> bool:
        return tree.relative_variance(length, currency) < flat.relative_variance(length, currency)

    if not wins(tree.periods):
        return None
    lo, hi = 1, tree.periods  # wins(hi); the answer lies in lo..hi
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if wins(mid) else (mid + 1, hi)
    return lo
