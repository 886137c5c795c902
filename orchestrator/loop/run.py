"""One invocation, top to bottom: ask the model, run the tools it calls, feed the results back.

`run_invocation(config, state)` is the whole loop: the frozen `LoopConfig` of the service, the
`RunState` of this invocation, and the free functions of `orchestrator.loop.calls` that run
each batch of tool calls through the saga.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Collection, Coroutine, Mapping, Sequence
from typing import Any

from orchestrator.approvals import ApprovalRecord
from orchestrator.errors import InvocationTakenOverError, OrchestratorError, RoundTripLimitError
from orchestrator.loop import checkpoints
from orchestrator.loop.artifact_images import with_artifact_images
from orchestrator.loop.budgeting import (
    before_model,
    may_start,
    not_run,
    refused_calls,
    spent_on_model,
    stopped,
)
from orchestrator.loop.calls import (
    Call,
    CallStatus,
    keep_successes,
    returns_immediately,
    run_batch,
    run_calls,
    start_call,
)
from orchestrator.loop.cancellation import cancel_requested, cancellable
from orchestrator.loop.config import LoopConfig
from orchestrator.loop.pausing import needs_approval, pause, settle_unrun, settle_waiting
from orchestrator.loop.replay import Replayed, replayed_batch
from orchestrator.loop.settling import settle_left
from orchestrator.loop.state import RunState, ask_providers, visible
from orchestrator.loop.toolset import unique_id, with_unique_ids
from orchestrator.messages import (
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
)
from orchestrator.models.base import (
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    TokenUsage,
)
from orchestrator.result import Result, ToolExecuted
from orchestrator.saga import rollback_reason, rolled_back_text
from orchestrator.saga._journal_writes import start_write
from orchestrator.saga.async_journal import beating, to_the_end
from orchestrator.saga.states import CANCELLED_BY_CALLER, InvocationState
from orchestrator.telemetry import model_called, trace_carrier, traced_invocation

__all__ = ["RoundTripLimitError", "adopt_invocation", "resume_invocation", "run_invocation"]

log = logging.getLogger(__name__)

ROLLED_BACK_STATUS = "rolled_back"


@traced_invocation
async def run_invocation(config: LoopConfig, state: RunState) -> Result:
    """Run one invocation to its end: the answer, an immediate return, a pause for approvals, or an
    exception (after undoing, when compensating, what succeeded before it)."""
    journal = state.saga.journal
    if journal is not None:
        context = state.context
        # The invocation's span goes with it: whoever recovers it continues its trace.
        invocation_json = {**state.invocation().to_json(), "trace_context": trace_carrier()}
        opening = await checkpoints.opening(config, state)
        await journal.execute(start_write(journal.cipher, context, invocation_json, opening))
    return await _run(config, state, _loop(config, state))


@traced_invocation
async def resume_invocation(
    config: LoopConfig, state: RunState, batch: list[Call], approvals: Mapping[str, ApprovalRecord]
) -> Result:
    """Go on with a paused invocation this process claimed (`state` and `batch` as it was paused,
    its saga restored): its waiting calls run as approved or become what the model reads of a
    rejection, then the loop goes on to its end, as `run_invocation`'s does."""
    return await _run(config, state, _resumed(config, state, batch, approvals), again=True)


async def _run(
    config: LoopConfig, state: RunState, body: Coroutine[Any, Any, Result], *, again: bool = False
) -> Result:
    """`body` to its end, cancellable by id; `again`: the invocation ran before (resumed, adopted),
    so a cancel requested meanwhile, while nothing ran it, cancels it now."""
    journal = state.saga.journal
    invocation_id = str(state.context.invocation_id)
    task, taken = asyncio.current_task(), []

    def taken_over(owner: str | None) -> None:  # stopped at once: no call more, nothing undone here
        taken.append(InvocationTakenOverError(f"invocation {invocation_id} was taken over by {owner}"))
        if task is not None:
            task.cancel()

    beat = None if journal is None else beating(journal, invocation_id, config.heartbeat_s, taken_over)
    state.saga.fence = None if beat is None else beat.fence
    try:
        with cancellable(invocation_id, config.cancel_redis_url):
            url = config.cancel_redis_url
            if again and url is not None and await asyncio.to_thread(cancel_requested, url, invocation_id):
                raise asyncio.CancelledError
            result = await body
    except BaseException as exc:
        if taken and task is not None:  # its saga and its end are the new owner's
            task.uncancel()
            log.error("%s while it ran here: stopped", taken[0])
            raise taken[0] from None
        await _end_abnormally(config, state, exc)
        raise
    finally:
        body.close()  # never started when the cancel came first
        if beat is not None:
            beat.cancel()
    if result.finish_reason is FinishReason.APPROVAL_REQUIRED:
        return result  # paused: the journal says so, and whoever resumes it ends it
    if state.saga.journal is None:
        return result
    _, cancelled = await to_the_end(state.saga.end(InvocationState.SUCCEEDED, answer=result.content))
    if cancelled:  # the caller cancelled while the end was journaled
        raise asyncio.CancelledError
    return result


@traced_invocation
async def adopt_invocation(
    config: LoopConfig, state: RunState, history: list[ChatMessage], turns: Sequence[Replayed]
) -> Result:
    """Go on with an invocation this process adopted from an orchestrator that died (`state` as it
    started, `history` the conversation before it, `turns` its journaled turns): each turn is
    replayed without asking the model, its calls concluded from the journal, re-attached to where
    they run, or run; then the loop goes on to its end, as `run_invocation`'s does."""
    return await _run(config, state, _adopted(config, state, history, turns), again=True)


async def _loop(config: LoopConfig, state: RunState) -> Result:
    await _open(config, state)
    return await _turns(config, state)


async def _open(config: LoopConfig, state: RunState) -> None:
    ask_providers(state, config.static_providers, await state.messages(), dynamic=False)
    system = config.system_message_for(state.memory_id)
    if system is not None:
        await state.add(SystemMessage(system))
    await state.add(state.user_message)


async def _adopted(
    config: LoopConfig, state: RunState, history: list[ChatMessage], turns: Sequence[Replayed]
) -> Result:
    await state.set_messages(history)
    await _open(config, state)
    for replayed in turns:
        state.saga.turn = state.round_trips = replayed.turn
        ask_providers(state, config.dynamic_providers, await state.messages(), dynamic=True)
        message = replayed.message
        state.used_ids.update(r.id for r in message.tool_execution_requests if r.id)
        await state.add(message)
        batch = replayed_batch(config, state, replayed)
        # a call that was to wait for a person and was never asked (its process died first) waits now
        waiting = {
            call.index
            for call in batch
            if call.execution is None
            and call.row is None
            and (call.request.id or "") not in replayed.approvals
            and needs_approval(config, state, call.request)
        }
        fresh = [call for call in batch if call.index not in waiting]
        await run_calls(config, state, [call for call in fresh if call.execution is None])
        result = await _after_batch(config, state, batch, fresh, waiting)
        if result is not None:
            return result
    return await _turns(config, state)


async def _resumed(
    config: LoopConfig, state: RunState, batch: list[Call], approvals: Mapping[str, ApprovalRecord]
) -> Result:
    ask_providers(state, config.static_providers, await state.messages(), dynamic=False)
    waiting = [c for c in batch if c.message is None and (c.request.id or "") in approvals]
    approved = [c for c in waiting if settle_waiting(config, state, c, approvals[c.request.id or ""])]
    for call in waiting:
        if call not in approved and state.emit is not None and call.execution is not None:
            state.emit(ToolExecuted(call.execution))
    await run_calls(config, state, approved)
    result = await _after_batch(config, state, batch, waiting, ())
    return result if result is not None else await _turns(config, state)


async def _turns(config: LoopConfig, state: RunState) -> Result:
    while True:
        state.saga.turn = state.round_trips + 1  # the turn of the calls this response asks for
        messages = await state.messages()  # read once per round trip
        takes_images = getattr(config.chat_model, "supports_tool_result_images", False)
        messages = await with_artifact_images(messages, takes_images)
        ask_providers(state, config.dynamic_providers, messages, dynamic=True)
        specifications = visible(config, state, messages)
        state.shown = {spec.name for spec in specifications}
        request = ChatRequest(
            messages=messages, tool_specifications=specifications, tool_choice=config.tool_choice
        )
        why = await before_model(config, state)
        if why is not None:
            return await stopped(config, state, why)
        started: dict[int, Call] = {}  # calls dispatched while the response streams
        response = await _ask_model(config, state, request, started)
        await spent_on_model(config, state, response)
        if response.token_usage:
            state.token_usage = (state.token_usage or TokenUsage()) + response.token_usage
        message = with_unique_ids(response.ai_message, state.round_trips + 1, set(state.used_ids))
        state.used_ids.update(r.id for r in message.tool_execution_requests if r.id)
        if not message.tool_execution_requests:
            await state.add(message)
            return _result(state, message.text, response.finish_reason)
        state.round_trips += 1
        _check_round_trips(config, state.round_trips)
        await state.add(message)  # the AI message is stored before its tools run
        requests = message.tool_execution_requests
        waiting = {i for i, r in enumerate(requests) if needs_approval(config, state, r)}
        refused = await refused_calls(config, state, len(requests), started)
        skipped = {*waiting, *refused}
        rows = await checkpoints.checkpoint(config, state, message, skipped) if config.checkpointing else {}
        batch = await run_batch(config, state, requests, started, skipped, rows)
        for call in batch:
            if call.index in refused:
                not_run(state, call, refused[call.index])
        fresh = [call for call in batch if call.index not in waiting]
        result = await _after_batch(config, state, batch, fresh, waiting)
        if result is not None:
            return result
        if refused:
            return await stopped(config, state, next(iter(refused.values())))


async def _after_batch(
    config: LoopConfig, state: RunState, batch: list[Call], fresh: list[Call], waiting: Collection[int]
) -> Result | None:
    """What follows a batch whose `fresh` calls just ran: their successes kept for the saga, a
    failure compensated, then a pause when calls wait for approval, else the results added to the
    conversation (and the invocation's `Result` when the batch returns at once)."""
    keep_successes(state, fresh)  # in request order, whatever order they finished in
    for call in fresh:
        if call.status is CallStatus.RAISED and call.error is not None:
            raise call.error
    failed = next((call for call in fresh if call.status is CallStatus.FAILED), None)
    if config.compensating and failed is not None:
        await _compensate_batch(state, batch, failed)
        # the batch is undone: a call of it waiting for a person would stand alone if approved later
        settle_unrun(state, [call for call in batch if call.index in waiting], failed.request.name)
        waiting = ()
    if waiting:
        return await pause(config, state, batch, waiting)
    results = []
    for call in batch:
        assert call.message is not None and call.execution is not None
        results.append(call.message)
        state.executions.append(call.execution)
        state.found += [n for n in call.found if n not in state.found]
    await state.add(*results)  # the batch's results in request order, in one write
    if returns_immediately(batch):
        return _result(state, None, FinishReason.TOOL_EXECUTION)
    return None


async def _ask_model(
    config: LoopConfig, state: RunState, request: ChatRequest, started: dict[int, Call]
) -> ChatResponse:
    model = config.chat_model
    began = time.perf_counter()
    if state.emit is None:
        response = await model.chat(request)
    else:
        response = await _stream_model(config, state, request, started)
    log.info(
        "model %s: %d messages, %d tools -> %d tool calls, finish %s in %.0f ms",
        model.provider,
        len(request.messages),
        len(request.tool_specifications),
        len(response.ai_message.tool_execution_requests),
        response.finish_reason,
        (time.perf_counter() - began) * 1000,
    )
    model_called(config, request, response, began)
    return response


async def _stream_model(
    config: LoopConfig, state: RunState, request: ChatRequest, started: dict[int, Call]
) -> ChatResponse:
    """Pass the model's events on; with concurrency on, dispatch each call as soon as it is complete.

    A complete tool call is passed on with the id its call runs under (the one `with_unique_ids`
    gives the complete response), so it and its `ToolExecuted` carry the same id.
    """
    assert state.emit is not None
    response: ChatResponse | None = None
    seen = set(state.used_ids)
    round_trip = state.round_trips + 1
    async for event in config.chat_model.stream(request):
        if isinstance(event, CompleteResponse):
            response = event.response
            continue
        if not isinstance(event, CompleteToolCall):
            state.emit(event)
            continue
        call_request = unique_id(event.request, event.index, round_trip, seen)
        state.emit(dataclasses.replace(event, request=call_request))
        # A checkpointing invocation journals the whole response before any call is published.
        early = config.concurrently and not config.checkpointing
        if early and not needs_approval(config, state, call_request) and await may_start(config, state):
            if not started:
                _check_round_trips(config, round_trip)
            call = Call(event.index, call_request)
            start_call(config, state, call)
            started[event.index] = call
    if response is None:
        raise OrchestratorError(f"{config.chat_model.provider} stream ended without a complete response")
    return response


def _check_round_trips(config: LoopConfig, round_trips: int) -> None:
    if round_trips > config.max_round_trips:
        raise RoundTripLimitError(
            f"Something is wrong, exceeded {config.max_round_trips} tool calling round trips "
            "(max_tool_calling_round_trips)"
        )


def _result(state: RunState, content: str | None, reason: FinishReason | None) -> Result:
    return Result(
        content=content,
        tool_executions=list(state.executions),
        finish_reason=reason,
        token_usage=state.token_usage,
        invocation_id=str(state.context.invocation_id),
    )


async def _compensate_batch(state: RunState, batch: Sequence[Call], failed: Call) -> None:
    """After a failed batch (`failed` its first failed call): undo every recorded success and
    rewrite their result messages."""
    undone = await state.saga.compensate_all(
        state.invocation(), rollback_reason(failed.request.name, failed.request.id)
    )
    rolled = {id(step.execution): step for step in undone}
    if not rolled:
        return
    for call in batch:
        if call.execution is not None and call.message is not None and id(call.execution) in rolled:
            text = rolled_back_text(call.request.name, failed.request.name)
            call.execution.result = text
            call.execution.status = ROLLED_BACK_STATUS
            call.message = dataclasses.replace(call.message, text=text, is_error=True, contents=None)
    earlier = {(e.request.id, e.request.name): e for e in state.executions if id(e) in rolled}
    if not earlier:
        return
    for execution in earlier.values():
        execution.result = rolled_back_text(execution.request.name, failed.request.name)
        execution.status = ROLLED_BACK_STATUS
    rewritten: list[ChatMessage] = [
        dataclasses.replace(m, text=earlier[(m.id, m.tool_name)].result, is_error=True, contents=None)
        if isinstance(m, ToolExecutionResultMessage) and (m.id, m.tool_name) in earlier
        else m
        for m in await state.messages()
    ]
    await state.set_messages(rewritten)


async def _end_abnormally(config: LoopConfig, state: RunState, error: BaseException) -> None:
    """Compensate what succeeded before the error propagates (handler raised, round-trip limit,
    provider failure, caller cancelled), even if the caller cancels again meanwhile."""
    reason = f"the invocation failed: {type(error).__name__}"
    if config.compensating and state.saga.steps:
        await to_the_end(state.saga.compensate_all(state.invocation(), reason))
    await to_the_end(settle_left(state))
    if isinstance(error, asyncio.CancelledError):
        await to_the_end(state.saga.end(InvocationState.CANCELLED, CANCELLED_BY_CALLER))
    else:
        await to_the_end(state.saga.end(InvocationState.FAILED, f"{type(error).__name__}: {error}"))
