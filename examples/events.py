"""Write a synthetic events table (no real person): examples/events.csv for examples/events.yaml.

20,000 persons over one year (2025). Each has a heavy-tailed number of events — log-normal, median
4, a few hundred at most, like visits, purchases or claims — each with a date, a channel, a region
(the person's own) and an amount in dollars (gamma, with a 5 % tail of large ones). One person is
the unit of privacy: see the privacy_unit block of examples/events.yaml.

Run:  .venv/bin/python examples/events.py [--persons 20000] [--out examples/events.csv]
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np

CHANNELS = ["store", "web", "app", "phone"]
REGIONS = ["north", "south", "east", "west"]


def write(path: Path, persons: int = 20_000, seed: int = 2025) -> Path:
    rng = np.random.default_rng(seed)  # synthetic data, not noise
    per = np.minimum(np.maximum(1, np.round(rng.lognormal(np.log(4), 1.2, persons))), 400).astype(int)
    pid = np.repeat(np.arange(1, persons + 1), per)
    n = len(pid)
    start = dt.date(2025, 1, 1).toordinal()
    days = rng.integers(0, 365, n)
    channel = np.array(CHANNELS)[rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])]
    region = np.array(REGIONS)[rng.integers(0, 4, persons)][pid - 1]
    amount = np.round(rng.gamma(2.0, 40.0, n) * np.where(rng.random(n) < 0.05, 8.0, 1.0), 2)
    with path.open("w") as f:
        f.write("person_id,day,channel,region,amount\n")
        for p, d, c, r, a in zip(pid, days, channel, region, amount):
            f.write(f"P{p:06d},{dt.date.fromordinal(start + int(d)).isoformat()},{c},{r},{a}\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--persons", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("events.csv"))
    args = parser.parse_args()
    print(f"wrote {write(args.out, args.persons)}")


if __name__ == "__main__":
    main()
