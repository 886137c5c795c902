"""The tool calls of one invocation: run a batch, journal each call, turn errors into messages."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from orchestrator.executors import observe_progress
from orchestrator.handlers import (
    HallucinatedToolNameError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    error_of,
    unwrap_cause,
)
from orchestrator.loop._attach import attached
from orchestrator.loop.cancellation import call_cancellable
from orchestrator.loop.config import LoopConfig
from orchestrator.loop.state import RunState
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.providers import AiServiceTool, ToolRunContext
from orchestrator.result import ToolExecuted, ToolProgress
from orchestrator.saga.async_journal import to_the_end
from orchestrator.search import FOUND_TOOLS_ATTRIBUTE, ToolSearchStrategy
from orchestrator.telemetry import traced_call
from workers.calls.progress import ProgressReport
from workers.calls.results import ToolExecutionResult, convert_result
from workers.calls.runner import error_outcome
from workers.errors import ToolArgumentsError, ToolCancelled
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition
from workers.tools.specification import ReturnBehavior

__all__ = ["Call", "CallStatus", "conclude", "returns_immediately", "run_batch", "run_calls", "start_call"]

log = logging.getLogger(__name__)

_ABANDONED = (OutcomeKind.TIMED_OUT, OutcomeKind.WORKER_LOST)


class CallStatus(Enum):
    """Where a tool call of a batch stands (its journal row has `orchestrator.CallState`)."""

    PENDING = "pending"  # not finished yet
    SUCCEEDED = "succeeded"  # the result goes to the model (a search asked badly included)
    FAILED = "failed"  # the tool failed; the handler's text goes to the model; the batch failed
    RAISED = "raised"  # a handler (or the hallucinated-name rule) ends the invocation with `error`


@dataclass
class Call:
    """One tool call of a batch: its request, and what came of it."""

    index: int
    request: ToolExecutionRequest
    status: CallStatus = CallStatus.PENDING
    error: BaseException | None = None  # what ends the invocation, when RAISED
    task: asyncio.Task[None] | None = None  # when dispatched concurrently
    execution: ToolExecution | None = None
    message: ToolExecutionResultMessage | None = None
    behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    found: list[str] = field(default_factory=list)  # the tools a tool search call found
    definition: ToolDefinition | None = None  # set for journaled calls (those of ToolDefinitions)
    row: int | None = None  # the call's journal row
    progress: ProgressReport | None = None  # the last progress its tool reported
    cancelled: bool = False  # this call alone was cancelled (`AiService.cancel_call`)
    # Published by an orchestrator that died, when this one adopted its invocation: re-attached to,
    # its deadline counted from then, never published again (unless its tool is idempotent).
    published_at: datetime | None = None


async def run_batch(
    config: LoopConfig,
    state: RunState,
    requests: Sequence[ToolExecutionRequest],
    started: dict[int, Call],
    waiting: Collection[int] = (),
    rows: Mapping[int, int] | None = None,
) -> list[Call]:
    """Run the calls of one response, concurrently (at most `max_fanout` at once) or one by one; calls
    `started` while the response streamed are awaited, not run again, and those at the indexes
    `waiting` (for approval) are not run; `rows`: the journal rows its turn's checkpoint wrote, by
    index. Returns them all in request order."""
    calls: list[Call] = []
    for index, request in enumerate(requests):
        early = started.get(index)
        call = early if early is not None and early.request.id == request.id else Call(index, request)
        call.row = (rows or {}).get(index, call.row)
        calls.append(call)
    await run_calls(config, state, [call for call in calls if call.index not in waiting])
    return calls


async def run_calls(config: LoopConfig, state: RunState, calls: Sequence[Call]) -> None:
    """Run `calls` (those already started are awaited), concurrently or one by one.

    When the invocation is cancelled meanwhile, the saga keeps the calls that succeeded (request
    order), so that it undoes them with the earlier turns' before the cancellation propagates, and the
    journal marks those still in flight abandoned (their executor gave them up: a worker that still
    finishes one undoes it)."""
    try:
        if config.concurrently:
            for call in calls:
                if call.task is None:
                    start_call(config, state, call)
            await asyncio.gather(*(c.task for c in calls if c.task is not None))
        else:
            for call in calls:
                await _run_call(config, state, call)
    except asyncio.CancelledError:
        keep_successes(state, calls)
        await state.saga.abandon([c.row for c in calls if c.row is not None and c.execution is None])
        raise


def keep_successes(state: RunState, calls: Sequence[Call]) -> None:
    """Keep for the saga those of `calls` that succeeded, in their order (request order)."""
    for call in calls:
        if call.status is CallStatus.SUCCEEDED and call.definition is not None and call.execution is not None:
            state.saga.keep(call.definition, call.execution, call.row)


def start_call(config: LoopConfig, state: RunState, call: Call) -> None:
    """Dispatch `call` now, as a task that waits for a place among the invocation's `max_fanout`."""

    async def gated() -> None:
        async with state.gate:
            await _run_call(config, state, call)

    call.task = asyncio.ensure_future(gated())


def returns_immediately(batch: Sequence[Call]) -> bool:
    """SPEC §5: no failure, and the last call is IMMEDIATE_IF_LAST or every call is immediate."""
    if not batch or any(call.status is CallStatus.FAILED for call in batch):
        return False
    if batch[-1].behavior is ReturnBehavior.IMMEDIATE_IF_LAST:
        return True
    return all(
        call.behavior in (ReturnBehavior.IMMEDIATE, ReturnBehavior.IMMEDIATE_IF_LAST) for call in batch
    )


async def _run_call(config: LoopConfig, state: RunState, call: Call) -> None:
    try:
        await _execute(config, state, call)
    except Exception as exc:  # a handler or the hallucination rule ended the invocation
        call.status, call.error = CallStatus.RAISED, exc


@traced_call
async def _execute(config: LoopConfig, state: RunState, call: Call) -> None:
    request = call.request
    started_at = datetime.now(UTC)
    late = False
    strategy = config.tool_search
    tool = state.tools.get(request.name)
    searched = strategy is not None and request.name == config.search_tool_name and tool is None
    if tool is None and not searched and config.catalog is not None:  # it may be refilling
        found = await config.catalog.lost(request.name)
        if found is not None:
            tool = state.tools[request.name] = found
    if searched:
        assert strategy is not None
        outcome = _search(state, strategy, call)
    elif tool is None:
        outcome = _hallucinated(config, request)
    elif isinstance(tool, AiServiceTool):
        call.behavior = tool.return_behavior
        outcome = await _run_programmatic(state, tool, request)
    else:
        call.behavior = tool.return_behavior
        invocation = state.invocation()
        if call.row is None and state.saga.journal is None:
            await state.saga.intent(request, tool, invocation)  # numbered; there is nothing to write
        elif call.row is None:  # else written with its turn's checkpoint
            # written to the end, so a cancel meanwhile finds the row to mark abandoned (`run_calls`)
            call.row, cancelled = await to_the_end(state.saga.intent(request, tool, invocation))
            if cancelled:
                raise asyncio.CancelledError
        call.definition = tool
        late = config.compensating and tool.compensation is not None
        observer = _ProgressObserver(state, call)
        try:
            with observe_progress(observer):
                if call.published_at is not None:
                    running = attached(config.executor, request, tool, invocation, call.published_at, late)
                else:
                    running = config.executor.execute(request, tool, invocation, compensate_if_late=late)
                outcome = await _cancellable(state, call, running)
        finally:
            observer.ended = True  # a call abandoned at its deadline may report on: not heard
    if outcome.parameter_changes:
        state.parameters.merge(outcome.parameter_changes)
    cancelled = False  # the invocation, while the outcome was journaled: the call is settled first
    if call.definition is not None:  # journaled before a handler may end the invocation
        # Abandoned: if it still completes, its worker (or LocalExecutor) undoes it.
        # (A call cancelled alone whose worker finished first succeeded: it is not abandoned.)
        abandoned = late and (outcome.kind in _ABANDONED or (call.cancelled and outcome.is_error))
        progress = call.progress.to_json() if call.progress is not None else None
        try:
            await state.saga.outcome(call.row, outcome, outcome.text, abandoned=abandoned, progress=progress)
        except asyncio.CancelledError:
            cancelled = True
    conclude(state, call, outcome, started_at, searched=searched)
    if cancelled:
        raise asyncio.CancelledError


def conclude(
    state: RunState,
    call: Call,
    outcome: ToolOutcome,
    started_at: datetime,
    *,
    searched: bool = False,
    finished_at: datetime | None = None,
) -> None:
    """What the call's `outcome` makes of it: its status, execution and result message (the edge's
    handler deciding what the model reads of a failure); the stream is `told` of it."""
    request = call.request
    text, call.status = _settle(state, outcome, request, searched=searched)
    finished_at = finished_at or datetime.now(UTC)
    call.execution = ToolExecution(
        request=request,
        result=text,
        result_contents=outcome.contents,
        result_object=outcome.result_object,
        attributes=dict(outcome.attributes),
        has_failed=outcome.is_error,
        status=outcome.kind.value,
        started_at=started_at,
        finished_at=finished_at,
        task_id=outcome.task_id,
        pool=outcome.pool,
        worker=outcome.worker,
    )
    call.message = ToolExecutionResultMessage(
        id=request.id,
        tool_name=request.name,
        text=text,
        contents=tuple(outcome.contents) if outcome.contents is not None and not outcome.is_error else None,
        is_error=outcome.is_error,
        attributes=dict(outcome.attributes),
    )
    log.info(
        "tool %s call %s: %s in %.0f ms%s",
        request.name,
        request.id,
        outcome.kind.value,
        (finished_at - started_at).total_seconds() * 1000,
        f" on {outcome.worker}" if outcome.worker else "",
    )
    if state.emit is not None:
        state.emit(ToolExecuted(call.execution))


async def _cancellable(state: RunState, call: Call, running: Awaitable[ToolOutcome]) -> ToolOutcome:
    """Await the call as a task of its own that `cancel_call` may cancel alone: the executor abandons
    it as at a deadline (revoked, terminated on prefork, its reporter told), and it ends as a failed
    call the model hears of, the invocation going on. A cancelled invocation cancels it too, and
    that cancellation propagates."""
    task = asyncio.ensure_future(running)

    def cancel() -> None:
        call.cancelled = True
        task.cancel()

    with call_cancellable(str(state.context.invocation_id), call.request.id or "", cancel):
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not call.cancelled or (current is not None and current.cancelling()):
                raise
    name = call.request.name
    return error_outcome(ToolCancelled(f"Tool '{name}' was cancelled"), OutcomeKind.EXECUTION_ERROR)


class _ProgressObserver:
    """Takes a call's progress reports on any thread: keeps the last for the journal and, when the
    invocation streams, yields each as a `ToolProgress` from the invocation's event loop (queued
    there in arrival order, so before the call's `ToolExecuted`)."""

    def __init__(self, state: RunState, call: Call) -> None:
        self.state, self.call = state, call
        self.loop = asyncio.get_running_loop()
        self.ended = False

    def __call__(self, report: ProgressReport) -> None:
        if self.ended:
            return
        self.call.progress = report
        if self.state.emit is None:
            return
        request = self.call.request
        event = ToolProgress(
            request_id=request.id,
            tool_name=request.name,
            fraction=report.fraction,
            message=report.message,
            data=report.data,
            at=datetime.fromtimestamp(report.at, UTC),
        )
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
            self.loop.call_soon_threadsafe(self._emit, event)

    def _emit(self, event: ToolProgress) -> None:
        if self.state.emit is not None:
            self.state.emit(event)


def _settle(
    state: RunState, outcome: ToolOutcome, request: ToolExecutionRequest, *, searched: bool
) -> tuple[str, CallStatus]:
    """What the model reads of a call, and whether it failed the batch (which then sets off the
    compensations and rules out an immediate return).

    A search the model asked for badly is a result it reads, and may search again after: the
    search tool's arguments error goes to the model as it is, and no tool call of the batch failed.
    Any other error goes through the edge's handler (which may end the invocation).
    """
    if not outcome.is_error:
        return outcome.text, CallStatus.SUCCEEDED
    if searched:
        return outcome.text, CallStatus.SUCCEEDED
    return _handle(state, outcome, request).message, CallStatus.FAILED


def _search(state: RunState, strategy: ToolSearchStrategy, call: Call) -> ToolOutcome:
    """Search among the tools the model cannot see yet: neither always visible nor found before
    (those shown with the request this call answers)."""
    candidates = [t.specification for name, t in state.tools.items() if name not in state.shown]
    try:
        found = strategy.search(call.request, candidates)
    except ToolArgumentsError as exc:
        return error_outcome(exc, OutcomeKind.ARGUMENTS_ERROR)
    call.found = found.found
    return ToolOutcome(OutcomeKind.SUCCESS, found.text, attributes={FOUND_TOOLS_ATTRIBUTE: found.found})


def _hallucinated(config: LoopConfig, request: ToolExecutionRequest) -> ToolOutcome:
    strategy = config.hallucinated_tool_name_strategy
    if strategy is None:
        raise HallucinatedToolNameError(
            f"The LLM is trying to execute the '{request.name}' tool, but no such tool exists. "
            "Most likely, it is a hallucination. You can override this default strategy by setting the "
            "hallucinated_tool_name_strategy on the AiService"
        )
    answer = strategy(request)
    text = answer.text if isinstance(answer, ToolExecutionResultMessage) else str(answer)
    return ToolOutcome(OutcomeKind.SUCCESS, text)


async def _run_programmatic(
    state: RunState, tool: AiServiceTool, request: ToolExecutionRequest
) -> ToolOutcome:
    context = ToolRunContext(state.context, state.parameters, state.memory_id)
    try:
        value: Any = tool.executor(request, context)
        if inspect.isawaitable(value):
            value = await value
        result = convert_result(
            value if isinstance(value, str | ToolExecutionResult) else str(value), returns_none=False
        )
    except Exception as exc:
        return error_outcome(exc, OutcomeKind.EXECUTION_ERROR)
    return ToolOutcome(
        OutcomeKind.SUCCESS, result.text, result.contents, result.result_object, result.attributes
    )


def _handle(state: RunState, outcome: ToolOutcome, request: ToolExecutionRequest) -> ToolErrorHandlerResult:
    """The edge's handler decides what the model reads of a failed call (or raises to end the
    invocation)."""
    raw = error_of(outcome)
    context = ToolErrorContext(
        request=request,
        invocation_context=state.context,
        parameters=state.parameters,
        memory_id=state.memory_id,
        raw_error=raw,
    )
    handlers = state.handlers
    handler = handlers.arguments if outcome.kind is OutcomeKind.ARGUMENTS_ERROR else handlers.execution
    return handler(unwrap_cause(raw), context)
