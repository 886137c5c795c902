"""Acceptance tests of `AiService`: hallucinated tool names, timeouts and pools without a worker (SPEC §6).

How every case runs: tests/integration/acceptance/__init__.py.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import tests.integration.acceptance_tools as acc
from orchestrator import CeleryExecutor, FinishReason, HallucinatedToolNameError, ScriptedChatModel
from tests.integration.acceptance._service import (
    FINAL,
    HALLUCINATION_TEXT,
    executions,
    explicit_handlers,
    invoke,
    service_for,
)
from tests.integration.scripts import ask, call, tool_result

pytestmark = pytest.mark.integration


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
