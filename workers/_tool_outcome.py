"""A call's outcome as it crosses the wire: how it ended (`OutcomeKind`), the cause of a failed tool's
exception (`ErrorCause`) and the outcome itself (`ToolOutcome`). Part of the wire contract
`workers.protocol` defines and re-exports: import them from there."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from workers.contents import Content, content_from_json, content_to_json

__all__ = ["ErrorCause", "OutcomeKind", "ToolOutcome"]


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
        return dataclasses.asdict(self)

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
    `task_id`, `pool` and `worker` say where the call ran, `waited_s` how long it waited before it
    was published and `wait_reason` for what (`concurrency`, `rate_limit`): set by the executor, not
    compared, never on the wire. `queued_s` is how long it waited in its pool's queue, from its
    publish to a worker starting it, as that worker measured it: it crosses the wire beside the
    outcome (`to_wire`), as the worker's name does, never in `to_json`, and is not compared; None
    when unknown (a call run in this process, retried, or told by an older worker).
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
    waited_s: float | None = field(default=None, compare=False)
    wait_reason: str | None = field(default=None, compare=False)
    queued_s: float | None = field(default=None, compare=False)

    @property
    def is_error(self) -> bool:
        return self.kind.is_error

    def to_json(self) -> dict[str, Any]:
        """`kind`, `text` and the fields set (`from_json` reads an absent one as unset): Flower shows it."""
        fields = {
            "kind": self.kind.value,
            "text": self.text,
            "contents": None if self.contents is None else [content_to_json(c) for c in self.contents],
            "result_object": self.result_object,
            "attributes": self.attributes or None,
            "error_type": self.error_type,
            "message_for_llm": self.message_for_llm,
            "parameter_changes": self.parameter_changes or None,
            "error_type_name": self.error_type_name,
            "error_cause": self.error_cause.to_json() if self.error_cause is not None else None,
        }
        return {k: v for k, v in fields.items() if v is not None}

    def to_wire(self, worker: str | None) -> dict[str, Any]:
        """What a worker stores as the call's result (or in its failure): `to_json()`, the worker's
        name, and `queued_s` in milliseconds' precision when it was measured (absent otherwise)."""
        wire: dict[str, Any] = {**self.to_json(), "worker": worker}
        if self.queued_s is not None:
            wire["queued_s"] = round(self.queued_s, 3)
        return wire

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolOutcome:
        """The outcome of `to_json()` or of `to_wire()` (an absent field read as unset)."""
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
            queued_s=_seconds(data.get("queued_s")),
        )


def _seconds(value: Any) -> float | None:
    """A duration read from the wire: a number of seconds, not negative; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        return None
    return float(value)
