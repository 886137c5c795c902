"""One invocation, top to bottom: ask the model, run the tools it calls, feed the results back."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from orchestrator._toolset import add_provided_tools, unique_id, visible_specifications, with_unique_ids
from orchestrator.errors import OrchestratorError
from orchestrator.handlers import (
    HallucinatedToolNameError,
    ToolErrorContext,
    ToolErrorHandlerResult,
    error_of,
)
from orchestrator.messages import (
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    UserMessage,
)
from orchestrator.models.base import (
    ChatEvent,
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    TokenUsage,
)
from orchestrator.providers import AiServiceTool, ToolProviderRequest, ToolRunContext
from orchestrator.result import Result, ToolExecuted
from orchestrator.saga import Saga, rolled_back_text
from orchestrator.search import FOUND_TOOLS_ATTRIBUTE
from workers.invocation import Invocation, InvocationContext, InvocationParameters
from workers.protocol import OutcomeKind, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.results import ToolExecutionResult, convert_result
from workers.runner import error_outcome
from workers.specification import ReturnBehavior, ToolSpecification
from workers.tools import ToolDefinition

if TYPE_CHECKING:
    from orchestrator.service import AiService

__all__ = ["Mode", "RoundTripLimitError", "run_invocation"]

log = logging.getLogger(__name__)

Mode = Literal["chat", "achat", "stream"]
Emit = Callable[[ChatEvent | ToolExecuted], None]
Tool = ToolDefinition | AiServiceTool
HEARTBEAT_INTERVAL_S = 10.0
ROLLED_BACK_STATUS = "rolled_back"
_ABANDONED = (OutcomeKind.TIMED_OUT, OutcomeKind.WORKER_LOST)


class RoundTripLimitError(OrchestratorError):
    """The model kept calling tools past `max_tool_calling_round_trips`."""


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


class _Invocation:
    """The state of one invocation; `run()` is the loop."""

    def __init__(
        self,
        service: AiService,
        user_message: UserMessage,
        memory_id: str | None,
        parameters: InvocationParameters,
        mode: Mode,
        emit: Emit | None,
    ) -> None:
        self.service = service
        self.mode = mode
        self.emit = emit
        self.user_message = user_message
        self.memory_id = memory_id or "default"
        self.parameters = parameters
        self.context = InvocationContext(
            invocation_id=uuid.uuid4(),
            service_name=service.name,
            memory_id=self.memory_id,
            user_message=user_message.single_text,
            timestamp=datetime.now(UTC),
        )
        self.memory = service._memory_for(memory_id)
        self.transcript: list[ChatMessage] = []  # used when no memory is configured
        self.tools: dict[str, Tool] = dict(service._tools)
        self.found: list[str] = []
        self.executions: list[ToolExecution] = []
        self.token_usage: TokenUsage | None = None
        self.arguments_handler, self.execution_handler = service._handlers_for(mode)
        self.gate = asyncio.Semaphore(service.max_concurrent_tool_calls)
        self.used_ids: set[str] = set()
        self.compensating = service.compensate_on_tool_errors
        self.journal = service.journal
        self.saga = Saga(
            service.executor, self.journal, str(self.context.invocation_id), keep=self.compensating
        )

    # -- messages ---------------------------------------------------------------------------------

    def _messages(self) -> list[ChatMessage]:
        return self.memory.messages() if self.memory is not None else list(self.transcript)

    def _add(self, message: ChatMessage) -> None:
        if self.memory is not None:
            self.memory.add(message)
        else:
            self.transcript.append(message)

    # -- tools ------------------------------------------------------------------------------------

    def _provider_request(self) -> ToolProviderRequest:
        return ToolProviderRequest(
            user_message=self.user_message,
            memory_id=self.memory_id,
            invocation_context=self.context,
            parameters=self.parameters,
            messages=self._messages(),
        )

    def _ask_providers(self, dynamic: bool) -> None:
        providers = [
            p for p in self.service.tool_providers if bool(getattr(p, "is_dynamic", False)) == dynamic
        ]
        if providers:
            add_provided_tools(self.service, providers, self._provider_request(), self.tools, dynamic=dynamic)

    def _visible(self) -> list[ToolSpecification]:
        return visible_specifications(
            self.tools, self.service.tool_search_strategy, self.found, self._messages()
        )

    # -- the loop ---------------------------------------------------------------------------------

    async def run(self) -> Result:
        if self.journal is not None:
            self.journal.start_invocation(self.context, self._invocation().to_json())
        beating = asyncio.ensure_future(self._heartbeat()) if self.journal is not None else None
        try:
            result = await self._run()
        except BaseException as exc:
            await self._end_abnormally(exc)
            raise
        finally:
            if beating is not None:
                beating.cancel()
        if self.journal is not None:
            self.journal.set_invocation_state(str(self.context.invocation_id), "succeeded")
        return result

    async def _end_abnormally(self, error: BaseException) -> None:
        """Compensate what succeeded before the error propagates (handler raised, round-trip limit,
        provider failure, caller cancelled), even if the caller cancels again meanwhile."""
        reason = f"the invocation failed: {type(error).__name__}"
        if self.compensating and self.saga.steps:
            undo = asyncio.ensure_future(self.saga.compensate_all(self._invocation(), reason))
            try:
                await asyncio.shield(undo)
            except asyncio.CancelledError:
                await undo
        if self.journal is not None:
            self.journal.set_invocation_state(
                str(self.context.invocation_id), "failed", f"{type(error).__name__}: {error}"
            )

    async def _heartbeat(self) -> None:
        """Keep the journal's heartbeat fresh, so `toolfleet recover` never takes over a live saga."""
        assert self.journal is not None
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            try:
                self.journal.heartbeat(str(self.context.invocation_id))
            except Exception as exc:  # a journal hiccup must not end the invocation
                log.warning("journal heartbeat failed: %s", exc)

    def _invocation(self) -> Invocation:
        return Invocation(self.context, self.parameters.to_json())

    async def _compensate_batch(self, batch: Sequence[_Call]) -> None:
        """After a failed batch: undo every recorded success and rewrite their result messages."""
        failed = next(call for call in batch if call.failed)
        undone = await self.saga.compensate_all(self._invocation(), f"tool '{failed.request.name}' failed")
        rolled = {id(step.execution): step for step in undone}
        if not rolled:
            return
        for call in batch:
            if call.execution is not None and id(call.execution) in rolled:
                text = rolled_back_text(call.request.name, failed.request.name)
                call.execution.result = text
                call.execution.status = ROLLED_BACK_STATUS
                call.message = dataclasses.replace(call.message, text=text, is_error=True, contents=None)  # type: ignore[type-var]
        earlier = {(e.request.id, e.request.name): e for e in self.executions if id(e) in rolled}
        if not earlier:
            return
        for execution in earlier.values():
            execution.result = rolled_back_text(execution.request.name, failed.request.name)
            execution.status = ROLLED_BACK_STATUS
        rewritten = [
            dataclasses.replace(m, text=earlier[(m.id, m.tool_name)].result, is_error=True, contents=None)
            if isinstance(m, ToolExecutionResultMessage) and (m.id, m.tool_name) in earlier
            else m
            for m in self._messages()
        ]
        if self.memory is not None:
            self.memory.set_messages(rewritten)
        else:
            self.transcript = rewritten

    async def _run(self) -> Result:
        service = self.service
        self._ask_providers(dynamic=False)
        system = service._system_message_for(self.memory_id)
        if system is not None:
            self._add(SystemMessage(system))
        self._add(self.user_message)
        round_trips = 0
        while True:
            self._ask_providers(dynamic=True)
            request = ChatRequest(
                messages=self._messages(),
                tool_specifications=self._visible(),
                tool_choice=service.tool_choice,
            )
            calls: dict[int, _Call] = {}
            response = await self._ask_model(request, calls, round_trips)
            self.token_usage = (
                (self.token_usage or TokenUsage()) + response.token_usage
                if response.token_usage
                else self.token_usage
            )
            message = with_unique_ids(response.ai_message, round_trips + 1, set(self.used_ids))
            self.used_ids.update(r.id for r in message.tool_execution_requests if r.id)
            if not message.tool_execution_requests:
                self._add(message)
                return self._result(message.text, response.finish_reason)
            round_trips += 1
            self._check_round_trips(round_trips)
            self._add(message)  # the AI message is stored before its tools run
            batch = await self._run_batch(message.tool_execution_requests, calls)
            for call in batch:  # kept in request order, whatever order they finished in
                if call.succeeded and call.definition is not None and call.execution is not None:
                    self.saga.keep(call.definition, call.execution, call.row)
            for call in batch:
                if call.raised is not None:
                    raise call.raised
            if self.compensating and any(call.failed for call in batch):
                await self._compensate_batch(batch)
            for call in batch:
                assert call.message is not None and call.execution is not None
                self._add(call.message)
                self.executions.append(call.execution)
                self.found += [n for n in call.found if n not in self.found]
            if _returns_immediately(batch):
                return self._result(None, FinishReason.TOOL_EXECUTION)

    def _check_round_trips(self, round_trips: int) -> None:
        limit = self.service.max_tool_calling_round_trips
        if round_trips > limit:
            raise RoundTripLimitError(
                f"Something is wrong, exceeded {limit} tool calling round trips "
                "(max_tool_calling_round_trips)"
            )

    def _result(self, content: str | None, reason: FinishReason | None) -> Result:
        return Result(
            content=content,
            tool_executions=list(self.executions),
            finish_reason=reason,
            token_usage=self.token_usage,
            invocation_id=str(self.context.invocation_id),
        )

    async def _ask_model(
        self, request: ChatRequest, calls: dict[int, _Call], round_trips: int
    ) -> ChatResponse:
        model = self.service.chat_model
        started = time.perf_counter()
        if self.mode != "stream":
            response = await model.chat(request)
        else:
            response = await self._stream_model(request, calls, round_trips)
        log.info(
            "model %s: %d messages, %d tools -> %d tool calls, finish %s in %.0f ms",
            model.provider,
            len(request.messages),
            len(request.tool_specifications),
            len(response.ai_message.tool_execution_requests),
            response.finish_reason,
            (time.perf_counter() - started) * 1000,
        )
        return response

    async def _stream_model(
        self, request: ChatRequest, calls: dict[int, _Call], round_trips: int
    ) -> ChatResponse:
        assert self.emit is not None
        response: ChatResponse | None = None
        seen = set(self.used_ids)  # the same ids `_with_unique_ids` gives the complete response
        async for event in self.service.chat_model.stream(request):
            if isinstance(event, CompleteResponse):
                response = event.response
                continue
            self.emit(event)
            if isinstance(event, CompleteToolCall) and self.service.execute_tools_concurrently:
                if not calls:
                    self._check_round_trips(round_trips + 1)
                call = _Call(event.index, unique_id(event.request, event.index, round_trips + 1, seen))
                call.task = asyncio.ensure_future(self._gated(call))
                calls[event.index] = call
        if response is None:
            raise OrchestratorError(
                f"{self.service.chat_model.provider} stream ended without a complete response"
            )
        return response

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
        async with self.gate:  # at most max_concurrent_tool_calls of this invocation in flight
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
        if strategy is not None and request.name == strategy.search_tool().name and tool is None:
            candidates = [t.specification for t in self.tools.values()]
            found = strategy.search(request, candidates)
            call.found = found.found
            outcome = ToolOutcome(
                OutcomeKind.SUCCESS, found.text, attributes={FOUND_TOOLS_ATTRIBUTE: found.found}
            )
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
            text = self._handle(outcome, request).message
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
        error = error_of(outcome)
        context = ToolErrorContext(
            request=request,
            invocation_context=self.context,
            parameters=self.parameters,
            memory_id=self.memory_id,
            raw_error=error,
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


async def run_invocation(
    service: AiService,
    user_message: UserMessage,
    *,
    memory_id: str | None,
    parameters: InvocationParameters,
    mode: Mode,
    emit: Emit | None = None,
) -> Result:
    """Run one invocation to its end: the answer, an immediate return, or an exception."""
    return await _Invocation(service, user_message, memory_id, parameters, mode, emit).run()
