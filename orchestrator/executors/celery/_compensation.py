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

import redis
from kombu.exceptions import OperationalError

from orchestrator.executors._call_events import CallEvent
from orchestrator.executors._compensation_state import reopen, settle_unfinished
from orchestrator.executors.base import idempotency_key
from orchestrator.executors.celery._attach import in_broker
from orchestrator.executors.celery._dispatch import Dispatcher
from workers import OutcomeKind, ToolDefinition, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.calls.doubt import undo_key
from workers.calls.invocation import Invocation
from workers.calls.retry import backoff_s, compensation_timeout_s
from workers.protocol import (
    CompensationTask,
    compensation_lock_key,
    compensation_task_id,
    compensation_task_name,
)

__all__ = ["compensate", "undo_in_doubt"]

log = logging.getLogger(__name__)

WAIT_MAX_S = 1.0  # how often a compensation waiting for a worker or the broker looks again
LOOK_AGAIN_S = 10.0  # how often an awaited compensation no worker started is looked for in its queue


async def compensate(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    execution: ToolExecution,
    invocation: Invocation,
    *,
    on_call: Callable[[CallEvent], None] | None,
) -> ToolOutcome:
    """The outcome of undoing `execution`, dispatched until it runs or its deadline passes.

    The task id follows from the call's idempotency key (`undo_key`: a call in doubt has one of its
    own) and the worker runs a compensation at most once per key, so dispatching it again never undoes
    a call twice."""
    settings = dispatcher.settings
    key = idempotency_key(invocation, execution.request)
    timeout_s = compensation_timeout_s(definition, settings)
    deadline = time.monotonic() + timeout_s
    locked = undo_key(key, execution)
    reopen(dispatcher.redis, locked)
    outcome = await _dispatch_until(
        dispatcher,
        definition,
        CompensationTask(execution, invocation, key),
        locked,
        deadline,
        timeout_s,
        on_call,
    )
    if not outcome.is_error:
        return outcome
    hold_s = (definition.timeout or settings.default_tool_timeout_s) + 30  # as long as a worker's lock
    return await settle_unfinished(dispatcher.redis, locked, outcome, hold_s)


async def _dispatch_until(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    envelope: CompensationTask,
    locked: str,
    deadline: float,
    timeout_s: float,
    on_call: Callable[[CallEvent], None] | None,
) -> ToolOutcome:
    settings = dispatcher.settings
    lost = waits = 0
    key, task_id = envelope.idempotency_key, compensation_task_id(locked)
    while True:
        resending = asyncio.ensure_future(
            _resend_if_lost(dispatcher, definition, task_id, envelope, locked, deadline)
        )
        try:
            outcome = await dispatcher.dispatch(
                compensation_task_name(definition.name),
                task_id,
                envelope,
                definition,
                deadline,
                timeout_s,
                key=key,
                on_call=on_call,
            )
        finally:
            resending.cancel()
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


async def _resend_if_lost(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    task_id: str,
    envelope: CompensationTask,
    locked: str,
    deadline: float,
) -> None:
    """While a compensation is awaited: every `LOOK_AGAIN_S`, publish it again if no worker started it
    and its message no longer waits in its pool's queue. A worker that had taken it as Redis
    restarted may hold it unacknowledged until the broker's visibility timeout (its return to the
    queue failed with Redis away); another copy runs it now, and that one finds it done. Never twice:
    a compensation runs at most once per key."""
    pool, name = definition.pool, compensation_task_name(definition.name)
    while time.monotonic() + LOOK_AGAIN_S < deadline:
        await asyncio.sleep(LOOK_AGAIN_S)
        try:
            if await asyncio.to_thread(_lost, dispatcher, task_id, pool, locked):
                log.warning("compensation %s: no worker has it, nor does its queue: sent again", task_id)
                remaining = deadline - time.monotonic()
                queue = dispatcher.routes.undo_queue(definition)
                dispatcher.publish(
                    name, task_id, envelope, pool, remaining, key=envelope.idempotency_key, queue=queue
                )
        except (redis.RedisError, OperationalError) as exc:  # looked at again next time
            log.info("compensation %s: whether it is lost is unknown: %s", task_id, exc)


def _lost(dispatcher: Dispatcher, task_id: str, pool: str, locked: str) -> bool:
    if dispatcher.stored_state(task_id) is not None or dispatcher.redis.exists(compensation_lock_key(locked)):
        return False  # a worker has begun it (or ended it)
    return in_broker(dispatcher, task_id, pool, held=False) is False


async def undo_in_doubt(
    dispatcher: Dispatcher,
    definition: ToolDefinition,
    request: ToolExecutionRequest,
    invocation: Invocation,
    outcome: ToolOutcome,
) -> None:
    """Send the compensation of a call whose worker was lost before it told its outcome
    (`workers.calls.doubt`): its effect may stand, and the model is told it failed.

    Like the undo of a call that finished after it was abandoned, it is its pool's to run, not
    awaited: the broker keeps it (a worker that dies running it has it delivered again), and its key
    of its own lets the undo of a late finish still run. Published until the broker takes it,
    within the compensation's deadline."""
    settings = dispatcher.settings
    key = idempotency_key(invocation, request)
    execution = ToolExecution(
        request=request,
        result=outcome.text,
        has_failed=True,
        status=outcome.kind.value,
        task_id=outcome.task_id,
        pool=definition.pool,
        worker=outcome.worker,
    )
    timeout_s = compensation_timeout_s(definition, settings)
    envelope = CompensationTask(execution, invocation, key, deadline=time.time() + timeout_s)
    task_id = compensation_task_id(undo_key(key, execution))
    give_up, attempt = time.monotonic() + timeout_s, 0
    while True:
        try:
            dispatcher.publish(
                compensation_task_name(definition.name),
                task_id,
                envelope,
                definition.pool,
                max(timeout_s, settings.result_expires_s),  # waits for a worker as long as results do
                key=key,
                queue=dispatcher.routes.undo_queue(definition),
            )
        except OperationalError as exc:
            pause = backoff_s(attempt, settings.retry_backoff_s, WAIT_MAX_S)
            attempt += 1
            if time.monotonic() + pause < give_up:
                await asyncio.sleep(pause)
                continue
            log.error("%s call %s, in doubt, could not be sent its undo: %s", definition.name, key, exc)
            return
        log.warning(
            "%s call %s lost its worker before it told its outcome: undone in doubt", definition.name, key
        )
        return
