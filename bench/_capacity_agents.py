"""The capacity run's second agent: `fanout`, whose model asks for `FANOUT` `noop` calls at once, then
answers. Beside `bench.agents:plain` (one call per completion) it separates what a tool call costs from
what the completion around it costs: cost per completion = a + b x calls."""

from __future__ import annotations

import itertools

from bench import tools
from bench.agents import ANSWER
from orchestrator import AiMessage, AiService, CeleryExecutor, ScriptedChatModel, fail_invocation
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.models.base import ChatRequest
from workers import ToolExecutionRequest

__all__ = ["FANOUT", "fanout"]

FANOUT = 8
_ids = itertools.count(1)


def _script(request: ChatRequest) -> AiMessage:
    if request.messages and isinstance(request.messages[-1], ToolExecutionResultMessage):
        return AiMessage(text=ANSWER)
    batch = next(_ids)
    return AiMessage(
        tool_execution_requests=[ToolExecutionRequest(f"f{batch}-{n}", "noop", "{}") for n in range(FANOUT)]
    )


def fanout() -> AiService:
    """`FANOUT` `noop` calls in one model response, on the `bench` pool, then `ANSWER`."""
    return AiService(
        chat_model=ScriptedChatModel(_script),
        tools=[tools],
        executor=CeleryExecutor(),
        tool_arguments_error_handler=fail_invocation(),
        tool_execution_error_handler=fail_invocation(),
    )
