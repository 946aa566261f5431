"""Truncated or not: the bias of a measure axis's SUMs over seeded builds, default settings otherwise.

The CPS-shaped table of tests/test_bias.py (28k rows, six dimensions, a lognormal wage in
[0, 20,000] on a log2 axis with counts, ε = 1): the worst |mean error| / standard error over every
0–2-column answer cell in 20 builds, and how many cells pass 4, with query-specific truncation
(Qiu et al.; the default until this measurement) and without (the default now). Estimates unclamped.

Run: .venv/bin/python bench/truncation_bias.py [--builds 20]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from engine.answers.options import AnswerOptions  # noqa: E402
from tests.test_bias import LIMIT_Z, _cps, worst_bias  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builds", type=int, default=20)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    lines = ["# Truncated SUMs and bias (CPS-shaped table, ε = 1)", ""]
    lines += ["| SUMs | worst z̄ | cells checked | |", "|---|---|---|---|"]
    for label, truncate in (("truncated", True), ("untruncated (default)", False)):
        z, cell, checked = worst_bias(
            tmp / label.split()[0], _cps(tmp), args.builds, AnswerOptions(clamp=False, truncate=truncate)
        )
        lines.append(f"| {label} | {z:.1f} | {checked} | {'beyond' if z > LIMIT_Z else 'within'} {LIMIT_Z:g} |")
    lines += ["", f"Reproduce: .venv/bin/python bench/truncation_bias.py --builds {args.builds}"]
    publish("truncation_bias.md", lines)


if __name__ == "__main__":
    main()
