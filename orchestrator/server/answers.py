"""What a chat completion's handler hears of its invocation, wherever from: the run it started
(`completions.Heard`), or the event log of one another request started (`attached.Attached`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.models.base import FinishReason, TokenUsage
from orchestrator.result import Result
from orchestrator.server import openai_wire

__all__ = ["Ending", "Quiet", "Told"]


class Quiet:
    """Nothing happened for a keep-alive interval (a quiet tool): a streaming client is told so."""


@dataclass(frozen=True)
class Ending:
    """How an invocation's answer ends: its text, finish and usage, or the calls it waits for."""

    invocation_id: str
    content: str | None
    finish: FinishReason | None
    usage: TokenUsage | None
    waiting: list[dict[str, Any]] | None = None  # paused: the waiting calls as JSON

    @classmethod
    def of(cls, result: Result) -> Ending:
        paused = result.finish_reason is FinishReason.APPROVAL_REQUIRED
        waiting = [a.to_json() for a in result.pending_approvals] if paused else None
        return cls(
            str(result.invocation_id), result.content, result.finish_reason, result.token_usage, waiting
        )

    def text(self) -> str | None:
        """What the completion says: the answer, or what waits and where to decide."""
        if self.waiting is None:
            return self.content
        return openai_wire.waiting_text(self.invocation_id, self.waiting)


class Told(Protocol):
    """Where a completion's handler hears its invocation: `PartialResponse`s, `Quiet`s, then one
    `Ending`, or an `ApiError` raised; `leave()` when the client is gone or the answer sent."""

    def events(self) -> AsyncIterator[object]: ...

    def leave(self) -> None: ...
