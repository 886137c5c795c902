"""One Celery task per tool, `tool.<name>`, routed to the tool's pool queue.

A task is a thin adapter: bind the arguments, call the tool, convert the result — the same code
`LocalExecutor` runs — then return the outcome's JSON. A failed call raises a `ToolFailure` named
after the tool's exception, so Flower shows FAILURE with that type and message, while the structured
outcome travels in the exception's arguments for the orchestrator to read.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from typing import Any

import redis
from celery import Celery, Task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown

from workers._failures import ToolFailure, failure_for
from workers.artifacts import ArtifactSink
from workers.calls.progress import reporting
from workers.calls.retry import is_transient, retry_delay_s
from workers.calls.runner import bound_outcome, call_identity, log_call, run_tool
from workers.protocol import (
    CALL_CANCELLED_KEY,
    IDEMPOTENCY_HEADER,
    SENT_AT_HEADER,
    CallTask,
    CompensationTask,
    OutcomeKind,
    ToolExecutionRequest,
    ToolOutcome,
    compensation_task_name,
    is_toolfleet_task,
    tool_task_name,
)
from workers.redis_client import connect as connect_redis
from workers.runtime._backend import cancelled_at_start
from workers.runtime._compensation import finish_or_compensate_late, run_compensation_task
from workers.runtime._consumer import broker_reconnected
from workers.runtime._progress import worker_reporter
from workers.runtime._telemetry import install_worker_telemetry, observed_call, observed_compensation
from workers.runtime.builds import build_queues
from workers.runtime.catalog import CatalogHeartbeat, CatalogTool, WorkerEntry
from workers.runtime.rates import rates_of, wait_for_start
from workers.settings import Settings
from workers.tools import ToolDefinition
from workers.tools.registry import ToolRegistry

__all__ = ["register_tasks"]

log = logging.getLogger(__name__)


def _run_call(
    task: Task, definition: ToolDefinition, settings: Settings, envelope: CallTask
) -> dict[str, Any]:
    started = time.perf_counter()
    queued_s = _queued_s(task)
    request, deadline = envelope.request, envelope.deadline
    if deadline is not None and time.time() >= deadline:
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not start before its deadline",
            error_type="DeadlineExceeded",
            queued_s=queued_s,
        )
        raise failure_for(_logged(task, definition, request, outcome, started))
    if _given_up(task):
        outcome = ToolOutcome(
            kind=OutcomeKind.EXECUTION_ERROR,
            text=f"Tool '{definition.name}' was cancelled before it started",
            error_type="ToolCancelled",
            queued_s=queued_s,
        )
        raise failure_for(_logged(task, definition, request, outcome, started))
    rates = rates_of(task.backend.client, definition, envelope, at_start=True)
    if rates is not None and not wait_for_start(rates, definition, deadline):
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not start before its deadline: its rate limit left no turn",
            error_type="DeadlineExceeded",
            queued_s=queued_s,
        )
        raise failure_for(_logged(task, definition, request, outcome, started))
    sink = _sink(settings.artifact_url, settings.inline_result_bytes)
    identity = None
    if definition.takes_identity:  # built only for the tools that ask for it: most calls need none
        identity = call_identity(
            envelope.invocation,
            request,
            attempt=1 + int(task.request.retries or 0),  # the first run, then Celery's retries
            key=(task.request.headers or {}).get(IDEMPOTENCY_HEADER),
        )
    if definition.takes_reporter:  # the last report is sent before the outcome
        with reporting(worker_reporter(task, definition)):
            outcome = run_tool(
                definition, request, envelope.invocation, identity, log_outcome=False, artifacts=sink
            )
    else:  # most tools report nothing: no reporter, no context to set
        outcome = run_tool(
            definition, request, envelope.invocation, identity, log_outcome=False, artifacts=sink
        )
    if _past_its_deadline(outcome, deadline):
        outcome = ToolOutcome(
            kind=OutcomeKind.TIMED_OUT,
            text=f"Tool '{definition.name}' did not finish within its deadline",
            error_type="TimeoutError",
        )
    outcome = dataclasses.replace(
        bound_outcome(outcome, definition.name, settings.max_result_bytes), queued_s=queued_s
    )
    if outcome.is_error:
        attempt = int(task.request.retries or 0)
        if attempt < definition.options.retries and is_transient(outcome, definition):
            countdown = retry_delay_s(attempt, settings)
            if deadline is None or time.time() + countdown < deadline:
                elapsed_ms = (time.perf_counter() - started) * 1000
                log_call(
                    definition.name,
                    request.id,
                    outcome,
                    elapsed_ms,
                    task_id=task.request.id,
                    attempt=attempt + 1,
                    retry_in_s=countdown,
                )
                raise task.retry(
                    countdown=countdown,
                    max_retries=definition.options.retries,
                    exc=failure_for(outcome),
                    **envelope.reprs(),
                )
        raise failure_for(_logged(task, definition, request, outcome, started), task.request.hostname)
    if envelope.compensate_if_late and definition.compensation is not None:
        invocation = envelope.invocation
        finish_or_compensate_late(task, definition, settings, request, invocation, outcome, deadline)
    return _logged(task, definition, request, outcome, started).to_wire(task.request.hostname)


@functools.lru_cache(maxsize=4)
def _sink(url: str, inline_result_bytes: int) -> ArtifactSink:
    """The worker's artifact sink, made once (its settings are the process's)."""
    return ArtifactSink(url, inline_result_bytes)


def _queued_s(task: Task) -> float | None:
    """How long the call waited in its pool's queue, from its publish (the message's `SENT_AT_HEADER`,
    the orchestrator's clock) to now (this worker's): on its first attempt only, as a retry's message
    keeps the first publish's time; None when unknown (a message sent without the header)."""
    if task.request.retries:
        return None
    sent_at = getattr(task.request, SENT_AT_HEADER, None) or (task.request.headers or {}).get(SENT_AT_HEADER)
    if isinstance(sent_at, bool) or not isinstance(sent_at, int | float):
        return None
    return max(time.time() - sent_at, 0.0)  # clocks apart: a message "from the future" waited none


def _past_its_deadline(outcome: ToolOutcome, deadline: float | None) -> bool:
    """Whether the call failed for want of time: the pool's time limit (the deadline), or a timeout
    the tool raised once the deadline had passed (an MCP request's timeout is its tool's deadline,
    and it fires a moment after it on the worker: whichever side's timer fires first, a timeout)."""
    if outcome.error_type == "SoftTimeLimitExceeded":
        return True
    return deadline is not None and isinstance(outcome.exception, TimeoutError) and time.time() >= deadline


def _given_up(task: Task) -> bool:
    """Whether the orchestrator gave the call up (cancelled it, or its deadline passed) before it
    started: `abandon` marks it (`CALL_CANCELLED_KEY`) before revoking it, and Celery's revoke misses
    a message a threads pool already holds. A mark that cannot be read counts as none: the call runs,
    its deadline checked as before."""
    known = cancelled_at_start(task.request.id)  # read with its STARTED state, in the same round trip
    if known is not None:
        return known
    try:
        return bool(task.backend.client.exists(CALL_CANCELLED_KEY.format(task.request.id)))
    except redis.RedisError as exc:
        log.warning("could not read whether %s was cancelled: %s", task.request.id, exc)
        return False


def _logged(
    task: Task,
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    outcome: ToolOutcome,
    started: float,
) -> ToolOutcome:
    """`outcome`, once its call's line is logged."""
    elapsed_ms = (time.perf_counter() - started) * 1000
    log_call(definition.name, request.id, outcome, elapsed_ms, task_id=task.request.id)
    return outcome


def register_tasks(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    """Register `tool.<name>` for every tool and `compensate.<name>` for every compensable one, and
    publish the catalog while a worker of `app` runs."""
    for definition in registry:
        _register(app, definition, settings)
        if definition.compensation is not None:
            _register_compensation(app, definition, settings)
    _only_toolfleet_tasks(app)
    _publish_catalog_while_running(app, registry, settings)
    install_worker_telemetry(app, record_content=settings.trace_content)


def _only_toolfleet_tasks(app: Celery) -> None:
    """Drop Celery's built-in tasks (`celery.accumulate`, `celery.chord_unlock`, ...) from the app.

    Celery registers them in every app, and a worker runs them for anyone who can write a message
    to its queue; a tool worker runs only its tools and their compensations.
    """

    def drop(sender: Any = None, **_: Any) -> None:
        for name in list(app.tasks):
            if not is_toolfleet_task(name):
                app.tasks.unregister(name)

    if app.finalized:
        drop()
    else:
        app.on_after_finalize.connect(drop, weak=False)


def _register(app: Celery, definition: ToolDefinition, settings: Settings) -> None:
    def run(self: Task, **kwargs: Any) -> dict[str, Any]:
        envelope = CallTask.from_json(kwargs)
        with observed_call(self, definition, envelope):
            return _run_call(self, definition, settings, envelope)

    run.__name__ = f"tool_{definition.name}"
    run.__doc__ = definition.specification.description
    app.task(
        bind=True,
        name=tool_task_name(definition.name),
        queue=definition.pool,
        acks_late=definition.options.idempotent,
        reject_on_worker_lost=definition.options.idempotent,
        throws=(ToolFailure,),
        track_started=True,
        typing=False,
    )(run)


def _register_compensation(app: Celery, definition: ToolDefinition, settings: Settings) -> None:
    def run(self: Task, **kwargs: Any) -> dict[str, Any]:
        envelope = CompensationTask.from_json(kwargs)
        with observed_compensation(self, definition, envelope):
            return run_compensation_task(self, definition, settings, envelope)

    run.__name__ = f"compensate_{definition.name}"
    run.__doc__ = f"Undoes a call of {definition.name}"
    # Compensations must complete: acknowledged late and redelivered when their worker dies.
    app.task(
        bind=True,
        name=compensation_task_name(definition.name),
        queue=definition.pool,
        acks_late=True,
        reject_on_worker_lost=True,
        throws=(ToolFailure,),
        track_started=True,
        typing=False,
    )(run)


def _publish_catalog_while_running(app: Celery, registry: ToolRegistry, settings: Settings) -> None:
    heartbeats: list[CatalogHeartbeat] = []

    def on_setup(sender: Any = None, instance: Any = None, **_: Any) -> None:
        # Besides each pool's queue (`-Q`, `--pool`), the queue of this build of it: calls of the
        # versions it serves are published there (`workers.runtime.builds`).
        if instance is not None and getattr(instance, "app", None) is app:
            queues = instance.app.amqp.queues
            for name in build_queues(registry, queues.consume_from, settings.build_id).values():
                # declared as the app declares a pool's queue (on RabbitMQ: its type and exchange)
                queues.select_add(queues[name])

    def on_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        queues = {q.name for q in sender.task_consumer.queues}
        pools = sorted(queues - set(build_queues(registry, queues, settings.build_id).values()))
        pool_module = type(sender.pool).__module__.rsplit(".", 1)[-1]
        kind = {"thread": "threads"}.get(pool_module, pool_module)
        entry = WorkerEntry(
            hostname=sender.hostname,
            pools=pools,
            pool_kind=kind,
            concurrency=int(getattr(sender.pool, "limit", 0) or 0),
            pool_concurrency=sender.app.conf.get("toolfleet_pool_concurrency"),
            pid=os.getpid(),
            started_at=time.time(),
            tools=[CatalogTool.of(d, settings.build_id) for d in registry if d.pool in pools],
            build_id=settings.build_id,
        )
        heartbeat = CatalogHeartbeat(connect_redis(settings.redis_url), entry, settings.heartbeat_ttl_s)
        heartbeat.start()
        heartbeats.append(heartbeat)
        log.info(
            "worker %s serves pools %s (%s x%d)", entry.hostname, ",".join(pools), kind, entry.concurrency
        )

    def on_reconnected(sender: Any = None, **_: Any) -> None:
        # Redis may have restarted empty: announce the worker now rather than at its next heartbeat.
        if getattr(sender, "app", None) is app:
            for heartbeat in heartbeats:
                heartbeat.announce()

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        while heartbeats:
            heartbeats.pop().stop()

    celeryd_after_setup.connect(on_setup, weak=False)
    worker_ready.connect(on_ready, weak=False)
    broker_reconnected.connect(on_reconnected, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
