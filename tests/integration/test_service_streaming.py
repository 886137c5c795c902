"""`AiService` with tools, end to end: streaming, and `Result` — each run in-process
(`LocalExecutor`) and on real worker processes over real Redis (`CeleryExecutor`), with a
`ScriptedChatModel` standing in for the LLM.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

import tests.integration.tools as T
from orchestrator import (
    AiMessage,
    AiService,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    HallucinatedToolNameError,
    PartialResponse,
    PartialToolCall,
    Result,
    ScriptedChatModel,
    TokenUsage,
    ToolExecuted,
    ToolExecutionResultMessage,
    UserMessage,
    send_exception_message_to_llm,
)
from tests.integration._placement import assert_ran, is_celery
from tests.orchestrator._service import call as _call
from tests.orchestrator._service import calls as _calls

pytestmark = pytest.mark.integration

# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["pools"]


# -- 5. streaming ---------------------------------------------------------------------------------


def _stream(service: AiService, text: str, **kwargs: Any) -> list[tuple[Any, datetime]]:
    """Consume `service.stream(...)`, recording when each event arrived."""

    async def consume() -> list[tuple[Any, datetime]]:
        return [(event, datetime.now(UTC)) async for event in service.stream(text, **kwargs)]

    return asyncio.run(consume())


def _shape(event: Any) -> tuple[Any, ...]:
    if isinstance(event, PartialResponse):
        return ("partial", event.text)
    if isinstance(event, PartialToolCall):
        return ("partial_tool_call", event.index, event.id, event.name)
    if isinstance(event, CompleteToolCall):
        return ("complete_tool_call", event.index, event.request)
    if isinstance(event, ToolExecuted):
        return ("executed", event.execution.request.id, event.execution.result)
    if isinstance(event, CompleteResponse):
        return ("complete", event.response.ai_message.text)
    raise AssertionError(f"unexpected event {event!r}")


def test_stream_events_arrive_in_order(executor: Any) -> None:
    # given: one response with text and a tool call, then a final answer
    call = _call("echo", "s1", text="hi", times=2)
    model = ScriptedChatModel([_calls(call, text="Checking the echo"), "It said hi hi"])
    service = AiService(chat_model=model, tools=[T.echo], executor=executor)

    # when
    events = [event for event, _ in _stream(service, "echo twice", memory_id="s")]

    # then: text pieces, the call's pieces, the complete call, its execution, the answer, the end
    assert [_shape(e) for e in events] == [
        ("partial", "Checking"),
        ("partial", " the ech"),
        ("partial", "o"),
        ("partial_tool_call", 0, "s1", "echo"),
        ("partial_tool_call", 0, "s1", "echo"),
        ("complete_tool_call", 0, call),
        ("executed", "s1", "hi hi"),
        ("partial", "It said "),
        ("partial", "hi hi"),
        ("complete", "It said hi hi"),
    ]
    pieces = [e.partial_arguments for e in events if isinstance(e, PartialToolCall)]
    assert "".join(pieces) == call.arguments
    # and: the final event carries the Result of the invocation
    final = events[-1]
    assert isinstance(final, CompleteResponse) and isinstance(final.result, Result)
    assert final.result.content == "It said hi hi"
    assert final.result.finish_reason is FinishReason.STOP
    assert [e.result for e in final.result.tool_executions] == ["hi hi"]
    executed = events[6]
    assert isinstance(executed, ToolExecuted)
    assert executed.execution == final.result.tool_executions[0]
    assert_ran(executor, executed.execution, "alpha", "alpha@integration")


def test_stream_dispatches_a_tool_while_the_model_is_still_streaming(executor: Any) -> None:
    # given: a slowly streaming model whose response holds two tool calls
    first, second = _call("echo", "d1", text="one"), _call("echo", "d2", text="two")
    model = ScriptedChatModel([_calls(first, second), "both done"], event_delay_s=0.05)
    service = AiService(chat_model=model, tools=[T.echo], executor=executor)

    # when
    timed = _stream(service, "two echoes")

    # then: the first call started before the model finished streaming its response (the second
    # call's complete event is that response's last event)
    last_of_response = next(t for e, t in timed if isinstance(e, CompleteToolCall) and e.index == 1)
    final = timed[-1][0]
    assert isinstance(final, CompleteResponse) and final.result is not None
    executions = final.result.tool_executions
    assert [e.request.id for e in executions] == ["d1", "d2"]
    assert [e.result for e in executions] == ["one", "two"]
    assert executions[0].started_at is not None
    assert executions[0].started_at < last_of_response
    assert final.result.content == "both done"


def test_stream_without_concurrency_runs_tools_after_the_response(executor: Any) -> None:
    # given: the same slow stream, with tools run one after another
    first, second = _call("echo", "q1", text="one"), _call("echo", "q2", text="two")
    model = ScriptedChatModel([_calls(first, second), "both done"], event_delay_s=0.05)
    service = AiService(chat_model=model, tools=[T.echo], executor=executor, execute_tools_concurrently=False)

    # when
    timed = _stream(service, "two echoes")

    # then: nothing started before the response was complete, and they ran in request order
    last_of_response = next(t for e, t in timed if isinstance(e, CompleteToolCall) and e.index == 1)
    final = timed[-1][0]
    assert isinstance(final, CompleteResponse) and final.result is not None
    one, two = final.result.tool_executions
    assert one.started_at is not None and two.started_at is not None and one.finished_at is not None
    assert one.started_at > last_of_response
    assert two.started_at >= one.finished_at


def test_stream_ends_with_the_error(executor: Any) -> None:
    # given: the model calls a tool that does not exist
    model = ScriptedChatModel([_calls(_call("nope", "h1"))])
    service = AiService(chat_model=model, tools=[T.echo], executor=executor)
    seen: list[Any] = []

    async def consume() -> None:
        async for event in service.stream("hi"):
            seen.append(event)

    # when / then: the stream raises the hallucination error, after the call's events
    with pytest.raises(HallucinatedToolNameError) as raised:
        asyncio.run(consume())
    assert str(raised.value).startswith(
        "The LLM is trying to execute the 'nope' tool, but no such tool exists."
    )
    assert isinstance(seen[-1], CompleteToolCall)
    assert not any(isinstance(e, CompleteResponse) for e in seen)


# -- 6. Result ------------------------------------------------------------------------------------


def test_result_holds_every_execution_in_request_order_with_timings_and_placement(executor: Any) -> None:
    # given: a slow call and a quick one in one response, a failing one in the next; token usage on
    # every response
    slow, quick, failing = (
        _call("slow", "r1", seconds=0.3),
        _call("echo", "r2", text="x"),
        _call("fail", "r3", how="other"),
    )
    model = ScriptedChatModel(
        [
            ChatResponse(_calls(slow, quick), FinishReason.TOOL_EXECUTION, TokenUsage(10, 5)),
            ChatResponse(_calls(failing), FinishReason.TOOL_EXECUTION, TokenUsage(20, 6)),
            ChatResponse(AiMessage("done"), FinishReason.STOP, TokenUsage(7, 3)),
        ]
    )
    service = AiService(
        chat_model=model,
        tools=[T.slow, T.echo, T.fail],
        executor=executor,
        tool_execution_error_handler=send_exception_message_to_llm(),
    )

    # when
    result = service.chat("go")

    # then: the answer and the summed token usage
    assert result.content == "done"
    assert result.finish_reason is FinishReason.STOP
    assert result.token_usage == TokenUsage(37, 14)
    assert result.token_usage is not None and result.token_usage.total_tokens == 51

    # and: every execution, in request order (not completion order), with its outcome
    executions = result.tool_executions
    assert [e.request for e in executions] == [slow, quick, failing]
    assert [e.result for e in executions] == ["slept 0.3", "x", "broken: other"]
    assert [e.status for e in executions] == ["success", "success", "execution_error"]
    assert [e.has_failed for e in executions] == [False, False, True]

    # and: timings: each started before it finished; the calls of one response ran at once, the
    # next response's calls after them
    for execution in executions:
        assert execution.started_at is not None and execution.finished_at is not None
        assert execution.started_at.tzinfo is not None
        assert execution.started_at <= execution.finished_at
    assert executions[0].duration_s is not None and executions[0].duration_s >= 0.3
    assert executions[1].finished_at < executions[0].finished_at  # type: ignore[operator]
    assert executions[1].started_at < executions[0].finished_at  # type: ignore[operator]
    assert executions[2].started_at >= executions[0].finished_at  # type: ignore[operator]

    # and: where each ran
    for execution in executions:
        assert_ran(executor, execution, "alpha", "alpha@integration")
    if is_celery(executor):
        assert len({e.task_id for e in executions}) == 3

    # and: the result messages reached the model in request order, after the AI message
    assert model.requests[1].messages == [
        UserMessage("go"),
        _calls(slow, quick),
        ToolExecutionResultMessage("r1", "slow", "slept 0.3"),
        ToolExecutionResultMessage("r2", "echo", "x"),
    ]
