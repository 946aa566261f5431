"""Shared fixtures: real DuckDB files in temp dirs, synthetic CSVs, a real uvicorn server."""

from __future__ import annotations

import atexit
import concurrent.futures
import csv
import datetime as dt
import gzip
import hashlib
import io
import multiprocessing
import os
import pickle
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

# One BLAS thread in the tests and every process they start (servers, spawned pools), as every build
# runs (`engine.builds.steps.measure`): OpenBLAS's idle threads spin, and with two test processes on
# two cores that spinning took the CPU the other process needed (a pairwise test file: 118 → 103 s of
# CPU at the same wall time alone). Set before numpy loads, then enforced by threadpoolctl in case
# a plugin loaded it first.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# One build thread in the test processes and the pools they spawn (`side_by_side`), unless the run
# sets its own: with two test files at a time on two cores, and the seeded-build tests running two
# processes each, a build's second thread (and its fit worker processes, off with one thread) only
# contended for the cores — the whole suite ran 539 → 493 s (975 tests, -n 2, the same machine within
# the hour; 499 s with the servers on one thread too). Seeded builds release the same values at any thread count
# (`tests/test_parallel_measure.py`, which sets its own), and the servers the tests start keep the
# deployed default, every core (`LiveServer`), so the threaded path still runs wherever a server builds.
_BUILD_THREADS_SET_HERE = "PRIMA_BUILD_THREADS" not in os.environ
os.environ.setdefault("PRIMA_BUILD_THREADS", "1")

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(limits=1, user_api="blas")

from engine.service import Prima  # noqa: E402
from engine.synopses.cube import Cube  # noqa: E402
from storage.schema import TableSpec  # noqa: E402
from tests.budget import pytest_collection_modifyitems, pytest_configure  # noqa: E402, F401  (the suite's time budget)

ADMIN_TOKEN = "test-admin-token-0123456789"
# One TLS context for every test client (`verify=TLS`): httpx builds a fresh one per Client, a
# module-level httpx.get/post included, loading certifi's CA bundle (~25 ms of CPU), and the suite's
# requests go to 127.0.0.1 over plain HTTP: py-spy over a whole run found ~70 s of CPU there, most in
# `LiveServer.start`'s polls.
TLS = ssl.create_default_context()
REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
DATASETS = {  # tests/data/README.md: provenance and licence
    "adult.data": "df25a4e32ed6f1bd4b3910d21a7bd661a09061eced7cb45555a519d9667cc87b",
    "Metro_Interstate_Traffic_Volume.csv": "749c90d720360a4215bb15345526073c079ba4cc95e3fa558796d083f85fce9e",
    "bank-full.csv": "e003ab9ba07160dd9e7dc257e924f4961a6dfaed4a3c2c157c38621995b68c08",
    "PUMS.csv": "18b41cb75b1df17e166184f8f9a8f8d942aab7cd24e1dc4e0cf0ae64a6ac8b18",
}
_UNPACKED: dict[str, Path] = {}
# adult.data has no header: UCI adult.names' columns, in order
ADULT_COLUMNS = [
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation", "relationship",
    "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country", "income",
]  # fmt: skip


# Adult as a wide table (`cuboids`: ten columns): seven categories with UCI's value lists, then
# three numbers binned as `ADULT_WIDE_SQL` writes them for DuckDB's truth on the raw file.
ADULT_WIDE = {
    "sex": ["Female", "Male"],
    "race": ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"],
    "relationship": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
    "marital_status": [
        "Married-civ-spouse", "Never-married", "Divorced", "Separated", "Widowed", "Married-spouse-absent",
        "Married-AF-spouse",
    ],
    "workclass": [
        "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov", "State-gov", "Without-pay",
        "Never-worked",
    ],
    "occupation": [
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
        "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
        "Priv-house-serv", "Protective-serv", "Armed-Forces",
    ],
    "income": ["<=50K", ">50K"],
}  # fmt: skip
ADULT_WIDE_NUMBERS = [
    {"name": "education_num", "type": "int", "lo": 1, "hi": 16},
    {"name": "age", "type": "int", "lo": 0, "hi": 119, "bin": 10},
    {"name": "hours_per_week", "type": "int", "lo": 0, "hi": 99, "bin": 10},
]
ADULT_WIDE_SQL = {"age": "10 * (age // 10)", "hours_per_week": "10 * (hours_per_week // 10)"}


def adult_wide_spec(cube: dict) -> TableSpec:
    """`ADULT_WIDE` and `ADULT_WIDE_NUMBERS` over tests/data's adult.data, COUNT and SUM(capital_loss),
    pure ε = 1, with ``cube``."""
    dims = [{"name": n, "type": "category", "values": v} for n, v in ADULT_WIDE.items()] + ADULT_WIDE_NUMBERS
    return TableSpec.model_validate(
        {
            "name": "adult",
            "source": {"csv": str(dataset("adult.data")), "header": False, "columns": ADULT_COLUMNS},
            "epsilon": 1.0,
            "dimensions": dims,
            "measures": [{"name": "capital_loss", "lo": 0, "hi": 4356}],
            "cube": cube,
        }
    )


def write_sales_csv(path: Path, rows: int = 5000, seed: int = 7) -> Path:
    """A synthetic table with int, category and date dimensions, values partly outside the domains
    and a signed measure partly outside its bounds (so clipping and domain filtering are exercised).
    Generated once per (rows, seed) in a test process and written from memory after that: drawing
    it row by row took ~0.15 s, and a few hundred tests write it (~18 s of CPU over a run)."""
    if (rows, seed) not in _SALES:
        rng = np.random.default_rng(seed)  # test data, not noise
        regions = np.array(["north", "south", "east", "west", "mars"])  # 'mars' is outside the domain
        start = dt.date(2020, 1, 1).toordinal()
        text = io.StringIO(newline="")
        w = csv.writer(text)
        w.writerow(["age", "region", "day", "score", "amount"])
        for _ in range(rows):
            age = int(rng.integers(10, 100))  # domain 18..90: some rows fall outside
            region = regions[rng.choice(5, p=[0.3, 0.3, 0.2, 0.15, 0.05])]
            day = dt.date.fromordinal(start + int(rng.integers(0, 800))).isoformat()
            score = int(rng.integers(0, 25))
            amount = round(float(rng.normal(200, 400)), 2)  # bounds [-100, 1000]: both sides clip
            w.writerow([age, region, day, score, amount])
        _SALES[(rows, seed)] = text.getvalue().encode()
    path.write_bytes(_SALES[(rows, seed)])
    return path


_SALES: dict[tuple[int, int], bytes] = {}


def dataset(name: str) -> Path:
    """A real table from tests/data (gzip in the repository), decompressed once per test process into
    a temporary directory and checked against its SHA-256."""
    if name not in _UNPACKED:
        out = Path(tempfile.mkdtemp(prefix="prima-data-")) / name
        with gzip.open(DATA / f"{name}.gz", "rb") as packed, out.open("wb") as f:
            shutil.copyfileobj(packed, f)
        assert hashlib.sha256(out.read_bytes()).hexdigest() == DATASETS[name], f"{name} differs from tests/data"
        atexit.register(shutil.rmtree, out.parent, True)
        _UNPACKED[name] = out
    return _UNPACKED[name]


def select_total(prefix: np.ndarray, selection: list) -> float:
    """Σ of a selection read from a zero-padded prefix array, through the service's own answer path."""
    return Cube("t", "x", {"v": prefix}, {}).total("v", selection)


def sales_spec(csv_path: Path, name: str = "sales", epsilon: float = 1.0) -> dict:
    return {
        "name": name,
        "source": {"csv": str(csv_path)},
        "dimensions": [
            {"name": "age", "type": "int", "lo": 18, "hi": 90},
            {"name": "region", "type": "category", "values": ["north", "south", "east", "west"]},
            {"name": "day", "type": "date", "lo": "2020-01-01", "hi": "2021-12-31", "granularity": "month"},
            {"name": "score", "type": "int", "lo": 0, "hi": 24, "bin": 5},
        ],
        "measures": [{"name": "amount", "lo": -100, "hi": 1000}],
        "epsilon": epsilon,
        "cube": {"build": "on_first_query"},  # these tests query first; registered tables default to "admin"
    }


@pytest.fixture
def sales_csv(tmp_path: Path) -> Path:
    return write_sales_csv(tmp_path / "sales.csv")


@pytest.fixture
def prima(tmp_path: Path) -> Iterator[Prima]:
    service = Prima(tmp_path / "data", seed=12345)
    yield service
    service.close()


@pytest.fixture
def sales(prima: Prima, sales_csv: Path) -> Prima:
    prima.register(TableSpec.model_validate(sales_spec(sales_csv)))
    return prima


def registered_template(data_dir: Path, spec: TableSpec) -> Path:
    """A data directory with ``spec`` registered and nothing built, for `seeded_copy`."""
    template = Prima(data_dir)
    try:
        template.register(spec)
    finally:
        template.close()
    return data_dir


def seeded_copy(template: Path, data_dir: Path, seed: int) -> Prima:
    """A Prima at ``seed`` over a copy of a `registered_template`'s store: tests that build a table
    over many seeds copy its registration (the source copied into DuckDB, the preview: half of each
    coverage build's time) instead of repeating it. What they measure, the builds, starts from the
    same catalog either way; the copies share the table's salt, which only orders a privacy unit's
    rows."""
    cubes = template / "cubes"
    assert not (cubes.exists() and any(cubes.rglob("*.npy"))), "a built template would give every seed its noise"
    data_dir.mkdir(parents=True)
    shutil.copyfile(template / "store.duckdb", data_dir / "store.duckdb")
    return Prima(data_dir, seed=seed)


def memory_dir(fallback: Path) -> Path:
    """A fresh directory in memory (/dev/shm) for a test's throw-away data directories, or
    ``fallback`` where there is none: a CPS-shaped build writes 280 MB of cube files and fsyncs them,
    0.7 s of its 3.3 s on disk. Callers remove what they put there; the directory itself goes when
    the test process exits."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        return fallback
    made = Path(tempfile.mkdtemp(prefix="prima-test-", dir=shm))
    atexit.register(shutil.rmtree, made, True)
    return made


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """``prima serve`` in a subprocess on 127.0.0.1 (a real uvicorn), restartable on one data dir."""

    def __init__(
        self,
        data_dir: Path,
        demo: bool = True,
        import_dir: Path | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.demo = demo
        self.import_dir = import_dir or data_dir.parent
        self.extra_args, self.extra_env = extra_args, env or {}
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = data_dir.parent / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        args = [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--log-level",
            "warning",
        ]
        if not self.demo:
            args.append("--no-demo")
        args += list(self.extra_args)
        env = {
            **{k: v for k, v in os.environ.items() if not (k == "PRIMA_BUILD_THREADS" and _BUILD_THREADS_SET_HERE)},
            "PRIMA_ADMIN_TOKEN": ADMIN_TOKEN,
            "PRIMA_IMPORT_DIR": str(self.import_dir),
            **self.extra_env,
        }
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1, verify=TLS).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not come up in 30 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


J = TypeVar("J")
R = TypeVar("R")
_POOL: concurrent.futures.ProcessPoolExecutor | None = None


def side_by_side(fn: Callable[[J], R], jobs: Sequence[J], timeout: float = 3000) -> list[R]:
    """``[fn(job) for job in jobs]`` on two spawned processes kept for the whole test process: the
    seeded-build tests (privacy audit, bias, coverage) are pure Python, and on 2 cores two processes
    halve their time with their power unchanged. One pool, not one per test: starting two spawned
    interpreters costs ~1.9 s of CPU, and about thirty tests did. Serial if a pool cannot be had.
    ``fn`` must be a module-level function and the jobs picklable."""
    global _POOL
    try:
        if _POOL is None:
            _POOL = concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
            atexit.register(_POOL.shutdown, cancel_futures=True)
        return list(_POOL.map(fn, jobs, timeout=timeout))
    except (OSError, concurrent.futures.process.BrokenProcessPool, pickle.PicklingError):
        _POOL = None
        return [fn(job) for job in jobs]


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    """FastAPI's TestClient on a fresh data dir with the demo table and the admin token set."""
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.http.app import create_app

    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=True)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def empty_client(tmp_path: Path) -> Iterator[Any]:
    """A TestClient on an empty data dir (no demo table), the admin token set, server errors raised."""
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.http.app import create_app

    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, demo=False, import_dir=tmp_path)
    with TestClient(create_app(settings)) as c:
        yield c


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}
