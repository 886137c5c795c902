"""What the demo's scripted model reads of a request, and how it asks for calls: shared by its stories."""

from __future__ import annotations

import json
from collections.abc import Callable

from orchestrator.messages import AiMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import ChatRequest
from workers.protocol import ToolExecutionRequest

__all__ = ["Script", "asks", "call", "last_results"]

Script = Callable[[ChatRequest], AiMessage | str]


def last_results(request: ChatRequest) -> list[ToolExecutionResultMessage]:
    """The results of the calls the model asked for last, in order."""
    results: list[ToolExecutionResultMessage] = []
    for message in reversed(request.messages):
        if not isinstance(message, ToolExecutionResultMessage):
            break
        results.insert(0, message)
    return results


def asks(request: ChatRequest) -> bool:
    """Whether the user has just asked (the model's first turn)."""
    return isinstance(request.messages[-1], UserMessage)


def call(call_id: str, tool: str, **arguments: object) -> ToolExecutionRequest:
    return ToolExecutionRequest(call_id, tool, json.dumps(arguments))
