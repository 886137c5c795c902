"""Tenants' daily budgets with real workers and Redis: twenty invocations of one tenant at once never
take more tool calls between them than its day allows, another tenant's day is its own, a day's tokens
stop the next invocation before it asks the model, and a budget that cannot be checked stops the
invocation (budgets fail closed)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from orchestrator import AiService, Budget, CeleryExecutor, ChatRequest, FinishReason, ScriptedChatModel
from orchestrator.budgets import TenantBudgets
from orchestrator.models.base import ChatResponse, TokenUsage
from orchestrator.result import Result
from tests.integration import slot_tools
from tests.orchestrator._service import call, calls
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def budget_keys(client: redis.Redis) -> Iterator[None]:
    """No tenant has spent anything today, before and after the test."""
    client.delete(*client.keys("toolfleet:budget:*") or ["none"])
    yield
    client.delete(*client.keys("toolfleet:budget:*") or ["none"])


def _one_call_then_answer(run: str, usage: TokenUsage | None = None) -> ScriptedChatModel:
    """A model that asks for one call of `unlimited_sleep` in an invocation's first turn, then answers."""

    def answer(request: ChatRequest) -> ChatResponse:
        asked = any(getattr(m, "tool_execution_requests", None) for m in request.messages)
        if asked:
            return ChatResponse(calls(text="done"), FinishReason.STOP, usage)
        request_call = call("unlimited_sleep", f"c-{uuid.uuid4().hex[:6]}", run=run, seconds=0.05)
        return ChatResponse(calls(request_call), FinishReason.TOOL_EXECUTION, usage)

    return ScriptedChatModel(answer)


def _service(
    settings: Settings, run: str, daily: dict[str, Budget], usage: TokenUsage | None = None
) -> AiService:
    executor = CeleryExecutor(settings=settings, tools=[slot_tools])
    return AiService(
        chat_model=_one_call_then_answer(run, usage),
        executor=executor,
        tools=[slot_tools],
        daily_budgets=daily,
    )


async def _invocations(service: AiService, tenant: str, count: int) -> list[Result]:
    return list(
        await asyncio.gather(*(service.achat(f"go {i}", parameters={"tenant": tenant}) for i in range(count)))
    )


def test_twenty_invocations_at_once_never_take_more_calls_than_the_day_allows(
    settings: Settings, client: redis.Redis, slot_worker: WorkerProcess, budget_keys: None
) -> None:
    # given: tenant acme may make 7 tool calls a day, every other tenant 100
    run = uuid.uuid4().hex
    service = _service(settings, run, {"acme": Budget(max_tool_calls=7), "*": Budget(max_tool_calls=100)})

    # when: 20 invocations of acme, each asking for one call, run at once, and 3 of globex
    async def both() -> tuple[list[Result], list[Result]]:
        acme, globex = await asyncio.gather(
            _invocations(service, "acme", 20), _invocations(service, "globex", 3)
        )
        return acme, globex

    try:
        acme, globex = asyncio.run(both())
    finally:
        service.executor.close()

    # then: exactly 7 of acme's calls ran (the tools' own record); the other 13 invocations stopped
    # with the day's budget spent; globex's day is its own
    reasons = sorted(str(r.finish_reason) for r in acme)
    assert reasons == ["BUDGET_EXCEEDED"] * 13 + ["STOP"] * 7
    stopped = {r.budget_exceeded for r in acme if r.finish_reason is FinishReason.BUDGET_EXCEEDED}
    assert stopped == {"the daily budget of tenant 'acme' of 7 tool calls is spent"}
    assert len(client.lrange(f"test:slots:{run}:seen", 0, -1)) == 7 + 3
    assert [r.finish_reason for r in globex] == [FinishReason.STOP] * 3
    tenants = TenantBudgets({"*": Budget()}, client)
    assert tenants.spent("acme")["tool_calls"] == "7"
    assert tenants.spent("globex")["tool_calls"] == "3"


def test_a_day_of_tokens_spent_stops_the_next_invocation_before_it_asks_the_model(
    settings: Settings, client: redis.Redis, slot_worker: WorkerProcess, budget_keys: None
) -> None:
    # given: a tenant of 1,000 tokens a day; each response costs 600
    run = uuid.uuid4().hex
    service = _service(settings, run, {"*": Budget(max_tokens=1_000)}, TokenUsage(500, 100))
    model = service.chat_model
    assert isinstance(model, ScriptedChatModel)

    # when: it runs one invocation (two responses), then another
    try:
        first = service.chat("one", parameters={"tenant": "initech"})
        second = service.chat("two", parameters={"tenant": "initech"})
        other = service.chat("three", parameters={"tenant": "hooli"})
    finally:
        service.executor.close()

    # then: the first ran to its answer (the budget is checked before each model call, not within one);
    # the second stopped before asking the model; another tenant's day is untouched
    assert first.finish_reason is FinishReason.STOP
    assert second.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert second.budget_exceeded == "the daily budget of tenant 'initech' of 1000 tokens is spent"
    assert other.finish_reason is FinishReason.STOP
    assert len(model.requests) == 2 + 0 + 2


def test_a_daily_budget_that_cannot_be_checked_stops_the_invocation(settings: Settings) -> None:
    # given: the budgets' Redis is away
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    tenants = TenantBudgets({"*": Budget(max_tool_calls=5)}, unreachable)

    # when / then: neither a model call nor a tool call may go ahead
    why = tenants.before_model("acme")
    assert why is not None and why.startswith("the daily budget of tenant 'acme' could not be checked")
    granted, why = tenants.before_calls("acme", 2)
    assert granted == 0 and why is not None and "could not be checked" in why
    json.dumps(why)
