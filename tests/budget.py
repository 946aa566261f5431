"""The per-test time budget CI enforces, as a pytest plugin of its own (no engine imports, so
`tests/test_ci_budget.py` can load it into a throwaway pytest run in a fraction of a second);
`tests/conftest.py` loads it for the suite."""

from __future__ import annotations

import os
from typing import Any

import pytest


class TestBudget:
    """Fails the run when one test's call takes longer than ``PRIMA_TEST_BUDGET`` seconds (`.ci/run`
    sets 60), or than its own ``@pytest.mark.budget(seconds, why)``: CI stays near ten minutes only
    if no test grows past that unseen (#57), and the few over it say why where they are defined. The
    controller judges (under pytest-xdist the workers collect, and a test's budget reaches the
    controller in its report's user properties); the summary names each test over its budget."""

    __test__ = False  # (not a test class)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.over: list[tuple[str, float, float]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        limit = float(dict(report.user_properties).get(BUDGET_PROPERTY, self.seconds))
        if report.when == "call" and report.duration > limit:
            self.over.append((report.nodeid, report.duration, limit))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.over:
            terminalreporter.section(f"over the per-test budget of {self.seconds:g} s (PRIMA_TEST_BUDGET)", red=True)
            for nodeid, took, limit in sorted(self.over, key=lambda o: -o[1]):
                terminalreporter.line(
                    f"{took:7.1f} s > {limit:g} s  {nodeid}: make it cheaper (shared fixtures, fewer cells)"
                )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.over and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


BUDGET_PROPERTY = "budget_seconds"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's own ``budget`` travels in its reports' user properties (from pytest-xdist's workers,
    which collect, to the controller, which judges)."""
    for item in items:
        marker = item.get_closest_marker("budget")
        if marker is not None:
            item.user_properties.append((BUDGET_PROPERTY, float(marker.args[0])))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "budget(seconds, why): this test's own time budget under PRIMA_TEST_BUDGET")
    seconds = float(os.environ.get("PRIMA_TEST_BUDGET") or 0)
    if seconds > 0 and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(TestBudget(seconds), "prima-test-budget")
