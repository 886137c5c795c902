"""The tool calls of one invocation: run a batch, journal each call, turn errors into messages."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from orchestrator._invocation_state import InvocationState
from orchestrator.handlers import (
    HallucinatedToolNameError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    error_of,
    unwrap_cause,
)
from orchestrator.messages import ToolExecutionResultMessage
from orchestrator.providers import AiServiceTool, ToolRunContext
from orchestrator.result import ToolExecuted
from orchestrator.search import FOUND_TOOLS_ATTRIBUTE, ToolSearchStrategy
from workers.calls.results import ToolExecutionResult, convert_result
from workers.calls.runner import error_outcome
from workers.errors import ToolArgumentsError
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition
from workers.tools.specification import ReturnBehavior

__all__ = ["ToolCalls"]

log = logging.getLogger(__name__)

_ABANDONED = (OutcomeKind.TIMED_OUT, OutcomeKind.WORKER_LOST)


@dataclass
class _Call:
    """One tool call of a batch: its request, and what came of it."""

    index: int
    request: ToolExecutionRequest
    task: asyncio.Task[None] | None = None
    execution: ToolExecution | None = None
    message: ToolExecutionResultMessage | None = None
    behavior: ReturnBehavior = ReturnBehavior.TO_LLM
    failed: bool = False
    raised: BaseException | None = None
    found: list[str] = field(default_factory=list)
    definition: ToolDefinition | None = None
    row: int | None = None
    succeeded: bool = False


class ToolCalls(InvocationState):
    """Runs the tool calls the model asks for, each through the saga, and records what came of them."""

    # -- tool calls -------------------------------------------------------------------------------

    async def _run_batch(
        self, requests: Sequence[ToolExecutionRequest], started: dict[int, _Call]
    ) -> list[_Call]:
        calls: list[_Call] = []
        for index, request in enumerate(requests):
            early = started.get(index)
            calls.append(
                early if early is not None and early.request.id == request.id else _Call(index, request)
            )
        if self.service.execute_tools_concurrently:
            for call in calls:
                if call.task is None:
                    call.task = asyncio.ensure_future(self._gated(call))
            await asyncio.gather(*(c.task for c in calls if c.task is not None))
        else:
            for call in calls:
                await self._run_call(call)
        return calls

    async def _gated(self, call: _Call) -> None:
        async with self.gate:  # at most max_fanout of this invocation in flight
            await self._run_call(call)

    async def _run_call(self, call: _Call) -> None:
        try:
            await self._execute(call)
        except Exception as exc:  # a handler or the hallucination rule ended the invocation
            call.raised = exc

    async def _execute(self, call: _Call) -> None:
        request = call.request
        started_at = datetime.now(UTC)
        late = False
        strategy = self.service.tool_search_strategy
        tool = self.tools.get(request.name)
        searched = False
        if strategy is not None and request.name == strategy.search_tool().name and tool is None:
            searched = True
            outcome = self._search(strategy, call)
        elif tool is None:
            outcome = self._hallucinated(request)
        elif isinstance(tool, AiServiceTool):
            call.behavior = tool.return_behavior
            outcome = await self._run_programmatic(tool, request)
        else:
            call.behavior = tool.return_behavior
            invocation = self._invocation()
            call.row = self.saga.intent(request, tool, invocation)
            call.definition = tool
            late = self.compensating and tool.compensation is not None
            outcome = await self.service.executor.execute(request, tool, invocation, compensate_if_late=late)
        if outcome.parameter_changes:
            self.parameters.merge(outcome.parameter_changes)
        if call.definition is not None:  # journaled before a handler may end the invocation
            self.saga.outcome(call.row, outcome, outcome.text)
            call.succeeded = not outcome.is_error
            if late and outcome.kind in _ABANDONED and self.journal is not None and call.row is not None:
                # Abandoned: if it still completes, its worker (or LocalExecutor) undoes it.
                self.journal.set_call_state(call.row, "abandoned")
        text = outcome.text
        if outcome.is_error:
            # The search tool's own arguments error goes back to the model, which may search again.
            text = outcome.text if searched else self._handle(outcome, request).message
            call.failed = True
        finished_at = datetime.now(UTC)
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
            contents=tuple(outcome.contents)
            if outcome.contents is not None and not outcome.is_error
            else None,
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
        if self.emit is not None:
            self.emit(ToolExecuted(call.execution))

    def _search(self, strategy: ToolSearchStrategy, call: _Call) -> ToolOutcome:
        """Search among the tools the model cannot see yet: neither always visible nor found before."""
        visible = {spec.name for spec in self._visible()}
        candidates = [t.specification for name, t in self.tools.items() if name not in visible]
        try:
            found = strategy.search(call.request, candidates)
        except ToolArgumentsError as exc:
            return error_outcome(exc, OutcomeKind.ARGUMENTS_ERROR)
        call.found = found.found
        return ToolOutcome(OutcomeKind.SUCCESS, found.text, attributes={FOUND_TOOLS_ATTRIBUTE: found.found})

    def _hallucinated(self, request: ToolExecutionRequest) -> ToolOutcome:
        strategy = self.service.hallucinated_tool_name_strategy
        if strategy is None:
            raise HallucinatedToolNameError(
                f"The LLM is trying to execute the '{request.name}' tool, but no such tool exists. "
                "Most likely, it is a hallucination. You can override this default strategy by setting the "
                "hallucinated_tool_name_strategy on the AiService"
            )
        answer = strategy(request)
        text = answer.text if isinstance(answer, ToolExecutionResultMessage) else str(answer)
        return ToolOutcome(OutcomeKind.SUCCESS, text)

    async def _run_programmatic(self, tool: AiServiceTool, request: ToolExecutionRequest) -> ToolOutcome:
        context = ToolRunContext(self.context, self.parameters, self.memory_id)
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

    def _handle(self, outcome: ToolOutcome, request: ToolExecutionRequest) -> ToolErrorHandlerResult:
        raw = error_of(outcome)
        error = unwrap_cause(raw)
        context = ToolErrorContext(
            request=request,
            invocation_context=self.context,
            parameters=self.parameters,
            memory_id=self.memory_id,
            raw_error=raw,
        )
        handler = (
            self.arguments_handler if outcome.kind is OutcomeKind.ARGUMENTS_ERROR else self.execution_handler
        )
        return handler(error, context)


def _returns_immediately(batch: Sequence[_Call]) -> bool:
    """SPEC §5: no failure, and the last call is IMMEDIATE_IF_LAST or every call is immediate."""
    if not batch or any(call.failed for call in batch):
        return False
    if batch[-1].behavior is ReturnBehavior.IMMEDIATE_IF_LAST:
        return True
    return all(
        call.behavior in (ReturnBehavior.IMMEDIATE, ReturnBehavior.IMMEDIATE_IF_LAST) for call in batch
    )
