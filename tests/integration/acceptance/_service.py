"""What the acceptance tests of `AiService` share: the texts they expect, and helpers that build
requests, run a service in each mode and read back what ran and what the model was sent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import tests.integration.acceptance_tools as acc
from orchestrator import (
    AiService,
    CeleryExecutor,
    CompleteResponse,
    Result,
    ScriptedChatModel,
    ToolExecutionRequest,
    send_exception_message_to_llm,
)
from orchestrator.messages import messages_to_json
from workers import ReturnBehavior

FINAL = "final answer"
IMMEDIATE = ReturnBehavior.IMMEDIATE
IF_LAST = ReturnBehavior.IMMEDIATE_IF_LAST
TO_LLM = ReturnBehavior.TO_LLM
TOOL_OF = {TO_LLM: "acc_to_llm", IMMEDIATE: "acc_immediate", IF_LAST: "acc_if_last"}
BAD_COUNT = '{"count": "banana"}'
BAD_COUNT_TEXT = 'Argument "count" is not convertable to int, got str: <banana>'
VISIBLE_TEXT = "The card of ACME was declined"
ROUND_TRIPS_TEXT = "Something is wrong, exceeded 2 tool calling round trips (max_tool_calling_round_trips)"
HALLUCINATION_TEXT = (
    "The LLM is trying to execute the 'nope' tool, but no such tool exists. Most likely, it is a "
    "hallucination. You can override this default strategy by setting the "
    "hallucinated_tool_name_strategy on the AiService"
)


def service_for(model: ScriptedChatModel, executor: Any, **config: Any) -> AiService:
    return AiService(chat_model=model, tools=[acc], executor=executor, **config)


def handlers(kind: str, handler: Any, *, other: Any) -> dict[str, Any]:
    """The service options that give errors of `kind` ("arguments" or "execution") to `handler`, and
    the other kind to `other`."""
    if kind == "arguments":
        return {"tool_arguments_error_handler": handler, "tool_execution_error_handler": other}
    assert kind == "execution", kind
    return {"tool_arguments_error_handler": other, "tool_execution_error_handler": handler}


def explicit_handlers() -> dict[str, Any]:
    """Both kinds of error sent to the model, as the default handlers of a `chat` never do."""
    return handlers("arguments", send_exception_message_to_llm(), other=send_exception_message_to_llm())


def run_stream(service: AiService, text: str = "go", **kwargs: Any) -> tuple[list[Any], Result]:
    """Consume `service.stream(...)`; the last event must be a `CompleteResponse` carrying the `Result`."""

    async def consume() -> list[Any]:
        return [event async for event in service.stream(text, **kwargs)]

    events = asyncio.run(consume())
    last = events[-1]
    assert isinstance(last, CompleteResponse), f"last event is {last!r}"
    assert isinstance(last.result, Result)
    assert last.response.ai_message.text == last.result.content
    assert last.response.finish_reason == last.result.finish_reason
    assert sum(isinstance(e, CompleteResponse) for e in events) == 1
    return events, last.result


def invoke(service: AiService, mode: str, text: str = "go", **kwargs: Any) -> Result:
    if mode == "chat":
        return service.chat(text, **kwargs)
    if mode == "achat":
        return asyncio.run(service.achat(text, **kwargs))
    assert mode == "stream"
    return run_stream(service, text, **kwargs)[1]


def where(executor: Any) -> str | None:
    return acc.POOL if isinstance(executor, CeleryExecutor) else None


def executions(result: Result) -> list[tuple[str | None, str, str, bool, str]]:
    return [(e.request.id, e.request.name, e.result, e.has_failed, e.status) for e in result.tool_executions]


def assert_ran_where_expected(result: Result, executor: Any, worker: str | None = None) -> None:
    for execution in result.tool_executions:
        assert execution.pool == where(executor)
        if isinstance(executor, CeleryExecutor):
            assert execution.task_id is not None
            assert execution.worker is not None and execution.worker.endswith("@acceptance")
        else:
            assert (execution.task_id, execution.worker) == (None, None)


def sent_to_model(model: ScriptedChatModel) -> str:
    """Every message of every request the model received, as JSON text."""
    return json.dumps([messages_to_json(request.messages) for request in model.requests])


def bad_count() -> ToolExecutionRequest:
    return ToolExecutionRequest(id="t1", name="acc_typed", arguments=BAD_COUNT)
