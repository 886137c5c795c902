"""What a scripted model says in the integration tests: a tool call, an answer asking for calls, the
results it reads back, and the saga service that runs such a script.

One spelling of each, so a test's script reads the same in every module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator import (
    AiMessage,
    AiService,
    ChatRequest,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    ToolExecutor,
)
from orchestrator.saga.journal import Journal

__all__ = ["ask", "call", "results_of", "saga_service", "tool_result"]


def call(call_id: str, name: str, /, **arguments: Any) -> ToolExecutionRequest:
    """The model's request, under id `call_id`, to call the tool `name` with `arguments`."""
    return ToolExecutionRequest(id=call_id, name=name, arguments=json.dumps(arguments))


def ask(*calls: ToolExecutionRequest) -> AiMessage:
    """A model answer asking for `calls`, run as one batch."""
    return AiMessage(tool_execution_requests=list(calls))


def tool_result(request: ToolExecutionRequest, text: str, *, is_error: bool) -> ToolExecutionResultMessage:
    """The result of `request` as the model reads it back."""
    return ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text, is_error=is_error)


def results_of(request: ChatRequest) -> list[ToolExecutionResultMessage]:
    """The tool results among the messages of `request`, in order."""
    return [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]


def saga_service(
    model: ScriptedChatModel, executor: ToolExecutor, journal: Journal, tools: Sequence[Any]
) -> AiService:
    """A service that runs `model`'s script on `executor` and undoes the saga when a tool fails."""
    return AiService(
        chat_model=model,
        tools=list(tools),
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
    )
