"""The ``prima`` console command (SPEC §5): ``prima serve [--data-dir] [--host] [--port] [--no-demo]``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from app.config import Settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prima", description="Differentially private SQL service")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the HTTP service")
    serve.add_argument("--data-dir", type=Path, help="data directory (env PRIMA_DATA_DIR, default ./data)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--no-demo", action="store_true", help="do not create the demo table")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return 2  # pragma: no cover - argparse rejects unknown commands


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api import create_app

    settings = Settings()
    if args.data_dir is not None:
        settings = dataclasses.replace(settings, data_dir=args.data_dir)
    if args.no_demo:
        settings = dataclasses.replace(settings, demo=False)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not settings.admin_token:
        logging.getLogger("prima").warning("PRIMA_ADMIN_TOKEN is not set: admin endpoints are disabled")
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
