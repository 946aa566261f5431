"""The README's tour and the guides' examples run as written against a live server.

Each ```bash block of the README's "A short tour" (after the serve command) and of docs/api.md's
curl tour runs in bash from the repository root, with only the address and the token swapped
for the test server's; every curl must get a 2xx (`--fail-with-body`). Every full `SELECT` in
docs/sql.md's example table must answer 200 on the same server.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, REPO, TLS, LiveServer


def bash_blocks(markdown: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", markdown, flags=re.S)


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"## {title}")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:] if end < 0 else markdown[start:end]


def run_as_written(script: str, server: LiveServer) -> str:
    """The block in bash with `set -e`, curl failing on HTTP errors, our address and token."""
    script = script.replace("localhost:8000", server.url.removeprefix("http://")).replace(
        "Bearer secret", f"Bearer {ADMIN_TOKEN}"
    )
    prelude = 'set -euo pipefail\ncurl() { command curl --fail-with-body --max-time 120 "$@"; echo; }\n'
    done = subprocess.run(["bash", "-c", prelude + script], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def tour_server(tmp_path: Path) -> LiveServer:
    server = LiveServer(tmp_path / "data", import_dir=REPO / "examples")
    server.start()
    yield server
    server.stop()


def test_the_readme_tour_runs_as_written(tour_server: LiveServer) -> None:
    tour = section((REPO / "README.md").read_text(), "A short tour")
    serve, commands = bash_blocks(tour)
    assert serve.strip() == "PRIMA_ADMIN_TOKEN=secret PRIMA_IMPORT_DIR=$PWD/examples ./run.sh serve"  # what we started
    out = run_as_written(commands, tour_server)
    assert '"dry_run":true' in out and '"name":"staff"' in out
    assert "sum(salary)_stddev" in out  # the CSV answer
    by_dept = next(json.loads(line) for line in out.splitlines() if line.startswith('{"columns":["dept"'))
    depts = by_dept["rows"][:4]  # (then an outside group only if its noisy count says rows are there)
    assert [r[0] for r in depts] == ["ops", "eng", "sales", "support"]
    assert all(r[2] is not None for r in depts) and not any(f[1] for f in by_dept["noisy"][:4])  # real values
    # the guide's SQL examples, on the same server (people and the tour's staff table)
    sql_guide = (REPO / "docs" / "sql.md").read_text()
    examples = [q for q in re.findall(r"`((?:SELECT|WITH) [^`]+)`", sql_guide) if " FROM " in q]
    assert len(examples) >= 18
    for sql in examples:
        r = httpx.post(tour_server.url + "/v1/query", json={"sql": sql}, timeout=120, verify=TLS)
        assert r.status_code == 200, (sql, r.text)


def test_the_api_guide_tour_runs_as_written(tour_server: LiveServer) -> None:
    blocks = bash_blocks(section((REPO / "docs" / "api.md").read_text(), "A curl tour"))
    assert blocks
    for block in blocks:
        run_as_written(block, tour_server)
    assert (
        httpx.get(tour_server.url + "/v1/tables/staff", verify=TLS).status_code == 404
    )  # the tour retires it at the end
