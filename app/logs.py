"""Structured JSON log lines (one object per line) for the service and uvicorn.

Log calls in Prima pass only public facts (table names, build ids, exception types, timings);
request logs carry method, path and status — never bodies, so never SQL literals or values.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import logging.config
import os
import sys
from typing import Any, NoReturn


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__  # the type only: messages may quote data
        return json.dumps(entry)


class TextFormatter(logging.Formatter):
    """Plain lines; an exception as its type only, never a traceback (a deeply nested
    query once logged 774 KB of traceback per 1 KB request, and tracebacks can quote values)."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 — logging's name
        return f"{ei[0].__name__} (traceback withheld)" if ei and ei[0] is not None else ""

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return ""


def configure(level: str, fmt: str) -> dict[str, Any]:
    """Configure root logging and return a uvicorn ``log_config`` using the same format."""
    formatter = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"()": TextFormatter, "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
        },
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {
            **{
                name: {"handlers": ["default"], "level": level.upper(), "propagate": False}
                for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
            },
            # pg-mimic logs each statement it answers at debug: SQL literals stay out of every log
            "pg_mimic": {"level": "INFO"},
        },
    }
    logging.config.dictConfig(config)
    return config


def exit_after_shutdown(code: int = 0) -> NoReturn:
    """Leave a server process whose app has shut down: logs and stdio flushed, then `os._exit`,
    without the interpreter's teardown. Every database was closed by the app's lifespan, yet DuckDB's
    nanobind bindings report the instances its own module still holds at teardown — ~40 lines of
    "nanobind: leaked …" after every Ctrl-C of `prima serve`, which read as a crash."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
