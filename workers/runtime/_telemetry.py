"""A worker's side of the telemetry: each call's log fields, span and metrics, and tracing set up when
a worker starts.

The orchestrator puts the trace context of its tool-call span into the message's headers; the Celery
instrumentation of OpenTelemetry (`opentelemetry-instrumentation-celery`) reads it back and runs the
task under a `run/<task>` span, its child; the `execute_tool` span below is that span's child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from celery import Celery, Task
from celery.exceptions import Retry
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown

from workers.protocol import SENT_AT_HEADER, CallTask, CompensationTask, OutcomeKind, ToolExecutionRequest
from workers.telemetry.logs import CallFields, bound_call
from workers.telemetry.metrics import process_ended, worker_metrics
from workers.telemetry.tracing import (
    GEN_AI_OPERATION,
    GEN_AI_TOOL_CALL_ID,
    GEN_AI_TOOL_NAME,
    content_recorded,
    setup_tracing,
    span,
    stop_tracing,
    tracer_provider,
    tracing_enabled,
)
from workers.tools import ToolDefinition

__all__ = ["install_worker_telemetry", "observed_call", "observed_compensation"]

log = logging.getLogger(__name__)

WORKER_SERVICE_NAME = "toolfleet-worker"


def _attributes(
    task: Task, definition: ToolDefinition, request: ToolExecutionRequest, invocation_id: str
) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        GEN_AI_TOOL_NAME: definition.name,
        GEN_AI_TOOL_CALL_ID: request.id,
        "gen_ai.tool.type": "function",
        "toolfleet.pool": definition.pool,
        "toolfleet.worker": task.request.hostname,
        "toolfleet.invocation.id": invocation_id,
        "toolfleet.attempt": 1 + int(task.request.retries or 0),
        "toolfleet.side": "worker",
    }
    if content_recorded():
        attributes["gen_ai.tool.call.arguments"] = request.arguments
    return attributes


def _outcome_kind(error: BaseException | None) -> str:
    if error is None:
        return OutcomeKind.SUCCESS.value
    if isinstance(error, Retry):
        return "retry"
    args: tuple[Any, ...] = error.args
    if len(args) >= 2 and isinstance(args[1], dict):  # a ToolFailure: (message, outcome JSON)
        return str(args[1].get("kind") or OutcomeKind.EXECUTION_ERROR.value)
    return OutcomeKind.EXECUTION_ERROR.value


@contextlib.contextmanager
def observed_call(task: Task, definition: ToolDefinition, envelope: CallTask) -> Iterator[None]:
    """Run one call with its log fields bound, under its span, counted in the worker's metrics."""
    request = envelope.request
    invocation_id = str(envelope.invocation.context.invocation_id)
    fields = CallFields(invocation_id, request.id, definition.name, definition.pool, task.request.hostname)
    metrics = worker_metrics()
    tool, pool = definition.name, definition.pool
    attempt = int(task.request.retries or 0)
    sent_at = getattr(task.request, SENT_AT_HEADER, None) or (task.request.headers or {}).get(SENT_AT_HEADER)
    if attempt == 0 and isinstance(sent_at, int | float):
        metrics.queue_wait.labels(tool, pool).observe(max(time.time() - sent_at, 0.0))
    in_flight = metrics.in_flight.labels(tool, pool)
    in_flight.inc()
    started = time.perf_counter()
    error: BaseException | None = None
    attributes = _attributes(task, definition, request, invocation_id) if tracing_enabled() else {}
    if attributes and envelope.deadline is not None:
        attributes["toolfleet.deadline"] = envelope.deadline
    try:
        with (
            bound_call(fields),
            span(f"execute_tool {tool}", {GEN_AI_OPERATION: "execute_tool", **attributes}) as current,
        ):
            try:
                yield
            except BaseException as exc:
                error = exc
                current.set_attribute("toolfleet.outcome.kind", _outcome_kind(exc))
                raise
            current.set_attribute("toolfleet.outcome.kind", OutcomeKind.SUCCESS.value)
    finally:
        in_flight.dec()
        kind = _outcome_kind(error)
        metrics.duration.labels(tool, pool).observe(time.perf_counter() - started)
        metrics.runs.labels(tool, pool, kind).inc()
        if kind == "retry":
            metrics.retries.labels(tool, pool).inc()
        elif kind == OutcomeKind.TIMED_OUT.value:
            metrics.deadline_misses.labels(tool, pool).inc()


@contextlib.contextmanager
def observed_compensation(
    task: Task, definition: ToolDefinition, envelope: CompensationTask
) -> Iterator[None]:
    """Run one compensation with its log fields bound, under its span, counted by result."""
    request = envelope.execution.request
    invocation_id = str(envelope.invocation.context.invocation_id)
    fields = CallFields(invocation_id, request.id, definition.name, definition.pool, task.request.hostname)
    attributes = _attributes(task, definition, request, invocation_id)
    result = "failed"
    try:
        with (
            bound_call(fields),
            span(f"compensate {definition.name}", {GEN_AI_OPERATION: "compensate", **attributes}) as current,
        ):
            yield
            result = "succeeded"
            current.set_attribute("toolfleet.compensation.result", result)
    finally:
        worker_metrics().compensations.labels(definition.name, definition.pool, result).inc()


def install_worker_telemetry(app: Celery, *, record_content: bool = False) -> None:
    """When a worker of `app` starts: set up tracing (if configured) and the Celery instrumentation;
    stop tracing when it (or a pool process) stops, its spans flushed within `FLUSH_TIMEOUT_S`, and drop
    a dead pool process's live gauges."""

    def on_init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        if setup_tracing(WORKER_SERVICE_NAME, record_content=record_content):
            from opentelemetry.instrumentation.celery import CeleryInstrumentor

            instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
            if not instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.instrument(tracer_provider=tracer_provider())
            log.info("tracing on: spans exported over OTLP")

    def on_process_shutdown(pid: int | None = None, **_: Any) -> None:
        stop_tracing()  # the spans buffered go out, or are dropped after a short wait
        process_ended(os.getpid() if pid is None else pid)

    def on_shutdown(sender: Any = None, **_: Any) -> None:
        stop_tracing()

    worker_init.connect(on_init, weak=False)
    worker_process_shutdown.connect(on_process_shutdown, weak=False)
    worker_shutdown.connect(on_shutdown, weak=False)
