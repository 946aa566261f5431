"""Structured JSON log lines (one object per line) for the service and uvicorn.

Log calls in Prima pass only public facts (table names, build ids, exception types, timings);
request logs carry method, path and status — never bodies, so never SQL literals or values.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import logging.config
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__  # the type only: messages may quote data
        return json.dumps(entry)


def configure(level: str, fmt: str) -> dict[str, Any]:
    """Configure root logging and return a uvicorn ``log_config`` using the same format."""
    formatter = {"()": JsonFormatter} if fmt == "json" else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["default"], "level": level.upper()},
        "loggers": {name: {"handlers": ["default"], "level": level.upper(), "propagate": False}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
    logging.config.dictConfig(config)
    return config



