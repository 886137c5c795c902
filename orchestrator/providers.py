"""Tools that change per call: programmatic tools and tool providers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from orchestrator.messages import ChatMessage, UserMessage
from workers.calls.invocation import InvocationContext, InvocationParameters
from workers.calls.results import ToolExecutionResult
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ReturnBehavior, SearchBehavior, ToolSpecification

__all__ = ["AiServiceTool", "ToolProvider", "ToolProviderRequest", "ToolProviderResult", "ToolRunContext"]


@dataclass(frozen=True)
class ToolRunContext:
    """What a programmatic tool's executor receives besides the request."""

    invocation_context: InvocationContext
    parameters: InvocationParameters
    memory_id: str


ToolCallable: TypeAlias = Callable[
    [ToolExecutionRequest, ToolRunContext],
    "str | ToolExecutionResult | Awaitable[str | ToolExecutionResult]",
]


@dataclass(frozen=True)
class AiServiceTool:
    """A tool given as a specification plus an executor that runs in the orchestrator.

    `executor(request, context)` returns the result text or a `ToolExecutionResult` (or an
    awaitable of either); an exception is an execution error, handled like any tool's.
    """

    specification: ToolSpecification
    executor: ToolCallable
    return_behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    search_behavior: SearchBehavior = SearchBehavior.SEARCHABLE

    @property
    def name(self) -> str:
        return self.specification.name


@dataclass(frozen=True)
class ToolProviderRequest:
    """What a provider is told: the user's message (even after memory evicted it), ids and messages."""

    user_message: UserMessage
    memory_id: str
    invocation_context: InvocationContext
    parameters: InvocationParameters
    messages: Sequence[ChatMessage] = ()


@dataclass(frozen=True)
class ToolProviderResult:
    """Tools a provider offers: `AiServiceTool`s, or objects/functions with `@tool` methods."""

    tools: Sequence[Any] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)


class ToolProvider(Protocol):
    """Gives tools per invocation (static) or before every model call (`is_dynamic = True`).

    A dynamic provider only adds tools: the first definition of a name wins, and a tool once given
    stays for the invocation.
    """

    is_dynamic: bool

    def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult: ...
