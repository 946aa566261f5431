"""Real BI clients against Prima's PostgreSQL wire listener, each checked against REST.

Installs each client into its own environment from the package registries (pinned below, cached
under `--cache`, default /tmp/prima-bi-clients; pgjdbc, psqlODBC and psql are Debian's), starts
`prima serve --pg-port` on a temporary data dir with the demo table `people`, the tour's `staff` and
three generated tables (`orders`: daily dates and an amount with a log2 axis; `accounts`: a signed
balance whose axis has no counts; `hours`: a linear axis over [0, 52]), runs a scripted session per
client (`sessions.py`, `node_session.mjs`, `JdbcStatements.java`, `superset_session.py`, psql and dbt
from here). Every driver that binds parameters runs the shared statements of `statements.py` (the
SQL issue #55 saw break) with its own binding; psql and dbt send them with the values written in.
Every value is compared with REST's answer for the same SQL; results in bench/results/bi_clients.md.
CI runs the light clients live in tests/ (psql, psycopg, SQLAlchemy 2, asyncpg, pgjdbc, psqlODBC).

Run: .venv/bin/python bench/bi_clients/run.py [--clients psycopg,asyncpg,node,pgjdbc,psql,superset,…]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import httpx
import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from bench.bi_clients.statements import STATEMENTS, compare, placeholders  # noqa: E402
from tests.conftest import free_port  # noqa: E402

PYTHON_CLIENTS = {  # pinned: a result names the versions it was measured with
    "ibis": ["ibis-framework[postgres]==12.0.0", "packaging", "psycopg[binary]==3.3.9"],
    "pgcli": ["pgcli==4.7.1"],
    "sqlalchemy-psycopg2": ["SQLAlchemy==2.1.9", "psycopg2-binary==2.9.11"],
    "sqlalchemy-psycopg": ["SQLAlchemy==2.1.9", "psycopg[binary]==3.3.9"],
    "psycopg": ["psycopg[binary]==3.3.9"],
    "asyncpg": ["asyncpg==0.32.0"],
    "odbc": ["pyodbc==5.5.0"],  # with Debian's odbc-postgresql (psqlODBC) and unixodbc
    "harlequin": ["harlequin==2.17.0", "harlequin-postgres==1.5.2"],
    "duckdb": ["duckdb==1.5.5", "duckdb-extension-postgres==1.5.5"],  # the scanner from PyPI, not downloaded
    "dbt": ["dbt-core==1.11.16", "dbt-postgres==1.11.0"],
    "superset": ["apache-superset==6.1.0", "psycopg2-binary==2.9.11", "rich"],  # rich: its CLI imports it
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
    """Superset 6.1 on loopback with a fresh metadata database, driven through its HTTP API
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
    return json.loads(last) if last.startswith("{") else {"checks": {"session": [None, False, done.stderr[-400:]]}}


def expected(rest: httpx.Client) -> dict:
    """REST's answers for the numbers every session checks, and for every shared statement."""
    def q(sql: str) -> dict:
        r = rest.post("/v1/query", json={"sql": sql}, headers={"Authorization": f"Bearer {TOKEN}"})
        return r.json() if r.status_code == 200 else {"error": r.text[:300]}

    want = {"count_by_education": q("SELECT education, COUNT(*) FROM people GROUP BY education")["rows"],
            "count_age_over_30": q("SELECT COUNT(*) FROM people WHERE age > 30")["rows"][0][0],
            "sum_by_region_desc": q("SELECT region, SUM(salary) AS s FROM people GROUP BY region ORDER BY s DESC")["rows"],
            "staff_since_2020": q("SELECT COUNT(*) FROM staff WHERE hired >= '2020-01-01'")["rows"][0][0],
            "count_hs_phd": q("SELECT COUNT(*) FROM people WHERE education IN ('hs', 'phd')")["rows"][0][0],
            "orders_sum_by_year": q("SELECT DATE_TRUNC('year', order_date) AS y, SUM(amount) FROM orders GROUP BY 1 "
                                    "ORDER BY 1")["rows"]}
    want["statements"] = {st["name"]: q(st.get("rest", st["sql"])) for st in STATEMENTS if "refused" not in st}
    return want


def _orders_csv(path: Path) -> None:
    """Synthetic orders (no real person): daily dates over 2019–2023, four categories and regions, a
    heavy-tailed amount — the table issue #55's Superset chart broke on."""
    rng = np.random.default_rng(55)  # bench data, not noise
    start = dt.date(2019, 1, 1).toordinal()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["order_date", "category", "region", "amount"])
        for day, cat, reg, amount in zip(rng.integers(0, 1826, 20000), rng.integers(0, 4, 20000),
                                         rng.integers(0, 4, 20000), rng.lognormal(4, 1.5, 20000)):
            w.writerow([dt.date.fromordinal(start + int(day)).isoformat(), CATEGORIES[cat], REGIONS[reg], round(amount, 2)])


def _small_csvs(folder: Path) -> None:
    """`accounts` (a signed balance, axis without counts) and `hours` (weekly hours, 47 % zeros)."""
    rng = np.random.default_rng(56)
    (folder / "accounts.csv").write_text("job,balance\n" + "".join(
        f"{'abc'[int(j)]},{round(float(b), 2)}\n" for j, b in zip(rng.integers(0, 3, 5000), rng.normal(1500, 3000, 5000))))
    (folder / "hours.csv").write_text("age,work\n" + "".join(
        f"{int(a)},{0 if rng.random() < 0.47 else int(w)}\n" for a, w in zip(rng.integers(18, 80, 5000),
                                                                            rng.integers(1, 53, 5000))))


CATEGORIES, REGIONS = ["toys", "games", "books", "garden"], ["north", "south", "east", "west"]
TABLES = {
    "orders": {"dimensions": [{"name": "order_date", "type": "date", "lo": "2019-01-01", "hi": "2023-12-31"},
                              {"name": "category", "type": "category", "values": CATEGORIES},
                              {"name": "region", "type": "category", "values": REGIONS}],
               "measures": [{"name": "amount", "lo": 0, "hi": 10000, "axis": {"kind": "log2", "count": True}}]},
    "accounts": {"dimensions": [{"name": "job", "type": "category", "values": ["a", "b", "c"]}],
                 "measures": [{"name": "balance", "lo": -10000, "hi": 100000, "axis": {"kind": "log2"}}]},
    "hours": {"dimensions": [{"name": "age", "type": "int", "lo": 18, "hi": 79}],
              "measures": [{"name": "work", "lo": 0, "hi": 52, "axis": {"kind": "linear", "count": True}}]},
}


def start(folder: Path) -> tuple[subprocess.Popen, int, int]:
    port, pg_port = free_port(), free_port()
    env = {"PRIMA_ADMIN_TOKEN": ADMIN, "PRIMA_ANALYST_TOKENS": TOKEN, "PRIMA_IMPORT_DIR": str(folder),
           "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--data-dir", str(folder / "data"), "--port",
                             str(port), "--pg-port", str(pg_port), "--log-level", "warning"], cwd=REPO, env=env)
    _wait_healthy(port)
    shutil.copy(REPO / "examples" / "staff.csv", folder / "staff.csv")
    _orders_csv(folder / "orders.csv")
    _small_csvs(folder)
    staff = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    staff["source"]["csv"] = str(folder / "staff.csv")
    specs = [staff] + [{"name": name, "source": {"csv": str(folder / f"{name}.csv")}, "epsilon": 1.0, **spec}
                       for name, spec in TABLES.items()]
    admin = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as c:
        for spec in specs:
            c.post("/v1/admin/tables", content=json.dumps(spec, default=str), headers=admin).raise_for_status()
            c.post(f"/v1/admin/tables/{spec['name']}/cube", headers=admin).raise_for_status()
        c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers={"Authorization": f"Bearer {TOKEN}"})
    return proc, port, pg_port


def literal(sql: str, params: list) -> str:
    """The statement with its parameters written as PostgreSQL literals (psql and dbt send text)."""
    def one(value: object) -> str:
        if isinstance(value, dict):
            (tag, v), = value.items()
            if tag.endswith("[]"):
                return "ARRAY[" + ", ".join(one({tag[:-2]: x} if tag != "int[]" else x) for x in v) + "]"
            return f"DATE '{v}'" if tag == "date" else f"'{v}'"
        return str(value) if isinstance(value, (int, float)) else "'" + str(value).replace("'", "''") + "'"
    return re.sub(r"\$(\d+)", lambda m: one(params[int(m.group(1)) - 1]), sql)


def psql_results(pg_port: int) -> dict:
    """psql 15 (Debian's), each statement with its values written in (psql 15 has no `\bind`), and its
    catalog listings; `VERBOSITY verbose` prints the SQLSTATE of a refusal."""
    env = {"PGPASSWORD": TOKEN, "PATH": "/usr/bin:/bin"}
    base = ["psql", "-X", "-A", "-t", "-q", "-F", "\x1f", "-v", "VERBOSITY=verbose", "-h", "127.0.0.1", "-p",
            str(pg_port), "-U", "bi", "prima", "-c", "SET prima.stddev = off"]
    outcomes, checks = {}, {}
    for st in STATEMENTS:
        done = subprocess.run([*base, "-c", literal(st["sql"], st["params"])], capture_output=True, text=True, env=env,
                              timeout=120)
        error = re.search(r"ERROR:\s+([0-9A-Z]{5}): (.*)", done.stderr)
        outcomes[st["name"]] = ({"error": [error.group(1), error.group(2)]} if error else
                                {"rows": [line.split("\x1f") for line in done.stdout.splitlines() if line]})
    for command, ok in (("\\dT", lambda out: out.strip() == ""), ("\\dt", lambda out: "orders" in out)):
        done = subprocess.run([*base[:-2], "-c", command], capture_output=True, text=True, env=env, timeout=60)
        checks[command] = [done.stdout[:160], ok(done.stdout) and done.returncode == 0, done.stderr[:200]]
    return {"checks": checks, "statements": outcomes}


def jdbc_results(pg_port: int, tmp: Path) -> dict:
    """pgjdbc (Debian's libpostgresql-jdbc-java) binding each statement's parameters itself."""
    jar, javac, java = Path("/usr/share/java/postgresql.jar"), shutil.which("javac"), shutil.which("java")
    if not (jar.exists() and javac and java):
        return {"checks": {"installed": [None, False, "needs libpostgresql-jdbc-java and a JDK"]}}
    subprocess.run([javac, "-d", str(tmp), str(HERE / "JdbcStatements.java")], check=True, capture_output=True)

    def tagged(value: object) -> str:
        if isinstance(value, dict):
            (tag, v), = value.items()
            return f"{tag}:{','.join(map(str, v)) if isinstance(v, list) else v}"
        return f"{'int' if isinstance(value, int) else 'text'}:{value}"

    lines = [f"{st['name']}\t{placeholders(st['sql'], 'qmark')}\t{chr(31).join(tagged(p) for p in st['params'])}"
             for st in STATEMENTS]
    (tmp / "statements.tsv").write_text("\n".join(lines) + "\n")
    done = subprocess.run([java, "-cp", f"{jar}:{tmp}", "JdbcStatements", f"jdbc:postgresql://127.0.0.1:{pg_port}/prima",
                           "bi", TOKEN, str(tmp / "statements.tsv")], capture_output=True, text=True, timeout=300)
    outcomes: dict[str, dict] = {st["name"]: {"rows": []} for st in STATEMENTS}
    for line in done.stdout.splitlines():
        kind, name, *rest = line.split("\t")
        if kind == "R":
            outcomes[name]["rows"].append([None if c == "null" else c for c in rest[0].split("\x1f")])
        elif kind == "E":
            outcomes[name] = {"error": [rest[0], rest[1]]}
    checks = {} if done.returncode == 0 else {"session": [None, False, done.stderr[-400:]]}
    return {"checks": checks, "statements": outcomes}


def dbt_results(cache: Path, pg_port: int, tmp: Path) -> dict:
    """dbt-postgres: `dbt debug` (the connection test) and `dbt show --inline` of each statement with
    its values written in (dbt renders SQL as text)."""
    python = python_env(cache, "dbt")
    project = tmp / "dbt_project"
    (project / "models").mkdir(parents=True, exist_ok=True)
    (project / "dbt_project.yml").write_text("name: prima_bench\nversion: '1.0'\nprofile: prima\nconfig-version: 2\n")
    (project / "profiles.yml").write_text(
        f"prima:\n  target: dev\n  outputs:\n    dev:\n      type: postgres\n      host: 127.0.0.1\n      port: {pg_port}\n"
        f"      user: bi\n      password: {TOKEN}\n      dbname: prima\n      schema: public\n      threads: 1\n"
        "      sslmode: disable\n")
    dbt = [str(python.parent / "dbt"), "--no-use-colors"]
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "DBT_PROFILES_DIR": str(project), "HOME": str(tmp),
           "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    debug = subprocess.run([*dbt, "debug"], cwd=project, capture_output=True, text=True, env=env, timeout=300)
    checks = {"dbt debug": [debug.stdout[-160:], debug.returncode == 0 and "All checks passed" in debug.stdout,
                            "" if debug.returncode == 0 else debug.stdout[-300:]]}
    outcomes = {}
    for st in STATEMENTS:
        done = subprocess.run([*dbt, "show", "--inline", literal(st["sql"], st["params"]), "--output", "json",
                               "--limit", "500", "--log-format", "json"], cwd=project, capture_output=True,
                              text=True, env=env, timeout=300)
        outcomes[st["name"]] = _dbt_outcome(done.stdout)
    return {"checks": checks, "statements": outcomes}


def _dbt_outcome(stdout: str) -> dict:
    """The rows `dbt show` previewed, or the database error it logged (dbt prints no SQLSTATE)."""
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        data = event.get("data", {})
        if "preview" in data:
            return {"rows": [list(r.values()) for r in json.loads(data["preview"])]}
        if event.get("info", {}).get("level") == "error" and data.get("exc") or "Database Error" in str(data):
            return {"error": [None, str(data.get("exc") or data)[:400]]}
    return {"error": [None, "no preview in dbt's output: " + stdout[-300:]]}


def run_client(client: str, args: argparse.Namespace, pg_port: int, rest_url: str, files: dict[str, Path],
               tmp: Path) -> dict:
    """One client's {"checks": …, "statements": …} (node: statements per driver)."""
    if client == "superset":
        return superset_results(args.cache, pg_port, rest_url)
    if client == "psql":
        return psql_results(pg_port)
    if client == "pgjdbc":
        return jdbc_results(pg_port, tmp)
    if client == "dbt":
        return dbt_results(args.cache, pg_port, tmp)
    if client == "node":
        folder = node_env(args.cache)
        if folder is None:
            return {"checks": {"installed": [None, False, "node/npm not available"]}}
        command, cwd = ["node", str(folder / "node_session.mjs"), str(pg_port), TOKEN, str(files["want"]),
                        str(files["statements"])], folder
    else:
        command = [str(python_env(args.cache, client)), str(HERE / "sessions.py"), client, str(pg_port), TOKEN,
                   str(files["want"])]
        cwd = HERE
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=cwd)
    last = (done.stdout.strip().splitlines() or ["{}"])[-1]
    return json.loads(last) if last.startswith("{") else {"checks": {"session": [None, False, done.stderr[-400:]]}}


def rows_of(client: str, result: dict, want: dict) -> list[tuple[str, str, list]]:
    """(client, check, [got, ok, detail]) for the client's own checks and each statement it ran."""
    out = [(client, name, v) for name, v in result.get("checks", {}).items()]
    statements = result.get("statements", {})
    per_driver = statements if client == "node" else {client: statements}
    for driver, outcomes in per_driver.items():
        for st in STATEMENTS:
            if st["name"] in outcomes:
                rest = want["statements"].get(st["name"], {})
                verdict = (compare(outcomes[st["name"]], st, rest) if "error" not in rest
                           else [None, False, f"REST refused: {rest['error']}"])
                out.append((driver, st["name"], verdict))
    return out


ALL_CLIENTS = [*PYTHON_CLIENTS, "node", "pgjdbc", "psql"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", default=",".join(ALL_CLIENTS))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "prima-bi-clients")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    table: list[tuple[str, str, list]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        proc, port, pg_port = start(tmp)
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as rest:
                want = expected(rest)
            files = {"want": tmp / "want.json", "statements": tmp / "statements.json"}
            files["want"].write_text(json.dumps(want))
            files["statements"].write_text(json.dumps(STATEMENTS))
            for client in args.clients.split(","):
                try:
                    result = run_client(client, args, pg_port, f"http://127.0.0.1:{port}", files, tmp)
                except Exception as exc:  # noqa: BLE001 — an install or a crash is that client's result
                    result = {"checks": {"session": [None, False, f"{type(exc).__name__}: {str(exc)[:300]}"]}}
                table += rows_of(client, result, want)
                print(f"{client}: {sum(1 for r in table if r[0] == client and r[2][1])} ok", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    write(table)


def write(table: list[tuple[str, str, list]]) -> None:
    ok = sum(1 for *_, v in table if v[1])
    versions = ", ".join(sorted(set(sum(PYTHON_CLIENTS.values(), []))))
    lines = ["# Real BI clients against the wire listener", "",
             f"`.venv/bin/python bench/bi_clients/run.py` — versions: {versions}, {', '.join(NODE_PACKAGES)} (npm), "
             "Debian's pgjdbc, psqlODBC and psql 15. Each check compares the client's values with REST's answer to "
             "the same SQL (the shared statements of `statements.py`: bound by each driver itself, written in as "
             "literals by psql and dbt); a refusal counts as expected when it carries the expected SQLSTATE (where "
             "the client reports one: dbt does not) and words that say what to do.", "",
             f"**{ok} of {len(table)} checks as expected.**", "",
             "| client | check | ok | detail |", "|---|---|---|---|"]
    for client, name, (got, passed, detail) in table:
        detail = (detail or got or "").replace("|", "\\|").replace("\n", " ")[:140]
        lines.append(f"| {client} | {name.replace('|', '/')} | {'yes' if passed else 'no'} | {detail} |")
    text = "\n".join(lines) + "\n"
    (REPO / "bench" / "results" / "bi_clients.md").write_text(text)
    print(text)
    print("Reproduce: .venv/bin/python bench/bi_clients/run.py")


if __name__ == "__main__":
    main()
