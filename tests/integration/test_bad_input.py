"""Bad model input on both executors: in-process (`LocalExecutor`) and on a worker (`CeleryExecutor`).

The same generated input goes to both executors. Properties: `execute` never raises; the outcome is an
arguments error or an execution error (or a success, for input that was valid after all) with a clear,
non-empty text; both executors give the same outcome (`ToolOutcome.to_json()` compared whole), except
for the argument-size limit that only `CeleryExecutor` enforces; and the worker stays alive and keeps
serving (checked after every test). Generators and oracles come from `tests/test_bad_input_local.py`.

The worker is this module's own: pool `bad`, tools `tests/integration/badinput_tools.py`, started with
`TOOLFLEET_MAX_RESULT_BYTES=65536`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import tests.integration.badinput_tools as bad
from orchestrator import (
    AiMessage,
    AiService,
    CeleryExecutor,
    HallucinatedToolNameError,
    LocalExecutor,
    ScriptedChatModel,
    ToolExecutionResultMessage,
)
from tests.test_bad_input_local import (
    FUZZED,
    check_garbage,
    check_nested,
    check_one_bad_parameter,
    check_structured,
    check_truncated,
    check_unknown,
    check_wrong_type,
    deeply_nested,
    garbage_text,
    one_bad_parameter,
    truncated_json,
    unknown_names,
    wrong_types,
)
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

HOSTNAME = "bad@badinput"
SMALL_ARGUMENT_BYTES = 4096
FEW = hypothesis.settings(
    max_examples=40,
    deadline=None,
    database=None,
    # The function-scoped fixture is the after-each-test health check; it holds no per-example state.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def bad_worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    worker = bad.start_worker(redis_url, worker_logs / "bad-input.log", HOSTNAME)
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture(scope="module")
def local() -> Iterator[LocalExecutor]:
    executor = LocalExecutor(tools=[bad], max_result_bytes=bad.MAX_RESULT_BYTES)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def celery(bad_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    """Tools from the live catalog (no local tool code), the default 1 MiB argument limit."""
    executor = CeleryExecutor(settings=settings)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def small_celery(bad_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    executor = CeleryExecutor(settings=dataclasses.replace(settings, max_argument_bytes=SMALL_ARGUMENT_BYTES))
    yield executor
    executor.close()


@pytest.fixture(autouse=True)
def still_serving(bad_worker: WorkerProcess, celery: CeleryExecutor) -> Iterator[None]:
    """After every batch of bad input, the worker is alive and a healthy call succeeds on it."""
    yield
    assert bad_worker.process.poll() is None, f"the worker died (exit {bad_worker.process.returncode})"
    outcome = asyncio.run(celery.execute(ToolExecutionRequest("healthy", "bad_str", '{"value": "ok"}')))
    assert (outcome.kind, outcome.text, outcome.worker) == (OutcomeKind.SUCCESS, "ok", HOSTNAME)


@pytest.fixture(params=["local", "celery"])
def executor(request: pytest.FixtureRequest) -> LocalExecutor | CeleryExecutor:
    executor: LocalExecutor | CeleryExecutor = request.getfixturevalue(request.param)
    return executor


def _on_both(
    local: LocalExecutor, celery: CeleryExecutor, tool: str, arguments: str
) -> tuple[ToolOutcome, ToolOutcome]:
    """The same call on both executors; parity checked: the whole outcome JSON is equal."""
    request = ToolExecutionRequest("call-1", tool, arguments)

    async def run() -> tuple[ToolOutcome, ToolOutcome]:
        return await local.execute(request), await celery.execute(request)

    in_process, on_worker = asyncio.run(run())
    assert on_worker.to_json() == in_process.to_json()
    if on_worker.kind is not OutcomeKind.EXECUTION_ERROR or on_worker.error_type != "UnknownToolError":
        assert (on_worker.pool, on_worker.worker) == (bad.POOL, HOSTNAME)  # it really ran on the worker
    return in_process, on_worker


# ---- generated bad input, on both executors --------------------------------------------------------


@FEW
@given(tool=st.sampled_from(FUZZED), text=garbage_text)
def test_garbage_arguments(local: LocalExecutor, celery: CeleryExecutor, tool: str, text: str) -> None:
    for outcome in _on_both(local, celery, tool, text):
        check_garbage(outcome, tool, text)


@FEW
@given(case=truncated_json())
def test_truncated_json(local: LocalExecutor, celery: CeleryExecutor, case: tuple[str, str]) -> None:
    tool, text = case
    for outcome in _on_both(local, celery, tool, text):
        check_truncated(outcome, tool, text)


# Nesting is refused before parsing, so the text no longer depends on the caller's stack.
_STACK_INDEPENDENT_DEPTHS = st.integers(65, 10_000)


@hypothesis.settings(FEW, max_examples=20)
@given(text=deeply_nested(_STACK_INDEPENDENT_DEPTHS))
def test_deep_nesting(local: LocalExecutor, celery: CeleryExecutor, text: str) -> None:
    for outcome in _on_both(local, celery, "bad_list", text):
        check_nested(outcome, "bad_list")


def test_ten_thousand_open_brackets(local: LocalExecutor, celery: CeleryExecutor) -> None:
    for outcome in _on_both(local, celery, "bad_int", "[" * 10_000):
        assert (outcome.kind, outcome.text) == (
            OutcomeKind.ARGUMENTS_ERROR,
            'Arguments of tool "bad_int" are nested deeper than 64 levels',
        )


@hypothesis.settings(FEW, max_examples=60)
@given(case=wrong_types())
def test_wrong_types_for_each_parameter_type(
    local: LocalExecutor, celery: CeleryExecutor, case: tuple[str, Any]
) -> None:
    tool, value = case
    for outcome in _on_both(local, celery, tool, json.dumps({"value": value})):
        check_wrong_type(outcome, tool, value)


@FEW
@given(case=one_bad_parameter())
def test_one_wrong_parameter_among_many(
    local: LocalExecutor, celery: CeleryExecutor, case: tuple[str, dict[str, Any]]
) -> None:
    parameter, arguments = case
    for outcome in _on_both(local, celery, "bad_mixed", json.dumps(arguments)):
        check_one_bad_parameter(outcome, parameter, arguments[parameter])


@pytest.fixture(scope="module")
def served_anywhere(celery: CeleryExecutor) -> set[str]:
    """Every tool name of the live catalog: other modules' workers may serve tools this one lacks."""
    return {definition.name for definition in celery.catalog_definitions()}


@hypothesis.settings(FEW, max_examples=30)
@given(name=unknown_names)
def test_unknown_tools(
    local: LocalExecutor, celery: CeleryExecutor, served_anywhere: set[str], name: str
) -> None:
    hypothesis.assume(name not in served_anywhere)
    for outcome in _on_both(local, celery, name, "{}"):
        check_unknown(outcome, name)
        assert outcome.task_id is None  # nothing was dispatched


# ---- results that cannot cross the wire -------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("bad_object", "Result of tool 'bad_object': a value of type object is not JSON-serializable"),
        ("bad_nan", "Result of tool 'bad_nan': nan is not a JSON number"),
        ("bad_tuple_key", "Result of tool 'bad_tuple_key': dict key (1, 2) is not a string"),
    ],
)
def test_a_result_that_cannot_be_serialized(
    local: LocalExecutor, celery: CeleryExecutor, tool: str, text: str
) -> None:
    for outcome in _on_both(local, celery, tool, ""):
        check_structured(outcome, tool, {OutcomeKind.EXECUTION_ERROR})
        assert (outcome.text, outcome.error_type) == (text, "ToolResultError")


def _run(executor: LocalExecutor | CeleryExecutor, tool: str, arguments: str) -> ToolOutcome:
    return asyncio.run(executor.execute(ToolExecutionRequest("call-1", tool, arguments)))


@hypothesis.settings(FEW, max_examples=15)
@given(size=st.integers(bad.MAX_RESULT_BYTES + 1, 4 * bad.MAX_RESULT_BYTES))
def test_a_result_over_the_limit_is_an_execution_error_naming_the_setting(
    celery: CeleryExecutor, size: int
) -> None:
    outcome = _run(celery, "bad_huge", json.dumps({"size": size}))
    assert (outcome.kind, outcome.error_type) == (OutcomeKind.EXECUTION_ERROR, "ToolResultError")
    assert outcome.text == (
        f"Result of tool 'bad_huge' is {size} bytes, over the limit of {bad.MAX_RESULT_BYTES} bytes "
        "(TOOLFLEET_MAX_RESULT_BYTES)"
    )


def test_a_result_at_the_limit_passes(celery: CeleryExecutor) -> None:
    outcome = _run(celery, "bad_huge", json.dumps({"size": bad.MAX_RESULT_BYTES}))
    assert (outcome.kind, len(outcome.text)) == (OutcomeKind.SUCCESS, bad.MAX_RESULT_BYTES)


# ---- the argument-size limit (CeleryExecutor only) ----------------------------------------------------

_WIDE_CHARS = st.sampled_from(["x", "é", "✓", "𝄞"])  # 1 to 4 bytes in UTF-8: the limit counts bytes


@hypothesis.settings(FEW, max_examples=30)
@given(char=_WIDE_CHARS, extra=st.integers(1, 3 * SMALL_ARGUMENT_BYTES))
def test_arguments_over_the_limit_are_refused_before_dispatch(
    local: LocalExecutor, small_celery: CeleryExecutor, char: str, extra: int
) -> None:
    # given: arguments of more than 4096 bytes (fewer characters when they are wide)
    arguments = json.dumps(
        {"value": char * (SMALL_ARGUMENT_BYTES // len(char.encode()) + extra)}, ensure_ascii=False
    )
    size = len(arguments.encode())
    assert size > SMALL_ARGUMENT_BYTES
    # when
    on_worker = _run(small_celery, "bad_str", arguments)
    # then: refused with the exact text, never published; in-process there is no such limit
    assert (on_worker.kind, on_worker.error_type, on_worker.task_id) == (
        OutcomeKind.ARGUMENTS_ERROR,
        "ArgumentsTooLarge",
        None,
    )
    assert on_worker.text == (
        f"Arguments of tool 'bad_str' are {size} bytes, over the limit of {SMALL_ARGUMENT_BYTES} bytes "
        "(TOOLFLEET_MAX_ARGUMENT_BYTES)"
    )
    assert _run(local, "bad_str", arguments).kind is OutcomeKind.SUCCESS


def test_arguments_of_exactly_the_limit_run(small_celery: CeleryExecutor) -> None:
    prefix = json.dumps({"value": ""})
    arguments = json.dumps({"value": "x" * (SMALL_ARGUMENT_BYTES - len(prefix))})
    assert len(arguments.encode()) == SMALL_ARGUMENT_BYTES
    outcome = _run(small_celery, "bad_str", arguments)
    assert (outcome.kind, outcome.worker) == (OutcomeKind.SUCCESS, HOSTNAME)


# ---- through AiService: call ids and unknown tool names ----------------------------------------------


def _call(call_id: str | None, value: str) -> ToolExecutionRequest:
    return ToolExecutionRequest(id=call_id, name="bad_str", arguments=json.dumps({"value": value}))


def _results(model: ScriptedChatModel, request_index: int) -> list[tuple[str | None, str]]:
    return [
        (m.id, m.text)
        for m in model.requests[request_index].messages
        if isinstance(m, ToolExecutionResultMessage)
    ]


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (["1", "1"], ["1", "1_2"]),
        ([None, None], ["call_1_0", "call_1_1"]),
        (["1", None, "1", "1_2"], ["1", "call_1_1", "1_2", "1_2_2"]),
        (["", ""], ["call_1_0", "call_1_1"]),
    ],
    ids=["duplicated", "missing", "mixed", "empty"],
)
def test_every_call_gets_its_own_result_with_a_unique_id_in_request_order(
    executor: LocalExecutor | CeleryExecutor, ids: list[str | None], expected: list[str]
) -> None:
    # given: one response whose calls repeat ids or have none
    values = [f"value-{i}" for i in range(len(ids))]
    calls = [_call(call_id, value) for call_id, value in zip(ids, values, strict=True)]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(chat_model=model, tools=[bad], executor=executor)
    # when
    result = service.chat("go")
    # then: one result per call, in request order, each under its own id, matching the AI message's
    assert result.content == "done"
    assert _results(model, 1) == list(zip(expected, values, strict=True))
    ai = next(m for m in model.requests[1].messages if isinstance(m, AiMessage))
    assert [r.id for r in ai.tool_execution_requests] == expected
    assert [e.request.id for e in result.tool_executions] == expected
    if isinstance(executor, CeleryExecutor):  # each its own task on the worker
        task_ids = [e.task_id for e in result.tool_executions]
        assert None not in task_ids and len(set(task_ids)) == len(task_ids)


def test_ids_stay_unique_across_round_trips(executor: LocalExecutor | CeleryExecutor) -> None:
    model = ScriptedChatModel(
        [
            AiMessage(tool_execution_requests=[_call("1", "a"), _call("1", "b")]),
            AiMessage(tool_execution_requests=[_call("1", "c"), _call(None, "d")]),
            "done",
        ]
    )
    service = AiService(chat_model=model, tools=[bad], executor=executor)
    result = service.chat("go")
    assert _results(model, 2) == [("1", "a"), ("1_2", "b"), ("1_3", "c"), ("call_2_1", "d")]
    assert [e.request.id for e in result.tool_executions] == ["1", "1_2", "1_3", "call_2_1"]


def _hallucination(name: str) -> str:
    return (
        f"The LLM is trying to execute the '{name}' tool, but no such tool exists. Most likely, it is a "
        "hallucination. You can override this default strategy by setting the "
        "hallucinated_tool_name_strategy on the AiService"
    )


@hypothesis.settings(FEW, max_examples=25)
@given(name=unknown_names)
def test_an_unknown_tool_name_fails_with_the_exact_hallucination_text(
    executor: LocalExecutor | CeleryExecutor, name: str
) -> None:
    calls = [ToolExecutionRequest("1", name, "{}")]
    service = AiService(
        chat_model=ScriptedChatModel([AiMessage(tool_execution_requests=calls), "never"]),
        tools=[bad],
        executor=executor,
    )
    with pytest.raises(HallucinatedToolNameError) as raised:
        service.chat("go")
    assert str(raised.value) == _hallucination(name)


def test_an_unknown_tool_name_gets_the_strategys_text(executor: LocalExecutor | CeleryExecutor) -> None:
    # given: a known call and an unknown one in the same response, and a strategy
    calls = [_call("1", "real"), ToolExecutionRequest("2", "bad_teleport", '{"to": "mars"}')]
    model = ScriptedChatModel([AiMessage(tool_execution_requests=calls), "done"])
    service = AiService(
        chat_model=model,
        tools=[bad],
        executor=executor,
        hallucinated_tool_name_strategy=lambda request: f"There is no tool named '{request.name}'",
    )
    # when
    result = service.chat("go")
    # then: the model reads the strategy's text as the unknown call's result, which is not an error
    assert _results(model, 1) == [("1", "real"), ("2", "There is no tool named 'bad_teleport'")]
    messages = [m for m in model.requests[1].messages if isinstance(m, ToolExecutionResultMessage)]
    assert [m.is_error for m in messages] == [False, False]
    assert result.content == "done"


# ---- product bugs, pinned --------------------------------------------------------------------------


def test_a_result_over_the_limit_is_refused_on_both(local: LocalExecutor, celery: CeleryExecutor) -> None:
    _on_both(local, celery, "bad_huge", json.dumps({"size": bad.MAX_RESULT_BYTES + 4464}))


def test_a_picture_over_the_result_limit_is_refused(celery: CeleryExecutor) -> None:
    outcome = _run(celery, "bad_huge_image", json.dumps({"size": 200_000}))
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert "TOOLFLEET_MAX_RESULT_BYTES" in outcome.text


def test_an_error_text_over_the_result_limit_is_bounded(celery: CeleryExecutor) -> None:
    outcome = _run(celery, "bad_huge_error", json.dumps({"size": 200_000}))
    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert len(outcome.text.encode()) <= bad.MAX_RESULT_BYTES


def test_an_escaped_lone_surrogate_gives_the_same_outcome_on_both(
    local: LocalExecutor, celery: CeleryExecutor
) -> None:
    _on_both(local, celery, "bad_str", '{"value": "\\ud800"}')


def test_a_raw_lone_surrogate_never_makes_execute_raise(local: LocalExecutor, celery: CeleryExecutor) -> None:
    _on_both(local, celery, "bad_str", '{"value": "\ud800"}')


def test_an_exponent_beyond_memory_gives_the_same_arguments_error_on_both(
    local: LocalExecutor, celery: CeleryExecutor
) -> None:
    in_process, _ = _on_both(local, celery, "bad_int", '{"value": 1E+999999999999999999}')
    assert in_process.kind is OutcomeKind.ARGUMENTS_ERROR


def test_an_exception_without_a_text_gives_an_outcome_on_both(
    local: LocalExecutor, celery: CeleryExecutor
) -> None:
    _on_both(local, celery, "bad_unprintable", "")


def test_nesting_near_the_recursion_limit_gives_the_same_text_on_both(
    local: LocalExecutor, celery: CeleryExecutor
) -> None:
    differing = []
    for depth in range(950, 1001):
        request = ToolExecutionRequest("call-1", "bad_list", "[" * depth)

        async def run(request: ToolExecutionRequest = request) -> tuple[ToolOutcome, ToolOutcome]:
            return await local.execute(request), await celery.execute(request)

        in_process, on_worker = asyncio.run(run())
        if in_process.text != on_worker.text:
            differing.append(depth)
    assert not differing, f"texts differ at depths {differing[0]}..{differing[-1]}"
