"""The model interface: requests, responses, streaming events and the `ChatModel` protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeAlias

from orchestrator.messages import AiMessage, ChatMessage
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ToolSpecification

__all__ = [
    "ChatEvent",
    "ChatModel",
    "ChatRequest",
    "ChatResponse",
    "CompleteResponse",
    "CompleteToolCall",
    "FinishReason",
    "PartialResponse",
    "PartialToolCall",
    "TokenUsage",
    "ToolChoice",
]


class FinishReason(StrEnum):
    """Why the model stopped (or why the invocation returned, for `TOOL_EXECUTION`)."""

    STOP = "STOP"
    LENGTH = "LENGTH"
    TOOL_EXECUTION = "TOOL_EXECUTION"
    CONTENT_FILTER = "CONTENT_FILTER"
    OTHER = "OTHER"
    APPROVAL_REQUIRED = "APPROVAL_REQUIRED"  # the invocation paused: calls wait for a person's approval
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"  # the invocation stopped: it would have gone past a budget


class ToolChoice(StrEnum):
    """Whether the model may (`AUTO`), must (`REQUIRED`) or must not (`NONE`) call tools."""

    AUTO = "AUTO"
    REQUIRED = "REQUIRED"
    NONE = "NONE"


@dataclass(frozen=True)
class TokenUsage:
    """Tokens a response (or an invocation, summed) used."""

    input_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    def __add__(self, other: TokenUsage | None) -> TokenUsage:
        if other is None:
            return self

        def add(a: int | None, b: int | None) -> int | None:
            return None if a is None and b is None else (a or 0) + (b or 0)

        return TokenUsage(
            add(self.input_tokens, other.input_tokens), add(self.output_tokens, other.output_tokens)
        )


@dataclass(frozen=True)
class ChatRequest:
    """What the model is sent: the messages, the tools it may call, and generation parameters."""

    messages: list[ChatMessage]
    tool_specifications: list[ToolSpecification] = field(default_factory=list)
    tool_choice: ToolChoice | None = None
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ChatResponse:
    """The model's answer, with why it stopped and what it cost."""

    ai_message: AiMessage
    finish_reason: FinishReason | None = None
    token_usage: TokenUsage | None = None
    model_name: str | None = None
    id: str | None = None


@dataclass(frozen=True)
class PartialResponse:
    """A piece of the answer's text, as the model streams it."""

    text: str


@dataclass(frozen=True)
class PartialToolCall:
    """A piece of a tool call's arguments, for providers that stream them."""

    index: int
    id: str | None
    name: str | None
    partial_arguments: str


@dataclass(frozen=True)
class CompleteToolCall:
    """A tool call whose arguments are complete; with concurrency on, it is dispatched at once."""

    index: int
    request: ToolExecutionRequest


@dataclass(frozen=True)
class CompleteResponse:
    """The end of a streamed answer: the whole response. `AiService.stream()` ends with one too, which
    also carries the invocation's `Result` (`orchestrator.result.CompleteResponse`)."""

    response: ChatResponse


ChatEvent: TypeAlias = PartialResponse | PartialToolCall | CompleteToolCall | CompleteResponse


class ChatModel(Protocol):
    """A chat model: a whole answer with `chat`, or the answer as events with `stream`.

    `stream` yields `PartialResponse`/`PartialToolCall`/`CompleteToolCall` events and ends with one
    `CompleteResponse`. `provider` names the provider in errors; `supports_tool_result_images`
    says whether images can be sent back as tool results.
    """

    provider: str
    supports_tool_result_images: bool

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatEvent]: ...
