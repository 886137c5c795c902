"""Approvals over HTTP: `POST /v1/invocations/{id}/approvals` decides waiting calls on any replica,
and the replica that sees no call waiting any more goes on with the invocation in the background,
its events appended to the invocation's stream (so a client following it on any replica sees the
approved call run and the answer). A replica's housekeeping does the same for invocations whose
calls were decided elsewhere (`toolfleet approve` without an agent) or whose time ran out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.approvals import ApprovalDecision, ApprovalState, approve, record_decisions, reject
from orchestrator.errors import ApiError, ApprovalConflictError, ApprovalError, OrchestratorError
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.saga.async_journal import JournalRunner
from orchestrator.saga.journal import ApprovalRecord, InvocationState, Journal
from orchestrator.server.conversations import start_turn
from orchestrator.server.invocations import Run
from orchestrator.server.state import ServiceState, checked_id, read_body, service_state
from orchestrator.server.tenants import Viewer
from orchestrator.server.visibility import viewer_of

__all__ = ["cancel_paused_invocation", "decide_calls", "resume_decided", "resume_in_background", "router"]

log = logging.getLogger(__name__)

router = APIRouter()


class DecisionBody(BaseModel):
    """One call's decision: approve (with edited `arguments`, or as asked) or reject with a `reason`."""

    model_config = ConfigDict(extra="forbid")

    call_id: str = Field(min_length=1, max_length=255)
    decision: Literal["approve", "reject"]
    arguments: dict[str, Any] | None = None
    reason: str | None = Field(default=None, max_length=4000)
    arguments_hash: str | None = Field(default=None, max_length=64)

    def to_decision(self) -> ApprovalDecision:
        if self.decision == "approve":
            return approve(self.arguments, arguments_hash=self.arguments_hash)
        if self.arguments is not None:
            raise ApiError(400, "a rejection takes no arguments", param="decisions.arguments")
        return reject(self.reason, arguments_hash=self.arguments_hash)


class ApprovalsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[DecisionBody] = Field(min_length=1, max_length=1000)
    by: str | None = Field(default=None, max_length=255)


@router.post("/v1/invocations/{invocation_id}/approvals", status_code=202)
async def decide(invocation_id: str, request: Request) -> dict[str, Any]:
    """Decide calls a paused invocation waits on; once none waits, it goes on on this replica."""
    state = service_state(request)
    checked = checked_id(invocation_id)
    try:
        body = ApprovalsBody.model_validate_json(await read_body(request, state.serve.max_body_bytes))
        decisions = {d.call_id: d.to_decision() for d in body.decisions}
    except ValidationError as exc:
        first: Any = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise ApiError(400, f"invalid request: {param}: {first['msg']}", param=param) from None
    except OrchestratorError as exc:
        raise ApiError(400, str(exc), param="decisions") from None
    records, waiting, resumed = await decide_calls(
        state.journal,
        checked,
        decisions,
        body.by or "api",
        lambda: resume_in_background(state, checked),
        viewer=viewer_of(request),
    )
    return {
        "id": checked,
        "object": "invocation.approvals",
        "approvals": [r.to_json() for r in records],
        "waiting": [r.to_json() for r in waiting],
        "status": "resuming" if resumed else "paused" if waiting else "resumed_elsewhere",
    }


async def decide_calls(
    journal: JournalRunner,
    invocation_id: str,
    decisions: Mapping[str, ApprovalDecision],
    by: str,
    resume: Callable[[], Awaitable[bool]] | None,
    *,
    viewer: Viewer,
) -> tuple[list[ApprovalRecord], list[ApprovalRecord], bool]:
    """Record `decisions` on the invocation's waiting calls (409 on a conflict, 404 for a call that
    does not wait, and for any call of an invocation that is not `viewer`'s, as of an unknown one);
    once none waits, `resume()` it here (without one, a replica's housekeeping goes on with it). The
    calls decided, those still waiting, and whether it was resumed here. The API and the run view's
    form decide through this one function."""
    try:
        records = await journal.run(lambda j: _record(j, invocation_id, decisions, by, viewer))
    except ApprovalConflictError as exc:
        raise ApiError(409, str(exc), code="approval_conflict") from None
    except ApprovalError as exc:
        raise ApiError(404, str(exc), code="approval_not_found") from None
    waiting = await journal.run(lambda j: j.approvals(invocation_id, state=ApprovalState.PENDING))
    resumed = False if waiting or resume is None else await resume()
    return records, waiting, resumed


def _record(
    journal: Journal, invocation_id: str, decisions: Mapping[str, ApprovalDecision], by: str, viewer: Viewer
) -> list[ApprovalRecord]:
    """`record_decisions`, in the transaction that reads whose the invocation is."""
    record = journal.invocation(invocation_id)
    if record is not None and not viewer.sees(record.tenant):
        # as `record_decisions` says of an invocation it does not know: nothing more is told
        first = next(iter(decisions), "")
        raise ApprovalError(f"Invocation {invocation_id} has no call {first} waiting for approval")
    return record_decisions(journal, invocation_id, decisions, by)


async def resume_in_background(state: ServiceState, invocation_id: str) -> bool:
    """Go on with a decided paused invocation on this replica (if this replica serves its agent):
    whether it started; exactly one process goes on with it, the others' runs end at once."""
    origin = await state.events.first(invocation_id) or {}
    record = await state.journal.run(lambda j: j.invocation(invocation_id))
    if record is None or record.state is not InvocationState.PAUSED:
        return False
    agent = str(origin.get("agent") or record.service_name or "")
    service = state.agents.get(agent)
    if service is None:
        log.info("invocation %s waits for a replica serving agent %r", invocation_id, agent)
        return False
    conversation_id = origin.get("conversation_id")
    question = UserMessage(record.user_message or "")

    def run(memory: ChatMemory) -> Run:
        return Run(
            invocation_id,
            agent,
            service,
            question,
            memory,
            None,
            conversation_id=conversation_id,
            tenant=record.tenant,
            resuming=True,
        )

    await start_turn(state, state.admit(), agent, conversation_id, [], run, tenant=record.tenant)
    return True


async def resume_decided(state: ServiceState) -> int:
    """Housekeeping: expire calls whose time ran out, and go on with the paused invocations of this
    replica's agents that no call holds back any more; how many were started here."""
    await state.journal.run(lambda j: j.expire_approvals())
    ready = await state.journal.run(lambda j: j.ready_to_resume())
    started = 0
    for invocation_id in ready:
        if invocation_id in state.invocations.running or state.draining:
            continue
        try:
            started += await resume_in_background(state, invocation_id)
        except ApiError:  # at capacity: the next round
            break
    return started


async def cancel_paused_invocation(state: ServiceState, invocation_id: str) -> bool:
    """Cancel a paused invocation (its agent's executor compensates what it did); whether it was paused."""
    record = await state.journal.run(lambda j: j.invocation(invocation_id))
    if record is None or record.state is not InvocationState.PAUSED:
        return False
    origin = await state.events.first(invocation_id) or {}
    service = state.agents.get(origin.get("agent") or record.service_name or "")
    if service is None or not await service.acancel(invocation_id):
        return False
    await state.events.add(invocation_id, {"type": "invocation.cancelled", "invocation_id": invocation_id})
    return True
