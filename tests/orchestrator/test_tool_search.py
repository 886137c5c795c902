"""SPEC §8 tool search: the search looks only at tools the model cannot see yet, terms are split on
any whitespace and counted once, and unusable arguments are an arguments error the model reads."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from orchestrator import (
    AiMessage,
    AiService,
    ChatRequest,
    ScriptedChatModel,
    SimpleToolSearchStrategy,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    VectorToolSearchStrategy,
)
from workers import SearchBehavior, tool

SEARCH = SimpleToolSearchStrategy.NAME


@tool("Tells the weather right now", search_behavior=SearchBehavior.ALWAYS_VISIBLE)
def weather_now(city: str) -> str:
    return f"sunny in {city}"


@tool("Forecast of the weather for the coming days")
def weather_forecast(city: str) -> str:
    return f"rain in {city}"


@tool("Severe weather alerts")
def weather_alerts(city: str) -> str:
    return f"no alerts in {city}"


@tool("Books a flight")
def book_flight(origin: str, destination: str) -> str:
    return f"{origin}-{destination}"


TOOLS = [weather_now, weather_forecast, weather_alerts, book_flight]


def _search(call_id: str, arguments: Any) -> ToolExecutionRequest:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolExecutionRequest(call_id, SEARCH, text)


def _service(model: ScriptedChatModel, strategy: Any = None, **options: Any) -> AiService:
    return AiService(
        chat_model=model, tools=TOOLS, tool_search_strategy=strategy or SimpleToolSearchStrategy(), **options
    )


def _names(request: ChatRequest) -> list[str]:
    return [spec.name for spec in request.tool_specifications]


def test_always_visible_tools_are_not_found_again() -> None:
    # given: a search for a term only the always-visible tool matches best
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[_search("s-1", {"terms": ["now"]})]), "ok"])

    # when
    result = _service(model).chat("find")

    # then: the visible tool is not among the results
    assert result.tool_executions[0].result == "No matching tools found"
    assert _names(model.requests[1]) == ["weather_now", SEARCH]


def test_tools_found_earlier_are_not_found_again() -> None:
    # given: a first search finds the forecast, a second one searches the same words again
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[_search("s-1", {"terms": ["forecast"]})]),
            AiMessage(tool_execution_requests=[_search("s-2", {"terms": ["weather"]})]),
            "ok",
        ]
    )

    # when
    result = _service(model).chat("find")

    # then: the second search answers only with what the model cannot see yet
    first, second = (e.result for e in result.tool_executions)
    assert first == "Tools found: weather_forecast"
    assert second == "Tools found: weather_alerts"
    assert _names(model.requests[2]) == ["weather_now", SEARCH, "weather_forecast", "weather_alerts"]


def test_terms_are_split_on_any_whitespace_and_counted_once() -> None:
    # given: "alerts" only matches after a tab split; "weather" given three times counts once
    terms = ["flight\tALERTS", "weather\nweather", " Weather "]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[_search("s-1", {"terms": terms})]), "ok"])

    # when
    result = _service(model, SimpleToolSearchStrategy(max_results=5)).chat("find")

    # then: weather_alerts 3 (alerts) + 3 (weather) = 6; book_flight 3 (flight); forecast 3 (weather)
    assert result.tool_executions[0].result == "Tools found: weather_alerts, weather_forecast, book_flight"


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, 'Required parameter "terms" of tool "tool_search_tool" is missing'),
        ("", 'Required parameter "terms" of tool "tool_search_tool" is missing'),
        ({"terms": None}, 'Required parameter "terms" of tool "tool_search_tool" is missing'),
        (
            {"terms": "weather"},
            'Argument "terms" of tool "tool_search_tool" must be an array of strings, got string',
        ),
        (
            {"terms": {"a": 1}},
            'Argument "terms" of tool "tool_search_tool" must be an array of strings, got object',
        ),
        (
            {"terms": ["weather", 3]},
            'Argument "terms" of tool "tool_search_tool" must be an array of strings, got an array holding '
            "a non-string",
        ),
        (
            "{not json",
            'Arguments of tool "tool_search_tool" are not valid JSON: '
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
    ],
)
@pytest.mark.parametrize("mode", ["chat", "achat"])
def test_unusable_terms_are_an_arguments_error_the_model_reads(arguments: Any, text: str, mode: str) -> None:
    # given: the default handlers (chat() fails on arguments errors of tools)
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[_search("s-1", arguments)]), "ok"])
    service = _service(model)

    # when
    result = service.chat("find") if mode == "chat" else _run(service.achat("find"))

    # then: the invocation goes on, and the model reads the error as the search's failed result
    assert result.content == "ok"
    execution = result.tool_executions[0]
    assert (execution.result, execution.has_failed, execution.status) == (text, True, "arguments_error")
    (message,) = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert (message.text, message.is_error) == (text, True)
    assert _names(model.requests[1]) == ["weather_now", SEARCH]


def _run(awaitable: Any) -> Any:
    return asyncio.run(awaitable)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ({}, 'Required parameter "query" of tool "tool_search_tool" is missing'),
        ({"query": ["weather"]}, 'Argument "query" of tool "tool_search_tool" must be a string, got array'),
    ],
)
def test_unusable_vector_query_is_an_arguments_error_the_model_reads(arguments: Any, text: str) -> None:
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[_search("s-1", arguments)]), "ok"])

    result = _service(model, VectorToolSearchStrategy()).chat("find")

    assert result.content == "ok"
    assert (result.tool_executions[0].result, result.tool_executions[0].has_failed) == (text, True)


def test_vector_search_skips_visible_tools() -> None:
    # given: a query naming the always-visible tool exactly
    model = ScriptedChatModel(
        [
            AiMessage(
                tool_execution_requests=[
                    _search("s-1", {"query": "weather_now: Tells the weather right now"})
                ]
            ),
            "ok",
        ]
    )

    # when
    result = _service(model, VectorToolSearchStrategy(max_results=10, min_score=0.0)).chat("find")

    # then: every hidden tool may be found, the visible one never
    found = result.tool_executions[0].result.removeprefix("Tools found: ").split(", ")
    assert sorted(found) == ["book_flight", "weather_alerts", "weather_forecast"]
