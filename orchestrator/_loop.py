"""One invocation, top to bottom: ask the model, run the tools it calls, feed the results back."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator._invocation_state import Emit, Mode
from orchestrator._tool_calls import ToolCalls, _Call, _returns_immediately
from orchestrator._toolset import unique_id, with_unique_ids
from orchestrator.errors import OrchestratorError
from orchestrator.messages import SystemMessage, ToolExecutionResultMessage, UserMessage
from orchestrator.models.base import (
    ChatRequest,
    ChatResponse,
    CompleteResponse,
    CompleteToolCall,
    FinishReason,
    TokenUsage,
)
from orchestrator.result import Result
from orchestrator.saga import rollback_reason, rolled_back_text
from workers.calls.invocation import InvocationParameters

if TYPE_CHECKING:
    from orchestrator.service import AiService

__all__ = ["Mode", "RoundTripLimitError", "run_invocation"]

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10.0
ROLLED_BACK_STATUS = "rolled_back"


class RoundTripLimitError(OrchestratorError):
    """The model kept calling tools past `max_tool_calling_round_trips`."""


class _Invocation(ToolCalls):
    """The state of one invocation; `run()` is the loop."""

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
        self.saga.end("succeeded", answer=result.content)
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
        self.saga.end("failed", f"{type(error).__name__}: {error}")

    async def _heartbeat(self) -> None:
        """Keep the journal's heartbeat fresh, so `toolfleet recover` never takes over a live saga."""
        assert self.journal is not None
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            try:
                self.journal.heartbeat(str(self.context.invocation_id))
            except Exception as exc:  # a journal hiccup must not end the invocation
                log.warning("journal heartbeat failed: %s", exc)

    async def _compensate_batch(self, batch: Sequence[_Call]) -> None:
        """After a failed batch: undo every recorded success and rewrite their result messages."""
        failed = next(call for call in batch if call.failed)
        undone = await self.saga.compensate_all(
            self._invocation(), rollback_reason(failed.request.name, failed.request.id)
        )
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
            self.saga.turn = round_trips + 1  # the turn of the calls this response asks for
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
