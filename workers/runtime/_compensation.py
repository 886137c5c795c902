"""Compensation on the worker: the `compensate.<name>` task's body, which undoes a call at most once
per idempotency key, and the compensation of a success that finished after its call was abandoned."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from celery import Task

from workers._failures import failure_for
from workers.calls.compensating import run_compensation
from workers.calls.doubt import undo_key
from workers.calls.invocation import Invocation
from workers.calls.retry import backoff_s, call_state_ttl_s, compensation_timeout_s, retry_delay_s
from workers.calls.runner import call_identity
from workers.protocol import (
    CALL_ABANDONED,
    CALL_FINISHED,
    COMPENSATION_ABANDONED,
    COMPENSATION_DONE,
    IDEMPOTENCY_HEADER,
    WORKER_KEY,
    CompensationTask,
    OutcomeKind,
    ToolExecution,
    ToolExecutionRequest,
    ToolOutcome,
    call_state_key,
    compensation_lock_key,
    compensation_task_id,
    compensation_task_name,
)
from workers.redis_client import connect as connect_redis
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = ["finish_or_compensate_late", "run_compensation_task"]

log = logging.getLogger(__name__)

T = TypeVar("T")
_clients: dict[str, redis.Redis] = {}


def _redis(settings: Settings) -> redis.Redis:
    # Created lazily in the process that uses it: prefork children must not share the parent's sockets.
    key = f"{os.getpid()}:{settings.redis_url}"
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = connect_redis(settings.redis_url, socket_timeout=5)
    return client


# Mark a call finished unless the orchestrator abandoned it first, whose mark then stays: a retry
# of this write (its first try may have landed unanswered) reads the same verdict, never its own mark.
_FINISH = """
local previous = redis.call('get', KEYS[1])
if previous ~= ARGV[1] then
  redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return previous
"""

_UNBOUNDED = 1_000_000  # retries of compensation tasks are bounded by their deadline instead


def _wait_for_other_delivery(task: Task, envelope: CompensationTask) -> None:
    """Another delivery is undoing this call right now: look again in a second, until the deadline."""
    if envelope.deadline is not None and time.time() + 1.0 >= envelope.deadline:
        raise failure_for(
            ToolOutcome(
                kind=OutcomeKind.EXECUTION_ERROR,
                text="Compensation still in progress elsewhere at its deadline",
                error_type="CompensationInProgress",
            ),
            task.request.hostname,
        )
    raise task.retry(
        countdown=1.0,
        max_retries=_UNBOUNDED,
        kwargs=envelope.to_json(),
        exc=RuntimeError("compensation in progress"),
        **envelope.reprs(),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _holder_is_gone(client: redis.Redis, holder: str, my_hostname: str | None) -> bool:
    """Whether the process that took a compensation lock died: its pid on this worker, or its worker."""
    hostname, _, rest = holder.partition("|")
    pid_text = rest.partition("|")[0]
    if hostname == my_hostname and pid_text.isdigit():
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    return not client.exists(WORKER_KEY.format(hostname))


def finish_or_compensate_late(
    task: Task,
    definition: ToolDefinition,
    settings: Settings,
    request: ToolExecutionRequest,
    invocation: Invocation,
    outcome: ToolOutcome,
    deadline: float | None,
) -> None:
    """Mark the call finished; if the orchestrator already abandoned it, enqueue its compensation.

    One atomic script decides: whichever of worker and orchestrator writes first wins, so a late
    success is either collected by the orchestrator or compensated here, never both, never neither.
    The orchestrator's mark is left in place, so a retry of the write reads the same verdict.
    """
    ttl = call_state_ttl_s(settings)
    # The side effect happened: this mark must land, or a late success goes unnoticed; yet not forever.
    until = (deadline if deadline is not None else time.time()) + settings.result_expires_s
    try:
        previous = _with_retries(
            settings,
            f"marking {task.request.id} finished",
            until,
            lambda: _redis(settings).eval(
                _FINISH, 1, call_state_key(task.request.id), CALL_ABANDONED, CALL_FINISHED, ttl
            ),
        )
    except redis.RedisError as exc:
        log.error("could not mark %s finished: %s", task.request.id, exc)
        return
    if previous != CALL_ABANDONED.encode():
        return
    key = str((task.request.headers or {}).get(IDEMPOTENCY_HEADER) or "") or task.request.id
    execution = ToolExecution(
        request=request,
        result=outcome.text,
        result_object=outcome.result_object,
        attributes=dict(outcome.attributes),
        status=OutcomeKind.SUCCESS.value,
        task_id=task.request.id,
        pool=definition.pool,
        worker=task.request.hostname,
    )
    log.warning(
        "tool %s call %s finished after its deadline; enqueuing its compensation", definition.name, request.id
    )
    timeout_s = compensation_timeout_s(definition, settings)
    envelope = CompensationTask(execution, invocation, key, deadline=time.time() + timeout_s)
    task.app.send_task(
        compensation_task_name(definition.name),
        kwargs=envelope.to_json(),
        task_id=compensation_task_id(key),
        queue=definition.pool,
        headers={IDEMPOTENCY_HEADER: key, "late": True},
        **envelope.reprs(),
    )


def run_compensation_task(
    task: Task, definition: ToolDefinition, settings: Settings, envelope: CompensationTask
) -> dict[str, Any]:
    """Undo one call, at most once per idempotency key, whatever the number of deliveries.

    Redis may blip at any point: the lock and the "done" mark are written with retries, and once
    the undo ran, a bookkeeping write that keeps failing is logged, never turned into a failure.
    """
    execution, invocation = envelope.execution, envelope.invocation
    key, deadline = envelope.idempotency_key, envelope.deadline
    lock = compensation_lock_key(undo_key(key, execution))
    lock_ttl = int((definition.timeout or settings.default_tool_timeout_s) + 30)
    mine = f"{task.request.hostname}|{os.getpid()}|{uuid.uuid4().hex}"
    bookkeeping_until = (deadline or time.time()) + settings.retry_backoff_max_s
    hostname = task.request.hostname
    taken = _with_retries(
        settings,
        f"locking the compensation {key}",
        bookkeeping_until,
        lambda: _take_lock(_redis(settings), lock, mine, lock_ttl, hostname),
    )
    if taken == COMPENSATION_DONE:
        done = ToolOutcome(kind=OutcomeKind.SUCCESS, text="Already compensated")
        return {**done.to_json(), "worker": task.request.hostname}
    if taken == COMPENSATION_ABANDONED:
        # A copy still queued after its orchestrator gave up and recorded the compensation failed:
        # running it now would be an undo the journal does not show. `toolfleet recover` runs it.
        raise failure_for(
            ToolOutcome(
                kind=OutcomeKind.EXECUTION_ERROR,
                text="Compensation abandoned at its deadline by its orchestrator; "
                "`toolfleet recover` runs it",
                error_type="CompensationAbandoned",
            ),
            task.request.hostname,
        )
    if taken == "busy":
        _wait_for_other_delivery(task, envelope)
    identity = call_identity(invocation, execution.request, attempt=1 + envelope.failures, key=key)
    outcome = run_compensation(definition, execution, invocation, identity)
    if outcome.is_error:
        try:
            _with_retries(
                settings,
                f"unlocking the compensation {key}",
                bookkeeping_until,
                lambda: _release_lock(_redis(settings), lock, mine),
            )
        except redis.RedisError as exc:  # the lock expires by itself: the failure is what counts
            log.warning("could not unlock the compensation %s (%s); it expires in %d s", key, exc, lock_ttl)
        failures = envelope.failures  # lock waits are retries too: count failures apart
        if failures < settings.compensation_retries:
            countdown = retry_delay_s(failures, settings)
            if deadline is None or time.time() + countdown < deadline:
                raise task.retry(
                    countdown=countdown,
                    max_retries=_UNBOUNDED,
                    kwargs=dataclasses.replace(envelope, failures=failures + 1).to_json(),
                    exc=failure_for(outcome),
                    **envelope.reprs(),
                )
        raise failure_for(outcome, task.request.hostname)
    # The undo happened: the mark must land (or a redelivery after the lock expires would undo again),
    # yet a mark that cannot be written never makes a done undo a failed one.
    done_until = max(bookkeeping_until, time.time() + _DONE_MARK_MIN_S)
    try:
        _with_retries(
            settings,
            f"marking the compensation {key} done",
            done_until,
            lambda: _redis(settings).set(lock, COMPENSATION_DONE, ex=_DONE_TTL_S),
        )
    except redis.RedisError as exc:
        log.error("compensation %s ran, but its done mark could not be written: %s", key, exc)
    return {**outcome.to_json(), "worker": task.request.hostname}


_DONE_TTL_S = 7 * 24 * 3600
_DONE_MARK_MIN_S = 30.0


def _take_lock(client: redis.Redis, lock: str, mine: str, lock_ttl: int, hostname: str | None) -> str:
    """ "mine" when this delivery may undo the call, "done" when it was undone, "busy" when another
    live delivery is undoing it, `ABANDONED` when its orchestrator gave up on it. Safe to run again
    after a lost reply: a lock already ours is ours."""
    if client.set(lock, mine, nx=True, ex=lock_ttl):
        return "mine"
    holder = client.get(lock)
    if holder == COMPENSATION_DONE.encode():
        return COMPENSATION_DONE
    if holder == COMPENSATION_ABANDONED.encode():
        return COMPENSATION_ABANDONED
    if holder == mine.encode():
        return "mine"
    if holder is not None and not _holder_is_gone(client, _text(holder), hostname):
        return "busy"
    return "mine" if client.set(lock, mine, ex=lock_ttl, get=True) == holder else "busy"


# Deletes the lock only while it still holds this delivery's value: once its TTL ran out, another
# delivery may hold it, and deleting theirs would let a third undo the call again.
_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


def _release_lock(client: redis.Redis, lock: str, mine: str) -> bool:
    """Delete the compensation lock if this delivery still holds it; whether it did."""
    return bool(client.eval(_RELEASE_SCRIPT, 1, lock, mine))


def _with_retries(settings: Settings, what: str, until: float, write: Callable[[], T]) -> T:
    """`write()`, again with backoff while Redis is unreachable, until the wall-clock time `until`."""
    attempt = 0
    while True:
        try:
            return write()
        except redis.RedisError as exc:
            pause = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if time.time() + pause > until:
                raise
            log.warning("%s failed (%s); retrying in %.2f s", what, exc, pause)
            time.sleep(pause)
            attempt += 1
