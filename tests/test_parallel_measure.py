"""The measure phase at speed: the fast marginal sums equal numpy's, and a seeded build
releases the same values on one thread or several."""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from engine.builds import steps
from engine.service import Prima
from privacy.estimation.lattice import broadcast_sum, marginal, marginals
from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import processes, threads
from privacy.strategies import pairwise
from storage import cube_store
from storage.schema import TableSpec

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(10, 50, 36, 8), (3, 4, 5), (7, 1, 3, 2, 5), (1000,), (6, 7)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_marginals_equal_numpys_sums(shape: tuple[int, ...], dtype: type) -> None:
    x = np.random.default_rng(len(shape)).random(shape).astype(dtype)  # test data, not noise
    cliques = [frozenset(c) for k in range(len(shape) + 1) for c in itertools.combinations(range(len(shape)), k)]
    tol = 1e-12 if dtype is np.float64 else 1e-5
    for clique, shared in zip(cliques, marginals(x, cliques)):
        drop = tuple(i for i in range(len(shape)) if i not in clique)
        expected = x.astype(np.float64).sum(axis=drop, keepdims=True) if drop else x
        assert marginal(x, clique).shape == shared.shape == expected.shape
        np.testing.assert_allclose(marginal(x, clique), expected, rtol=tol)
        np.testing.assert_allclose(shared, expected, rtol=tol)


@pytest.mark.parametrize("shape", SHAPES)
def test_broadcast_sum_adds_every_part_once(shape: tuple[int, ...]) -> None:
    x = np.random.default_rng(1).random(shape)
    parts = [marginal(x, frozenset(c)) for c in itertools.combinations(range(len(shape)), min(2, len(shape)))]
    expected = np.zeros(shape)
    for p in parts:
        expected += p
    np.testing.assert_allclose(broadcast_sum(parts, shape), expected, rtol=1e-12)
    out = np.full(shape, np.nan)
    assert broadcast_sum(parts, shape, out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    single = broadcast_sum(parts[:1], shape)
    np.testing.assert_array_equal(single, np.broadcast_to(parts[0], shape))
    single[...] = 0  # a new array: the part itself is untouched
    assert parts[0].any()


def test_children_of_a_seeded_source_repeat_and_differ() -> None:
    a = [c.words(4) for c in threads.children(RandomSource(7), 3)]
    b = [c.words(4) for c in threads.children(RandomSource(7), 3)]
    assert all((x == y).all() for x, y in zip(a, b))
    assert len({tuple(x) for x in a}) == 3
    assert not any(c.seeded for c in threads.children(RandomSource(), 2))


def test_parallel_map_keeps_order_and_shares_one_thread_budget_with_nested_maps() -> None:
    """Nested maps draw on one budget of tokens: never more pieces at once than granted, and a
    map started late (the third aggregate on 2 threads) gets every token the others gave back."""
    running, peak, lock = [0], [0], threading.Lock()
    late_peak = [0]

    def leaf(_: int, late: bool) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if late:
                late_peak[0] = max(late_peak[0], running[0])
        time.sleep(0.05 if late else 0.001)
        with lock:
            running[0] -= 1

    def outer(i: int) -> int:
        threads.parallel_map(lambda j: leaf(j, i == 2), list(range(4 if i == 2 else 1)))
        return i * i

    with threads.allowed(2):
        assert threads.parallel_map(outer, [0, 1, 2]) == [0, 1, 4]
    assert peak[0] == 2 and late_peak[0] == 2
    with threads.allowed(4):
        assert threads.parallel_map(lambda _: threads.available(), [0]) == [4]
    assert threads.parallel_map(lambda i: i + 1, [1, 2]) == [2, 3]  # no budget: in order, on this thread


def _staff_arrays(tmp: Path, workers: int, strategy: str = "pairwise") -> dict[str, np.ndarray]:
    """The README tour's table (pairwise: the log-linear fit and its bootstrap refits; cuboids: the
    shrunk pairs and theirs) built with seed 11 on ``workers`` threads; the stored noisy arrays."""
    spec = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    spec["source"]["csv"] = str(REPO / "examples" / "staff.csv")
    spec = TableSpec.model_validate(spec | {"name": "t", "cube": {"strategy": strategy}})
    before = steps.BUILD_THREADS
    steps.BUILD_THREADS = workers
    try:
        prima = Prima(tmp / f"data{strategy}{workers}", seed=11)
        prima.register(spec)
        prima.build("t")
        stored = cube_store.load(prima.db, prima.cube_root, "t")
        arrays = {k: np.array(v) for k, v in stored.arrays.items()}
        prima.close()
        return arrays
    finally:
        steps.BUILD_THREADS = before


@pytest.mark.parametrize("strategy", ["pairwise", "cuboids"])
def test_a_seeded_build_releases_the_same_values_on_any_thread_count(tmp_path: Path, strategy: str) -> None:
    """(The test processes build on one thread, `tests/conftest.py`: this is where two are checked.)"""
    one, two = _staff_arrays(tmp_path, 1, strategy), _staff_arrays(tmp_path, 2, strategy)
    assert one.keys() == two.keys() and len(one) >= 2
    for key in one:
        np.testing.assert_array_equal(one[key], two[key])


def test_fits_in_worker_processes_return_what_this_process_computes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`privacy.parallel.processes`: the same call answered by a worker (under a thread budget > 1) and here."""
    monkeypatch.setenv("PRIMA_BUILD_THREADS", "2")
    monkeypatch.delenv("PRIMA_BUILD_PROCESSES", raising=False)
    shape, cuboids = (4, 5, 3), [frozenset(c) for c in itertools.combinations(range(3), 2)]
    rng = np.random.default_rng(3)
    truth = rng.poisson(20.0, size=shape).astype(float)
    measured = [marginal(truth, c) + rng.normal(0, 2, size=marginal(truth, c).shape) for c in cuboids]
    args = (shape, cuboids, [1.0, 1.0, 1.0], measured, 10)
    here = pairwise.estimate(*args)
    with threads.allowed(2):
        there = processes.offload(pairwise.estimate, *args, seconds=processes.STARTING_SECONDS)
    assert processes._get().started >= 1
    for a, b in zip(here, there):
        np.testing.assert_array_equal(a, b)


def test_a_dead_fit_worker_is_replaced_and_an_error_in_one_is_raised_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIMA_BUILD_THREADS", "2")
    monkeypatch.delenv("PRIMA_BUILD_PROCESSES", raising=False)
    processes.warm(processes.STARTING_SECONDS)
    pool = processes._get()
    idle = [pool.take() for _ in range(pool.started)]
    killed = {w.process.pid for w in idle}
    for w in idle:
        w.process.kill()
        w.process.wait()
        pool.give_back(w)
    with threads.allowed(2):
        assert processes.offload(math.fsum, [0.1] * 10, seconds=processes.STARTING_SECONDS) == math.fsum(
            [0.1] * 10
        )  # ran here: its worker was dead
        assert processes.offload(math.fsum, [0.5] * 4, seconds=processes.STARTING_SECONDS) == 2.0
        with pytest.raises(ValueError, match="math domain error"):
            processes.offload(math.sqrt, -1.0, seconds=processes.STARTING_SECONDS)  # raised in a worker, re-raised here
        assert processes.offload(math.sqrt, 4.0, seconds=processes.STARTING_SECONDS) == 2.0  # that worker still answers
    now = [pool.take() for _ in range(pool.idle.qsize())]
    for w in now:
        pool.give_back(w)
    live = {w.process.pid for w in now if w.process.poll() is None}
    assert live and not live & killed


def test_fit_workers_start_only_for_fits_worth_them(tmp_path: Path) -> None:
    """A fresh process building the small staff table (pairwise fits of a few hundred cells) starts
    no fit worker — they would cost ~1 s of CPU to save milliseconds — and runs the same build; the
    same table counted by day (~430,000 cells) is over `processes.STARTING_SECONDS`, so its build would."""
    import subprocess
    import sys

    small = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    small["source"]["csv"] = str(REPO / "examples" / "staff.csv")
    small = TableSpec.model_validate(small | {"name": "t", "cube": {"strategy": "pairwise"}})
    assert 0 < steps.fit_seconds(small) < processes.STARTING_SECONDS
    daily = small.model_dump(mode="json")
    daily["dimensions"][2]["granularity"] = "day"
    assert steps.fit_seconds(TableSpec.model_validate(daily)) >= processes.STARTING_SECONDS
    code = (
        "import sys, json; from engine.service import Prima; from storage.schema import TableSpec;"
        "from privacy.parallel import processes;"
        "p = Prima(sys.argv[1], seed=1); spec = TableSpec.model_validate_json(sys.argv[2]); p.register(spec);"
        "p.build('t'); print(json.dumps(processes.running())); p.close()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "data"), small.model_dump_json()],
        cwd=REPO,
        env={**os.environ, "PRIMA_BUILD_THREADS": "2", "PRIMA_BUILD_PROCESSES": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "false", out.stderr[-2000:]
