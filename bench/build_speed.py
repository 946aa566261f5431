"""Build time with BLAS limited to one thread inside builds vs BLAS's own thread count.

Builds, through the library (`engine.service.Prima`, the same path as the API), the README tour's
`staff` table (examples/staff.yaml: 53 × 4 × 168 cells, pairwise) and Adult with 5 dimensions
(age 0–120 × education-num 1–16 × hours-per-week 1–99 in bins of 10 × sex × race, pairwise),
alternating the two settings so this VM's speed drift lands on both. A regression of the thread
control shows up as a ratio near 1 or below.

Run:  .venv/bin/python bench/build_speed.py [--rounds N]
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import adult_rows  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def staff_spec(_: Path) -> dict:
    spec = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    spec["source"]["csv"] = str(REPO / "examples" / "staff.csv")
    return spec


def adult5_spec(tmp: Path) -> dict:
    path = tmp / "adult5.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["age", "education_num", "hours", "sex", "race", "gain"])
        for r in adult_rows():
            w.writerow([r[0], r[4], r[12], r[9], r[8], r[10]])
    return {
        "name": "adult5",
        "source": {"csv": str(path)},
        "epsilon": 1.0,
        "dimensions": [
            {"name": "age", "type": "int", "lo": 0, "hi": 120},
            {"name": "education_num", "type": "int", "lo": 1, "hi": 16},
            {"name": "hours", "type": "int", "lo": 1, "hi": 99, "bin": 10},
            {"name": "sex", "type": "category", "values": ["Female", "Male"]},
            {
                "name": "race",
                "type": "category",
                "values": ["Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"],
            },
        ],
        "measures": [{"name": "gain", "lo": 0, "hi": 99999}],
        "cube": {"strategy": "pairwise"},
    }


def timed_build(spec: dict, threads: int | None, tmp: Path) -> float:
    steps.BUILD_BLAS_THREADS = threads
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        prima = Prima(Path(d) / "data", seed=1)
        prima.register(TableSpec.model_validate(spec))
        start = time.perf_counter()
        prima.build(spec["name"])
        elapsed = time.perf_counter() - start
        prima.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for name, make in (("staff (README tour)", staff_spec), ("Adult, 5 dimensions", adult5_spec)):
            spec = make(tmp)
            times: dict[str, list[float]] = {"BLAS default threads": [], "1 BLAS thread (service)": []}
            for _ in range(args.rounds):
                times["BLAS default threads"].append(timed_build(spec, None, tmp))
                times["1 BLAS thread (service)"].append(timed_build(spec, 1, tmp))
            best = {k: min(v) for k, v in times.items()}
            print(
                f"{name}: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in best.items())
                + f"; ratio {best['BLAS default threads'] / best['1 BLAS thread (service)']:.2f}x"
            )
    print(f"Reproduce: .venv/bin/python bench/build_speed.py --rounds {args.rounds}")


if __name__ == "__main__":
    main()
