"""The loop's side of budgets: checked before each model call and each batch of tool calls, spent after
each model call; an invocation that would go past its budget, or its tenant's for the day, stops.

Calls of a batch are taken from the budgets in request order: those that fit run, the rest are not
run (the model would read why, were the conversation to go on), and the invocation ends after the
batch with `FinishReason.BUDGET_EXCEEDED`. What succeeded is kept, or undone when the service
compensates (`compensate_on_tool_errors`), as after a failed call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from datetime import UTC, datetime

from orchestrator.loop.calls import Call, CallStatus
from orchestrator.loop.config import LoopConfig
from orchestrator.loop.state import RunState
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.models.base import ChatResponse, FinishReason
from orchestrator.result import Result, ToolExecuted
from orchestrator.saga.async_journal import to_the_end
from workers.protocol import ToolExecution
from workers.tenants import tenant_of

__all__ = [
    "before_model",
    "budgeted",
    "may_start",
    "not_run",
    "refused_calls",
    "spent_on_model",
    "stopped",
    "take_calls",
]

log = logging.getLogger(__name__)

NOT_RUN_STATUS = "budget_exceeded"


async def before_model(config: LoopConfig, state: RunState) -> str | None:
    """Why the next model call must not be made (a budget spent, or one that cannot be checked)."""
    why = state.spend.before_model() if state.spend is not None else None
    if why is None and config.tenant_budgets is not None:
        why = await asyncio.to_thread(config.tenant_budgets.before_model, tenant_of(state.parameters))
    return why


async def spent_on_model(config: LoopConfig, state: RunState, response: ChatResponse) -> None:
    """Count a model call's tokens and cost against the invocation's and its tenant's budgets."""
    if state.spend is not None:
        state.spend.spent_on_model(response)
    if config.tenant_budgets is not None:
        await asyncio.to_thread(config.tenant_budgets.spent_on_model, tenant_of(state.parameters), response)


async def take_calls(config: LoopConfig, state: RunState, count: int) -> tuple[int, str | None]:
    """Take `count` tool calls from the budgets, the invocation's then its tenant's day: how many may
    run, and why not the rest."""
    if not budgeted(config, state):
        return count, None
    allowed, why = state.spend.room_for_calls(count) if state.spend is not None else (count, None)
    if allowed and config.tenant_budgets is not None:
        granted, tenant_why = await asyncio.to_thread(
            config.tenant_budgets.before_calls, tenant_of(state.parameters), allowed
        )
        if granted < allowed:
            allowed, why = granted, tenant_why
    if state.spend is not None:
        state.spend.tool_calls += allowed
    return allowed, why


def budgeted(config: LoopConfig, state: RunState) -> bool:
    """Whether the invocation has a budget of its own or its tenant's to keep (most have none)."""
    return state.spend is not None or config.tenant_budgets is not None


async def may_start(config: LoopConfig, state: RunState) -> bool:
    """Whether a call complete while the response streams may be dispatched now (taken from the
    budgets if so); else it waits for its batch, whose budget check then settles it."""
    return not budgeted(config, state) or (await take_calls(config, state, 1))[0] == 1


async def refused_calls(
    config: LoopConfig, state: RunState, count: int, started: Collection[int]
) -> dict[int, str]:
    """The calls of a batch of `count` (those `started` early already taken) the budgets leave no room
    for, by index, with why."""
    if not budgeted(config, state):
        return {}
    pending = [index for index in range(count) if index not in started]
    allowed, why = await take_calls(config, state, len(pending))
    return {index: why for index in pending[allowed:]} if why is not None else {}


def not_run(state: RunState, call: Call, why: str) -> None:
    """Settle a call the budgets left no room for: not run, and the model would read why."""
    now = datetime.now(UTC)
    request = call.request
    text = f"Tool '{request.name}' was not run: the invocation stopped, {why}"
    call.status = CallStatus.SUCCEEDED  # not a failure of the batch: nothing to compensate for it
    call.execution = ToolExecution(
        request=request, result=text, has_failed=True, status=NOT_RUN_STATUS, started_at=now, finished_at=now
    )
    call.message = ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text, is_error=True)
    if state.emit is not None:
        state.emit(ToolExecuted(call.execution))


async def stopped(config: LoopConfig, state: RunState, why: str) -> Result:
    """End the invocation for `why` (a budget): what succeeded undone first when the service
    compensates."""
    log.info("invocation %s stopped: %s", state.context.invocation_id, why)
    if config.compensating and state.saga.steps:
        await to_the_end(state.saga.compensate_all(state.invocation(), f"the invocation stopped: {why}"))
    return Result(
        content=None,
        tool_executions=list(state.executions),
        finish_reason=FinishReason.BUDGET_EXCEEDED,
        token_usage=state.token_usage,
        invocation_id=str(state.context.invocation_id),
        budget_exceeded=why,
    )
