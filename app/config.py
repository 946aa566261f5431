"""Service settings from ``PRIMA_*`` environment variables, overridable by CLI flags."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _env_path(name: str) -> Path | None:
    value = _env(name)
    return Path(value) if value else None


def _env_tokens(name: str) -> frozenset[str]:
    return frozenset(t.strip() for t in (_env(name) or "").split(",") if t.strip())


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path(_env("PRIMA_DATA_DIR", "data")))
    admin_token: str | None = field(default_factory=lambda: _env("PRIMA_ADMIN_TOKEN"))
    # Analyst tokens: when any are set, query and table endpoints require one (or the admin token).
    analyst_tokens: frozenset[str] = field(default_factory=lambda: _env_tokens("PRIMA_ANALYST_TOKENS"))
    # CSV/Parquet registration reads only below this directory; None means <data_dir>/import.
    import_dir: Path | None = field(default_factory=lambda: _env_path("PRIMA_IMPORT_DIR"))
    demo: bool = field(default_factory=lambda: _env("PRIMA_DEMO", "1") not in ("0", "false", "no"))
    # A token for /metrics alone (a Prometheus scraper), besides the admin token (app/guard.py).
    metrics_token: str | None = field(default_factory=lambda: _env("PRIMA_METRICS_TOKEN"))
    # Requests per second per token (or per client address without one); 0 disables the limit.
    rate_limit: float = field(default_factory=lambda: float(_env("PRIMA_RATE_LIMIT", "0")))
    max_body_bytes: int = field(default_factory=lambda: int(_env("PRIMA_MAX_BODY_BYTES", str(4 * 2**20))))
    max_cube_bytes: int = field(default_factory=lambda: int(_env("PRIMA_MAX_CUBE_BYTES", str(2**30))))
    request_timeout: float = field(default_factory=lambda: float(_env("PRIMA_REQUEST_TIMEOUT", "60")))
    # The PostgreSQL wire listener for BI tools (app/wire/server.py): off unless a port is given.
    pg_port: int | None = field(default_factory=lambda: int(_env("PRIMA_PG_PORT", "0")) or None)
    pg_host: str = field(default_factory=lambda: _env("PRIMA_PG_HOST", "127.0.0.1") or "127.0.0.1")
    # TLS for the wire listener (PEM files); required when it binds off loopback.
    pg_tls_cert: Path | None = field(default_factory=lambda: _env_path("PRIMA_PG_TLS_CERT"))
    pg_tls_key: Path | None = field(default_factory=lambda: _env_path("PRIMA_PG_TLS_KEY"))
    # Seconds a wire client has for its startup and login (PostgreSQL's authentication_timeout).
    pg_auth_timeout: float = field(default_factory=lambda: float(_env("PRIMA_PG_AUTH_TIMEOUT", "60")))
    # Many servers on one state (docs/operations.md): the catalog, ledger and cube index in this
    # PostgreSQL database, the cubes in a directory every server mounts. None: the data dir holds both.
    state_url: str | None = field(default_factory=lambda: _env("PRIMA_STATE"))
    cube_dir: str | None = field(default_factory=lambda: _env("PRIMA_CUBE_DIR"))  # a path, or s3://bucket/prefix
    # Seconds between checks for closed periods of growing tables with "schedule": true (0: never).
    append_every: float = field(default_factory=lambda: float(_env("PRIMA_APPEND_EVERY", "3600")))

    @property
    def resolved_import_dir(self) -> Path:
        return self.import_dir if self.import_dir is not None else self.data_dir / "import"
