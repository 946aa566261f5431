"""Prometheus metrics (``GET /metrics``): queries by endpoint and status, latency, builds, budgets.

Nothing data-dependent beyond what is public is exported: table names, budget figures and build
counts (SECURITY.md lists them as public); never a query answer or a row value.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

TRACKED = {"/v1/query": "query", "/v1/query/batch": "batch", "wire": "wire"}  # wire: app/wire/server.py's queries
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10)


class Metrics:
    """Request counts and latencies kept as plain numbers, turned into Prometheus families at scrape.

    Why not prometheus_client's Counter/Histogram: each update takes locks and label lookups, a
    few µs that showed up in the query fast path's latency (bench/perf.py). Here an update is a
    bisect and three additions under one lock; ``/metrics`` renders the same families
    (``prima_queries_total``, ``prima_query_latency_seconds``).
    """

    def __init__(self, service: Callable[[], Any]) -> None:
        self.registry = CollectorRegistry()
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}
        self._latency: dict[str, list[float]] = {}  # endpoint → per-bucket counts (+Inf last), then sum
        self.registry.register(_RequestCollector(self))
        self.registry.register(_ServiceCollector(service))

    def observe(self, path: str, status: int, seconds: float) -> None:
        endpoint = TRACKED.get(path)
        if endpoint is None:
            return
        slot = bisect.bisect_left(BUCKETS, seconds)
        with self._lock:
            key = (endpoint, status)
            self._counts[key] = self._counts.get(key, 0) + 1
            hist = self._latency.get(endpoint)
            if hist is None:
                hist = self._latency[endpoint] = [0.0] * (len(BUCKETS) + 2)
            hist[slot] += 1
            hist[-1] += seconds

    def snapshot(self) -> tuple[dict[tuple[str, int], int], dict[str, list[float]]]:
        with self._lock:
            return dict(self._counts), {k: list(v) for k, v in self._latency.items()}

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def wrap(self, scope: dict[str, Any], send: Callable) -> Callable:
        """A ``send`` that records a tracked request's status and time once the response is out."""
        path = scope.get("path", "")
        if path not in TRACKED:
            return send
        start = time.perf_counter()
        status = 0

        async def recording(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.observe(path, status, time.perf_counter() - start)

        return recording


class _RequestCollector:
    """``prima_queries_total`` and ``prima_query_latency_seconds`` from the plain counters."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        counts, latency = self.metrics.snapshot()
        requests = CounterMetricFamily(
            "prima_queries", "Query requests by endpoint and HTTP status", labels=["endpoint", "status"]
        )
        for (endpoint, status), n in sorted(counts.items()):
            requests.add_metric([endpoint, str(status)], n)
        yield requests
        hist = HistogramMetricFamily("prima_query_latency_seconds", "Query request latency", labels=["endpoint"])
        for endpoint, slots in sorted(latency.items()):
            cumulative, buckets = 0.0, []
            for bound, n in zip([*map(str, BUCKETS), "+Inf"], slots[:-1]):
                cumulative += n
                buckets.append((bound, cumulative))
            hist.add_metric([endpoint], buckets, sum_value=slots[-1])
        yield hist


class _ServiceCollector:
    """Read at scrape time: cube builds and each table's remaining budget."""

    def __init__(self, service: Callable[[], Any]) -> None:
        self.service = service

    def collect(self) -> Iterator[Any]:
        prima = self.service()
        if prima is None:
            return
        builds = CounterMetricFamily("prima_cube_builds", "Cube builds by outcome", labels=["outcome"])
        builds.add_metric(["done"], prima.stats["builds_done"])
        builds.add_metric(["failed"], prima.stats["builds_failed"])
        yield builds
        remaining = GaugeMetricFamily(
            "prima_budget_remaining_epsilon", "Remaining ε per pure-ε table", labels=["table"]
        )
        spent = GaugeMetricFamily("prima_budget_spent_epsilon", "Spent ε per pure-ε table", labels=["table"])
        rho_remaining = GaugeMetricFamily("prima_budget_remaining_rho", "Remaining ρ per zCDP table", labels=["table"])
        rho_spent = GaugeMetricFamily(
            "prima_budget_spent_rho", "Spent ρ per table (tight zCDP of every entry)", labels=["table"]
        )
        for name in prima.table_names():
            budget = prima.budget(name)
            if budget["currency"] == "epsilon":
                remaining.add_metric([name], budget["epsilon_remaining"])
                spent.add_metric([name], budget["epsilon_spent"])
                rho_spent.add_metric([name], budget["rho_spent"])
            else:
                rho_remaining.add_metric([name], budget["rho_remaining"])
                rho_spent.add_metric([name], budget["rho_spent"])
        yield from (remaining, spent, rho_remaining, rho_spent)
