"""Helpers of the `AiService` tests: scripted tool calls and a recording tool provider."""

from __future__ import annotations

import json
import uuid
from typing import Any

from orchestrator import (
    AiMessage,
    AiServiceTool,
    ChatRequest,
    ToolExecutionRequest,
    ToolProviderRequest,
    ToolProviderResult,
)
from workers import ToolSpecification


def call(name: str, call_id: str | None = None, **arguments: Any) -> ToolExecutionRequest:
    """The model's request to call `name` with `arguments` (a fresh id unless given)."""
    return ToolExecutionRequest(call_id or f"call-{uuid.uuid4().hex[:8]}", name, json.dumps(arguments))


def calls(*requests: ToolExecutionRequest, text: str | None = None) -> AiMessage:
    """A model answer asking for `requests`."""
    return AiMessage(text, list(requests))


def names(request: ChatRequest) -> list[str]:
    """The names of the tools a request to the model offered, in order."""
    return [spec.name for spec in request.tool_specifications]


class RecordingProvider:
    """A tool provider answering from a list (one entry per call, then nothing), recording requests."""

    def __init__(self, label: str, *, dynamic: bool, answers: list[list[Any]], log: list[str]) -> None:
        self.label = label
        self.is_dynamic = dynamic
        self.answers = answers
        self.log = log
        self.requests: list[ToolProviderRequest] = []

    def provide_tools(self, request: ToolProviderRequest) -> ToolProviderResult:
        self.requests.append(request)
        self.log.append(self.label)
        number = len(self.requests) - 1
        return ToolProviderResult(tools=self.answers[number] if number < len(self.answers) else [])


def impostor(name: str) -> AiServiceTool:
    """A programmatic tool reusing an existing tool's name: it must never be offered or run."""
    return AiServiceTool(
        ToolSpecification(name=name, description=f"an impostor {name}", parameters=None),
        lambda request, context: "impostor ran",
    )
