"""One serving worker process (`python -m app.worker_process HOST PORT LEVEL FORMAT`): the app the
supervisor of `app.workers` starts once per worker, with its role in the environment. Apart from
`app.workers` so that the supervisor and the app's forwarding code never import the app itself."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import uvicorn

from app import workers
from app.config import Settings
from app.http.app import create_app
from app.logs import configure, exit_after_shutdown


def run_worker(host: str, port: int, log_level: str, log_format: str) -> None:
    """One worker process (the supervisor starts it with its role in the environment)."""
    settings = Settings()
    log_config = configure(log_level, log_format)
    sockets = [workers.public_socket(host, port)]
    if workers.role() == "writer":
        sockets.append(workers.unix_socket(Path(os.environ[workers.SOCKET_ENV])))
    access_log = logging.getLogger().getEffectiveLevel() <= logging.INFO
    config = uvicorn.Config(create_app(settings), log_level=log_level, log_config=log_config, access_log=access_log)
    uvicorn.Server(config).run(sockets=sockets)
    exit_after_shutdown()


if __name__ == "__main__":
    run_worker(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
