"""What an invocation returns, and the events a streamed invocation yields besides the model's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from orchestrator.models import base
from orchestrator.models.base import FinishReason, TokenUsage
from orchestrator.saga.journal import ApprovalRecord
from workers.protocol import ToolExecution

__all__ = [
    "ApprovalRequested",
    "CompleteResponse",
    "InvocationResumed",
    "Result",
    "StreamEvent",
    "ToolExecuted",
    "ToolProgress",
]


@dataclass
class Result:
    """The answer of one invocation: the final text (`None` on immediate return), every tool
    execution in request order across all round trips, why it ended, and the tokens it used."""

    content: str | None
    tool_executions: list[ToolExecution] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    token_usage: TokenUsage | None = None
    invocation_id: str | None = None
    # With `FinishReason.APPROVAL_REQUIRED`: the calls waiting for a person (`AiService.resume`).
    pending_approvals: list[ApprovalRecord] = field(default_factory=list)
    # With `FinishReason.BUDGET_EXCEEDED`: which budget stopped it, and why.
    budget_exceeded: str | None = None


@dataclass(frozen=True)
class ToolExecuted:
    """A tool call finished (streamed as soon as it does): its execution, with timings and where it ran."""

    execution: ToolExecution


@dataclass(frozen=True)
class ToolProgress:
    """A running tool call reported progress (`ToolProgressReporter.progress()`), streamed in order
    before the call's `ToolExecuted`: the call's id and tool, how far it is (`fraction` in [0, 1]),
    its `message` and JSON `data` (each None when not given), and when the tool reported it (`at`).

    Reports are rate-limited per call (at most one every 50 ms travels, the latest winning), so a
    tool reporting in a tight loop yields a few of these, the last one always."""

    request_id: str | None
    tool_name: str
    fraction: float | None
    message: str | None
    data: Any
    at: datetime


@dataclass(frozen=True)
class ApprovalRequested:
    """The invocation paused: these calls wait for a person's approval (streamed before the last
    event, whose `Result` lists them too)."""

    invocation_id: str
    approvals: tuple[ApprovalRecord, ...]


@dataclass(frozen=True)
class InvocationResumed:
    """A paused invocation goes on in this process, which took it (`AiService.stream_resume`): the
    decisions on the calls it waited on, before any of them runs."""

    invocation_id: str
    approvals: tuple[ApprovalRecord, ...]


@dataclass(frozen=True)
class CompleteResponse(base.CompleteResponse):
    """The last event of `AiService.stream()`: the final response, and the invocation's `Result`.

    It is a `CompleteResponse` of the model interface (`isinstance(event, CompleteResponse)` holds
    whichever is imported) that carries the `Result` besides; the models never see this type.
    """

    result: Result


# What `AiService.stream()` yields: the model's events, `ToolProgress`, `ToolExecuted` and
# `ApprovalRequested` (and, first when resumed, `InvocationResumed`), then one `CompleteResponse`.
StreamEvent: TypeAlias = base.ChatEvent | ToolProgress | ToolExecuted | ApprovalRequested | InvocationResumed
