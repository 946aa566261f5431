"""Prometheus metrics (``GET /metrics``): queries by endpoint and status, latency, builds, budgets.

Nothing data-dependent beyond what is public is exported: table names, budget figures and build
counts (SECURITY.md lists them as public); never a query answer or a row value.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

TRACKED = {"/v1/query": "query", "/v1/query/batch": "batch"}


class Metrics:
    def __init__(self, service: Callable[[], Any]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("prima_queries", "Query requests by endpoint and HTTP status",
                                ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("prima_query_latency_seconds", "Query request latency", ["endpoint"],
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5, 10),
                                 registry=self.registry)
        self.registry.register(_ServiceCollector(service))
        self._children: dict[tuple[str, int], tuple[Any, Any]] = {}

    def observe(self, path: str, status: int, seconds: float) -> None:
        endpoint = TRACKED.get(path)
        if endpoint is None:
            return
        key = (endpoint, status)
        children = self._children.get(key)
        if children is None:  # label lookups take a lock: resolve each pair once
            children = self._children[key] = (self.requests.labels(endpoint, str(status)), self.latency.labels(endpoint))
        children[0].inc()
        children[1].observe(seconds)

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
        remaining = GaugeMetricFamily("prima_budget_remaining_epsilon", "Remaining ε per table", labels=["table"])
        spent = GaugeMetricFamily("prima_budget_spent_epsilon", "Spent ε per table", labels=["table"])
        for name in prima.table_names():
            budget = prima.budget(name)
            remaining.add_metric([name], budget["epsilon_remaining"])
            spent.add_metric([name], budget["epsilon_spent"])
        yield remaining
        yield spent
