"""Crash points for the kill tests (issue: budget integrity under SIGKILL).

``fault_point(name)`` does nothing unless the environment variable ``PRIMA_FAULT_KILL_AT`` names
that point, in which case the process kills itself with SIGKILL right there — exactly what an
OOM killer or a power cut does. Tests run a build in a subprocess with the variable set and then
check what a restarted service finds. Production never sets it.
"""

from __future__ import annotations

import os
import signal

POINTS = ("before_charge", "after_charge", "after_aggregate", "during_persist", "after_persist")


def fault_point(name: str) -> None:
    if os.environ.get("PRIMA_FAULT_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
