"""The ``prima`` command: serve, and admin/analyst work from a terminal.

Every command but ``serve`` talks either to the library directly (``--data-dir DIR``, the server
must not be running on that directory: DuckDB has one writer) or to a running server
(``--url http://host:8000``, token from ``--token`` or ``PRIMA_ADMIN_TOKEN``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from app.config import Settings

cli = typer.Typer(
    help="Prima: differentially private SQL over privatized prefix-sum cubes.",
    no_args_is_help=True,
    add_completion=False,
)
budget_cli = typer.Typer(help="Show or set a table's privacy budget.", no_args_is_help=True)
cli.add_typer(budget_cli, name="budget")
out = Console()

DataDir = typer.Option(None, "--data-dir", help="use the library on this data directory")
Url = typer.Option(None, "--url", help="talk to a running server, e.g. http://127.0.0.1:8000")
Token = typer.Option(None, "--token", envvar="PRIMA_ADMIN_TOKEN", help="bearer token (default $PRIMA_ADMIN_TOKEN)")


@cli.command()
def serve(
    data_dir: Path | None = typer.Option(None, help="data directory (env PRIMA_DATA_DIR, default ./data)"),
    host: str = typer.Option("127.0.0.1", help="bind address"),
    port: int = typer.Option(8000, help="port"),
    no_demo: bool = typer.Option(False, "--no-demo", help="do not create the demo table"),
    log_level: str = typer.Option("info", help="debug, info, warning or error"),
    log_format: str = typer.Option("json", help="json (one object per line) or text"),
    pg_port: int | None = typer.Option(
        None, "--pg-port", help="also speak the PostgreSQL protocol on this port (BI tools)"
    ),
    pg_host: str = typer.Option(
        "127.0.0.1", "--pg-host", help="bind address of the PostgreSQL listener (off loopback: TLS only)"
    ),
    pg_tls_cert: Path | None = typer.Option(
        None, "--pg-tls-cert", help="PEM certificate for the PostgreSQL listener's TLS"
    ),
    pg_tls_key: Path | None = typer.Option(
        None, "--pg-tls-key", help="PEM private key for the PostgreSQL listener's TLS"
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        envvar="PRIMA_WORKERS",
        min=1,
        max=256,
        help="serving processes on this data dir: one writer and N-1 readers (docs/operations.md)",
    ),
    state: str | None = typer.Option(
        None,
        "--state",
        help="postgresql://… shared by many servers: catalog, ledger and cube index live there (env PRIMA_STATE)",
    ),
    cube_dir: str | None = typer.Option(
        None,
        "--cube-dir",
        help="with --state: the directory every server reads and writes cubes in, or s3://bucket/prefix "
        "(env PRIMA_CUBE_DIR)",
    ),
) -> None:
    """Start the HTTP service (and, with --pg-port, the PostgreSQL wire listener for BI tools)."""
    import logging

    import uvicorn

    from app.http.app import create_app
    from app.logs import configure, exit_after_shutdown

    settings = Settings()
    if data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=data_dir)
    if no_demo:
        settings = dataclasses.replace(settings, demo=False)
    if state is not None or cube_dir is not None:
        settings = dataclasses.replace(
            settings, state_url=state or settings.state_url, cube_dir=cube_dir or settings.cube_dir
        )
    if settings.state_url is not None:
        if not settings.state_url.startswith(("postgresql://", "postgres://")):
            raise typer.BadParameter("--state takes a PostgreSQL URL (postgresql://user@host:port/db)")
        if settings.cube_dir is None:
            raise typer.BadParameter("--state needs --cube-dir: a directory every server mounts, where cubes are kept")
        if workers > 1:
            raise typer.BadParameter(
                "--state serves one process per server: run more servers on the same --state instead of --workers"
            )
    elif settings.cube_dir is not None:
        raise typer.BadParameter("--cube-dir goes with --state (alone, cubes live in the data dir)")
    if pg_tls_cert is not None or pg_tls_key is not None:
        settings = dataclasses.replace(settings, pg_tls_cert=pg_tls_cert, pg_tls_key=pg_tls_key)
    if pg_port is not None:
        settings = dataclasses.replace(settings, pg_port=pg_port, pg_host=pg_host)
    if settings.pg_port:
        from app.wire.server import check_bind, tls_context

        try:
            if bool(settings.pg_tls_cert) != bool(settings.pg_tls_key):
                raise ValueError("--pg-tls-cert and --pg-tls-key go together")
            tls = settings.pg_tls_cert is not None
            if tls:
                tls_context(settings.pg_tls_cert, settings.pg_tls_key)  # fail now on unreadable files
            check_bind(settings.pg_host, tls)
        except (ValueError, OSError) as exc:
            raise typer.BadParameter(str(exc)) from None
    _check_free(settings.data_dir)  # a held data dir: the one-line message, not a start-up traceback
    log_config = configure(log_level, log_format)
    if not settings.admin_token:
        logging.getLogger("prima").warning("PRIMA_ADMIN_TOKEN is not set: admin endpoints are disabled")
    # Request lines are logged at info; above that uvicorn would still format each one to drop it.
    access_log = logging.getLogger().getEffectiveLevel() <= logging.INFO  # as `configure` set it
    if workers > 1:
        from app.workers import supervise

        env = {
            "PRIMA_DEMO": "1" if settings.demo else "0",
            "PRIMA_PG_PORT": str(settings.pg_port or 0),
            "PRIMA_PG_HOST": settings.pg_host,
        }
        env |= {
            k: str(v)
            for k, v in (("PRIMA_PG_TLS_CERT", settings.pg_tls_cert), ("PRIMA_PG_TLS_KEY", settings.pg_tls_key))
            if v is not None
        }
        raise typer.Exit(supervise(settings.data_dir, host, port, workers, log_level, log_format, env))
    uvicorn.run(
        create_app(settings), host=host, port=port, log_level=log_level, log_config=log_config, access_log=access_log
    )
    exit_after_shutdown()


def _fail_on_store(data_dir: Path, exc: Exception) -> None:
    """The one-line message for a data dir's store that cannot be opened."""
    if "lock" in str(exc).lower():  # DuckDB: another process (a running server) holds the file
        _fail(
            409,
            f"the data dir {data_dir} is in use by another process, probably a running server: "
            "talk to it with --url http://127.0.0.1:8000 (and --token), or stop it first",
        )
    _fail(500, str(exc).splitlines()[0])


def _check_free(data_dir: Path) -> None:
    """Open and close the data dir's store: fails the way `_Local` does when another process holds it."""
    from storage.database import Database, StorageError

    try:
        Database(Path(data_dir) / "store.duckdb").close()
    except StorageError as exc:
        _fail_on_store(data_dir, exc)


class _Local:
    """The library on a data directory (no server involved)."""

    def __init__(self, data_dir: Path) -> None:
        from engine.service import Prima
        from storage.database import StorageError

        try:
            self.prima = Prima(data_dir)
        except StorageError as exc:
            _fail_on_store(data_dir, exc)

    def call(self, what: str, *args: Any) -> Any:
        from engine.errors import PrimaError

        try:
            return getattr(self, f"_{what}")(*args)
        except PrimaError as exc:
            _fail(exc.status, exc.detail)

    def _register(self, spec: dict, dry_run: bool = False, force: bool = False, new_population: bool = False) -> Any:
        from storage.schema import TableSpec

        return self.prima.register(
            TableSpec.model_validate(spec), dry_run=dry_run, force=force, new_population=new_population
        )

    def _budget(self, table: str) -> Any:
        return self.prima.budget(table)

    def _set_budget(self, table: str, amount: float, currency: str, delta: float | None = None) -> Any:
        return self.prima.set_budget(table, **{currency: amount}, delta=delta)

    def _start_build(self, table: str, force: bool) -> Any:
        return self.prima.build_in_background(table, force=force)

    def _build_status(self, table: str) -> Any:
        return self.prima.cube_status(table)

    def _query(self, sql: str) -> Any:
        return self.prima.query(sql)

    def _ledger(self, table: str) -> Any:
        return self.prima.ledger_entries(table)

    def _tables(self) -> Any:
        return [self.prima.table_info(n) for n in self.prima.table_names()]

    def _retire(self, table: str) -> Any:
        return self.prima.retire(table)

    def _append(self, table: str, body: dict) -> Any:
        import datetime as dt

        through = dt.date.fromisoformat(body["through"]) if body.get("through") else None
        return self.prima.append(
            table,
            through=through,
            period=body.get("period"),
            limit=body.get("limit"),
            remeasure=bool(body.get("remeasure")),
        )


class _Remote:
    """A running server over HTTP."""

    def __init__(self, url: str, token: str | None) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=120)

    def call(self, what: str, *args: Any) -> Any:
        method, path, body = getattr(self, f"_{what}")(*args)
        r = self.http.request(method, path, json=body)
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            _fail(r.status_code, detail if isinstance(detail, str) else str(detail))
        data = r.json()
        return data.get("entries", data.get("tables", data)) if what in ("ledger", "tables") else data

    def _register(self, spec: dict, dry_run: bool = False, force: bool = False, new_population: bool = False) -> tuple:
        flags = [
            f"{k}=true" for k, on in (("dry_run", dry_run), ("force", force), ("new_population", new_population)) if on
        ]
        return "POST", "/v1/admin/tables" + ("?" + "&".join(flags) if flags else ""), spec

    def _budget(self, table: str) -> tuple:
        return "GET", f"/v1/tables/{table}/budget", None

    def _set_budget(self, table: str, amount: float, currency: str, delta: float | None = None) -> tuple:
        return "PUT", f"/v1/admin/tables/{table}/budget", {currency: amount} | ({"delta": delta} if delta else {})

    def _start_build(self, table: str, force: bool) -> tuple:
        return "POST", f"/v1/admin/tables/{table}/cube", {"force": force, "background": True}

    def _build_status(self, table: str) -> tuple:
        return "GET", f"/v1/admin/tables/{table}/cube", None

    def _query(self, sql: str) -> tuple:
        return "POST", "/v1/query", {"sql": sql}

    def _ledger(self, table: str) -> tuple:
        return "GET", f"/v1/admin/tables/{table}/ledger", None

    def _tables(self) -> tuple:
        return "GET", "/v1/tables", None

    def _retire(self, table: str) -> tuple:
        return "DELETE", f"/v1/admin/tables/{table}", None

    def _append(self, table: str, body: dict) -> tuple:
        return "POST", f"/v1/admin/tables/{table}/append", body


def _backend(data_dir: Path | None, url: str | None, token: str | None) -> _Local | _Remote:
    if (data_dir is None) == (url is None):
        _fail(2, "give exactly one of --data-dir DIR or --url URL")
    return _Local(data_dir) if data_dir is not None else _Remote(url, token)


def _fail(status: int, detail: str) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error[/red] ({status}): {detail}")
    raise typer.Exit(1)


@cli.command()
def register(
    metadata: Path = typer.Argument(..., exists=True, dir_okay=False, help="table metadata YAML"),
    dry_run: bool = typer.Option(False, "--dry-run", help="preview the expected errors and size; register nothing"),
    force: bool = typer.Option(False, "--force", help="register even if no row falls inside every declared domain"),
    new_population: bool = typer.Option(
        False, "--new-population", help="a source already in another id space holds another population (logged)"
    ),
    data_dir: Path | None = DataDir,
    url: str | None = Url,
    token: str | None = Token,
) -> None:
    """Register a table from a metadata file (the JSON body of POST /v1/admin/tables, as YAML)."""
    # YAML reads 2012-01-01 as a date; round-trip through JSON so both backends get plain strings.
    spec = json.loads(json.dumps(yaml.safe_load(metadata.read_text()), default=str))
    source = spec.get("source", {}) if isinstance(spec, dict) else {}
    for kind in ("csv", "parquet"):  # a relative file path is relative to the metadata file
        if isinstance(source.get(kind), str) and not Path(source[kind]).is_absolute():
            source[kind] = str((metadata.parent / source[kind]).resolve())
    info = _backend(data_dir, url, token).call("register", spec, dry_run, force, new_population)
    _print_preview(info["preview"])
    if dry_run:
        out.print(f"dry run: [bold]{info['name']}[/bold] was not registered; nothing was loaded or spent")
        return
    out.print(
        f"registered [bold]{info['name']}[/bold]: {len(info['dimensions'])} dimensions, "
        f"{info['cells']:,} cells, budget {_amount(info['budget'], 'total')}"
    )
    pre = info.get("preflight") or {}
    if "rows" in pre:
        out.print(
            f"preflight (admin only, not DP): {pre['rows']:,} rows, {pre['rows_in_every_domain']:,} inside every "
            "declared domain"
        )
    _warn(pre.get("warnings", []) + ([pre["error"]] if "error" in pre else []))


def _print_preview(p: dict) -> None:
    """The registration's cost preview: expected noise of first queries, size, build time."""
    out.print(f"strategy: {p.get('strategy', '?')}")
    if p["expected_errors"] is None:  # a data-aware strategy (hdpview): no preview, the warning says why
        out.print(f"stores at most {p['stored_bytes'] / 1e6:,.1f} MB")
        _warn(p["warnings"])
        return
    table = Table(title="expected noise (stddev) of the first queries you will run")
    currency = p.get("privacy", {}).get("currency", "epsilon")
    for col in ("aggregate", SYMBOLS[currency], "total", "one group of 1 dimension (worst)", "one group of 2 (worst)"):
        table.add_column(col)
    for name, e in p["expected_errors"].items():
        one, two = e["group_by_one_dimension_stddev"], e["group_by_two_dimensions_stddev"]
        table.add_row(
            name,
            f"{e[currency]:.3g}",
            f"{e['total_stddev']:,.4g}",
            _worst(one),
            _worst(two),
        )
    out.print(table)
    out.print(f"stores {p['stored_bytes'] / 1e6:,.1f} MB; measuring takes about {p['estimated_measure_seconds']:g} s")
    privacy = p.get("privacy")
    if privacy:
        other = (
            f"as (ε, δ): ({privacy['build_as_epsilon_delta']['epsilon']:g}, {privacy['build_as_epsilon_delta']['delta']:g})"
            if privacy["currency"] == "rho"
            else f"tight ρ (zCDP) of its Laplace releases: {privacy['build_rho']:.4g}"
        )
        out.print(
            f"one build spends {SYMBOLS[privacy['currency']]}={privacy['build']:g} ({privacy['noise']} noise); {other}"
        )
    _print_workload(p.get("workload") or [])
    growth = p.get("growth")
    if growth:  # a growing table: the numbers above are one release's
        currency = "rho" if "rho_per_period" in growth else "epsilon"
        tree = (
            f"; the tree beats flat releases from ranges of {growth['tree_beats_flat_from']} {growth['grain']}s"
            if growth.get("tree_beats_flat_from")
            else ""
        )
        out.print(
            f"grows by {growth['grain']} ({growth['periods']} in the horizon {growth['first']} … {growth['last']}), "
            f"model {growth['model']}: {growth['releases']} releases, {growth['levels']} per {growth['grain']}'s rows "
            f"at {SYMBOLS[currency]}={growth[currency + '_per_release']:.4g} each{tree}; stores "
            f"{growth['bytes_at_horizon'] / 1e6:,.1f} MB at the horizon"
        )
    _warn(p["warnings"])


def _print_workload(rows: list[dict]) -> None:
    """A declared workload's queries (REST's ``preview.workload``): each aggregate's expected stddev per
    answer cell, and its ratio to the table without the workload and to a per-query engine splitting
    the same budget over the workload (its warnings are among the preview's)."""
    if not rows:
        return
    table = Table(title="declared workload: stddev per answer cell (× without it, × a per-query split)")
    table.add_column("query")
    labels = list(dict.fromkeys(label for row in rows for label in row["stddev"]))
    for label in labels:
        table.add_column(label)
    for row in rows:
        cells = [_workload_cell(row, label) for label in labels]
        query = row["query"] if len(row["query"]) <= 60 else row["query"][:57] + "..."
        table.add_row(query, *cells)
    out.print(table)


def _workload_cell(row: dict, label: str) -> str:
    """One aggregate of one declared query: "stddev (× without the workload, × a per-query split)";
    a model-filled answer (a wide table's 3+ columns, or a class-axis SUM over 2) has no stddev before
    the build (null over HTTP, NaN in the library)."""
    if label not in row["stddev"]:
        return "-"
    sd = row["stddev"][label]
    if sd is None or math.isnan(sd):
        return "from a model (stated per query)"
    return f"{sd:,.4g} ({_ratio(row['vs_default'].get(label))}, {_ratio(row['vs_per_query_split'].get(label))})"


def _ratio(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2g}×"


def _per_period_total(entries: list[dict]) -> str:
    """A growing table's charges under the "period" model compose in parallel across periods (each
    period's releases read disjoint rows): what counts against the budget is the most-charged period,
    as the budget display says, not the sum over periods."""
    per: dict[str, float] = {}
    shared = 0.0  # entries that cover every period (sequential)
    for e in entries:
        amount = e["epsilon"] if e["epsilon"] is not None else e.get("rho") or 0.0
        if e.get("parallel"):
            per[e["period"]] = per.get(e["period"], 0.0) + amount
        else:
            shared += amount
    symbol = "ε" if all(e["epsilon"] is not None for e in entries) else "ρ"
    most = max(per.values(), default=0.0)
    return (
        f"charged per period (parallel composition: each period's rows pay only for their own releases): "
        f"the most-charged period {symbol}={most + shared:.4g} over {len(per)} periods"
        + (f", of which {symbol}={shared:.4g} covers every period" if shared else "")
    )


def _worst(stddevs: dict[str, float | None]) -> str:
    """The largest stated stddev; a model-filled answer (wide tables' 3+ columns) has none before the
    build — null over HTTP, NaN in the library — and says so."""
    known = [v for v in stddevs.values() if v is not None and not math.isnan(v)]
    if not stddevs:
        return "-"
    if not known:
        return "from a model (stated per query)"
    return f"{max(known):,.4g}" + (" (others from a model)" if len(known) < len(stddevs) else "")


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        out.print(f"[yellow]warning[/yellow]: {warning}")


@cli.command()
def retire(table: str, data_dir: Path | None = DataDir, url: str | None = Url, token: str | None = Token) -> None:
    """Retire a table: its cube and loaded copy are deleted; its ledger entries stay."""
    info = _backend(data_dir, url, token).call("retire", table)
    out.print(f"retired [bold]{table}[/bold] ({_amount(info, 'spent')} spent stays in the ledger)")


@cli.command()
def build(
    table: str,
    force: bool = typer.Option(False, help="rebuild (spends budget again)"),
    data_dir: Path | None = DataDir,
    url: str | None = Url,
    token: str | None = Token,
) -> None:
    """Build a table's cube, showing the build phases, then the ε it charged."""
    backend = _backend(data_dir, url, token)
    status = backend.call("start_build", table, force)
    if status["status"] == "ready" and not force:  # nothing started: the cube was there already
        out.print(
            f"cube already built: strategy {status['strategy']}, build {status['build_id'][:8]}; "
            "nothing charged now (`prima ledger` shows what it cost; --force rebuilds and spends again)"
        )
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[phase]}"),
        console=out,
        transient=False,
    ) as progress:
        task = progress.add_task(f"building {table}", total=1.0, phase=status.get("phase", ""))
        while status["status"] == "building":
            progress.update(task, completed=status.get("fraction", 0.0), phase=status.get("phase", ""))
            time.sleep(0.1)
            status = backend.call("build_status", table)
        progress.update(task, completed=1.0, phase=status["status"])
    if status["status"] != "ready":
        _fail(409, status.get("error") or f"build ended with status {status['status']}")
    mine = [e for e in backend.call("ledger", table) if e["build_id"] == status["build_id"]]
    charged = sum(e["epsilon"] or 0.0 for e in mine)
    rho = sum(e["rho"] or 0.0 for e in mine)
    gaussian = any(e["epsilon"] is None for e in mine)
    out.print(
        f"cube ready: strategy {status['strategy']}, build {status['build_id'][:8]}, "
        + (f"ρ charged {rho:g}" if gaussian else f"ε charged {charged:g} (ρ {rho:.4g})")
    )


@cli.command()
def append(
    table: str,
    period: str | None = typer.Option(None, help="exactly this period (the next one), e.g. 2025-01-03"),
    through: str | None = typer.Option(None, help="every closed period ending on or before this date"),
    next_only: bool = typer.Option(False, "--next", help="only the next closed period"),
    remeasure: bool = typer.Option(
        False,
        "--remeasure",
        help="measure the measured --period again (late or corrected rows): charged again; flat releases only",
    ),
    data_dir: Path | None = DataDir,
    url: str | None = Url,
    token: str | None = Token,
) -> None:
    """Measure a growing table's closed periods (each charged once, before its rows are read)."""
    body = {
        k: v
        for k, v in (
            ("period", period),
            ("through", through),
            ("limit", 1 if next_only else None),
            ("remeasure", remeasure),
        )
        if v
    }
    info = _backend(data_dir, url, token).call("append", table, body)
    g = info["growth"]
    out.print(
        f"appended {len(info['appended'])} period(s) of [bold]{table}[/bold]"
        + (
            f": {info['appended'][0]}" + (f" … {info['appended'][-1]}" if len(info["appended"]) > 1 else "")
            if info["appended"]
            else ""
        )
        + f"; measured {g['measured']} of {g['periods']} ({g['releases']}), next {g['next'] or 'none'}"
        + (f"; runway {g['runway_periods']} period(s)" if "runway_periods" in g else "")
    )


@cli.command()
def query(sql: str, data_dir: Path | None = DataDir, url: str | None = Url, token: str | None = Token) -> None:
    """Run one query and print the answer with ± one standard deviation."""
    result = _backend(data_dir, url, token).call("query", sql)
    currency = result["cube"].get("currency", "epsilon")
    table = Table(
        title=f"{result['table']} ({result['cube']['strategy']}, {SYMBOLS[currency]}={result['cube'][currency]:g})"
    )
    keys = set(result.get("group_columns", []))
    for name in result["columns"]:
        table.add_column(name, justify="right")
        if name not in keys:
            table.add_column("±", justify="right", style="dim")
    blank = [[None] * len(result["columns"])] * len(result["rows"])
    for row, sds, cis, flags in zip(
        result["rows"], result["stddev"], result.get("ci95") or blank, result.get("noisy") or blank
    ):
        cells: list[str] = []
        for name, value, sd, ci, noisy in zip(result["columns"], row, sds, cis, flags):
            shown = "null" if value is None else f"{value:,.2f}" if isinstance(value, float) else str(value)
            cells.append(f"[dim]{shown} (noise)[/dim]" if noisy else shown)
            if name not in keys:  # a quantile has no stddev: its 95 % interval instead
                cells.append(f"{sd:,.2f}" if sd is not None else f"[{ci[0]:,.2f}, {ci[1]:,.2f}]" if ci else "")
        table.add_row(*cells)
    out.print(table)
    for note in result.get("notes", []):
        out.print(f"[yellow]note:[/yellow] {note}")


@cli.command()
def ledger(table: str, data_dir: Path | None = DataDir, url: str | None = Url, token: str | None = Token) -> None:
    """Show every charge to a table's budget."""
    entries = _backend(data_dir, url, token).call("ledger", table)
    view = Table(title=f"ledger of {table}")
    for col in ("at", "ε", "ρ", "purpose", "status", "build"):
        view.add_column(col)
    for e in entries:
        view.add_row(
            e["at"],
            "—" if e["epsilon"] is None else f"{e['epsilon']:g}",
            "—" if e.get("rho") is None else f"{e['rho']:.4g}",
            e["purpose"],
            e["status"],
            (e["build_id"] or "")[:8],
        )
    out.print(view)
    if any(e.get("parallel") for e in entries):  # the "period" model: each period's rows pay only their own
        out.print(_per_period_total(entries))
        return
    eps = [e["epsilon"] for e in entries if e["epsilon"] is not None]
    rho = f"ρ={sum(e.get('rho') or 0.0 for e in entries):.4g}"
    if len(eps) == len(entries):
        out.print(f"total charged: ε={sum(eps):g}, {rho}")
    else:
        out.print(
            f"total charged: {rho} (Gaussian entries have no ε" + (f"; the others: ε={sum(eps):g}" if eps else "") + ")"
        )


@cli.command()
def tables(data_dir: Path | None = DataDir, url: str | None = Url, token: str | None = Token) -> None:
    """List registered tables with cube and budget status."""
    view = Table(title="tables")
    for col in ("name", "dimensions", "measures", "cells", "cube", "spent / total"):
        view.add_column(col)
    for t in _backend(data_dir, url, token).call("tables"):
        b = t["budget"]
        view.add_row(
            t["name"],
            ", ".join(d["name"] for d in t["dimensions"]),
            ", ".join(m["name"] for m in t["measures"]),
            f"{t['cells']:,}",
            t["cube"]["status"],
            f"{SYMBOLS[b['currency']]} {b['spent']:g} / {b['total']:g}",
        )
    out.print(view)


@budget_cli.command("show")
def budget_show(table: str, data_dir: Path | None = DataDir, url: str | None = Url, token: str | None = Token) -> None:
    """Print total, spent and remaining budget (ε, or ρ for a zCDP table), and the other currency."""
    _print_budget(table, _backend(data_dir, url, token).call("budget", table))


@budget_cli.command("set")
def budget_set(
    table: str,
    amount: float,
    rho: bool = typer.Option(False, "--rho", help="the amount is ρ (a zCDP table)"),
    delta: float | None = typer.Option(None, "--delta", help="with an ε amount: an (ε, δ) total, kept as its ρ"),
    data_dir: Path | None = DataDir,
    url: str | None = Url,
    token: str | None = Token,
) -> None:
    """Set the total ε, or ρ with --rho, or (ε, δ) with --delta (refused below what is already spent, or in
    the wrong currency)."""
    currency = "rho" if rho else "epsilon"
    _print_budget(table, _backend(data_dir, url, token).call("set_budget", table, amount, currency, delta))


SYMBOLS = {"epsilon": "ε", "rho": "ρ"}


def _amount(b: dict, what: str) -> str:
    return f"{SYMBOLS[b['currency']]}={b[what]:g}"


def _print_budget(table: str, b: dict) -> None:
    symbol = SYMBOLS[b["currency"]]
    other = (
        f"; as zCDP ρ={b['rho_spent']:.4g} spent"
        if b["currency"] == "epsilon"
        else f"; as (ε, δ={b['as_epsilon_delta']['delta']:g}): ε={b['as_epsilon_delta']['epsilon_total']:g} total, "
        f"{b['as_epsilon_delta']['epsilon_spent']:g} spent"
    )
    out.print(f"{table}: {symbol} total {b['total']:g}, spent {b['spent']:g}, remaining {b['remaining']:g}{other}")


def main() -> None:
    cli()


if __name__ == "__main__":
    sys.exit(main())
