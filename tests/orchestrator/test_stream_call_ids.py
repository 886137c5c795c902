"""`stream()`: a streamed complete tool call carries the id its call runs under, the one its
`ToolExecuted` reports, even when the model gives no id or one it used before."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.models.base import CompleteToolCall
from orchestrator.result import StreamEvent, ToolExecuted
from workers import tool


@tool("Echoes a word")
def echo(word: str) -> str:
    return word


def _events(service: AiService) -> list[StreamEvent]:
    async def collect() -> list[StreamEvent]:
        return [event async for event in service.stream("echo")]

    return asyncio.run(collect())


@pytest.mark.parametrize("concurrently", [True, False], ids=["concurrent", "one by one"])
def test_complete_tool_calls_and_their_executions_carry_the_same_ids(concurrently: bool) -> None:
    # given: a model that gives its calls no id, then reuses an id within a response and across two
    script: list[AiMessage | str] = [
        AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest("", "echo", '{"word": "a"}'),
                ToolExecutionRequest("", "echo", '{"word": "b"}'),
            ]
        ),
        AiMessage(
            tool_execution_requests=[
                ToolExecutionRequest("same", "echo", '{"word": "c"}'),
                ToolExecutionRequest("same", "echo", '{"word": "d"}'),
            ]
        ),
        AiMessage(tool_execution_requests=[ToolExecutionRequest("same", "echo", '{"word": "e"}')]),
        "done",
    ]
    service = AiService(
        chat_model=ScriptedChatModel(script), tools=[echo], execute_tools_concurrently=concurrently
    )

    # when
    events = _events(service)

    # then: every streamed call has an id of its own, and its execution reports that same id
    streamed = [e.request for e in events if isinstance(e, CompleteToolCall)]
    executed = [e.execution.request for e in events if isinstance(e, ToolExecuted)]
    ids = [r.id for r in streamed]
    assert ids == ["call_1_0", "call_1_1", "same", "same_2", "same_3"]
    assert sorted((r.id, r.arguments) for r in executed) == sorted((r.id, r.arguments) for r in streamed)
