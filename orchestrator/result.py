"""What an invocation returns, and the events a streamed invocation yields besides the model's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

from orchestrator.models import base
from orchestrator.models.base import FinishReason, TokenUsage
from workers.protocol import ToolExecution

__all__ = ["CompleteResponse", "Result", "StreamEvent", "ToolExecuted"]


@dataclass
class Result:
    """The answer of one invocation: the final text (`None` on immediate return), every tool
    execution in request order across all round trips, why it ended, and the tokens it used."""

    content: str | None
    tool_executions: list[ToolExecution] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    token_usage: TokenUsage | None = None
    invocation_id: str | None = None


@dataclass(frozen=True)
class ToolExecuted:
    """A tool call finished (streamed as soon as it does): its execution, with timings and where it ran."""

    execution: ToolExecution


@dataclass(frozen=True)
class CompleteResponse(base.CompleteResponse):
    """The last event of `AiService.stream()`: the final response, and the invocation's `Result`.

    It is a `CompleteResponse` of the model interface (`isinstance(event, CompleteResponse)` holds
    whichever is imported) that carries the `Result` besides; the models never see this type.
    """

    result: Result


# What `AiService.stream()` yields: the model's events, `ToolExecuted`, then one `CompleteResponse`.
StreamEvent: TypeAlias = base.ChatEvent | ToolExecuted
