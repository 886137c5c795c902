"""The tools of one invocation: tool sources resolved, what providers add, what the model sees, and
call ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from orchestrator.errors import OrchestratorError
from orchestrator.messages import AiMessage, ChatMessage, ToolExecutionResultMessage
from orchestrator.providers import AiServiceTool, ToolProvider, ToolProviderRequest, ToolProviderResult
from orchestrator.search import FOUND_TOOLS_ATTRIBUTE
from workers.errors import ToolDefinitionError
from workers.protocol import ToolExecutionRequest
from workers.tools import ToolDefinition, discover_tools
from workers.tools.registry import instantiate
from workers.tools.specification import SearchBehavior, ToolSpecification

__all__ = [
    "Tool",
    "add_provided_tools",
    "resolve_tools",
    "unique_id",
    "visible_specifications",
    "with_unique_ids",
]

Tool: TypeAlias = ToolDefinition | AiServiceTool


@runtime_checkable
class _Service(Protocol):
    """An AI service (`AiService`): a tool of another only through `as_tool(name, description)`."""

    def as_tool(self, name: str, description: str) -> AiServiceTool: ...

    async def achat(self, user_message: Any) -> Any: ...


def resolve_tools(sources: Iterable[Any]) -> list[Tool]:
    """The tools of each source: a `ToolDefinition` or `AiServiceTool` as it is, the `@tool` methods of
    an object, class (instantiated) or module, or a `@tool` function."""
    resolved: list[Tool] = []
    for source in sources:
        if isinstance(source, ToolDefinition | AiServiceTool):
            resolved.append(source)
        elif isinstance(source, _Service) and not isinstance(source, type):
            raise ToolDefinitionError("Pass an AiService as a tool with service.as_tool(name, description)")
        else:
            resolved += discover_tools(instantiate(source) if isinstance(source, type) else source)
    return resolved


def add_provided_tools(
    providers: Sequence[ToolProvider],
    request: ToolProviderRequest,
    tools: dict[str, Tool],
    *,
    dynamic: bool,
) -> None:
    """Add the providers' tools: a static provider's name clash is an error; a dynamic provider only
    adds (the first definition of a name wins, and a tool once given stays for the invocation)."""
    for provider in providers:
        result = provider.provide_tools(request)
        if not isinstance(result, ToolProviderResult):
            raise OrchestratorError(
                f"Tool provider {provider!r} returned {_kind(result)} from provide_tools(); it must return "
                "a ToolProviderResult (ToolProviderResult() when it has no tools to add)"
            )
        for tool in resolve_tools(result.tools):
            name = tool.specification.name
            if name in tools:
                if dynamic:
                    continue
                raise ToolDefinitionError(f"Duplicated definition for tool: {name}")
            tools[name] = tool


def _kind(value: object) -> str:
    return "None" if value is None else f"a {type(value).__qualname__}"


def visible_specifications(
    tools: Mapping[str, Tool],
    search_tool: ToolSpecification | None,
    found_now: Sequence[str],
    messages: Sequence[ChatMessage],
) -> list[ToolSpecification]:
    """What the model is shown: every tool, or with tool search (`search_tool`, the strategy's search
    tool) the always-visible ones, the search tool, and the tools found so far (earlier searches still
    in memory, then this invocation's)."""
    if search_tool is None:
        return [tool.specification for tool in tools.values()]
    search_name = search_tool.name
    found: list[str] = []
    for message in messages:
        if isinstance(message, ToolExecutionResultMessage) and message.tool_name == search_name:
            found += [str(n) for n in message.attributes.get(FOUND_TOOLS_ATTRIBUTE, [])]
    visible = [t.specification for t in tools.values() if t.search_behavior is SearchBehavior.ALWAYS_VISIBLE]
    visible.append(search_tool)
    names = {s.name for s in visible}
    for name in [*found, *found_now]:
        tool = tools.get(name)
        if tool is not None and name not in names:
            visible.append(tool.specification)
            names.add(name)
    return visible


def with_unique_ids(message: AiMessage, round_trip: int, seen: set[str]) -> AiMessage:
    """Every call of an invocation gets an id of its own (`seen` holds those of earlier responses):
    results are matched to calls by id, and a call's idempotency key is built from it. A missing id
    gets a stable generated one; an id used before gets a suffix."""
    requests = [unique_id(r, i, round_trip, seen) for i, r in enumerate(message.tool_execution_requests)]
    if requests == message.tool_execution_requests:
        return message
    return dataclasses.replace(message, tool_execution_requests=requests)


def unique_id(
    request: ToolExecutionRequest, index: int, round_trip: int, seen: set[str]
) -> ToolExecutionRequest:
    call_id = request.id or f"call_{round_trip}_{index}"
    if call_id in seen:
        suffix = 2
        while f"{call_id}_{suffix}" in seen:
            suffix += 1
        call_id = f"{call_id}_{suffix}"
    seen.add(call_id)
    return request if call_id == request.id else dataclasses.replace(request, id=call_id)
