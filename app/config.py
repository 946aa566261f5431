"""Service settings from ``PRIMA_*`` environment variables, overridable by CLI flags (SPEC §5)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


@dataclass(frozen=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path(os.environ.get("PRIMA_DATA_DIR", "data")))
    admin_token: str | None = field(default_factory=lambda: os.environ.get("PRIMA_ADMIN_TOKEN") or None)
    import_dir: Path | None = field(default_factory=lambda: _env_path("PRIMA_IMPORT_DIR"))
    demo: bool = field(default_factory=lambda: os.environ.get("PRIMA_DEMO", "1") not in ("0", "false", "no"))
