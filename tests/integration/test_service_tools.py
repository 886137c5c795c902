"""`AiService` with tools, end to end: tool providers, tool search, invocation data and AI services as
tools — each run in-process (`LocalExecutor`) and on real worker processes over real Redis
(`CeleryExecutor`), with a `ScriptedChatModel` standing in for the LLM. Streaming and `Result`:
test_service_streaming.py.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import tests.integration.search_tools as st
import tests.integration.tools as T
from orchestrator import (
    AiMessage,
    AiService,
    ChatRequest,
    MessageWindowChatMemory,
    ScriptedChatModel,
    SimpleToolSearchStrategy,
    SystemMessage,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionResultMessage,
    UserMessage,
    VectorToolSearchStrategy,
    send_exception_message_to_llm,
)
from tests.integration._placement import assert_ran, is_celery
from tests.integration.worker_processes import tool_worker
from tests.orchestrator._service import RecordingProvider
from tests.orchestrator._service import call as _call
from tests.orchestrator._service import calls as _calls
from tests.orchestrator._service import impostor as _impostor
from tests.orchestrator._service import names as _names
from workers import ToolSpecification, tool_specifications_from
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

SEARCH = SimpleToolSearchStrategy.NAME


# -- fixtures -------------------------------------------------------------------------------------


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["pools", "srch_worker"]


@pytest.fixture(scope="module")
def srch_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    """A worker process of its own serving pool `srch` (tests/integration/search_tools.py)."""
    modules, log_path = ["tests.integration.search_tools"], worker_logs / "srch.log"
    worker = tool_worker(redis_url, [st.POOL], modules, log_path, "srch@integration", concurrency=8)
    with worker.running(timeout_s=60):
        yield worker


# -- helpers --------------------------------------------------------------------------------------


def _spec(function: Any) -> ToolSpecification:
    return tool_specifications_from(function)[0]


def _logging_model(log: list[str], responses: list[Any]) -> ScriptedChatModel:
    """A scripted model that also writes "model" into a shared log when it is asked."""
    remaining = list(responses)

    def answer(request: ChatRequest) -> Any:
        log.append("model")
        return remaining.pop(0)

    return ScriptedChatModel(answer)


# -- 1. tool providers ----------------------------------------------------------------------------


def test_static_provider_once_per_invocation_dynamic_before_every_model_call(executor: Any) -> None:
    # given: a static provider giving `echo`, and a dynamic one giving `whereami` (plus an impostor
    # `echo`) before the first model call, `whereami_beta` (plus an impostor `whereami`) before the
    # second, and nothing afterwards; a window of 2 messages evicts the user message early
    log: list[str] = []
    static = RecordingProvider("static", dynamic=False, answers=[[T.echo]], log=log)
    dynamic = RecordingProvider(
        "dynamic",
        dynamic=True,
        answers=[[T.whereami, _impostor("echo")], [T.whereami_beta, _impostor("whereami")]],
        log=log,
    )
    memory = MessageWindowChatMemory(2)
    model = _logging_model(
        log,
        [
            _calls(_call("echo", "c1", text="hi")),
            _calls(_call("whereami", "c2"), _call("whereami_beta", "c3")),
            "all done",
        ],
    )
    service = AiService(
        chat_model=model,
        executor=executor,
        tool_providers=[static, dynamic],
        chat_memory=memory,
        tool_execution_error_handler=send_exception_message_to_llm(),
    )

    # when
    result = service.chat("what runs where?", memory_id="m-prov", parameters={"user": "u1"})

    # then: the static provider was asked once, first; the dynamic one before each of the 3 model calls
    assert result.content == "all done"
    assert log == ["static", "dynamic", "model", "dynamic", "model", "dynamic", "model"]

    # and: each request offered exactly the tools given so far (first definition wins, tools stay)
    echo, whereami, whereami_beta = _spec(T.echo), _spec(T.whereami), _spec(T.whereami_beta)
    assert model.requests[0].tool_specifications == [echo, whereami]
    assert model.requests[1].tool_specifications == [echo, whereami, whereami_beta]
    assert model.requests[2].tool_specifications == [echo, whereami, whereami_beta]

    # and: the impostors never ran: the real tools did, where they live
    echo_run, where_run, beta_run = result.tool_executions
    assert echo_run.result == "hi"
    assert "impostor" not in where_run.result and "impostor" not in beta_run.result
    pids = [json.loads(run.result)["pid"] for run in (where_run, beta_run)]
    if is_celery(executor):
        assert os.getpid() not in pids
        assert_ran(executor, echo_run, "alpha", "alpha@integration")
        assert_ran(executor, where_run, "alpha", "alpha@integration")
        assert_ran(executor, beta_run, "beta", "beta@integration")
    else:
        assert pids == [os.getpid(), os.getpid()]

    # and: every provider request carries the user message (even once memory evicted it), the
    # memory id, the invocation parameters and the invocation context
    invocation_id = uuid.UUID(result.invocation_id)
    user = UserMessage("what runs where?")
    assert user not in dynamic.requests[1].messages, "the window should have evicted the user message"
    assert user not in dynamic.requests[2].messages
    for request in [*static.requests, *dynamic.requests]:
        assert request.user_message == user
        assert request.memory_id == "m-prov"
        assert request.parameters["user"] == "u1"
        assert request.invocation_context.invocation_id == invocation_id
        assert request.invocation_context.user_message == "what runs where?"
    assert len(static.requests) == 1 and len(dynamic.requests) == 3


def test_provider_tools_last_one_invocation_only(executor: Any) -> None:
    # given: a dynamic provider that gives `whereami` in the first invocation only
    log: list[str] = []
    static = RecordingProvider("static", dynamic=False, answers=[[T.echo], [T.echo]], log=log)
    dynamic = RecordingProvider("dynamic", dynamic=True, answers=[[T.whereami]], log=log)
    model = ScriptedChatModel([_calls(_call("whereami")), "first", "second"])
    service = AiService(chat_model=model, executor=executor, tool_providers=[static, dynamic])

    # when: two invocations
    service.chat("one")
    service.chat("two")

    # then: the static provider was asked once per invocation, and the second invocation starts
    # without the tool the dynamic provider gave the first one
    assert len(static.requests) == 2
    assert [_names(r) for r in model.requests] == [["echo", "whereami"], ["echo", "whereami"], ["echo"]]


# -- 2. tool search -------------------------------------------------------------------------------

FOUND_WEATHER = ["get_weather", "weather_forecast", "weather_alerts", "uv_index"]


def test_simple_tool_search_reveals_tools_accumulates_and_remembers_them(executor: Any) -> None:
    # given: a searchable catalog (one tool always visible) and a memory per memory id
    memories: dict[str, MessageWindowChatMemory] = {}
    model = ScriptedChatModel(
        [
            # invocation 1 (memory "trip")
            _calls(_call(SEARCH, terms=["weather"])),
            _calls(_call(SEARCH, terms=["flight"])),
            _calls(_call(SEARCH, terms=["submarine"])),
            _calls(
                _call("get_weather", city="Oslo"),
                # never found, so never offered: it still runs when called by name
                _call("convert_currency", amount=2, source="EUR", target="USD"),
            ),
            "done",
            # invocation 2 (memory "trip" again)
            _calls(_call("weather_forecast", city="Oslo", days=2)),
            "done again",
            # invocation 3 (another memory)
            "fresh",
        ]
    )
    service = AiService(
        chat_model=model,
        tools=[st.current_time, *st.SEARCHABLE],
        executor=executor,
        tool_search_strategy=SimpleToolSearchStrategy(),
        chat_memory_provider=lambda memory_id: memories.setdefault(memory_id, MessageWindowChatMemory(50)),
        tool_execution_error_handler=send_exception_message_to_llm(),
    )

    # when
    first = service.chat("plan my trip", memory_id="trip")

    # then: at first only the always-visible tool and the search tool are offered
    base = ["current_time", SEARCH]
    assert model.requests[0].tool_specifications == [
        _spec(st.current_time),
        SimpleToolSearchStrategy().search_tool(),
    ]
    # and: each search answers with the exact text, and its finds are appended and accumulate
    searches = [e.result for e in first.tool_executions[:3]]
    assert searches == [
        "Tools found: " + ", ".join(FOUND_WEATHER),
        "Tools found: book_flight",
        "No matching tools found",
    ]
    assert _names(model.requests[1]) == base + FOUND_WEATHER
    assert _names(model.requests[2]) == [*base, *FOUND_WEATHER, "book_flight"]
    assert _names(model.requests[3]) == [*base, *FOUND_WEATHER, "book_flight"]
    assert model.requests[2].tool_specifications[-1] == _spec(st.book_flight)
    # and: found and hidden tools both ran, on the srch pool when on Celery
    weather, currency = first.tool_executions[3:]
    assert weather.result.startswith("sunny in Oslo")
    assert (currency.result, currency.has_failed) == ("2.0 EUR is 4.0 USD", False)
    assert_ran(executor, weather, "srch", "srch@integration")
    assert_ran(executor, currency, "srch", "srch@integration")
    assert [e.status for e in first.tool_executions] == ["success"] * 5
    # and: the search results in memory carry what they found
    results = [
        m
        for m in service.memory("trip").messages()
        if isinstance(m, ToolExecutionResultMessage) and m.tool_name == SEARCH
    ]
    assert [m.attributes.get("found_tools") for m in results] == [FOUND_WEATHER, ["book_flight"], []]

    # when: a second invocation with the same memory id
    second = service.chat("and the forecast?", memory_id="trip")

    # then: it starts with every tool found before (read from memory), and can call them
    assert _names(model.requests[5]) == [*base, *FOUND_WEATHER, "book_flight"]
    assert second.content == "done again"
    assert second.tool_executions[0].result == "2 sunny days in Oslo"
    assert_ran(executor, second.tool_executions[0], "srch", "srch@integration")

    # when: an invocation with another memory id
    third = service.chat("hello", memory_id="elsewhere")

    # then: nothing found elsewhere is offered
    assert third.content == "fresh"
    assert _names(model.requests[7]) == base


def test_vector_tool_search_finds_a_weather_tool(executor: Any) -> None:
    # given: the vector strategy with its offline hashing embedding
    strategy = VectorToolSearchStrategy()
    model = ScriptedChatModel(
        lambda request: (
            _calls(_call(SEARCH, query="weather forecast for a city"))
            if len(request.messages) == 1
            else _calls(_call(request.tool_specifications[2].name, city="Rome"))
            if len(request.messages) == 3
            else "ok"
        )
    )
    service = AiService(
        chat_model=model,
        tools=[st.current_time, *st.SEARCHABLE],
        executor=executor,
        tool_search_strategy=strategy,
    )

    # when: the model searches by query, then calls the first tool found
    result = service.chat("weather?")

    # then: the search tool takes a `query`; a weather tool is found first and becomes callable
    assert model.requests[0].tool_specifications[1].parameters["required"] == ["query"]  # type: ignore[index]
    search, called = result.tool_executions
    assert search.result.startswith("Tools found: ")
    found = search.result.removeprefix("Tools found: ").split(", ")
    assert found[0] in {"weather_forecast", "get_weather"}
    assert {"book_flight", "convert_currency"}.isdisjoint(found[:2])
    assert _names(model.requests[1]) == ["current_time", SEARCH, *found]
    assert called.request.name == found[0]
    assert "Rome" in called.result and not called.has_failed
    assert_ran(executor, called, "srch", "srch@integration")


# -- 3. invocation data ---------------------------------------------------------------------------


def test_invocation_parameters_flow_between_tools_on_two_workers(executor: Any) -> None:
    # given: remember (pool alpha), then recall (pool beta) plus probes, then a failing tool whose
    # handler records its context
    handled: list[tuple[BaseException, ToolErrorContext]] = []

    def handler(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        handled.append((error, context))
        return ToolErrorHandlerResult.text(f"handled: {error}")

    model = ScriptedChatModel(
        [
            _calls(_call("remember", key="city", value="Paris")),
            _calls(_call("recall", key="city"), _call("injected"), _call("context_probe")),
            _calls(_call("fail", how="other")),
            "done",
            # the next invocation
            _calls(_call("recall", key="city"), _call("context_probe")),
            "done",
        ]
    )
    service = AiService(
        chat_model=model,
        tools=[T.remember, T.recall, T.injected, T.fail, st.context_probe],
        executor=executor,
        name="trip-planner",
        tool_execution_error_handler=handler,
    )

    # when: no memory id is given
    result = service.chat("where am I going?", parameters={"user": "u1"})

    # then: what remember wrote on one worker, recall read on another
    remember, recall, injected, probe, failed, *rest = result.tool_executions
    assert rest == []
    assert remember.result == "remembered"
    assert recall.result == "Paris"
    assert_ran(executor, remember, "alpha", "alpha@integration")
    assert_ran(executor, recall, "beta", "beta@integration")
    assert_ran(executor, probe, "srch", "srch@integration")

    # and: tools received the parameters, the context and the memory id "default"
    invocation_id = uuid.UUID(result.invocation_id)
    assert invocation_id.version == 4
    assert injected.result_object == {
        "params": {"user": "u1", "city": "Paris"},
        "invocation_id": str(invocation_id),
        "memory_id": "default",
        "user_message": "where am I going?",
    }
    seen = probe.result_object
    assert seen["params"] == {"user": "u1", "city": "Paris"}
    assert seen["memory_id"] == "default"
    context = seen["context"]
    assert context["invocation_id"] == str(invocation_id)
    assert context["service_name"] == "trip-planner"
    assert context["memory_id"] == "default"
    assert context["user_message"] == "where am I going?"
    stamp = datetime.fromisoformat(context["timestamp"])
    assert abs(datetime.now(UTC) - stamp) < timedelta(minutes=1)
    assert (seen["pid"] != os.getpid()) == is_celery(executor)

    # and: the error handler saw the same invocation data, and its text went to the model
    assert len(handled) == 1
    error, error_context = handled[0]
    assert str(error) == "broken: other"
    assert error_context.request == failed.request
    assert error_context.memory_id == "default"
    assert dict(error_context.parameters) == {"user": "u1", "city": "Paris"}
    assert error_context.invocation_context.invocation_id == invocation_id
    assert error_context.invocation_context.service_name == "trip-planner"
    assert error_context.invocation_context.user_message == "where am I going?"
    assert (failed.result, failed.has_failed, failed.status) == (
        "handled: broken: other",
        True,
        "execution_error",
    )

    # when: the next invocation
    after = service.chat("again", parameters={"user": "u2"})

    # then: it has its own parameters and its own invocation id
    assert after.tool_executions[0].result == "<missing>"
    assert after.tool_executions[1].result_object["params"] == {"user": "u2"}
    assert after.tool_executions[1].result_object["context"]["invocation_id"] == after.invocation_id
    assert after.invocation_id != result.invocation_id


def test_tool_memory_id_is_the_given_memory_id(executor: Any) -> None:
    # given
    model = ScriptedChatModel([_calls(_call("injected")), "ok"])
    service = AiService(chat_model=model, tools=[T.injected], executor=executor)

    # when
    result = service.chat("hi", memory_id="m-42")

    # then
    assert result.tool_executions[0].result_object["memory_id"] == "m-42"
    assert result.tool_executions[0].result_object["params"] == {}


# -- 4. an AI service as a tool -------------------------------------------------------------------


def test_ai_service_as_a_tool_runs_its_own_invocation(executor: Any) -> None:
    # given: an inner service that calls `whereami` and answers with what it returned
    def inner_script(request: ChatRequest) -> AiMessage | str:
        results = [m for m in request.messages if isinstance(m, ToolExecutionResultMessage)]
        if not results:
            return _calls(_call("whereami"))
        return f"expert answer: {results[0].text}"

    inner_ids: list[str] = []
    inner_memories: dict[str, MessageWindowChatMemory] = {}

    def inner_memory(memory_id: str) -> MessageWindowChatMemory:
        inner_ids.append(memory_id)
        return inner_memories.setdefault(memory_id, MessageWindowChatMemory(20))

    inner_model = ScriptedChatModel(inner_script)
    inner = AiService(
        chat_model=inner_model,
        tools=[T.whereami],
        executor=executor,
        system_message="You are the expert",
        chat_memory_provider=inner_memory,
    )
    outer_model = ScriptedChatModel(
        [
            _calls(_call("expert", "e1", request="where do you run?")),
            "outer: thanks",
        ]
    )
    outer_memory = MessageWindowChatMemory(20)
    outer = AiService(
        chat_model=outer_model,
        tools=[inner.as_tool("expert", "asks the expert")],
        executor=executor,
        system_message="You are the outer",
        chat_memory=outer_memory,
    )

    # when
    result = outer.chat("ask the expert", memory_id="outer-1")

    # then: the outer model was offered the expert as a tool taking a `request`
    (expert_spec,) = outer_model.requests[0].tool_specifications
    assert (expert_spec.name, expert_spec.description) == ("expert", "asks the expert")
    assert expert_spec.parameters is not None
    assert expert_spec.parameters["properties"] == {"request": {"type": "string"}}
    assert expert_spec.parameters["required"] == ["request"]

    # and: the inner invocation started from its own memory: only its system message and the request
    assert inner_model.requests[0].messages == [
        SystemMessage("You are the expert"),
        UserMessage("where do you run?"),
    ]
    assert len(inner_ids) == 1 and inner_ids[0] != "outer-1"
    inner_messages = inner_memories[inner_ids[0]].messages()
    assert [type(m).__name__ for m in inner_messages] == [
        "SystemMessage",
        "UserMessage",
        "AiMessage",
        "ToolExecutionResultMessage",
        "AiMessage",
    ]

    # and: the outer got the inner's final text as the tool result, and its memory holds none of
    # the inner's messages
    (execution,) = result.tool_executions
    assert execution.request.name == "expert" and not execution.has_failed
    assert execution.result.startswith("expert answer: {")
    where = json.loads(execution.result.removeprefix("expert answer: "))
    assert (where["pid"] != os.getpid()) == is_celery(executor)  # the inner's tool ran on alpha
    assert (execution.pool, execution.worker, execution.task_id) == (None, None, None)
    tool_result = outer_model.requests[1].messages[-1]
    assert isinstance(tool_result, ToolExecutionResultMessage)
    assert (tool_result.id, tool_result.tool_name, tool_result.text) == ("e1", "expert", execution.result)
    assert result.content == "outer: thanks"
    assert [type(m).__name__ for m in outer_memory.messages()] == [
        "SystemMessage",
        "UserMessage",
        "AiMessage",
        "ToolExecutionResultMessage",
        "AiMessage",
    ]
    assert SystemMessage("You are the expert") not in outer_memory.messages()
