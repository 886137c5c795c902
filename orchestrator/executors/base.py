"""The seam between the LLM loop and the place tools run."""

from __future__ import annotations

from typing import Protocol

from workers import ToolDefinition, ToolExecutionRequest, ToolOutcome
from workers.invocation import Invocation

__all__ = ["ToolExecutor"]


class ToolExecutor(Protocol):
    """Runs one tool call and returns its structured outcome; never raises for a tool's failure."""

    async def execute(
        self, request: ToolExecutionRequest, definition: ToolDefinition, invocation: Invocation
    ) -> ToolOutcome: ...
