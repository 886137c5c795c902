"""One Celery task per tool, `tool.<name>`, routed to the tool's pool queue.

A task is a thin adapter: bind the arguments, call the tool, convert the result — the same code
`LocalExecutor` runs — then return the outcome's JSON. A failed call raises a `ToolFailure` named
after the tool's exception, so Flower shows FAILURE with that type and message, while the structured
outcome travels in the exception's arguments for the orchestrator to read.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, cast

import redis
from celery import Celery, Task
from celery.signals import worker_ready, worker_shutdown

from workers import _failures
from workers.catalog import CatalogHeartbeat, CatalogTool, WorkerEntry
from workers.errors import ToolResultError
from workers.invocation import Invocation
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.registry import ToolRegistry
from workers.retry import backoff_s, is_transient
from workers.runner import error_outcome, run_tool
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = ["TASK_PREFIX", "ToolFailure", "failure_for", "outcome_from_failure", "register_tasks"]

log = logging.getLogger(__name__)

TASK_PREFIX = "tool."
_FAILURE_MODULE = _failures.__name__


class ToolFailure(Exception):
    """A tool call that ended in an error; `args` are (message, outcome JSON)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else type(self).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


_failure_types: dict[str, type[ToolFailure]] = {}


def failure_for(outcome: ToolOutcome, worker: str | None = None) -> ToolFailure:
    """The exception a task raises for an error outcome, named after the tool's exception type."""
    name = outcome.error_type or "ToolFailure"
    if not name.isidentifier():
        name = "ToolFailure"
    cls = _failure_types.get(name)
    if cls is None:
        cls = cast(type[ToolFailure], type(name, (ToolFailure,), {"__module__": _FAILURE_MODULE}))
        setattr(_failures, name, cls)
        _failure_types[name] = cls
    return cls(outcome.text, {**outcome.to_json(), "worker": worker})


def outcome_from_failure(result: Any) -> ToolOutcome | None:
    """The structured outcome carried by a stored `ToolFailure`, or `None` for any other failure."""
    if not isinstance(result, dict) or result.get("exc_module") != _FAILURE_MODULE:
        return None
    message = result.get("exc_message")
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[1], dict):
        try:
            return ToolOutcome.from_json(message[1])
        except (KeyError, ValueError):
            return None
    return None


def _run_call(
    task: Task, definition: ToolDefinition, settings: Settings, kwargs: dict[str, Any]
) -> dict[str, Any]:
    request = ToolExecutionRequest.from_json(kwargs["request"])
    invocation = Invocation.from_json(kwargs["invocation"])
    deadline = float(kwargs.get("deadline") or 0) or None
    if deadline is not None and time.time() >= deadline:
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not start before its deadline",
            error_type="DeadlineExceeded",
        )
        raise failure_for(outcome)
    outcome = run_tool(definition, request, invocation)
    if not outcome.is_error and len(outcome.text.encode()) > settings.max_result_bytes:
        size = len(outcome.text.encode())
        outcome = error_outcome(
            ToolResultError(
                f"Result of tool '{definition.name}' is {size} bytes, over the limit of "
                f"{settings.max_result_bytes} bytes (TOOLFLEET_MAX_RESULT_BYTES)"
            ),
            OutcomeKind.EXECUTION_ERROR,
        )
    if outcome.is_error:
        attempt = int(task.request.retries or 0)
        if attempt < definition.options.retries and is_transient(outcome, definition):
            countdown = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is None or time.time() + countdown < deadline:
                log.info(
                    "tool %s attempt %d failed (%s); retrying in %.2f s",
                    definition.name,
                    attempt + 1,
                    outcome.error_type,
                    countdown,
                )
                raise task.retry(
                    countdown=countdown, max_retries=definition.options.retries, exc=failure_for(outcome)
                )
        raise failure_for(outcome, task.request.hostname)
    return {**outcome.to_json(), "worker": task.request.hostname}


def register_tasks(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    """Register `tool.<name>` for every tool, and publish the catalog while a worker of `app` runs."""
    for definition in registry:
        _register(app, definition, settings)
    _publish_catalog_while_running(app, registry, settings)


def _register(app: Celery, definition: ToolDefinition, settings: Settings) -> None:
    def run(self: Task, **kwargs: Any) -> dict[str, Any]:
        return _run_call(self, definition, settings, kwargs)

    run.__name__ = f"tool_{definition.name}"
    run.__doc__ = definition.specification.description
    app.task(
        bind=True,
        name=TASK_PREFIX + definition.name,
        queue=definition.pool,
        acks_late=definition.options.idempotent,
        reject_on_worker_lost=definition.options.idempotent,
        throws=(ToolFailure,),
        track_started=True,
        typing=False,
    )(run)


def _publish_catalog_while_running(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    heartbeats: list[CatalogHeartbeat] = []

    def on_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        pools = sorted(q.name for q in sender.task_consumer.queues)
        pool_module = type(sender.pool).__module__.rsplit(".", 1)[-1]
        kind = {"thread": "threads"}.get(pool_module, pool_module)
        entry = WorkerEntry(
            hostname=sender.hostname,
            pools=pools,
            pool_kind=kind,
            concurrency=int(getattr(sender.pool, "limit", 0) or 0),
            pid=os.getpid(),
            started_at=time.time(),
            tools=[CatalogTool.of(d) for d in registry if d.pool in pools],
        )
        heartbeat = CatalogHeartbeat(
            redis.Redis.from_url(settings.redis_url), entry, settings.heartbeat_ttl_s
        )
        heartbeat.start()
        heartbeats.append(heartbeat)
        log.info(
            "worker %s serves pools %s (%s x%d)", entry.hostname, ",".join(pools), kind, entry.concurrency
        )

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        while heartbeats:
            heartbeats.pop().stop()

    worker_ready.connect(on_ready, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
