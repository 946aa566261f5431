"""Real BI clients against Prima's PostgreSQL wire listener, each checked against REST.

Installs each client into its own environment from the package registries (pinned below, cached
under `--cache`, default /tmp/prima-bi-clients), starts `prima serve --pg-port` on a temporary
data dir with the demo table `people` and the tour's `staff`, runs a scripted session per client
(`sessions.py`, `node_session.mjs`) that compares every number with REST's answer for the same
SQL, and writes bench/results/bi_clients.md. CI runs the light clients live in tests/ (psql,
psycopg, SQLAlchemy 2 Core, asyncpg); this harness covers the ones too heavy to install there.

Run: .venv/bin/python bench/bi_clients/run.py [--clients ibis,pgcli,sqlalchemy-psycopg2,harlequin,duckdb,superset,node]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import httpx
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import free_port  # noqa: E402

PYTHON_CLIENTS = {  # pinned: a result names the versions it was measured with
    "ibis": ["ibis-framework[postgres]==12.0.0", "packaging", "psycopg[binary]==3.3.9"],
    "pgcli": ["pgcli==4.7.1"],
    "sqlalchemy-psycopg2": ["SQLAlchemy==2.0.44", "psycopg2-binary==2.9.11"],
    "harlequin": ["harlequin==2.17.0", "harlequin-postgres==1.5.2"],
    "duckdb": ["duckdb==1.5.5", "duckdb-extension-postgres==1.5.5"],  # the scanner from PyPI, not downloaded
    "superset": ["apache-superset==6.0.0", "psycopg2-binary==2.9.11", "rich"],  # rich: its CLI imports it
}
SUPERSET_CONFIG = """SECRET_KEY = "prima-bi-clients-bench-only-secret"
SQLALCHEMY_DATABASE_URI = "sqlite:///{home}/superset.db"
WTF_CSRF_ENABLED = False
PREVENT_UNSAFE_DB_CONNECTIONS = False
"""
NODE_PACKAGES = ["pg@8.16.3", "postgres@3.4.7"]
TOKEN, ADMIN = "bench-analyst-token", "bench-admin-token"


def _wait_healthy(port: int, path: str = "/healthz") -> None:
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).raise_for_status()
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def python_env(cache: Path, name: str) -> Path:
    env = cache / name
    python = env / "bin" / "python"
    if not python.exists():
        venv.create(env, with_pip=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PYTHON_CLIENTS[name]], check=True)
    return python


def node_env(cache: Path) -> Path | None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    folder = cache / "node"
    if not (folder / "node_modules" / "pg").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text('{"name": "prima-bi-clients", "private": true, "type": "module"}')
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", *NODE_PACKAGES], cwd=folder, check=True)
    shutil.copy(HERE / "node_session.mjs", folder / "node_session.mjs")
    return folder


def superset_results(cache: Path, pg_port: int, rest_url: str) -> dict:
    """Superset 6 on loopback with a fresh metadata database, driven through its HTTP API
    (`superset_session.py`)."""
    python = python_env(cache, "superset")
    tool = python.parent / "superset"
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "superset_config.py").write_text(SUPERSET_CONFIG.format(home=home))
        env = {"SUPERSET_CONFIG_PATH": f"{home}/superset_config.py", "SUPERSET_HOME": home, "FLASK_APP": "superset",
               "PATH": "/usr/bin:/bin"}
        for step in (["db", "upgrade"], ["fab", "create-admin", "--username", "admin", "--firstname", "a", "--lastname",
                                          "b", "--email", "a@example.org", "--password", "admin"], ["init"]):
            subprocess.run([str(tool), *step], env=env, check=True, capture_output=True, timeout=600)
        port = free_port()
        server = subprocess.Popen([str(tool), "run", "-h", "127.0.0.1", "-p", str(port), "--with-threads"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_healthy(port, "/health")
            done = subprocess.run([str(python), str(HERE / "superset_session.py"), f"http://127.0.0.1:{port}",
                                   str(pg_port), TOKEN, rest_url], capture_output=True, text=True, timeout=600)
        finally:
            server.terminate()
            server.wait(30)
    last = (done.stdout.strip().splitlines() or ["{}"])[-1]
    return json.loads(last) if last.startswith("{") else {"session": [None, False, done.stderr[-400:]]}


def expected(rest: httpx.Client) -> dict:
    """REST's answers for the numbers every session checks."""
    def q(sql: str) -> list:
        r = rest.post("/v1/query", json={"sql": sql}, headers={"Authorization": f"Bearer {TOKEN}"})
        r.raise_for_status()
        return r.json()["rows"]
    return {"count_by_education": q("SELECT education, COUNT(*) FROM people GROUP BY education"),
            "count_age_over_30": q("SELECT COUNT(*) FROM people WHERE age > 30")[0][0],
            "sum_by_region_desc": q("SELECT region, SUM(salary) AS s FROM people GROUP BY region ORDER BY s DESC"),
            "staff_since_2020": q("SELECT COUNT(*) FROM staff WHERE hired >= '2020-01-01'")[0][0],
            "count_hs_phd": q("SELECT COUNT(*) FROM people WHERE education IN ('hs', 'phd')")[0][0]}


def start(folder: Path) -> tuple[subprocess.Popen, int, int]:
    port, pg_port = free_port(), free_port()
    env = {"PRIMA_ADMIN_TOKEN": ADMIN, "PRIMA_ANALYST_TOKENS": TOKEN, "PRIMA_IMPORT_DIR": str(folder),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--data-dir", str(folder / "data"), "--port",
                             str(port), "--pg-port", str(pg_port), "--log-level", "warning"], cwd=REPO, env=env)
    _wait_healthy(port)
    shutil.copy(REPO / "examples" / "staff.csv", folder / "staff.csv")
    spec = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    spec["source"]["csv"] = str(folder / "staff.csv")
    admin = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as c:
        c.post("/v1/admin/tables", content=json.dumps(spec, default=str), headers=admin).raise_for_status()
        c.post("/v1/admin/tables/staff/cube", headers=admin).raise_for_status()
        c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers={"Authorization": f"Bearer {TOKEN}"})
    return proc, port, pg_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default=",".join([*PYTHON_CLIENTS, "node"]))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "prima-bi-clients")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, port, pg_port = start(Path(tmp))
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as rest:
                want = json.dumps(expected(rest))
            for client in args.clients.split(","):
                if client == "superset":
                    results[client] = superset_results(args.cache, pg_port, f"http://127.0.0.1:{port}")
                    continue
                if client == "node":
                    folder = node_env(args.cache)
                    command = None if folder is None else ["node", str(folder / "node_session.mjs"), str(pg_port), TOKEN, want]
                    cwd = folder
                else:
                    command = [str(python_env(args.cache, client)), str(HERE / "sessions.py"), client, str(pg_port), TOKEN, want]
                    cwd = HERE
                if command is None:
                    results[client] = {"installed": [None, False, "node/npm not available"]}
                    continue
                done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)
                last = (done.stdout.strip().splitlines() or ["{}"])[-1]
                results[client] = json.loads(last) if last.startswith("{") else {"session": [None, False, done.stderr[-400:]]}
        finally:
            proc.terminate()
            proc.wait(30)
    lines = ["# Real BI clients against the wire listener", "",
             f"`.venv/bin/python bench/bi_clients/run.py` — versions: {', '.join(sum(PYTHON_CLIENTS.values(), []))}, "
             f"{', '.join(NODE_PACKAGES)} (npm). Each check compares the client's number with REST's answer to the "
             "same SQL; a refusal that says what to do counts as expected where noted.", "",
             "| client | check | ok | detail |", "|---|---|---|---|"]
    for client, checks in results.items():
        for name, (got, ok, detail) in checks.items():
            detail = (detail or got or "").replace("|", "\\|").replace("\n", " ")[:140]
            lines.append(f"| {client} | {name.replace('|', '/')} | {'yes' if ok else 'no'} | {detail} |")
    text = "\n".join(lines) + "\n"
    (REPO / "bench" / "results" / "bi_clients.md").write_text(text)
    print(text)
    print("Reproduce: .venv/bin/python bench/bi_clients/run.py")


if __name__ == "__main__":
    main()
