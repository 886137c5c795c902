"""Acceptance tests of `AiService`, the LLM loop (SPEC §4 loop, §5 return behavior, §6 errors).

Every case runs twice: with `LocalExecutor` (tools in this process) and with `CeleryExecutor` against
the real Redis and one real worker process serving `tests.integration.acceptance_tools` on pool `acc`.
The model is a `ScriptedChatModel`; what it was sent is read back from `model.requests`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

import orchestrator.service
import tests.integration.acceptance_tools as acc
from orchestrator import (
    AiMessage,
    AiService,
    AiServiceTool,
    CeleryExecutor,
    CompleteResponse,
    FinishReason,
    HallucinatedToolNameError,
    LocalExecutor,
    Result,
    RoundTripLimitError,
    ScriptedChatModel,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecuted,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
    fail_invocation,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
    send_generic_message_to_llm_unless_visible_to_llm,
)
from orchestrator.handlers import RemoteToolError
from orchestrator.messages import messages_to_json
from workers import ReturnBehavior, ToolSpecification
from workers.calls.invocation import InvocationParameters
from workers.errors import ToolArgumentsError
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

REPO_ROOT = str(Path(__file__).resolve().parents[2])
TOOLS_MODULE = "tests.integration.acceptance_tools"
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


# -- fixtures ------------------------------------------------------------------------------------


# Where the shared `executor` fixture (tests/integration/conftest.py) runs this module's calls.
WORKERS = ["acc_worker"]


@pytest.fixture(scope="module")
def acc_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker serving the acceptance tools on pool `acc`."""
    worker = WorkerProcess(
        pools=[acc.POOL],
        modules=[TOOLS_MODULE],
        redis_url=redis_url,
        kind="threads",
        concurrency=16,
        hostname=f"acc-{os.getpid()}@acceptance",
        env={"TOOLFLEET_HEARTBEAT_TTL_S": "2", "PYTHONPATH": REPO_ROOT},
        log_path=tmp_path_factory.mktemp("acceptance-worker") / "acc.log",
        loglevel="INFO",
    )
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture(scope="module")
def celery_executor(acc_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    chosen = CeleryExecutor(settings=settings)
    yield chosen
    chosen.close()


@pytest.fixture(autouse=True)
def _forget_raised() -> None:
    acc.RAISED.clear()


# -- helpers -------------------------------------------------------------------------------------


def call(call_id: str, name: str, **arguments: Any) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name=name, arguments=json.dumps(arguments))


def ask(*calls: ToolExecutionRequest) -> AiMessage:
    return AiMessage(tool_execution_requests=list(calls))


def tool_result(request: ToolExecutionRequest, text: str, *, is_error: bool) -> ToolExecutionResultMessage:
    return ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text, is_error=is_error)


def service_for(model: ScriptedChatModel, executor: Any, **config: Any) -> AiService:
    return AiService(chat_model=model, tools=[acc], executor=executor, **config)


def explicit_handlers() -> dict[str, Any]:
    return {
        "tool_arguments_error_handler": send_exception_message_to_llm(),
        "tool_execution_error_handler": send_exception_message_to_llm(),
    }


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


# -- 1. return behavior (SPEC §5) ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One batch of calls (one per behavior), which call fails (if any), and the expected outcome."""

    behaviors: tuple[ReturnBehavior, ...]
    failed: int | None
    immediate: bool

    @property
    def id(self) -> str:
        names = "+".join(b.value for b in self.behaviors)
        return f"{names}/{'ok' if self.failed is None else f'call{self.failed}-fails'}"


# The rule: return at once iff no call of the batch failed AND (the last call is IMMEDIATE_IF_LAST
# or every call is IMMEDIATE / IMMEDIATE_IF_LAST). 3 single calls x {ok, failed} = 6 rows, and the 6
# pairs below x {ok, one call failed} = 12 rows. A failing call keeps its tool's behavior.
#
#   batch                              ok            one call fails
#   [IMMEDIATE]                        immediate     to model
#   [IMMEDIATE_IF_LAST]                immediate     to model
#   [TO_LLM]                           to model      to model
#   [IMMEDIATE, IMMEDIATE]             immediate     to model   (2nd fails)
#   [TO_LLM, IMMEDIATE_IF_LAST]        immediate     to model   (1st fails; the last is still IF_LAST)
#   [IMMEDIATE_IF_LAST, TO_LLM]        to model      to model   (2nd fails)
#   [IMMEDIATE, TO_LLM]                to model      to model   (1st fails)
#   [IMMEDIATE, IMMEDIATE_IF_LAST]     immediate     to model   (1st fails)
#   [IMMEDIATE_IF_LAST, IMMEDIATE]     immediate     to model   (2nd fails; all immediate otherwise)
ROWS = [
    Row((IMMEDIATE,), None, True),
    Row((IMMEDIATE,), 0, False),
    Row((IF_LAST,), None, True),
    Row((IF_LAST,), 0, False),
    Row((TO_LLM,), None, False),
    Row((TO_LLM,), 0, False),
    Row((IMMEDIATE, IMMEDIATE), None, True),
    Row((IMMEDIATE, IMMEDIATE), 1, False),
    Row((TO_LLM, IF_LAST), None, True),
    Row((TO_LLM, IF_LAST), 0, False),
    Row((IF_LAST, TO_LLM), None, False),
    Row((IF_LAST, TO_LLM), 1, False),
    Row((IMMEDIATE, TO_LLM), None, False),
    Row((IMMEDIATE, TO_LLM), 0, False),
    Row((IMMEDIATE, IF_LAST), None, True),
    Row((IMMEDIATE, IF_LAST), 0, False),
    Row((IF_LAST, IMMEDIATE), None, True),
    Row((IF_LAST, IMMEDIATE), 1, False),
]


def test_the_table_has_the_18_distinct_rows() -> None:
    assert len(ROWS) == 18
    assert len({(r.behaviors, r.failed) for r in ROWS}) == 18


@pytest.mark.parametrize("mode", ["chat", "stream"])
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_return_behavior_rule(executor: Any, row: Row, mode: str) -> None:
    # given one response calling one tool per behavior of the row, then a final text
    calls = [
        call(f"c{i}", TOOL_OF[b], label=f"#{i}", fail=i == row.failed) for i, b in enumerate(row.behaviors)
    ]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(model, executor, **explicit_handlers())
    expected_results = [
        (f"c{i}", TOOL_OF[b], f"{b.value} #{i} {'failed' if i == row.failed else 'done'}", i == row.failed)
        for i, b in enumerate(row.behaviors)
    ]

    # when
    if mode == "stream":
        events, result = run_stream(service)
        executed = [str(e.execution.request.id) for e in events if isinstance(e, ToolExecuted)]
        assert sorted(executed) == [c.id for c in calls]  # one ToolExecuted per call
    else:
        result = service.chat("go")

    # then
    assert [(e[0], e[1], e[2], e[3]) for e in executions(result)] == expected_results
    assert [e.status for e in result.tool_executions] == [
        "execution_error" if i == row.failed else "success" for i in range(len(calls))
    ]
    assert_ran_where_expected(result, executor)
    if row.immediate:
        assert result.content is None
        assert result.finish_reason is FinishReason.TOOL_EXECUTION
        assert len(model.requests) == 1
        assert model.remaining == 1
    else:
        assert result.content == FINAL
        assert result.finish_reason is FinishReason.STOP
        assert len(model.requests) == 2
        assert model.requests[1].messages == [
            UserMessage("go"),
            ask(*calls),
            *(
                tool_result(c, text, is_error=failed)
                for c, (_, _, text, failed) in zip(calls, expected_results, strict=True)
            ),
        ]


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_immediate_return_holds_every_execution_of_the_invocation(executor: Any, mode: str) -> None:
    # given a TO_LLM round, then an IMMEDIATE one
    first, second = call("r1", "acc_to_llm", label="a"), call("r2", "acc_immediate", label="b")
    model = ScriptedChatModel([ask(first), ask(second), FINAL])
    service = service_for(model, executor, **explicit_handlers())

    # when
    result = invoke(service, mode)

    # then the invocation returns after the second round with both executions
    assert (result.content, result.finish_reason) == (None, FinishReason.TOOL_EXECUTION)
    assert executions(result) == [
        ("r1", "acc_to_llm", "TO_LLM a done", False, "success"),
        ("r2", "acc_immediate", "IMMEDIATE b done", False, "success"),
    ]
    assert len(model.requests) == 2


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_programmatic_tool_defaults_to_to_llm(executor: Any, mode: str) -> None:
    # given a programmatic tool built without a return behavior, called with an IMMEDIATE tool
    programmatic = AiServiceTool(
        ToolSpecification(name="acc_programmatic", description="Runs in the orchestrator"),
        lambda request, context: f"programmatic {request.id}",
    )
    calls = [call("p1", "acc_immediate", label="x"), call("p2", "acc_programmatic")]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = AiService(chat_model=model, tools=[acc, programmatic], executor=executor, **explicit_handlers())

    # when
    result = invoke(service, mode)

    # then it counts as TO_LLM: not every call is immediate, so the model is asked again
    assert programmatic.return_behavior is ReturnBehavior.TO_LLM
    assert (result.content, result.finish_reason) == (FINAL, FinishReason.STOP)
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "IMMEDIATE x done", is_error=False),
        tool_result(calls[1], "programmatic p2", is_error=False),
    ]


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


# -- 4. ready-made and custom error handlers (SPEC §6) -------------------------------------------


@dataclass(frozen=True)
class SentCase:
    """A handler whose text the model is sent for a failing call."""

    id: str
    kind: str  # "arguments" or "execution"
    handler: Any
    request: ToolExecutionRequest
    text: str


def _bad_count() -> ToolExecutionRequest:
    return ToolExecutionRequest(id="t1", name="acc_typed", arguments=BAD_COUNT)


SENT_CASES = [
    SentCase(
        "args/send_exception", "arguments", send_exception_message_to_llm(), _bad_count(), BAD_COUNT_TEXT
    ),
    SentCase(
        "exec-secret/send_exception",
        "execution",
        send_exception_message_to_llm(),
        call("t1", "acc_raise", how="secret"),
        acc.SECRET_MESSAGE,
    ),
    SentCase(
        "exec-visible/send_exception",
        "execution",
        send_exception_message_to_llm(),
        call("t1", "acc_raise", how="visible"),
        VISIBLE_TEXT,
    ),
    SentCase(
        "exec-empty/send_exception",
        "execution",
        send_exception_message_to_llm(),
        call("t1", "acc_raise", how="empty"),
        "RuntimeError",
    ),
    SentCase(
        "exec-visible/fail_unless_visible",
        "execution",
        fail_invocation_unless_visible_to_llm(),
        call("t1", "acc_raise", how="visible"),
        VISIBLE_TEXT,
    ),
    SentCase(
        "exec-secret/generic",
        "execution",
        send_generic_message_to_llm_unless_visible_to_llm("Something went wrong"),
        call("t1", "acc_raise", how="secret"),
        "Something went wrong",
    ),
    SentCase(
        "exec-visible/generic",
        "execution",
        send_generic_message_to_llm_unless_visible_to_llm("Something went wrong"),
        call("t1", "acc_raise", how="visible"),
        VISIBLE_TEXT,
    ),
]


@pytest.mark.parametrize("case", SENT_CASES, ids=[c.id for c in SENT_CASES])
def test_handler_text_is_sent_to_the_model(executor: Any, case: SentCase) -> None:
    # given the handler for that kind of error, the other kind failing the invocation
    model = ScriptedChatModel([ask(case.request), FINAL])
    other = fail_invocation()
    handlers = (
        {"tool_arguments_error_handler": case.handler, "tool_execution_error_handler": other}
        if case.kind == "arguments"
        else {"tool_arguments_error_handler": other, "tool_execution_error_handler": case.handler}
    )
    service = service_for(model, executor, **handlers)

    # when
    result = service.chat("go")

    # then
    status = "arguments_error" if case.kind == "arguments" else "execution_error"
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(case.request, case.text, is_error=True)
    assert executions(result) == [("t1", case.request.name, case.text, True, status)]
    assert_ran_where_expected(result, executor)


def test_generic_message_keeps_the_secret_from_the_model(executor: Any) -> None:
    # given two failing calls whose exception messages hold a secret, one of them visible to the model
    calls = [call("s1", "acc_raise", how="secret"), call("s2", "acc_raise", how="visible")]
    model = ScriptedChatModel([ask(*calls), ask(call("s3", "acc_raise", how="secret")), FINAL])
    service = service_for(
        model,
        executor,
        tool_arguments_error_handler=send_exception_message_to_llm(),
        tool_execution_error_handler=send_generic_message_to_llm_unless_visible_to_llm(
            "Something went wrong"
        ),
    )

    # when
    result = service.chat("go")

    # then
    assert result.content == FINAL
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "Something went wrong", is_error=True),
        tool_result(calls[1], VISIBLE_TEXT, is_error=True),
    ]
    assert len(model.requests) == 3
    assert acc.SECRET not in sent_to_model(model)
    assert "ORDERS_V2" not in sent_to_model(model)


@dataclass(frozen=True)
class RaiseCase:
    """A handler that fails the invocation for a failing call."""

    id: str
    kind: str
    handler: Any
    request: ToolExecutionRequest
    error_type: str
    message: str


RAISE_CASES = [
    RaiseCase(
        "args/fail", "arguments", fail_invocation(), _bad_count(), "ToolArgumentsError", BAD_COUNT_TEXT
    ),
    RaiseCase(
        "args/fail_unless_visible",
        "arguments",
        fail_invocation_unless_visible_to_llm(),
        _bad_count(),
        "ToolArgumentsError",
        BAD_COUNT_TEXT,
    ),
    RaiseCase(
        "exec-secret/fail",
        "execution",
        fail_invocation(),
        call("t1", "acc_raise", how="secret"),
        "RuntimeError",
        acc.SECRET_MESSAGE,
    ),
    RaiseCase(
        "exec-visible/fail",
        "execution",
        fail_invocation(),
        call("t1", "acc_raise", how="visible"),
        "PaymentDeclined",
        f"card of ACME rejected by gateway ({acc.SECRET})",
    ),
    RaiseCase(
        "exec-secret/fail_unless_visible",
        "execution",
        fail_invocation_unless_visible_to_llm(),
        call("t1", "acc_raise", how="secret"),
        "RuntimeError",
        acc.SECRET_MESSAGE,
    ),
]


@pytest.mark.parametrize("case", RAISE_CASES, ids=[c.id for c in RAISE_CASES])
def test_handler_fails_the_invocation(executor: Any, case: RaiseCase) -> None:
    # given the handler for that kind of error, the other kind sent to the model
    model = ScriptedChatModel([ask(case.request), FINAL])
    other = send_exception_message_to_llm()
    handlers = (
        {"tool_arguments_error_handler": case.handler, "tool_execution_error_handler": other}
        if case.kind == "arguments"
        else {"tool_arguments_error_handler": other, "tool_execution_error_handler": case.handler}
    )
    service = service_for(model, executor, **handlers)

    # when
    with pytest.raises(Exception) as raised:  # the exact type is checked below
        service.chat("go")

    # then the model is not asked again, and the invocation fails with the tool's exception
    assert len(model.requests) == 1
    error = raised.value
    assert str(error) == case.message
    if case.kind == "arguments":
        assert type(error) is ToolArgumentsError
    elif isinstance(executor, LocalExecutor):
        assert error is acc.RAISED[-1]
    else:
        assert isinstance(error, RemoteToolError)
        assert error.error_type == case.error_type


def test_custom_handler_receives_the_error_context(executor: Any) -> None:
    # given one handler for both kinds, recording what it receives
    seen: list[tuple[BaseException, ToolErrorContext]] = []

    def handler(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        seen.append((error, context))
        return ToolErrorHandlerResult.text(f"handled {context.request.id}")

    calls = [call("e1", "acc_raise", how="secret"), _bad_count()]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(
        model,
        executor,
        name="acceptance",
        tool_arguments_error_handler=handler,
        tool_execution_error_handler=handler,
    )

    # when
    result = service.chat("go", memory_id="m-42", parameters={"tenant": "t-1"})

    # then
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "handled e1", is_error=True),
        tool_result(calls[1], "handled t1", is_error=True),
    ]
    by_id = {str(context.request.id): (error, context) for error, context in seen}
    assert sorted(by_id) == ["e1", "t1"]
    assert result.invocation_id is not None
    for request in calls:
        error, context = by_id[str(request.id)]
        assert context.request == request
        assert str(context.invocation_context.invocation_id) == result.invocation_id
        assert context.invocation_context.service_name == "acceptance"
        assert context.invocation_context.memory_id == "m-42"
        assert context.invocation_context.user_message == "go"
        assert context.memory_id == "m-42"
        assert isinstance(context.parameters, InvocationParameters)
        assert dict(context.parameters) == {"tenant": "t-1"}
        assert context.raw_error is error  # nothing to unwrap: no __cause__
    execution_error, execution_context = by_id["e1"]
    assert str(execution_error) == acc.SECRET_MESSAGE
    if isinstance(executor, LocalExecutor):
        assert execution_context.raw_error is acc.RAISED[-1]
    else:
        assert isinstance(execution_error, RemoteToolError)
        assert execution_error.error_type == "RuntimeError"
    arguments_error, _ = by_id["t1"]
    assert type(arguments_error) is ToolArgumentsError
    assert str(arguments_error) == BAD_COUNT_TEXT


def test_handler_receives_the_cause_and_raw_error_the_exception_as_raised(executor: Any) -> None:
    # given a tool raising WrapperError whose __cause__ is LookupError: SPEC §6 unwraps one level of
    # `__cause__`, so the handler receives the LookupError and `raw_error` is the WrapperError.
    seen: list[tuple[BaseException, ToolErrorContext]] = []

    def handler(error: BaseException, context: ToolErrorContext) -> ToolErrorHandlerResult:
        seen.append((error, context))
        return ToolErrorHandlerResult.text(str(error))

    model = ScriptedChatModel([ask(call("w1", "acc_raise", how="wrapped")), FINAL])
    service = service_for(
        model, executor, tool_arguments_error_handler=handler, tool_execution_error_handler=handler
    )

    # when
    service.chat("go")

    # then
    [(error, context)] = seen
    assert str(error) == "inner: order 7 not found"
    assert str(context.raw_error) == "wrapper: guardrail tripped"
    assert context.raw_error.__cause__ is error
    assert model.requests[1].messages[-1].text == "inner: order 7 not found"  # what the handler chose
    if isinstance(executor, LocalExecutor):
        assert context.raw_error is acc.RAISED[-1]
        assert type(error) is LookupError
    else:
        assert isinstance(error, RemoteToolError)
        assert (error.type_name, error.message) == ("LookupError", "inner: order 7 not found")
        assert isinstance(context.raw_error, RemoteToolError)
        assert context.raw_error.type_name == "tests.integration.acceptance_tools.WrapperError"


# -- 5. default policies and the once-per-process notice (SPEC §6) -------------------------------


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_default_chat_fails_on_arguments_error(executor: Any, mode: str) -> None:
    # given no handlers configured
    model = ScriptedChatModel([ask(_bad_count()), FINAL])
    service = service_for(model, executor)

    # when / then
    with pytest.raises(ToolArgumentsError) as raised:
        invoke(service, mode)
    assert str(raised.value) == BAD_COUNT_TEXT
    assert len(model.requests) == 1


@pytest.mark.parametrize(
    ("how", "text"),
    [("secret", acc.SECRET_MESSAGE), ("visible", VISIBLE_TEXT), ("empty", "RuntimeError")],
)
@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_default_chat_sends_execution_error_to_the_model_and_warns(
    executor: Any, mode: str, how: str, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    # given no handlers configured, and a tool that fails
    request = call("x1", "acc_raise", how=how)
    model = ScriptedChatModel([ask(request), FINAL])
    service = service_for(model, executor)

    # when
    with caplog.at_level(logging.WARNING, logger="orchestrator.handlers"):
        result = invoke(service, mode)

    # then the model reads the message (message_for_llm, or the type name when empty); WARN logged
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(request, text, is_error=True)
    warnings = [
        r for r in caplog.records if r.name == "orchestrator.handlers" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert warnings[0].getMessage().startswith("tool acc_raise call x1 failed: ")


def test_default_achat_sends_arguments_error_to_the_model(executor: Any) -> None:
    # given no handlers configured
    model = ScriptedChatModel([ask(_bad_count()), FINAL])
    service = service_for(model, executor)

    # when
    result = invoke(service, "achat")

    # then
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(_bad_count(), BAD_COUNT_TEXT, is_error=True)
    assert executions(result) == [("t1", "acc_typed", BAD_COUNT_TEXT, True, "arguments_error")]


def test_default_achat_fails_on_execution_error(executor: Any) -> None:
    # given no handlers configured, and a tool raising a plain exception
    model = ScriptedChatModel([ask(call("x1", "acc_raise", how="secret")), FINAL])
    service = service_for(model, executor)

    # when / then
    with pytest.raises(Exception) as raised:  # the exact type is checked below
        invoke(service, "achat")
    assert len(model.requests) == 1
    assert str(raised.value) == acc.SECRET_MESSAGE
    if isinstance(executor, LocalExecutor):
        assert raised.value is acc.RAISED[-1]
    else:
        assert isinstance(raised.value, RemoteToolError)
        assert raised.value.error_type == "RuntimeError"


def test_default_achat_sends_visible_error_to_the_model(executor: Any) -> None:
    # given no handlers configured, and a tool raising a ToolErrorVisibleToLlm
    request = call("x1", "acc_raise", how="visible")
    model = ScriptedChatModel([ask(request), FINAL])
    service = service_for(model, executor)

    # when
    result = invoke(service, "achat")

    # then the model reads message_for_llm(), never the exception's own message
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(request, VISIBLE_TEXT, is_error=True)
    assert acc.SECRET not in sent_to_model(model)


def test_defaults_notice_is_logged_once_per_process(executor: Any, caplog: pytest.LogCaptureFixture) -> None:
    # given the notice not given yet in this process
    orchestrator.service._defaults_notice_given = False

    def notices() -> int:
        return sum(
            "This notice is shown once per process" in r.getMessage()
            for r in caplog.records
            if r.name == "orchestrator.service" and r.levelno == logging.WARNING
        )

    def script() -> ScriptedChatModel:
        return ScriptedChatModel([ask(call("n1", "acc_to_llm", label="n")), FINAL])

    with caplog.at_level(logging.WARNING, logger="orchestrator.service"):
        # when both handlers are configured explicitly: no notice
        service_for(script(), executor, **explicit_handlers()).chat("go")
        assert notices() == 0

        # when several services without (all or some) handlers run several invocations
        service_for(script(), executor).chat("go")
        service_for(script(), executor).chat("go")
        invoke(service_for(script(), executor), "achat")
        invoke(service_for(script(), executor), "stream")
        only_one = {"tool_execution_error_handler": send_exception_message_to_llm()}
        service_for(script(), executor, **only_one).chat("go")

    # then the notice was logged exactly once
    assert notices() == 1


# -- 6. hallucinated tool names (SPEC §6) --------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "achat", "stream"])
def test_hallucinated_tool_name_fails_without_a_strategy(executor: Any, mode: str) -> None:
    # given a model calling a tool that does not exist
    model = ScriptedChatModel([ask(call("h1", "nope")), FINAL])
    service = service_for(model, executor, **explicit_handlers())

    # when / then
    with pytest.raises(HallucinatedToolNameError) as raised:
        invoke(service, mode)
    assert str(raised.value) == HALLUCINATION_TEXT
    assert len(model.requests) == 1


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_hallucinated_tool_name_strategy_answers_the_model(executor: Any, mode: str) -> None:
    # given a strategy, and a model calling an IMMEDIATE tool and a tool that does not exist
    calls = [call("h0", "acc_immediate", label="real"), call("h1", "nope")]
    model = ScriptedChatModel([ask(*calls), FINAL])
    service = service_for(
        model,
        executor,
        hallucinated_tool_name_strategy=lambda req: f"Error: there is no tool called {req.name}",
        **explicit_handlers(),
    )

    # when
    result = invoke(service, mode)

    # then the strategy's text is a successful result (not an error), and the unknown tool counts
    # as TO_LLM, so the invocation goes on to the model's final answer
    assert (result.content, result.finish_reason) == (FINAL, FinishReason.STOP)
    assert model.requests[1].messages[-2:] == [
        tool_result(calls[0], "IMMEDIATE real done", is_error=False),
        tool_result(calls[1], "Error: there is no tool called nope", is_error=False),
    ]
    assert executions(result) == [
        ("h0", "acc_immediate", "IMMEDIATE real done", False, "success"),
        ("h1", "nope", "Error: there is no tool called nope", False, "success"),
    ]


# -- 7. timeouts and missing pools are visible to the model (SPEC §6; CeleryExecutor) -------------


@pytest.mark.parametrize("mode", ["chat", "achat"])
def test_timeout_is_visible_to_the_model_under_default_handlers(
    celery_executor: CeleryExecutor, mode: str
) -> None:
    # given no handlers configured, and a tool with timeout 0.3 s that sleeps 2 s
    request = call("z1", "acc_sleepy", seconds=2)
    model = ScriptedChatModel([ask(request), FINAL])
    service = service_for(model, celery_executor)

    # when
    started = time.perf_counter()
    result = invoke(service, mode)
    elapsed = time.perf_counter() - started

    # then the model reads the system's text, and the invocation did not wait for the tool
    text = "Tool 'acc_sleepy' did not finish within 0.3 s"
    assert elapsed < 1.5, f"took {elapsed:.3f} s"
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(request, text, is_error=True)
    assert executions(result) == [("z1", "acc_sleepy", text, True, "timed_out")]


@pytest.mark.parametrize("mode", ["chat", "achat"])
def test_missing_pool_is_visible_to_the_model_under_default_handlers(
    celery_executor: CeleryExecutor, mode: str
) -> None:
    # given no handlers configured, and a tool on a pool no worker serves
    request = call("o1", "acc_orphan")
    model = ScriptedChatModel([ask(request), FINAL])
    service = service_for(model, celery_executor)

    # when
    result = invoke(service, mode)

    # then
    text = f"No live worker serves pool '{acc.ORPHAN_POOL}' of tool 'acc_orphan'"
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(request, text, is_error=True)
    assert executions(result) == [("o1", "acc_orphan", text, True, "no_worker")]
