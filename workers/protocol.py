"""The wire contract between orchestrator and workers: a call request and its outcome, JSON only."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from workers.contents import Content, content_from_json, content_to_json

__all__ = [
    "ErrorCause",
    "OutcomeKind",
    "ToolExecution",
    "ToolExecutionRequest",
    "ToolOutcome",
    "call_task_id",
]

_CALL_NAMESPACE = uuid.UUID("0d7c3f52-8a61-4c1e-9b7e-6f2a41d3e9b5")


def call_task_id(idempotency_key: str, attempt: int = 0) -> str:
    """The task id of one dispatch of a call, derived from its idempotency key.

    The first dispatch (`attempt` 0) has the id the journal records before the call is published,
    so a recoverer finds the call's state from the log alone; a dispatch of the same call again
    (its worker was lost) is attempt 1, 2, ... with an id of its own, found the same way.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be at least 0, got {attempt}")
    name = idempotency_key if attempt == 0 else f"{idempotency_key}\x00{attempt}"
    return str(uuid.uuid5(_CALL_NAMESPACE, name))  # a UUID, as Celery's own task ids are


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


class OutcomeKind(StrEnum):
    """How a tool call ended."""

    SUCCESS = "success"
    ARGUMENTS_ERROR = "arguments_error"
    EXECUTION_ERROR = "execution_error"
    TIMED_OUT = "timed_out"
    WORKER_LOST = "worker_lost"
    NO_WORKER = "no_worker"

    @property
    def is_error(self) -> bool:
        return self is not OutcomeKind.SUCCESS


@dataclass(frozen=True)
class ErrorCause:
    """The direct `__cause__` of a failed tool's exception, as it crosses the wire: error handlers
    receive it (one level of unwrapping) wherever the call ran."""

    error_type: str
    type_name: str
    message: str
    message_for_llm: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "error_type": self.error_type,
            "type_name": self.type_name,
            "message": self.message,
            "message_for_llm": self.message_for_llm,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErrorCause:
        return cls(
            error_type=str(data["error_type"]),
            type_name=str(data.get("type_name") or data["error_type"]),
            message=str(data.get("message", "")),
            message_for_llm=data.get("message_for_llm"),
        )


@dataclass(frozen=True)
class ToolOutcome:
    """The structured outcome of one call, identical whether it ran in-process or on a worker.

    For a success, `text` is the result text and `contents` the multimodal parts, if any. For an
    error, `text` is the error message, `error_type` the exception's class name, `error_type_name`
    its qualified name (`ValueError`, `billing.errors.Declined`), `error_cause` its `__cause__`, and
    `message_for_llm` the text a `ToolErrorVisibleToLlm` chose for the model (`None` when unmarked).
    `exception` is the live exception when the call ran in this process; it never crosses the wire.
    `task_id`, `pool` and `worker` say where the call ran (set by the executor; not compared).
    """

    kind: OutcomeKind
    text: str
    contents: list[Content] | None = None
    result_object: Any = None
    attributes: dict[str, Any] = field(default_factory=dict)
    error_type: str | None = None
    message_for_llm: str | None = None
    parameter_changes: dict[str, Any] = field(default_factory=dict)
    error_type_name: str | None = None
    error_cause: ErrorCause | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    task_id: str | None = field(default=None, compare=False)
    pool: str | None = field(default=None, compare=False)
    worker: str | None = field(default=None, compare=False)

    @property
    def is_error(self) -> bool:
        return self.kind.is_error

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "text": self.text,
            "contents": [content_to_json(c) for c in self.contents] if self.contents is not None else None,
            "result_object": self.result_object,
            "attributes": self.attributes,
            "error_type": self.error_type,
            "message_for_llm": self.message_for_llm,
            "parameter_changes": self.parameter_changes,
            "error_type_name": self.error_type_name,
            "error_cause": self.error_cause.to_json() if self.error_cause is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolOutcome:
        contents = data.get("contents")
        cause = data.get("error_cause")
        return cls(
            kind=OutcomeKind(data["kind"]),
            text=str(data.get("text", "")),
            contents=[content_from_json(c) for c in contents] if contents is not None else None,
            result_object=data.get("result_object"),
            attributes=dict(data.get("attributes") or {}),
            error_type=data.get("error_type"),
            message_for_llm=data.get("message_for_llm"),
            parameter_changes=dict(data.get("parameter_changes") or {}),
            error_type_name=data.get("error_type_name"),
            error_cause=ErrorCause.from_json(cause) if isinstance(cause, dict) else None,
        )


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
