"""`AiService` tool providers, tool search and token usage in-process: the parts of the loop that need
no worker and no Redis (the same features end to end on workers: tests/integration/test_service_tools.py
and test_service_streaming.py)."""

from __future__ import annotations

import pytest

import tests.integration.search_tools as st
import tests.integration.tools as T
from orchestrator import (
    AiMessage,
    AiService,
    AiServiceTool,
    ChatResponse,
    FinishReason,
    MessageWindowChatMemory,
    ScriptedChatModel,
    SimpleToolSearchStrategy,
    TokenUsage,
    ToolExecutionResultMessage,
)
from tests.orchestrator._service import RecordingProvider, call, calls, impostor, names
from workers import ToolSpecification
from workers.errors import ToolDefinitionError

SEARCH = SimpleToolSearchStrategy.NAME


def test_duplicate_between_tools_and_static_provider_fails_before_the_model_is_asked() -> None:
    # given: `echo` given both as a tool of the service and by a static provider
    log: list[str] = []
    model = ScriptedChatModel(["never"])
    service = AiService(
        chat_model=model,
        tools=[T.echo],
        tool_providers=[RecordingProvider("static", dynamic=False, answers=[[T.echo]], log=log)],
    )

    # when / then
    with pytest.raises(ToolDefinitionError) as raised:
        service.chat("hi")
    assert str(raised.value) == "Duplicated definition for tool: echo"
    assert model.requests == []


def test_duplicate_between_two_static_providers_fails() -> None:
    # given: two static providers both giving a tool named `whereami`
    log: list[str] = []
    model = ScriptedChatModel(["never"])
    service = AiService(
        chat_model=model,
        tool_providers=[
            RecordingProvider("a", dynamic=False, answers=[[T.whereami]], log=log),
            RecordingProvider("b", dynamic=False, answers=[[impostor("whereami")]], log=log),
        ],
    )

    # when / then
    with pytest.raises(ToolDefinitionError) as raised:
        service.chat("hi")
    assert str(raised.value) == "Duplicated definition for tool: whereami"
    assert model.requests == []


def test_tools_found_in_an_evicted_search_are_not_offered_to_the_next_invocation() -> None:
    # given: a window of 3 messages, and a first invocation that finds `book_flight`
    model = ScriptedChatModel(
        [
            calls(call(SEARCH, terms=["flight"])),
            calls(call("book_flight", origin="OSL", destination="ROM")),
            "booked",
            "hello again",
        ]
    )
    service = AiService(
        chat_model=model,
        tools=[st.current_time, *st.SEARCHABLE],
        tool_search_strategy=SimpleToolSearchStrategy(),
        chat_memory=MessageWindowChatMemory(3),
    )
    first = service.chat("book a flight", memory_id="short")

    # then: within the invocation the found tool stayed, though its search result left the window
    assert [e.result for e in first.tool_executions] == ["Tools found: book_flight", "booked OSL-ROM"]
    assert not any(
        isinstance(m, ToolExecutionResultMessage) and m.tool_name == SEARCH
        for m in model.requests[2].messages
    )
    assert names(model.requests[2]) == ["current_time", SEARCH, "book_flight"]

    # when: the next invocation, with the search result no longer in memory
    service.chat("hi", memory_id="short")

    # then: only the base tools are offered
    assert names(model.requests[3]) == ["current_time", SEARCH]


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        # +2 name, +1 description: 3, 3 (catalog order breaks the tie), 2, 1
        (["weather"], "Tools found: get_weather, weather_forecast, weather_alerts, uv_index"),
        # lower-cased, split on spaces: weather_forecast scores 6
        (["Weather FORECAST"], "Tools found: weather_forecast, get_weather, weather_alerts, uv_index"),
        # six tools match "a": at most five, best first (convert_currency, the last 1, is cut)
        (["a"], "Tools found: weather_alerts, get_weather, weather_forecast, uv_index, book_flight"),
        # scores add up over terms: book_flight 3 + convert_currency 3, then get_weather 1
        (["flight", "currency city"], "Tools found: book_flight, convert_currency, get_weather"),
        (["submarine"], "No matching tools found"),
        ([], "No matching tools found"),
    ],
)
def test_simple_tool_search_scoring(terms: list[str], expected: str) -> None:
    # given: the search catalog in a known order
    model = ScriptedChatModel([calls(call(SEARCH, terms=terms)), "ok"])
    service = AiService(
        chat_model=model,
        tools=[st.current_time, *st.SEARCHABLE],
        tool_search_strategy=SimpleToolSearchStrategy(),
    )

    # when
    result = service.chat("find")

    # then: the exact text, and the next request offers exactly the found tools after the base ones
    assert result.tool_executions[0].result == expected
    found = expected.removeprefix("Tools found: ").split(", ") if expected.startswith("Tools") else []
    assert names(model.requests[1]) == ["current_time", SEARCH, *found]


@pytest.mark.parametrize(
    ("usages", "expected"),
    [
        ([None, None], None),
        ([TokenUsage(4, 1), None], TokenUsage(4, 1)),
        ([None, TokenUsage(2, None)], TokenUsage(2, None)),
        ([TokenUsage(4, 1), TokenUsage(2, 3)], TokenUsage(6, 4)),
    ],
)
def test_token_usage_is_summed_over_responses(
    usages: list[TokenUsage | None], expected: TokenUsage | None
) -> None:
    # given: a tool round and a final answer, carrying the given usages
    model = ScriptedChatModel(
        [
            ChatResponse(calls(call("whoami_local")), FinishReason.TOOL_EXECUTION, usages[0]),
            ChatResponse(AiMessage("ok"), FinishReason.STOP, usages[1]),
        ]
    )
    service = AiService(chat_model=model, tools=[_local_tool()])

    # when
    result = service.chat("hi")

    # then
    assert result.token_usage == expected


def _local_tool() -> AiServiceTool:
    return AiServiceTool(
        ToolSpecification(name="whoami_local", description="who am I", parameters=None),
        lambda request, context: "me",
    )
