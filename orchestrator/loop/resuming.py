"""Resuming a paused invocation from any process: the decisions written, the invocation claimed
(by one process only), its state and saga restored, and the loop run on to its end."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from orchestrator.approvals import ApprovalDecision, ApprovalState, record_decisions
from orchestrator.errors import ApprovalError, OrchestratorError
from orchestrator.loop.config import LoopConfig, Mode
from orchestrator.loop.pausing import claim, read_for_resume, restore, restore_memory, saga_steps
from orchestrator.loop.run import resume_invocation
from orchestrator.loop.state import Emit
from orchestrator.memory import ChatMemory
from orchestrator.models.base import FinishReason
from orchestrator.result import InvocationResumed, Result
from orchestrator.saga.states import InvocationState
from orchestrator.telemetry import approvals_waited, continued_trace

__all__ = ["resume"]

log = logging.getLogger(__name__)


async def resume(
    config: LoopConfig,
    invocation_id: str,
    decisions: Mapping[str, ApprovalDecision] | None,
    *,
    by: str | None,
    mode: Mode,
    emit: Emit | None = None,
    memory: ChatMemory | None = None,
) -> Result | None:
    """Write `decisions` (call id → decision) and, once no call waits, go on with the invocation here.

    Returns its `Result` when this process ran it on (to its end, or to its next pause); a `Result`
    that lists the calls still waiting (finish reason `APPROVAL_REQUIRED`) when some do; None when
    another process took it on, or it is no longer paused (decided and resumed before).
    """
    journal = config.journal if mode == "chat" else config.journal_runner
    if journal is None:
        raise OrchestratorError(
            "This AiService has no journal: none of its invocations can be paused or resumed"
        )
    if decisions:
        await journal.run(lambda j: record_decisions(j, invocation_id, decisions, by))
    else:
        await journal.run(lambda j: j.expire_approvals())
    kept = await claim(journal, invocation_id)
    if kept is None:
        record = await journal.run(lambda j: j.invocation(invocation_id))
        if record is None:
            raise ApprovalError(f"The journal has no invocation {invocation_id}")
        if record.state is not InvocationState.PAUSED:
            log.info("invocation %s is %s: resumed elsewhere, or not paused", invocation_id, record.state)
            return None
        waiting = await journal.run(lambda j: j.approvals(invocation_id, state=ApprovalState.PENDING))
        return Result(
            content=None,
            finish_reason=FinishReason.APPROVAL_REQUIRED,
            invocation_id=invocation_id,
            pending_approvals=waiting,
        )
    if config.catalog is not None:
        await config.catalog.refresh()
    state, batch = restore(config, kept, mode, emit, memory)
    await restore_memory(state, kept)
    calls, approvals = await read_for_resume(journal, invocation_id)
    state.saga.restore(saga_steps(state, calls, batch), max((c.sequence for c in calls), default=0))
    state.saga.turn = state.round_trips
    waited = [c.request.id for c in batch if c.message is None]
    decided = tuple(approvals[i] for i in waited if i in approvals)
    if emit is not None:
        emit(InvocationResumed(invocation_id, decided))
    log.info(
        "invocation %s resumed here: %s",
        invocation_id,
        ", ".join(f"{a.tool} {a.call_id} {a.state}" for a in approvals.values()),
    )
    with continued_trace(kept.get("trace_context")):
        approvals_waited(decided)
        return await resume_invocation(config, state, batch, approvals)
