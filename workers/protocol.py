"""The wire contract between orchestrator and workers, JSON only, no Celery imports.

What crosses it: a call and its outcome (`ToolExecutionRequest`, `ToolOutcome`, `ToolExecution`; the
outcome's types in `workers._tool_outcome`, re-exported here) in a task's keyword arguments (`CallTask`,
`CompensationTask`; task names and the refusal of a task a worker does not serve in
`workers._task_names`, re-exported here), ids from the call's idempotency key
(`call_task_id`, `compensation_task_id`). What it leaves in Redis: `celery-task-meta-<task id>`, the
per-call state (`call_state_key`), the compensation lock (`compensation_lock_key`), the catalog
(`WORKER_KEY`, `WORKERS_KEY`, `POOL_KEY`, `POOLS_KEY`). Nothing else spells out keyword names or keys.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from workers._task_names import (
    COMPENSATION_PREFIX,
    TASK_PREFIX,
    NotRegisteredDetail,
    compensation_task_name,
    is_compensation_task,
    is_toolfleet_task,
    tool_of_task,
    tool_task_name,
)
from workers._tool_outcome import ErrorCause, OutcomeKind, ToolOutcome
from workers.artifacts._values import ArtifactRef, refs_in
from workers.calls.invocation import Invocation
from workers.contents import Content, content_from_json, content_to_json

__all__ = [
    "CALL_ABANDONED",
    "CALL_CANCELLED_KEY",
    "CALL_FINISHED",
    "CANCELLED_KEY",
    "CANCEL_CHANNEL",
    "COMPENSATION_ABANDONED",
    "COMPENSATION_DONE",
    "COMPENSATION_PREFIX",
    "FAILURE_MODULE",
    "IDEMPOTENCY_HEADER",
    "META_PREFIX",
    "POOLS_KEY",
    "POOL_KEY",
    "PROGRESS_STATE",
    "SENT_AT_HEADER",
    "TASK_PREFIX",
    "WORKERS_KEY",
    "WORKER_KEY",
    "CallTask",
    "CompensationTask",
    "ErrorCause",
    "NotRegisteredDetail",
    "OutcomeKind",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolOutcome",
    "call_state_key",
    "call_task_id",
    "compensation_lock_key",
    "compensation_task_id",
    "compensation_task_name",
    "flower_reprs",
    "is_compensation_task",
    "is_toolfleet_task",
    "outcome_from_failure",
    "tool_of_task",
    "tool_task_name",
]

IDEMPOTENCY_HEADER = "idempotency_key"  # the message header naming the call a task belongs to
SENT_AT_HEADER = "toolfleet_sent_at"  # the message header: when it was published (epoch seconds)
META_PREFIX = "celery-task-meta-"  # Celery's Redis result backend: key and channel of a task's state
PROGRESS_STATE = "PROGRESS"  # the custom state a running call's progress reports travel as
CANCEL_CHANNEL = "toolfleet:cancel"  # pub/sub: invocation ids to cancel, whichever process runs them
CANCELLED_KEY = "toolfleet:cancelled:{}"  # an invocation asked to stop, by id (expiring)
CALL_CANCELLED_KEY = "toolfleet:call-cancelled:{}"  # a running call asked to stop, by task id (expiring)
CALL_ABANDONED = "abandoned"  # per-call state written by the orchestrator at the call's deadline
CALL_FINISHED = "finished"  # per-call state written by the worker when a late-compensable call succeeds
COMPENSATION_DONE = "done"  # the compensation lock's value once the undo ran
# the lock's value once the orchestrator that awaited it recorded it failed: no queued copy may run it
# until an orchestrator dispatches it again (`toolfleet recover`)
COMPENSATION_ABANDONED = "abandoned"
WORKER_KEY = "toolfleet:worker:{}"  # a live worker's catalog entry, by hostname (JSON, expiring)
POOL_KEY = "toolfleet:pool:{}"  # a pool's live workers: hostname -> expiry time (sorted set)
POOLS_KEY = "toolfleet:pools"  # every pool a worker ever announced (set)
WORKERS_KEY = "toolfleet:workers"  # every worker's hostname -> its entry's expiry time (sorted set)
# The module a failed task's exception class belongs to (`exc_module` in the stored state): its classes
# are named after the tool's exception and carry the outcome (`workers._failures`).
FAILURE_MODULE = "workers._failures"

_CALL_NAMESPACE = uuid.UUID("0d7c3f52-8a61-4c1e-9b7e-6f2a41d3e9b5")
_COMPENSATION_NAMESPACE = uuid.UUID("5b0b6a8e-4f5e-4a57-9a43-2f3c54a0c1de")


def call_task_id(idempotency_key: str) -> str:
    """The task id of a call, derived from its idempotency key: the one the journal records before
    the call is published, so a recoverer finds the call's state from the log alone. A call has no
    other: an idempotent call whose worker died is published again under the same id."""
    return str(uuid.uuid5(_CALL_NAMESPACE, idempotency_key))  # a UUID, as Celery's own task ids are


@dataclass(frozen=True)
class ToolExecutionRequest:
    """One tool call the model asked for: its id, the tool's name and the arguments as JSON text."""

    id: str | None = None
    name: str = ""
    arguments: str = "{}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolExecutionRequest:
        return cls(id=data.get("id"), name=str(data["name"]), arguments=str(data.get("arguments") or ""))


@dataclass
class ToolExecution:
    """One executed tool call as the caller (and a compensation) sees it.

    `result` is the text the model saw; `result_object` the value in its JSON form; `status` the
    outcome kind (or `"rolled_back"` after compensation); `task_id`, `pool` and `worker` say where it
    ran (`None` for in-process calls).
    """

    request: ToolExecutionRequest
    result: str
    result_contents: list[Content] | None = None
    result_object: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    has_failed: bool = False
    status: str = OutcomeKind.SUCCESS.value
    started_at: datetime | None = None
    finished_at: datetime | None = None
    task_id: str | None = None
    pool: str | None = None
    worker: str | None = None

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def artifacts(self) -> list[ArtifactRef]:
        """The artifacts the result refers to (in `result_object`): what a compensation that undoes the
        call removes, with `workers.artifacts.delete_artifacts`."""
        return refs_in(self.result_object)

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request.to_json(),
            "result": self.result,
            "result_contents": (
                [content_to_json(c) for c in self.result_contents]
                if self.result_contents is not None
                else None
            ),
            "result_object": self.result_object,
            "attributes": self.attributes,
            "has_failed": self.has_failed,
            "status": self.status,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "task_id": self.task_id,
            "pool": self.pool,
            "worker": self.worker,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolExecution:
        contents = data.get("result_contents")
        started, finished = data.get("started_at"), data.get("finished_at")
        return cls(
            request=ToolExecutionRequest.from_json(data["request"]),
            result=str(data.get("result", "")),
            result_contents=[content_from_json(c) for c in contents] if contents is not None else None,
            result_object=data.get("result_object"),
            attributes=dict(data.get("attributes") or {}),
            has_failed=bool(data.get("has_failed")),
            status=str(data.get("status", OutcomeKind.SUCCESS.value)),
            started_at=datetime.fromisoformat(started) if started else None,
            finished_at=datetime.fromisoformat(finished) if finished else None,
            task_id=data.get("task_id"),
            pool=data.get("pool"),
            worker=data.get("worker"),
        )


def compensation_task_id(idempotency_key: str) -> str:
    """The one task id of the compensation of a call: every path that undoes it uses the same id."""
    return "compensate-" + str(uuid.uuid5(_COMPENSATION_NAMESPACE, idempotency_key))


def call_state_key(task_id: str) -> str:
    """The per-call state in Redis that decides between "collected" and "abandoned"."""
    return f"toolfleet:call:{task_id}"


def compensation_lock_key(idempotency_key: str) -> str:
    """The lock a compensation holds while undoing a call, and its done mark afterwards."""
    return f"toolfleet:compensation:{idempotency_key}"


def _carried_json(invocation: Invocation, deadline: float | None) -> dict[str, Any]:
    """What every task carries besides its own fields: the invocation and the wall-clock deadline."""
    return {"invocation": invocation.to_json(), "deadline": deadline}


def _carried(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "invocation": Invocation.from_json(data["invocation"]),
        "deadline": float(data.get("deadline") or 0) or None,
    }


@dataclass(frozen=True)
class CallTask:
    """The keyword arguments of a `tool.<name>` task: the call, its invocation, whether a late success
    is undone by its worker, and the wall-clock deadline."""

    request: ToolExecutionRequest
    invocation: Invocation
    compensate_if_late: bool = False
    deadline: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "request": self.request.to_json(),
            "compensate_if_late": self.compensate_if_late,
            **_carried_json(self.invocation, self.deadline),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CallTask:
        return cls(
            request=ToolExecutionRequest.from_json(data["request"]),
            compensate_if_late=bool(data.get("compensate_if_late")),
            **_carried(data),
        )

    def reprs(self) -> dict[str, str]:
        """What Flower shows as the task's arguments (see `flower_reprs`)."""
        return flower_reprs(self.request, self.invocation)


@dataclass(frozen=True)
class CompensationTask:
    """The keyword arguments of a `compensate.<name>` task: the call to undo, its invocation, its
    idempotency key (the undo runs at most once per key), the deadline and the failed undos so far."""

    execution: ToolExecution
    invocation: Invocation
    idempotency_key: str
    deadline: float | None = None
    failures: int = 0

    def to_json(self) -> dict[str, Any]:
        fields = {"execution": self.execution.to_json(), "idempotency_key": self.idempotency_key}
        return {**fields, "failures": self.failures, **_carried_json(self.invocation, self.deadline)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompensationTask:
        execution = ToolExecution.from_json(data["execution"])
        key, failures = str(data["idempotency_key"]), int(data.get("failures") or 0)
        return cls(execution=execution, idempotency_key=key, failures=failures, **_carried(data))

    def reprs(self) -> dict[str, str]:
        """What Flower shows as the task's arguments (see `flower_reprs`)."""
        return flower_reprs(self.execution.request, self.invocation)


def flower_reprs(request: ToolExecutionRequest, invocation: Invocation) -> dict[str, str]:
    """What Flower shows as a task's arguments: the model's arguments and the ids, never the
    invocation's parameters (they may hold credentials)."""
    arguments = request.arguments
    if len(arguments) > 1024:
        arguments = arguments[:1024] + "…"
    invocation_id = invocation.context.invocation_id
    shown = f"{{'arguments': {arguments!r}, 'call_id': {request.id!r}, 'invocation_id': '{invocation_id}'}}"
    return {"argsrepr": "()", "kwargsrepr": shown}


def outcome_from_failure(result: Any) -> ToolOutcome | None:
    """The structured outcome carried by a stored tool failure (`FAILURE_MODULE`), else `None`."""
    if not isinstance(result, dict) or result.get("exc_module") != FAILURE_MODULE:
        return None
    message = result.get("exc_message")
    if isinstance(message, list | tuple) and len(message) == 2 and isinstance(message[1], dict):
        try:
            return ToolOutcome.from_json(message[1])
        except (KeyError, ValueError):
            return None
    return None
