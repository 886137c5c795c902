"""Re-attaching to a call whose orchestrator died, for the orchestrator that adopted its invocation.

The call's task id is derived from its idempotency key and journaled before it is published, so
what became of it is readable: a state in the result backend (started, retrying, finished) means it
reached a worker, and its message waiting in its pool's queue (or held unacknowledged by a worker)
means it was published. Such a call is watched where it is, never sent again, its deadline counted
from when it was journaled. A call with no sign of either may never have been published: an
idempotent tool's is published again under the same task id and idempotency key; any other's is
settled as lost, as recovery settles it (claimed abandoned, so that its worker undoes it if it
ever completes).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

from orchestrator.executors._outcomes import failed_outcome
from orchestrator.executors.celery._dispatch import Dispatcher
from workers import OutcomeKind, ToolDefinition, ToolOutcome
from workers.priorities import redis_lists
from workers.redis_client import connect as connect_redis
from workers.redis_client import is_redis

__all__ = ["deadline_of", "in_broker", "uncertain_outcome"]

log = logging.getLogger(__name__)

_UNACKED = "unacked"  # kombu's Redis transport: messages delivered to a worker, not yet acknowledged


def in_broker(dispatcher: Dispatcher, task_id: str, pool: str, *, held: bool = True) -> bool | None:
    """Whether the task's message waits in one of `pool`'s queues (its own and its live builds', any
    priority) or (`held`) is held by a worker unacknowledged, on a Redis broker; None when the broker
    is not Redis (it cannot be looked into)."""
    url = dispatcher.settings.broker_url
    if not is_redis(url):
        return None
    needle = task_id.encode()
    client = connect_redis(url, socket_timeout=5, socket_connect_timeout=2)
    try:
        for queue in dispatcher.routes.pool_queues(pool):
            for key in redis_lists(queue):
                if any(needle in message for message in client.lrange(key, 0, -1)):
                    return True
        return held and any(needle in message for message in client.hvals(_UNACKED))
    finally:
        client.close()


def remaining_s(timeout_s: float, published_at: datetime) -> float:
    """What is left of a call's deadline, counted from when it was journaled (published)."""
    return timeout_s - (datetime.now(UTC) - published_at).total_seconds()


def uncertain_outcome(dispatcher: Dispatcher, definition: ToolDefinition, task_id: str) -> ToolOutcome:
    """A non-idempotent call whose publication is not known: claimed abandoned and revoked (if it
    still runs and completes, its worker undoes a compensable one), and lost for the model."""
    dispatcher.mark_abandoned(task_id)
    dispatcher.abandon(task_id, terminate=False)
    log.warning("%s: no sign it reached the broker before its orchestrator died; settled as lost", task_id)
    return failed_outcome(
        OutcomeKind.WORKER_LOST,
        f"Tool '{definition.name}' was being sent when its orchestrator stopped; whether it ran is not "
        "known, and it is not idempotent, so it was not sent again",
        "OrchestratorLost",
    )


def deadline_of(timeout_s: float, published_at: datetime) -> float:
    """The call's deadline on this process's monotonic clock."""
    return time.monotonic() + remaining_s(timeout_s, published_at)
