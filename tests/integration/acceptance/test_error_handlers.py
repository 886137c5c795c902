"""Acceptance tests of `AiService`: ready-made and custom error handlers (SPEC §6).

How every case runs: tests/integration/acceptance/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import tests.integration.acceptance_tools as acc
from orchestrator import (
    LocalExecutor,
    ScriptedChatModel,
    ToolErrorContext,
    ToolErrorHandlerResult,
    ToolExecutionRequest,
    fail_invocation,
    fail_invocation_unless_visible_to_llm,
    send_exception_message_to_llm,
    send_generic_message_to_llm_unless_visible_to_llm,
)
from orchestrator.handlers import RemoteToolError
from tests.integration.acceptance._service import (
    BAD_COUNT_TEXT,
    FINAL,
    VISIBLE_TEXT,
    assert_ran_where_expected,
    bad_count,
    executions,
    handlers,
    sent_to_model,
    service_for,
)
from tests.integration.scripts import ask, call, tool_result
from workers.calls.invocation import InvocationParameters
from workers.errors import ToolArgumentsError

pytestmark = pytest.mark.integration


# -- 4. ready-made and custom error handlers (SPEC §6) -------------------------------------------


@dataclass(frozen=True)
class SentCase:
    """A handler whose text the model is sent for a failing call."""

    id: str
    kind: str  # "arguments" or "execution"
    handler: Any
    request: ToolExecutionRequest
    text: str


SENT_CASES = [
    SentCase(
        "args/send_exception", "arguments", send_exception_message_to_llm(), bad_count(), BAD_COUNT_TEXT
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
    service = service_for(model, executor, **handlers(case.kind, case.handler, other=fail_invocation()))

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
    RaiseCase("args/fail", "arguments", fail_invocation(), bad_count(), "ToolArgumentsError", BAD_COUNT_TEXT),
    RaiseCase(
        "args/fail_unless_visible",
        "arguments",
        fail_invocation_unless_visible_to_llm(),
        bad_count(),
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
    service = service_for(
        model, executor, **handlers(case.kind, case.handler, other=send_exception_message_to_llm())
    )

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

    calls = [call("e1", "acc_raise", how="secret"), bad_count()]
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
