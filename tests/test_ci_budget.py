"""The per-test time budget CI enforces (`tests/budget.py` TestBudget, `PRIMA_TEST_BUDGET` in
`.ci/run`): a test over the budget fails the run and is named, its own ``budget`` marker raises its
limit, and both hold under pytest-xdist as without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SLOW = """
import time
import pytest

def test_quick():
    pass

{marker}
def test_slow():
    time.sleep(0.6)
"""


@pytest.mark.parametrize(
    "workers,marked", [([], False), (["-n", "2"], False), (["-n", "2"], True)], ids=["plain", "xdist", "xdist-own"]
)
def test_a_test_over_its_budget_fails_the_run_and_is_named(tmp_path: Path, workers: list[str], marked: bool) -> None:
    marker = '@pytest.mark.budget(5, "sleeps")' if marked else ""
    (tmp_path / "test_timed.py").write_text(SLOW.format(marker=marker))
    env = os.environ | {"PRIMA_TEST_BUDGET": "0.3", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.budget", "-c", os.devnull, "-q", *workers, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert "2 passed" in done.stdout, done.stdout[-2000:]
    if marked:
        assert done.returncode == 0 and "over the per-test budget" not in done.stdout, done.stdout[-2000:]
    else:
        assert done.returncode == 1, done.stdout[-2000:]
        assert "> 0.3 s" in done.stdout and "test_timed.py::test_slow" in done.stdout
        assert "test_quick" not in done.stdout.split("over the per-test budget")[1]
