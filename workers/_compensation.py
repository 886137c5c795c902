"""Compensation on the worker: the `compensate.<name>` task's body, which undoes a call at most once
per idempotency key, and the compensation of a success that finished after its call was abandoned."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from celery import Task

from workers._task_reprs import flower_reprs
from workers._tool_failure import failure_for
from workers.catalog import WORKER_KEY
from workers.invocation import Invocation
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.retry import backoff_s
from workers.runner import call_identity, run_compensation
from workers.settings import Settings
from workers.tools import ToolDefinition

__all__ = [
    "ABANDONED",
    "COMPENSATION_PREFIX",
    "call_state_key",
    "compensation_lock_key",
    "compensation_task_id",
    "compensation_timeout_s",
]

log = logging.getLogger(__name__)

COMPENSATION_PREFIX = "compensate."


def compensation_timeout_s(definition: ToolDefinition, settings: Settings) -> float:
    """How long undoing one call may take, retries and backoff included."""
    per_attempt = max(definition.timeout or settings.default_tool_timeout_s, _MIN_COMPENSATION_ATTEMPT_S)
    return per_attempt * (1 + settings.compensation_retries) + settings.retry_backoff_max_s


_MIN_COMPENSATION_ATTEMPT_S = 30.0


def call_state_key(task_id: str) -> str:
    """The per-call state in Redis that decides between "collected" and "abandoned"."""
    return f"toolfleet:call:{task_id}"


def compensation_lock_key(idempotency_key: str) -> str:
    """The compensation's state in Redis: the delivery undoing it (`host|pid|nonce`), `done` once it
    ran, or `abandoned` once the orchestrator that awaited it recorded it failed (`ABANDONED`)."""
    return f"toolfleet:compensation:{idempotency_key}"


ABANDONED = "abandoned"  # no delivery may undo the call until an orchestrator dispatches it again


def compensation_task_id(idempotency_key: str) -> str:
    """The one task id of the compensation of a call: every path that undoes it uses the same id."""
    return "compensate-" + str(uuid.uuid5(_COMPENSATION_NAMESPACE, idempotency_key))


T = TypeVar("T")
_COMPENSATION_NAMESPACE = uuid.UUID("5b0b6a8e-4f5e-4a57-9a43-2f3c54a0c1de")
_clients: dict[str, redis.Redis] = {}


def _redis(settings: Settings) -> redis.Redis:
    # Created lazily in the process that uses it: prefork children must not share the parent's sockets.
    key = f"{os.getpid()}:{settings.redis_url}"
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(settings.redis_url, socket_timeout=5)
    return client


_UNBOUNDED = 1_000_000  # retries of compensation tasks are bounded by their deadline instead


def _wait_for_other_delivery(task: Task, kwargs: dict[str, Any], deadline: float | None) -> None:
    """Another delivery is undoing this call right now: look again in a second, until the deadline."""
    if deadline is not None and time.time() + 1.0 >= deadline:
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
        kwargs=kwargs,
        exc=RuntimeError("compensation in progress"),
        **flower_reprs(kwargs),
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


def _finish_or_compensate_late(
    task: Task,
    definition: ToolDefinition,
    settings: Settings,
    request: ToolExecutionRequest,
    invocation: Invocation,
    outcome: ToolOutcome,
    deadline: float | None,
) -> None:
    """Mark the call finished; if the orchestrator already abandoned it, enqueue its compensation.

    One atomic SET ... GET decides: whichever of worker and orchestrator writes first wins, so a late
    success is either collected by the orchestrator or compensated here, never both, never neither.
    """
    ttl = int(max(settings.result_expires_s, 60))
    attempt = 0
    while True:  # the side effect happened: this mark must land, or a late success goes unnoticed
        try:
            previous = _redis(settings).set(call_state_key(task.request.id), "finished", ex=ttl, get=True)
            break
        except redis.RedisError as exc:
            pause = backoff_s(attempt, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is not None and time.time() + pause > deadline + settings.result_expires_s:
                log.error("could not mark %s finished: %s", task.request.id, exc)
                return
            log.warning("marking %s finished failed (%s); retrying in %.2f s", task.request.id, exc, pause)
            time.sleep(pause)
            attempt += 1
    if previous != b"abandoned":
        return
    key = str(task.request.headers.get("idempotency_key") if task.request.headers else "") or task.request.id
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
    compensation_kwargs = {
        "execution": execution.to_json(),
        "invocation": invocation.to_json(),
        "idempotency_key": key,
        "deadline": time.time() + timeout_s,
    }
    task.app.send_task(
        COMPENSATION_PREFIX + definition.name,
        kwargs=compensation_kwargs,
        task_id=compensation_task_id(key),
        queue=definition.pool,
        headers={"idempotency_key": key, "late": True},
        **flower_reprs(compensation_kwargs),
    )


def _run_compensation(
    task: Task, definition: ToolDefinition, settings: Settings, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Undo one call, at most once per idempotency key, whatever the number of deliveries.

    Redis may blip at any point: the lock and the "done" mark are written with retries, and once
    the undo ran, a bookkeeping write that keeps failing is logged, never turned into a failure.
    """
    execution = ToolExecution.from_json(kwargs["execution"])
    invocation = Invocation.from_json(kwargs["invocation"])
    key = str(kwargs["idempotency_key"])
    deadline = float(kwargs.get("deadline") or 0) or None
    lock = compensation_lock_key(key)
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
    if taken == "done":
        return {"kind": "success", "text": "Already compensated", "worker": task.request.hostname}
    if taken == ABANDONED:
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
        _wait_for_other_delivery(task, kwargs, deadline)
    identity = call_identity(
        invocation, execution.request, attempt=1 + int(kwargs.get("failures") or 0), key=key
    )
    outcome = run_compensation(definition, execution, invocation, identity)
    if outcome.is_error:
        try:
            _with_retries(
                settings,
                f"unlocking the compensation {key}",
                bookkeeping_until,
                lambda: _redis(settings).delete(lock),
            )
        except redis.RedisError as exc:  # the lock expires by itself: the failure is what counts
            log.warning("could not unlock the compensation %s (%s); it expires in %d s", key, exc, lock_ttl)
        failures = int(kwargs.get("failures") or 0)  # lock waits are retries too: count failures apart
        if failures < settings.compensation_retries:
            countdown = backoff_s(failures, settings.retry_backoff_s, settings.retry_backoff_max_s)
            if deadline is None or time.time() + countdown < deadline:
                raise task.retry(
                    countdown=countdown,
                    max_retries=_UNBOUNDED,
                    kwargs={**kwargs, "failures": failures + 1},
                    exc=failure_for(outcome),
                    **flower_reprs(kwargs),
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
            lambda: _redis(settings).set(lock, "done", ex=_DONE_TTL_S),
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
    if holder == b"done":
        return "done"
    if holder == ABANDONED.encode():
        return ABANDONED
    if holder == mine.encode():
        return "mine"
    if holder is not None and not _holder_is_gone(client, _text(holder), hostname):
        return "busy"
    return "mine" if client.set(lock, mine, ex=lock_ttl, get=True) == holder else "busy"


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
