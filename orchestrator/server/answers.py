"""What a chat completion's handler hears of its invocation, wherever from: the run it started
(`completions.Heard`), or the event log of one another request started (`attached.Attached`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.messages import AiMessage
from orchestrator.models.base import ChatResponse, FinishReason, TokenUsage
from orchestrator.result import CompleteResponse, Result
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import InvocationRecord
from orchestrator.saga.states import InvocationState
from orchestrator.server import openai_wire

__all__ = ["Ending", "Quiet", "Told", "answer_of", "journaled_answer"]

log = logging.getLogger(__name__)


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


async def journaled_answer(journal: AsyncJournal | None, invocation_id: str) -> CompleteResponse | None:
    """The invocation's answer, as its end, if the journal has it succeeded (None when it has not,
    or cannot be read): what an invocation that failed after its answer was journaled ends with."""
    if journal is None:
        return None
    try:
        record = await journal.run(lambda j: j.invocation(invocation_id))
    except Exception as exc:
        log.warning("invocation %s: its journaled end is unknown: %s", invocation_id, exc)
        return None
    if record is None or record.state is not InvocationState.SUCCEEDED:
        return None
    return answer_of(record)


def answer_of(record: InvocationRecord) -> CompleteResponse:
    """A succeeded invocation's answer as the journal keeps it (its text; usage is not kept)."""
    reason = FinishReason.STOP if record.final_answer is not None else FinishReason.TOOL_EXECUTION
    result = Result(record.final_answer, finish_reason=reason, invocation_id=record.id)
    return CompleteResponse(ChatResponse(AiMessage(record.final_answer), reason), result)
