"""Acceptance tests of `AiService`: the round-trip limit, concurrent and sequential calls (SPEC §4).

How every case runs: tests/integration/acceptance/__init__.py.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis

from orchestrator import FinishReason, RoundTripLimitError, ScriptedChatModel, ToolExecuted
from tests.integration.acceptance._service import (
    FINAL,
    ROUND_TRIPS_TEXT,
    executions,
    explicit_handlers,
    invoke,
    run_stream,
    service_for,
)
from tests.integration.scripts import ask, call, tool_result

pytestmark = pytest.mark.integration


# -- 2. round-trip limit (SPEC §4) ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_round_trip_limit_is_exceeded_by_a_third_tool_round(
    executor: Any, mode: str, client: redis.Redis
) -> None:
    # given a limit of 2 and a model that asks for tools three times
    key = uuid.uuid4().hex
    model = ScriptedChatModel([ask(call(f"r{i}", "acc_count", key=key)) for i in (1, 2, 3)] + [FINAL])
    service = service_for(model, executor, max_tool_calling_round_trips=2, **explicit_handlers())

    # when / then
    with pytest.raises(RoundTripLimitError) as raised:
        invoke(service, mode)
    assert str(raised.value) == ROUND_TRIPS_TEXT
    assert len(model.requests) == 3
    assert client.get(f"acc:count:{key}") == b"2"  # the third round's call never ran


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_round_trip_limit_allows_n_tool_rounds_and_a_final_answer(
    executor: Any, mode: str, client: redis.Redis
) -> None:
    # given a limit of 2 and a model that asks for tools twice, then answers
    key = uuid.uuid4().hex
    model = ScriptedChatModel([ask(call(f"r{i}", "acc_count", key=key)) for i in (1, 2)] + [FINAL])
    service = service_for(model, executor, max_tool_calling_round_trips=2, **explicit_handlers())

    # when
    result = invoke(service, mode)

    # then
    assert (result.content, result.finish_reason) == (FINAL, FinishReason.STOP)
    assert executions(result) == [
        ("r1", "acc_count", "1", False, "success"),
        ("r2", "acc_count", "2", False, "success"),
    ]
    assert len(model.requests) == 3
    assert client.get(f"acc:count:{key}") == b"2"


# -- 3. concurrency and order (SPEC §4) ----------------------------------------------------------


def _warm_up(executor: Any) -> None:
    """One quick call first, so connection set-up does not count in the timings."""
    model = ScriptedChatModel([ask(call("w", "acc_slow", label="warm", seconds=0)), FINAL])
    assert service_for(model, executor, **explicit_handlers()).chat("warm").content == FINAL


def test_concurrent_calls_overlap(executor: Any) -> None:
    # given two calls of 0.3 s each, concurrency on (the default)
    _warm_up(executor)
    calls = [call("a", "acc_slow", label="a", seconds=0.3), call("b", "acc_slow", label="b", seconds=0.3)]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(model, executor, **explicit_handlers())
    assert service.execute_tools_concurrently is True

    # when
    started = time.perf_counter()
    result = service.chat("go")
    elapsed = time.perf_counter() - started

    # then
    assert elapsed < 0.55, f"two 0.3 s calls took {elapsed:.3f} s"
    assert [e.result for e in result.tool_executions] == ["a slept 0.3", "b slept 0.3"]


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_concurrent_results_are_in_request_order_when_the_second_finishes_first(
    executor: Any, mode: str
) -> None:
    # given a slow first call and a quick second one
    calls = [call("a", "acc_slow", label="a", seconds=0.4), call("b", "acc_slow", label="b", seconds=0.05)]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(model, executor, **explicit_handlers())

    # when
    if mode == "stream":
        events, result = run_stream(service)
        completion_order = [e.execution.request.id for e in events if isinstance(e, ToolExecuted)]
        assert completion_order == ["b", "a"]
    else:
        result = service.chat("go")

    # then the second finished first, yet executions and messages are in request order
    first, second = result.tool_executions
    assert first.finished_at is not None and second.finished_at is not None
    assert second.finished_at < first.finished_at
    assert executions(result) == [
        ("a", "acc_slow", "a slept 0.4", False, "success"),
        ("b", "acc_slow", "b slept 0.05", False, "success"),
    ]
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "a slept 0.4", is_error=False),
        tool_result(calls[1], "b slept 0.05", is_error=False),
    ]


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_sequential_calls_run_one_after_another_in_request_order(executor: Any, mode: str) -> None:
    # given two calls of 0.3 s each, concurrency off
    _warm_up(executor)
    calls = [call("a", "acc_slow", label="a", seconds=0.3), call("b", "acc_slow", label="b", seconds=0.3)]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(model, executor, execute_tools_concurrently=False, **explicit_handlers())

    # when
    started = time.perf_counter()
    result = invoke(service, mode)
    elapsed = time.perf_counter() - started

    # then
    assert elapsed >= 0.6, f"two sequential 0.3 s calls took {elapsed:.3f} s"
    first, second = result.tool_executions
    assert first.finished_at is not None and second.started_at is not None
    assert first.finished_at <= second.started_at
    assert [e.request.id for e in result.tool_executions] == ["a", "b"]
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "a slept 0.3", is_error=False),
        tool_result(calls[1], "b slept 0.3", is_error=False),
    ]
