"""Acceptance tests of `AiService`: the default error policies and their once-per-process notice (SPEC §6).

How every case runs: tests/integration/acceptance/__init__.py.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

import orchestrator.service
import tests.integration.acceptance_tools as acc
from orchestrator import LocalExecutor, ScriptedChatModel, send_exception_message_to_llm
from orchestrator.handlers import RemoteToolError
from tests.integration.acceptance._service import (
    BAD_COUNT_TEXT,
    FINAL,
    VISIBLE_TEXT,
    bad_count,
    executions,
    explicit_handlers,
    invoke,
    sent_to_model,
    service_for,
)
from tests.integration.scripts import ask, call, tool_result
from workers.errors import ToolArgumentsError

pytestmark = pytest.mark.integration


# -- 5. default policies and the once-per-process notice (SPEC §6) -------------------------------


@pytest.mark.parametrize("mode", ["chat", "stream"])
def test_default_chat_fails_on_arguments_error(executor: Any, mode: str) -> None:
    # given no handlers configured
    model = ScriptedChatModel([ask(bad_count()), FINAL])
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
    model = ScriptedChatModel([ask(bad_count()), FINAL])
    service = service_for(model, executor)

    # when
    result = invoke(service, "achat")

    # then
    assert result.content == FINAL
    assert model.requests[1].messages[-1] == tool_result(bad_count(), BAD_COUNT_TEXT, is_error=True)
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
