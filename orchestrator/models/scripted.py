"""`ScriptedChatModel`: a deterministic model for tests and the demo."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeAlias

from orchestrator.errors import ScriptExhaustedError
from orchestrator.messages import AiMessage, message_to_json
from orchestrator.models.base import (
    ChatEvent,
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    PartialResponse,
    PartialToolCall,
)

__all__ = ["ScriptExhaustedError", "ScriptedChatModel"]

Scripted: TypeAlias = AiMessage | str | ChatResponse
Script: TypeAlias = Sequence[Scripted] | Callable[[ChatRequest], Scripted]


class ScriptedChatModel:
    """Answers from a script: a list of responses taken in order, or a function of the request.

    A `str` is `AiMessage(text=...)`. Every request is recorded in `requests`. Asking for more
    responses than the list holds fails loudly, naming the request that found the script empty.
    `stream` splits text into chunks of `chunk_size` characters and each tool call's arguments into
    two pieces; `event_delay_s` spaces the events out, as a real model's stream would be.
    """

    provider = "scripted"
    supports_tool_result_images = True

    def __init__(self, script: Script, *, chunk_size: int = 8, event_delay_s: float = 0.0) -> None:
        self._script = script
        self._position = 0
        self.chunk_size = chunk_size
        self.event_delay_s = event_delay_s
        self.requests: list[ChatRequest] = []

    def _next(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        if callable(self._script):
            item = self._script(request)
        else:
            if self._position >= len(self._script):
                last = message_to_json(request.messages[-1]) if request.messages else None
                raise ScriptExhaustedError(
                    f"ScriptedChatModel ran out of responses: request {len(self.requests)} found "
                    f"only {len(self._script)} scripted; its last message was {last}"
                )
            item = self._script[self._position]
            self._position += 1
        if isinstance(item, ChatResponse):
            return item
        message = AiMessage(text=item) if isinstance(item, str) else item
        reason = FinishReason.TOOL_EXECUTION if message.tool_execution_requests else FinishReason.STOP
        return ChatResponse(ai_message=message, finish_reason=reason, model_name="scripted")

    @property
    def remaining(self) -> int | None:
        """Responses left in a list script (`None` for a function script)."""
        return None if callable(self._script) else len(self._script) - self._position

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return self._next(request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]:
        response = self._next(request)
        message = response.ai_message
        text = message.text or ""
        for start in range(0, len(text), max(self.chunk_size, 1)):
            await self._pause()
            yield PartialResponse(text[start : start + self.chunk_size])
        for index, call in enumerate(message.tool_execution_requests):
            half = len(call.arguments) // 2
            for piece in (call.arguments[:half], call.arguments[half:]):
                await self._pause()
                yield PartialToolCall(index=index, id=call.id, name=call.name, partial_arguments=piece)
            yield CompleteToolCall(index=index, request=call)
        await self._pause()
        yield CompleteResponse(response)

    async def _pause(self) -> None:
        if self.event_delay_s > 0:
            await asyncio.sleep(self.event_delay_s)
