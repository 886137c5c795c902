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

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from orchestrator.saga.journal import Journal
from workers.telemetry.metrics import DURATION_BUCKETS

__all__ = [
    "APPROVAL_WAIT",
    "COMPENSATIONS",
    "DEADLINE_MISSES",
    "INVOCATIONS",
    "MODEL_DURATION",
    "MODEL_TOKENS",
    "SERVED_ENDED",
    "SERVED_STARTED",
    "SLOTS_HELD",
    "TOOL_CALLS",
    "TOOL_DURATION",
    "TOOL_IN_FLIGHT",
    "TOOL_WAIT",
    "ApprovalsWaiting",
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
TOOL_WAIT = Histogram(
    "toolfleet_tool_call_wait_seconds",
    "A tool call's wait before it was published, by reason (concurrency: for a fleet-wide slot; "
    "rate_limit: for its turn under a fleet-wide rate limit) and result (taken, timed_out)",
    (*_TOOL, "reason", "result"),
    buckets=DURATION_BUCKETS,
)
SLOTS_HELD = Gauge(
    "toolfleet_slots_held",
    "Fleet-wide concurrency slots this process holds for its calls, by scope (tool:<name>, with its "
    "concurrency key's name as tool:<name>:<key>, or pool:<name>); summed over the fleet's "
    "orchestrators, the slots in use",
    ("scope",),
)
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
# The invocations `toolfleet serve` runs, by agent and tenant: tenants are the service's configured
# keys', so their number is bounded by its configuration, never by what clients send.
SERVED_STARTED = Counter(
    "toolfleet_served_invocations_started",
    "Invocations the service started for its clients, by agent and tenant",
    ("agent", "tenant"),
)
SERVED_ENDED = Counter(
    "toolfleet_served_invocations_ended",
    "Invocations the service ran that ended (or paused), by agent, tenant and outcome "
    "(succeeded, paused, failed, cancelled)",
    ("agent", "tenant", "outcome"),
)

APPROVAL_WAIT = Histogram(
    "toolfleet_approval_wait_seconds",
    "A call's wait for a person, from the pause to the decision, by decision "
    "(approved, rejected, expired, cancelled)",
    (*_TOOL, "decision"),
    buckets=(1, 10, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 72 * 3600),
)


class ApprovalsWaiting(Collector):
    """`toolfleet_approvals_waiting{tool,pool}`, counted in the journal at each scrape."""

    def __init__(self, count: Callable[[], dict[tuple[str, str | None], int]]) -> None:
        self.count = count

    def collect(self) -> Iterator[Any]:
        try:
            counts = self.count()
        except Exception as exc:  # a database hiccup must not fail the whole scrape
            log.warning("could not count the approvals waiting: %s", exc)
            return
        family = GaugeMetricFamily(
            "toolfleet_approvals_waiting",
            "Tool calls waiting for a person's approval",
            labels=("tool", "pool"),
        )
        for (tool, pool), waiting in sorted(counts.items(), key=lambda item: (item[0][0], item[0][1] or "")):
            family.add_metric((tool, pool or ""), waiting)
        yield family

    def describe(self) -> Iterator[Any]:
        return iter(())


def watch_approvals(journal: Callable[[], Journal]) -> Callable[[], None]:
    """Count the approvals waiting at each scrape of the default registry, in the journal `journal()`
    gives (made at the first scrape); returns what stops it."""
    made: list[Journal] = []

    def count() -> dict[tuple[str, str | None], int]:
        if not made:
            made.append(journal())
        return made[0].waiting_counts()

    collector = ApprovalsWaiting(count)
    REGISTRY.register(collector)

    def stop() -> None:
        REGISTRY.unregister(collector)
        while made:
            made.pop().engine.dispose()

    return stop


def exposition() -> tuple[bytes, str]:
    """The default registry in Prometheus' text format, and its content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
