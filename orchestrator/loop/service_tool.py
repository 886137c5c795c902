"""An AI service offered as a tool of another (`AiService.as_tool`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.errors import OrchestratorError
from orchestrator.providers import AiServiceTool, ToolRunContext
from orchestrator.result import Result
from workers.protocol import ToolExecutionRequest
from workers.tools.specification import ReturnBehavior, ToolSpecification

__all__ = ["service_tool"]


def service_tool(
    achat: Callable[..., Awaitable[Result]],
    name: str,
    description: str,
    parameter: str,
    template: str | None,
) -> AiServiceTool:
    """A tool taking one string argument, `parameter`, whose call runs `achat(message, memory_id=...)`
    with that string (or `template` with it filled in), under the memory id `<name>:<calling
    invocation id>`; the answer is the tool's result."""
    specification = ToolSpecification(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {parameter: {"type": "string"}},
            "required": [parameter],
        },
    )

    async def run(request: ToolExecutionRequest, context: ToolRunContext) -> str:
        try:
            arguments: Any = json.loads(request.arguments or "{}")
        except ValueError as exc:
            raise OrchestratorError(f"Arguments of tool '{name}' are not valid JSON: {exc}") from None
        text = arguments.get(parameter) if isinstance(arguments, dict) else None
        if not isinstance(text, str):
            raise OrchestratorError(f'Required parameter "{parameter}" of tool "{name}" is missing')
        message = template.format(**{parameter: text}) if template is not None else text
        result = await achat(message, memory_id=f"{name}:{context.invocation_context.invocation_id}")
        return result.content or ""

    return AiServiceTool(specification, run, ReturnBehavior.TO_LLM)
