"""An invocation paused for a person's approval: which calls wait, the state kept in the journal,
and that state made a `RunState` again by whichever process resumes it.

What is kept is all the loop needs to go on where it stopped, and nothing of the process: the
conversation, the calls of the batch (those that ran, with their results, and those that wait),
the executions so far, the parameters, the tokens and round trips. The saga's steps are not kept
here: they are the journal's successful compensable calls, read back when the invocation resumes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.approvals import ApprovalRecord, ApprovalState, rejected_text
from orchestrator.errors import OrchestratorError
from orchestrator.loop.calls import Call, CallStatus
from orchestrator.loop.config import LoopConfig, Mode
from orchestrator.loop.state import Emit, RunState, new_state
from orchestrator.memory import ChatMemory
from orchestrator.messages import (
    ChatMessage,
    ToolExecutionResultMessage,
    UserMessage,
    message_from_json,
    message_to_json,
    messages_from_json,
    messages_to_json,
)
from orchestrator.models.base import FinishReason, TokenUsage
from orchestrator.providers import AiServiceTool, ToolRunContext
from orchestrator.result import ApprovalRequested, Result, ToolExecuted
from orchestrator.saga import SagaStep
from orchestrator.saga.async_journal import JournalRunner
from orchestrator.saga.journal import CallRecord, CallState, Journal, WaitingCall, owner_id
from orchestrator.telemetry import approvals_requested, trace_carrier
from workers.calls.invocation import InvocationContext, InvocationParameters
from workers.protocol import ToolExecution, ToolExecutionRequest
from workers.tools import ToolDefinition
from workers.tools.specification import ReturnBehavior

__all__ = [
    "PAUSED_STATE_VERSION",
    "claim",
    "needs_approval",
    "pause",
    "read_for_resume",
    "restore",
    "saga_steps",
    "settle_unrun",
    "settle_waiting",
]

log = logging.getLogger(__name__)

PAUSED_STATE_VERSION = 1
REJECTED_STATUS = "rejected"
NOT_RUN_STATUS = "not_run"
NOT_RUN = (
    "The call to '{tool}' did not run: tool '{failed}' of the same batch failed, so the batch was rolled back"
)


def needs_approval(config: LoopConfig, state: RunState, request: ToolExecutionRequest) -> bool:
    """Whether a call waits for a person: its tool says so, or the service's policy does."""
    tool = state.tools.get(request.name)
    if tool is None:
        return False  # an unknown name is the hallucination strategy's
    if isinstance(tool, ToolDefinition) and tool.requires_approval:
        return True
    policy = config.approval_policy
    if policy is None or not isinstance(tool, ToolDefinition | AiServiceTool):
        return False
    return bool(policy(request, ToolRunContext(state.context, state.parameters, state.memory_id)))


async def pause(
    config: LoopConfig, state: RunState, batch: Sequence[Call], waiting: Collection[int]
) -> Result:
    """Write the invocation's state and its waiting calls to the journal, say so on the stream, and
    return the `Result` that lists them; nothing runs for the invocation until it is resumed."""
    journal = state.saga.journal
    invocation_id = str(state.context.invocation_id)
    calls = [call for call in batch if call.index in waiting]
    if journal is None:
        names = ", ".join(sorted({call.request.name for call in calls}))
        raise OrchestratorError(
            f"Calls of {names} need approval, which needs a journal to pause in: give the AiService "
            "journal=Journal(url) (or set TOOLFLEET_DATABASE_URL and approval_timeout_s)"
        )
    kept = _paused_state(state, batch, await state.messages())
    waiting_calls = [
        WaitingCall(
            call.request.id or "", call.request.name, _pool(state, call.request), call.request.arguments
        )
        for call in calls
    ]
    expires_at = datetime.now(UTC) + timedelta(seconds=config.approval_timeout_s)
    asked_by = f"{config.name or 'service'}/{state.memory_id}"
    records = await journal.run(
        lambda j: j.pause(invocation_id, kept, waiting_calls, expires_at=expires_at, requested_by=asked_by)
    )
    log.info(
        "invocation %s paused: %d call(s) wait for approval (%s)",
        invocation_id,
        len(records),
        ", ".join(f"{r.tool} {r.call_id}" for r in records),
    )
    approvals_requested(records)
    if state.emit is not None:
        state.emit(ApprovalRequested(invocation_id, tuple(records)))
    return Result(
        content=None,
        tool_executions=[*state.executions, *(c.execution for c in batch if c.execution is not None)],
        finish_reason=FinishReason.APPROVAL_REQUIRED,
        token_usage=state.token_usage,
        invocation_id=invocation_id,
        pending_approvals=list(records),
    )


def _pool(state: RunState, request: ToolExecutionRequest) -> str | None:
    tool = state.tools.get(request.name)
    return tool.pool if isinstance(tool, ToolDefinition) else None


def _paused_state(state: RunState, batch: Sequence[Call], messages: list[ChatMessage]) -> dict[str, Any]:
    usage = state.token_usage
    return {
        "version": PAUSED_STATE_VERSION,
        "mode": state.mode,
        "user_message": message_to_json(state.user_message),
        "messages": messages_to_json(messages),
        "context": state.context.to_json(),
        "parameters": state.parameters.to_json(),
        "round_trips": state.round_trips,
        "token_usage": None if usage is None else [usage.input_tokens, usage.output_tokens],
        "used_ids": sorted(state.used_ids),
        "found": list(state.found),
        "shown": sorted(state.shown),
        "executions": [execution.to_json() for execution in state.executions],
        "trace_context": trace_carrier(),  # the invocation's span: its resumption joins its trace
        "batch": [
            {
                "request": call.request.to_json(),
                "status": call.status.value,
                "behavior": call.behavior.value,
                "found": list(call.found),
                "message": None if call.message is None else message_to_json(call.message),
                "execution": None if call.execution is None else call.execution.to_json(),
            }
            for call in batch
        ],
    }


def restore(
    config: LoopConfig, kept: dict[str, Any], mode: Mode, emit: Emit | None, memory: ChatMemory | None
) -> tuple[RunState, list[Call]]:
    """The invocation's state and its paused batch, as `pause` kept them, resumed through the edge
    `mode` (its journal) with the error handlers of the edge it started on; without a memory, its
    transcript is the conversation as it was (`restore_memory` brings a memory back to it)."""
    if kept.get("version") != PAUSED_STATE_VERSION:
        raise OrchestratorError(f"A paused state of version {kept.get('version')} cannot be resumed here")
    context = InvocationContext.from_json(kept["context"])
    user_message = message_from_json(kept["user_message"])
    assert isinstance(user_message, UserMessage)
    state = new_state(
        config,
        user_message,
        context.memory_id,
        InvocationParameters(kept["parameters"]),
        mode,
        emit,
        memory=memory,
        invocation_id=str(context.invocation_id),
    )
    state.context = context
    started_on: Mode = kept["mode"]
    state.mode, state.handlers = started_on, config.handlers[started_on]
    if state.memory is None:
        state.transcript = messages_from_json(kept["messages"])
    usage = kept.get("token_usage")
    state.token_usage = None if usage is None else TokenUsage(usage[0], usage[1])
    state.round_trips = int(kept["round_trips"])
    state.used_ids = set(kept["used_ids"])
    state.found = list(kept["found"])
    state.shown = set(kept["shown"])
    state.executions = [ToolExecution.from_json(e) for e in kept["executions"]]
    batch: list[Call] = []
    for index, entry in enumerate(kept["batch"]):
        call = Call(index, ToolExecutionRequest.from_json(entry["request"]))
        call.status = CallStatus(entry["status"])
        call.behavior = ReturnBehavior(entry["behavior"])
        call.found = list(entry["found"])
        if entry["message"] is not None:
            message = message_from_json(entry["message"])
            assert isinstance(message, ToolExecutionResultMessage)
            call.message = message
        if entry["execution"] is not None:
            call.execution = ToolExecution.from_json(entry["execution"])
        batch.append(call)
    return state, batch


async def restore_memory(state: RunState, kept: dict[str, Any]) -> None:
    """The invocation's memory holds the conversation as `pause` kept it (`restore` did the rest)."""
    if state.memory is not None and messages_to_json(await state.messages()) != kept["messages"]:
        await state.set_messages(messages_from_json(kept["messages"]))


def saga_steps(state: RunState, calls: Sequence[CallRecord], batch: Sequence[Call]) -> list[SagaStep]:
    """The saga's steps of a resumed invocation: its successful compensable calls in the journal, in
    order, each with the execution the loop holds for it (so a rollback rewrites what the model reads)."""
    held = {e.request.id: e for e in state.executions}
    held.update({c.request.id: c.execution for c in batch if c.execution is not None})
    steps = []
    for record in calls:
        tool = state.tools.get(record.tool)
        if (
            record.state != CallState.SUCCEEDED
            or not record.compensable
            or not isinstance(tool, ToolDefinition)
        ):
            continue
        steps.append(SagaStep(tool, held.get(record.call_id) or record.execution(), record.id))
    return steps


def settle_waiting(config: LoopConfig, state: RunState, call: Call, approval: ApprovalRecord) -> bool:
    """Make a waiting call ready to go on: approved, it runs with the arguments approved (True);
    otherwise it becomes what the model reads of a call that did not run (False)."""
    if approval.state is ApprovalState.APPROVED:
        call.request = dataclasses.replace(call.request, arguments=approval.arguments_to_run)
        return True
    status = CallStatus.FAILED if config.compensate_on_rejection else CallStatus.SUCCEEDED
    _not_run(call, rejected_text(approval, config.approval_timeout_s), status, REJECTED_STATUS, approval.pool)
    return False


def settle_unrun(state: RunState, calls: Sequence[Call], failed: str) -> None:
    """Settle the `calls` of a batch undone before they ran (they waited for a person when another
    call of the batch failed): no one is asked, nothing runs; the model reads that they did not run,
    and the stream tells each one's end."""
    for call in calls:
        request = call.request
        text = NOT_RUN.format(tool=request.name, failed=failed)
        # settled, with nothing to undo
        execution = _not_run(call, text, CallStatus.SUCCEEDED, NOT_RUN_STATUS, _pool(state, request))
        if state.emit is not None:
            state.emit(ToolExecuted(execution))


def _not_run(call: Call, text: str, status: CallStatus, told: str, pool: str | None) -> ToolExecution:
    """Make `call` one that did not run: the model reads `text` as its (failed) result; its execution."""
    request = call.request
    call.status = status
    call.behavior = ReturnBehavior.TO_LLM
    call.message = ToolExecutionResultMessage(id=request.id, tool_name=request.name, text=text, is_error=True)
    call.execution = ToolExecution(request=request, result=text, has_failed=True, status=told, pool=pool)
    return call.execution


async def read_for_resume(
    journal: JournalRunner, invocation_id: str
) -> tuple[list[CallRecord], dict[str, ApprovalRecord]]:
    """The journal's calls of the invocation and its approvals by call id, in one transaction."""

    def read(j: Journal) -> tuple[list[CallRecord], dict[str, ApprovalRecord]]:
        return j.calls(invocation_id), {a.call_id: a for a in j.approvals(invocation_id)}

    return await journal.run(read)


async def claim(journal: JournalRunner, invocation_id: str) -> dict[str, Any] | None:
    """Take the paused invocation to resume it here (None: not paused, still waiting, or taken)."""
    return await journal.run(lambda j: j.claim_paused(invocation_id, owner_id()))
