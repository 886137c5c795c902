"""The orchestrator's Prometheus metrics: tool calls as the loop sees them (per tool and pool), the
compensations it ran, approvals waiting, and per service the invocations and model calls.

They live in prometheus_client's default registry of the process; `toolfleet serve` exposes them at
`GET /metrics`. What only a worker sees (queue wait, run time, retries) is on the worker's own
`/metrics` (`toolfleet worker --metrics-port`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from workers.telemetry.metrics import DURATION_BUCKETS

__all__ = [
    "APPROVALS_TABLE",
    "COMPENSATIONS",
    "DEADLINE_MISSES",
    "INVOCATIONS",
    "MODEL_DURATION",
    "MODEL_TOKENS",
    "TOOL_CALLS",
    "TOOL_DURATION",
    "TOOL_IN_FLIGHT",
    "ApprovalsWaiting",
    "pending_approvals",
]

log = logging.getLogger(__name__)

_TOOL = ("tool", "pool")
TOOL_CALLS = Counter(
    "toolfleet_tool_calls", "Tool calls of invocations, by outcome kind", (*_TOOL, "outcome")
)
TOOL_DURATION = Histogram(
    "toolfleet_tool_call_duration_seconds",
    "A tool call from dispatch to outcome, as the invocation waited for it",
    _TOOL,
    buckets=DURATION_BUCKETS,
)
TOOL_IN_FLIGHT = Gauge("toolfleet_tool_calls_in_flight", "Tool calls dispatched and not finished", _TOOL)
DEADLINE_MISSES = Counter(
    "toolfleet_tool_deadline_misses", "Tool calls given up at their deadline (timed out)", _TOOL
)
COMPENSATIONS = Counter(
    "toolfleet_compensations", "Compensations run, by result (succeeded, failed)", (*_TOOL, "result")
)
INVOCATIONS = Counter(
    "toolfleet_invocations",
    "Invocations ended, by finish reason (the model's, or error, cancelled)",
    ("service", "finish_reason"),
)
MODEL_DURATION = Histogram(
    "toolfleet_model_call_duration_seconds",
    "A model call, request to complete response",
    ("service", "provider"),
    buckets=DURATION_BUCKETS,
)
MODEL_TOKENS = Counter(
    "toolfleet_model_tokens",
    "Tokens the model calls used, by type (input, output)",
    ("service", "provider", "type"),
)

APPROVALS_TABLE = "toolfleet_approvals"


def pending_approvals(engine: sa.Engine) -> int:
    """How many approvals wait for a person in the journal's database; 0 while the database has no
    approvals table."""
    with engine.connect() as connection:
        if not sa.inspect(connection).has_table(APPROVALS_TABLE):
            return 0
        count = connection.execute(
            sa.text(f"SELECT count(*) FROM {APPROVALS_TABLE} WHERE state = 'pending'")
        ).scalar()
    return int(count or 0)


class ApprovalsWaiting(Collector):
    """`toolfleet_approvals_waiting`, read from the journal at each scrape."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterator[Any]:
        try:
            value = float(self.count())
        except Exception as exc:  # a database hiccup must not fail the whole scrape
            log.warning("could not count the approvals waiting: %s", exc)
            return
        yield GaugeMetricFamily(
            "toolfleet_approvals_waiting", "Tool calls waiting for a person's approval", value
        )

    def describe(self) -> Iterator[Any]:
        return iter(())


def watch_approvals(database_url: str) -> Callable[[], None]:
    """Count the approvals waiting in the journal at `database_url` at each scrape of the default
    registry (on an engine of its own, opened at the first scrape); returns what stops it."""
    engines: list[sa.Engine] = []

    def count() -> int:
        if not engines:
            from orchestrator._database_url import database_engine

            engines.append(database_engine(database_url))
        return pending_approvals(engines[0])

    collector = ApprovalsWaiting(count)
    REGISTRY.register(collector)

    def stop() -> None:
        REGISTRY.unregister(collector)
        while engines:
            engines.pop().dispose()

    return stop


def exposition() -> tuple[bytes, str]:
    """The default registry in Prometheus' text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
