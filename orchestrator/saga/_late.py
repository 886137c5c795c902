"""What became of a compensable call abandoned at its deadline, read from Redis.

A worker that finishes such a call after its orchestrator gave up on it enqueues the call's
compensation itself, under the call's one compensation task id (the idempotency key decides it).
Workers have no database, so that compensation's state is in the result backend, not in the
journal: the commands that show sagas read it there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum

import redis

from orchestrator.saga.journal import CallRecord
from workers._redis_errors import mapped_redis_errors
from workers.protocol import CALL_ABANDONED, CALL_FINISHED, META_PREFIX, call_state_key, compensation_task_id

__all__ = ["LateCompensation", "LateState", "late_compensation"]


class LateState(StrEnum):
    """Where the compensation a worker owes a call that finished after its deadline stands."""

    COMPENSATED = "compensated"
    FAILED = "failed"
    RUNNING = "running"
    NOT_FINISHED = "not_finished"  # the call itself has not finished: nothing to undo yet
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class LateCompensation:
    """`state` says where it stands; `text` says it to a person."""

    state: LateState
    text: str
    task_id: str


def late_compensation(client: redis.Redis, call: CallRecord) -> LateCompensation:
    """The state of the compensation a worker owes an abandoned call, or why there is none.

    Raises `RedisUnavailableError` (naming `TOOLFLEET_REDIS_URL`) when Redis cannot be read.
    """
    with mapped_redis_errors(client):
        return _late_compensation(client, call)


def _late_compensation(client: redis.Redis, call: CallRecord) -> LateCompensation:
    task_id = compensation_task_id(call.idempotency_key)
    raw = client.get(META_PREFIX + task_id)
    if raw:
        meta = json.loads(raw)
        status = str(meta.get("status"))
        if status == "SUCCESS":
            text = "undone by its worker after it finished late"
            return LateCompensation(LateState.COMPENSATED, text, task_id)
        if status in ("FAILURE", "REVOKED"):
            text = f"the late compensation failed: {_error(meta)}"
            return LateCompensation(LateState.FAILED, text, task_id)
        return LateCompensation(LateState.RUNNING, f"the late compensation is {status.lower()}", task_id)
    mark = client.get(call_state_key(call.task_id)) if call.task_id else None
    if mark in (CALL_ABANDONED.encode(), CALL_ABANDONED):
        if call.task_id and _status(client.get(META_PREFIX + call.task_id)) == "REVOKED":
            return LateCompensation(LateState.NOT_FINISHED, "revoked before it ran: nothing to undo", task_id)
        return LateCompensation(
            LateState.NOT_FINISHED,
            "it has not finished: nothing to undo yet; if it finishes, its worker undoes it",
            task_id,
        )
    if mark in (CALL_FINISHED.encode(), CALL_FINISHED):
        return LateCompensation(LateState.RUNNING, "it finished; its compensation is queued", task_id)
    return LateCompensation(
        LateState.UNKNOWN,
        "no trace in Redis (expired after TOOLFLEET_RESULT_EXPIRES_S, or it ran in-process)",
        task_id,
    )


def _status(raw: bytes | str | None) -> str | None:
    if not raw:
        return None
    status = json.loads(raw).get("status")
    return str(status) if status is not None else None


def _error(meta: dict[str, object]) -> str:
    result = meta.get("result")
    if isinstance(result, dict):
        message = result.get("exc_message")
        if isinstance(message, list | tuple):
            message = " ".join(str(part) for part in message if not isinstance(part, dict))
        return f"{result.get('exc_type', 'Exception')}: {message}"
    return str(result)
