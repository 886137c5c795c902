"""Per-invocation budgets (`AiService(budget=Budget(...))`) in-process: tool calls, tokens, cost and wall
time, checked before each model call and each batch; an invocation that would go past one stops with
`FinishReason.BUDGET_EXCEEDED` (tenants' daily budgets, in Redis: tests/integration/test_budgets.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import tests.integration.tools as T
from orchestrator import (
    AiMessage,
    AiService,
    Budget,
    ChatResponse,
    FinishReason,
    Journal,
    ModelPrice,
    OrchestratorError,
    ScriptedChatModel,
    TokenUsage,
)
from orchestrator.result import CompleteResponse, ToolExecuted
from tests.orchestrator._bank import Bank
from tests.orchestrator._service import call, calls


def _response(call_id: str, usage: TokenUsage, model_name: str = "scripted") -> ChatResponse:
    request = call("echo", call_id, text="x")
    return ChatResponse(calls(request), FinishReason.TOOL_EXECUTION, usage, model_name=model_name)


def _deposits() -> ScriptedChatModel:
    return ScriptedChatModel([calls(call("deposit", f"c{i}", amount=5 + i)) for i in range(2)])


def _one_call_a_turn(turns: int) -> ScriptedChatModel:
    return ScriptedChatModel([calls(call("echo", f"c{i}", text=f"n{i}")) for i in range(turns)] + ["done"])


def test_a_budget_of_five_tool_calls_stops_the_sixth() -> None:
    # given: a model that asks for one call a turn, eight times; a budget of 5 tool calls
    model = _one_call_a_turn(8)
    service = AiService(chat_model=model, tools=[T.echo], budget=Budget(max_tool_calls=5))

    # when
    result = service.chat("count")

    # then: five calls ran; the sixth did not, and the invocation stopped there, saying why
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert result.budget_exceeded == "its budget of 5 tool calls is spent"
    ran = [e for e in result.tool_executions if e.status == "success"]
    assert [e.result for e in ran] == ["n0", "n1", "n2", "n3", "n4"]
    assert [(e.request.id, e.status) for e in result.tool_executions[5:]] == [("c5", "budget_exceeded")]
    assert result.tool_executions[5].result == (
        "Tool 'echo' was not run: the invocation stopped, its budget of 5 tool calls is spent"
    )
    assert len(model.requests) == 6  # the model was not asked again after the refused batch


def test_a_batch_past_the_budget_runs_the_calls_that_fit_in_request_order() -> None:
    # given: a budget of 2 tool calls; the model asks for 3 at once
    model = ScriptedChatModel([calls(*(call("echo", f"c{i}", text=str(i)) for i in range(3))), "never"])
    service = AiService(chat_model=model, tools=[T.echo], budget=Budget(max_tool_calls=2))

    # when
    result = service.chat("three")

    # then: the first two ran, the third did not
    assert [(e.request.id, e.status) for e in result.tool_executions] == [
        ("c0", "success"),
        ("c1", "success"),
        ("c2", "budget_exceeded"),
    ]
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED


def test_a_token_budget_stops_before_the_next_model_call() -> None:
    # given: responses of 600 tokens each; a budget of 1,000 tokens
    model = ScriptedChatModel([_response(f"c{i}", TokenUsage(500, 100)) for i in range(3)])
    service = AiService(chat_model=model, tools=[T.echo], budget=Budget(max_tokens=1_000))

    # when
    result = service.chat("spend")

    # then: the second response took it past 1,000: no third model call
    assert len(model.requests) == 2
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert result.budget_exceeded == "its budget of 1000 tokens is spent (1200 used)"
    assert result.token_usage == TokenUsage(1000, 200)


def test_a_cost_budget_prices_each_response_by_its_model() -> None:
    # given: a dated model's responses, priced as the model whose name it starts with: 10 per million
    # input and 30 per million output tokens
    usage = TokenUsage(50_000, 10_000)  # 0.5 + 0.3 = 0.8 a response
    model = ScriptedChatModel([_response(f"c{i}", usage, "gpt-4o-2024-08-06") for i in range(3)])
    prices = {"gpt-4": ModelPrice(100, 100), "gpt-4o": ModelPrice(10, 30), "*": ModelPrice(1000, 1000)}
    budget = Budget(max_cost=1.5, prices=prices)
    service = AiService(chat_model=model, tools=[T.echo], budget=budget)

    # when
    result = service.chat("spend")

    # then: after two responses (1.6), no third
    assert len(model.requests) == 2
    assert result.budget_exceeded == "its budget of 1.5 is spent (1.6 used)"


def test_a_model_without_a_price_stops_a_cost_budget_closed() -> None:
    # given: a cost budget whose prices do not name the model
    model = ScriptedChatModel([calls(call("echo", "c0", text="x")), "never"])
    service = AiService(
        chat_model=model, tools=[T.echo], budget=Budget(max_cost=1.0, prices={"gpt-4o": ModelPrice(2.5, 10)})
    )

    # when
    result = service.chat("spend")

    # then: its cost cannot be counted, so the invocation does not go on
    assert len(model.requests) == 1
    assert result.budget_exceeded == "the cost of model 'scripted' is unknown: its budget has no price for it"


def test_a_wall_time_budget_stops_before_the_next_model_call() -> None:
    # given: a tool that takes 0.3 s, asked for in every turn; a budget of 0.5 s
    model = ScriptedChatModel([calls(call("slow", f"c{i}", seconds=0.3)) for i in range(5)])
    service = AiService(chat_model=model, tools=[T.slow], budget=Budget(max_wall_s=0.5))

    # when
    started = time.monotonic()
    result = service.chat("wait")

    # then: two calls ran (0.6 s), then it stopped
    assert time.monotonic() - started < 1.5
    assert result.budget_exceeded == "its budget of 0.5 s is spent"
    assert len(result.tool_executions) == 2


def test_a_budget_stop_compensates_when_the_service_compensates(tmp_path: Path) -> None:
    # given: a compensating service, a budget of one call; the model asks for two deposits in turn
    bank = Bank()
    model = ScriptedChatModel(
        [calls(call("deposit", "c0", amount=5)), calls(call("deposit", "c1", amount=7))]
    )
    service = AiService(
        chat_model=model,
        tools=[bank],
        compensate_on_tool_errors=True,
        budget=Budget(max_tool_calls=1),
        journal=Journal(f"sqlite:///{tmp_path / 'journal.db'}"),
    )

    # when
    result = service.chat("deposit twice")

    # then: the first deposit ran, and was undone when the budget stopped the invocation
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert bank.undone == ["deposit 5"]
    assert bank.balance == 0


def test_a_budget_stop_keeps_what_succeeded_when_the_service_does_not_compensate() -> None:
    bank = Bank()
    model = ScriptedChatModel(
        [calls(call("deposit", "c0", amount=5)), calls(call("deposit", "c1", amount=7))]
    )
    service = AiService(chat_model=model, tools=[bank], budget=Budget(max_tool_calls=1))
    result = service.chat("deposit twice")
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert (bank.balance, bank.undone) == (5, [])


def test_streamed_calls_are_taken_from_the_budget_as_they_start() -> None:
    # given: a budget of 2 calls; a streamed response asking for 3
    model = ScriptedChatModel([calls(*(call("echo", f"c{i}", text=str(i)) for i in range(3))), "never"])
    service = AiService(chat_model=model, tools=[T.echo], budget=Budget(max_tool_calls=2))

    async def events() -> list[object]:
        return [event async for event in service.stream("three")]

    # when
    seen = asyncio.run(events())

    # then: two ran, the third was told as not run, and the stream ends with the budget stop
    executed = [e.execution for e in seen if isinstance(e, ToolExecuted)]
    assert sorted((e.request.id, e.status) for e in executed) == [
        ("c0", "success"),
        ("c1", "success"),
        ("c2", "budget_exceeded"),
    ]
    last = seen[-1]
    assert isinstance(last, CompleteResponse)
    assert last.result.finish_reason is FinishReason.BUDGET_EXCEEDED


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tool_calls": -1}, "Budget(max_tool_calls=...) must be a whole number, 0 or more, got -1"),
        ({"max_tokens": 1.5}, "Budget(max_tokens=...) must be a whole number, 0 or more, got 1.5"),
        ({"max_wall_s": -2}, "Budget(max_wall_s=...) must be a number, 0 or more, got -2"),
        (
            {"max_cost": 1},
            "Budget(max_cost=...) needs prices={model: ModelPrice(...)}: what a model's tokens cost",
        ),
    ],
)
def test_a_budget_that_cannot_be_kept_is_refused_when_made(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(OrchestratorError) as raised:
        Budget(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_daily_budgets_need_an_executor_with_redis() -> None:
    with pytest.raises(OrchestratorError) as raised:
        AiService(
            chat_model=ScriptedChatModel(["x"]), tools=[T.echo], daily_budgets={"*": Budget(max_tool_calls=1)}
        )
    assert "daily_budgets need an executor on worker pools (CeleryExecutor)" in str(raised.value)


def test_an_answer_within_budget_is_untouched() -> None:
    model = ScriptedChatModel([calls(call("echo", "c0", text="x")), AiMessage("fine")])
    service = AiService(chat_model=model, tools=[T.echo], budget=Budget(max_tool_calls=5, max_tokens=10**6))
    result = service.chat("once")
    assert (result.content, result.finish_reason, result.budget_exceeded) == ("fine", FinishReason.STOP, None)
