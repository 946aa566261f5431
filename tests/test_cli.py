"""The README's CLI flow, through typer's runner, on a fresh data dir and against a live server."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from app.cli import cli
from tests.conftest import ADMIN_TOKEN, REPO, LiveServer, free_port

EXAMPLE = REPO / "examples" / "staff.yaml"
runner = CliRunner()


def run(*args: str) -> str:
    result = runner.invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_register_build_query_ledger_with_the_library(tmp_path: Path) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    assert "registered staff" in run("register", str(EXAMPLE), *d)
    built = run("build", "staff", *d)
    assert "ready" in built and "ε charged 1" in built
    answer = run("query", "SELECT dept, COUNT(*) AS n, AVG(salary) FROM staff GROUP BY dept", *d)
    assert all(dept in answer for dept in ("ops", "eng", "sales", "support")) and "±" in answer
    tiny = run(
        "query", "SELECT hired, COUNT(*) FROM staff WHERE hired BETWEEN '2013-01' AND '2013-03' GROUP BY hired", *d
    )
    assert "(noise)" in tiny  # a month's count on this table: flagged, as REST's noisy
    ledger = run("ledger", "staff", *d)
    assert ledger.count("done") == 3 and "total charged: ε=1" in ledger
    again = run("build", "staff", *d)  # a second build without --force spends nothing and says so
    assert "already built" in again and "charged" not in again.replace("nothing charged", "")
    assert run("ledger", "staff", *d).count("done") == 3
    assert "remaining 0" in run("budget", "show", "staff", *d)
    refused = runner.invoke(cli, ["budget", "set", "staff", "0.5", *d])
    assert refused.exit_code == 1 and "below" in refused.output


def test_the_same_flow_against_a_running_server(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "data", demo=False)
    server.start()
    try:
        url = ["--url", server.url, "--token", ADMIN_TOKEN]
        shutil.copy(EXAMPLE.parent / "staff.csv", tmp_path / "staff.csv")  # inside the server's import dir
        meta = tmp_path / "staff.yaml"
        meta.write_text(EXAMPLE.read_text())
        assert "registered staff" in run("register", str(meta), *url)
        assert "ε charged 1" in run("build", "staff", *url)
        assert re.search(r"\d", run("query", "SELECT SUM(salary) FROM staff WHERE age < 40", *url))
        assert run("ledger", "staff", *url).count("done") == 3  # COUNT(*), SUM, COUNT(salary)
    finally:
        server.stop()


def test_docker_command_is_a_valid_cli_invocation() -> None:
    cmd = next(line for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("CMD"))
    argv = [a.strip('",[] ') for a in cmd[len("CMD") :].split(",")]
    assert argv[0] == "prima"
    group = typer.main.get_command(cli)
    ctx = group.make_context("prima", argv[1:2] + ["--help"], resilient_parsing=True)
    command = group.get_command(ctx, argv[1])
    command.make_context(argv[1], argv[2:])  # raises on an unknown option or a bad value
    compose = (REPO / "docker-compose.yml").read_text()
    assert "PRIMA_ADMIN_TOKEN" in compose and "prima-data:/data" in compose
    assert shlex.split("prima serve --host 0.0.0.0")[0] == "prima"


def test_a_data_dir_held_by_a_running_server_gives_one_line_saying_what_to_do(tmp_path: Path) -> None:
    import subprocess
    import sys

    server = LiveServer(tmp_path / "data")
    server.start()
    try:  # `tables` (a library command) and a second `serve` (it printed a traceback)
        results = [
            subprocess.run(
                [sys.executable, "-m", "app.cli", *cmd, "--data-dir", str(tmp_path / "data")],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
            for cmd in (["tables"], ["serve", "--port", str(free_port())])
        ]
    finally:
        server.stop()
    for result in results:
        assert result.returncode == 1 and "Traceback" not in result.stderr + result.stdout
        lines = [l for l in (result.stderr + result.stdout).splitlines() if l.strip()]
        assert len(lines) == 1 and "--url" in " ".join(lines) and "in use" in " ".join(lines), lines


def test_retire_from_the_cli(tmp_path: Path) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    run("register", str(EXAMPLE), *d)
    run("build", "staff", *d)
    assert "retired staff" in run("retire", "staff", *d)
    assert "registered staff" in run("register", str(EXAMPLE), *d)
    assert "spent 1" in run("budget", "show", "staff", *d)  # the ledger stayed


def test_register_dry_run_previews_and_registers_nothing(tmp_path: Path) -> None:
    d = ["--data-dir", str(tmp_path / "data")]
    shown = run("register", str(EXAMPLE), "--dry-run", *d)
    assert "expected noise" in shown and "dry run" in shown and "COUNT(*)" in shown
    assert "registered staff" in run("register", str(EXAMPLE), *d)  # the dry run left the name free


def test_a_declared_workloads_queries_are_previewed(tmp_path: Path) -> None:
    """The register preview lists each declared query's stddev per aggregate and its two ratios, as
    REST's ``preview.workload`` does: the GROUP BY dept declared twice as heavy comes out below 1×
    the table without the workload."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["cube"] = {"workload": [{"group_by": []}, {"group_by": ["dept"], "weight": 2}]}
    path = tmp_path / "staff.yaml"
    path.write_text(yaml.safe_dump(spec))
    shown = run("register", str(path), "--dry-run", "--data-dir", str(tmp_path / "data"))
    assert "declared workload" in shown and "GROUP BY dept" in shown and "the total" in shown, shown
    row = next(line for line in shown.splitlines() if "GROUP BY dept" in line)
    ratios = [float(r) for r in re.findall(r"\(([0-9.]+)×,", row)]
    assert ratios and all(r < 1 for r in ratios), row


def test_dry_run_of_a_data_aware_strategy_says_there_is_no_preview(tmp_path: Path) -> None:
    """hdpview's error depends on its partition: the CLI prints the strategy and the warning."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["cube"] = {"build": "on_first_query", "strategy": "hdpview"}
    spec["source"]["csv"] = str(EXAMPLE.parent / spec["source"]["csv"])
    path = tmp_path / "staff_hdpview.yaml"
    path.write_text(yaml.safe_dump(spec))
    shown = run("register", str(path), "--dry-run", "--data-dir", str(tmp_path / "data"))
    assert "strategy: hdpview" in shown and "data-aware partition" in shown and "stores at most" in shown


def test_a_wide_preview_with_model_filled_cells_prints_locally_and_over_http(tmp_path: Path) -> None:
    """A `cuboids` table whose measure has an axis: its 2-dimension SUM cells are answered from a model,
    with no stddev before the build (NaN in the library, null over HTTP). The preview printer once
    crashed on the nulls after the server had registered the table, and printed `nan` locally."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["cube"] = {"strategy": "cuboids"}
    spec["measures"][0]["axis"] = {"kind": "log2"}
    shutil.copy(EXAMPLE.parent / "staff.csv", tmp_path / "staff.csv")
    path = tmp_path / "wide_staff.yaml"
    path.write_text(yaml.safe_dump(spec))
    local = run("register", str(path), "--dry-run", "--data-dir", str(tmp_path / "local"))
    assert "from a model" in local and "nan" not in local
    server = LiveServer(tmp_path / "data", demo=False)
    server.start()
    try:
        shown = run("register", str(path), "--url", server.url, "--token", ADMIN_TOKEN)
        assert "registered staff" in shown and "from a model" in shown
    finally:
        server.stop()


def test_query_prints_a_quantiles_interval(tmp_path: Path) -> None:
    """A quantile has no stddev; `prima query` printed it bare. Its 95 % interval stands in the ± column."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["measures"][0]["axis"] = {"kind": "log2", "count": True}
    spec["source"]["csv"] = str(EXAMPLE.parent / spec["source"]["csv"])
    spec["cube"] = {"build": "on_first_query"}
    path = tmp_path / "staff_axis.yaml"
    path.write_text(yaml.safe_dump(spec))
    d = ["--data-dir", str(tmp_path / "data")]
    run("register", str(path), *d)
    shown = run("query", "SELECT dept, MEDIAN(salary) FROM staff GROUP BY dept", *d)
    assert re.search(r"\[\s*[\d,.-]+, [\d,.-]+\]", shown), shown


def test_the_ledger_of_a_growing_table_totals_per_period(tmp_path: Path) -> None:
    """Under the "period" model each period pays only for its own rows: the ledger's total is the most
    charged period (what the budget shows spent), not the sum over periods (once "total charged ε=3"
    beside "spent 1 of 1")."""
    import datetime as dt

    from engine.service import Prima
    from tests.test_growing import events_spec, write_events

    (tmp_path / "ev").mkdir()
    events = write_events(tmp_path / "ev")
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(events_spec(events))
    prima.append("events", through=dt.date(2025, 1, 3), today=dt.date(2025, 2, 1))
    spent = prima.budget("events")["spent"]
    prima.close()
    shown = run("ledger", "events", "--data-dir", str(tmp_path / "data"))
    assert "total charged" not in shown and "over 3 periods" in shown
    assert f"the most-charged period ε={spent:.4g}" in shown, shown
