"""Real database servers for the source tests: a throwaway PostgreSQL cluster on loopback.

`.ci/run` installs Debian's postgresql package; the cluster is created here with initdb in a
temporary directory (as the ``postgres`` user when running as root, which initdb requires), on a
free port, and removed afterwards. ``PRIMA_TEST_PG_DSN`` points the tests at an existing server
instead. When neither is possible the tests skip — unless ``PRIMA_REQUIRE_SOURCES=1`` (set by CI),
which turns a missing server into a failure, so CI cannot pass without really running them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

REQUIRED = os.environ.get("PRIMA_REQUIRE_SOURCES") == "1"


def unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"{why} (PRIMA_REQUIRE_SOURCES=1)")
    pytest.skip(why)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_owner(cmd: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a DSN for a fresh, empty PostgreSQL database (superuser ``prima``)."""
    if os.environ.get("PRIMA_TEST_PG_DSN"):
        yield os.environ["PRIMA_TEST_PG_DSN"]
        return
    bindir = _pg_bin()
    if bindir is None:
        unavailable("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            unavailable("running as root and there is no 'postgres' user for initdb")
        user = "postgres"
    base = Path(tempfile.mkdtemp(prefix="prima-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if user:
        shutil.chown(base, user)
        shutil.chown(sock, user)
    port = free_port()
    run = lambda cmd: subprocess.run(_as_owner(cmd, user), check=True, capture_output=True, timeout=120)  # noqa: E731
    try:
        run([str(bindir / "initdb"), "-D", str(data), "-U", "prima", "--auth=trust", "-E", "UTF8", "--locale=C"])
        run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-w",
                "-l",
                str(base / "log"),
                "-o",
                f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off",
                "start",
            ]
        )
        yield f"postgresql://prima@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(Exception):
            run([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"])
        shutil.rmtree(base, ignore_errors=True)
