"""Undoing one successful call as the task `compensate.<tool>`: dispatched again after a lost worker,
and waited out (no live worker, broker out of reach) until the compensation's own deadline.

A dispatch that ends without a collected result leaves the compensation's state in Redis to decide
(`orchestrator.executors._compensation_state.settle_unfinished`): a copy that ran is a success, one
running is awaited, and one that never started is marked abandoned so that no queued copy runs it
after it is recorded failed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from orchestrator.executors._call_events import CallEvent
from orchestrator.executors._compensation_state import reopen, settle_unfinished
from orchestrator.executors.base import idempotency_key
from orchestrator.executors.celery._dispatch import Dispatcher
from workers import OutcomeKind, ToolDefinition, ToolExecution, ToolOutcome
from workers.calls.invocation import Invocation
from workers.calls.retry import backoff_s, compensation_timeout_s
from workers.protocol import CompensationTask, compensation_task_id, compensation_task_name

__all__ = ["compensate"]

log = logging.getLogger(__name__)

WAIT_MAX_S = 1.0  # how often a compensation waiting for a worker or the broker looks again


async def compensate(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    *,
    on_call: Callable[[CallEvent], None] | None,
) -> ToolOutcome:
    """The outcome of undoing `execution`, dispatched until it runs or its deadline passes.

    The task id follows from the call's idempotency key and the worker runs a compensation at most once
    per key, so dispatching it again never undoes a call twice."""
    settings = dispatcher.settings
    key = idempotency_key(invocation, execution.request)
    timeout_s = compensation_timeout_s(definition, settings)
    deadline = time.monotonic() + timeout_s
    reopen(dispatcher.redis, key)
    outcome = await _dispatch_until(
        dispatcher, definition, execution, invocation, key, deadline, timeout_s, on_call
    )
    if not outcome.is_error:
        return outcome
    hold_s = (definition.timeout or settings.default_tool_timeout_s) + 30  # as long as a worker's lock
    return await settle_unfinished(dispatcher.redis, key, outcome, hold_s)


async def _dispatch_until(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    key: str,
    deadline: float,
    timeout_s: float,
    on_call: Callable[[CallEvent], None] | None,
) -> ToolOutcome:
    settings = dispatcher.settings
    lost = waits = 0
    while True:
        outcome = await dispatcher.dispatch(
            compensation_task_name(definition.name),
            compensation_task_id(key),
            CompensationTask(execution, invocation, key),
            definition,
            deadline,
            timeout_s,
            key=key,
            on_call=on_call,
        )
        if outcome.kind is OutcomeKind.WORKER_LOST and lost < settings.compensation_retries:
            lost += 1
            if time.monotonic() < deadline:
                log.info("compensation of %s call %s: worker lost; dispatching again", definition.name, key)
                continue
        if outcome.kind is not OutcomeKind.NO_WORKER and outcome.error_type != "BrokerUnavailable":
            return outcome
        # No live worker (the catalog may be empty after a Redis restart until workers beat again)
        # or no broker: wait and try again, within the compensation's own deadline.
        pause = backoff_s(waits, settings.retry_backoff_s, WAIT_MAX_S)
        if time.monotonic() + pause >= deadline:
            log.warning(
                "compensation of %s call %s: %s, until its deadline", definition.name, key, outcome.text
            )
            return outcome
        if waits == 0:
            log.warning(
                "compensation of %s call %s: %s; retrying until its deadline",
                definition.name,
                key,
                outcome.text,
            )
        waits += 1
        await asyncio.sleep(pause)
