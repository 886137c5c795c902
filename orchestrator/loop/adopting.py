"""Adoption: an invocation whose orchestrator died, carried on by another process from its checkpoints.

Whoever finds the invocation's owner gone (a replica's watch, `toolfleet recover --agent`) claims it
with one conditional update (`Journal.adopt`: still running, its beat stale, checkpointed), so one
process only carries it on. The invocation is then rebuilt (`replay`) and run to its end here: the
model is not asked again for a journaled turn, a call with a journaled outcome is not run again, a
call still running is re-attached to, and the answer is journaled as if nothing had happened.

An invocation is not adopted, and is compensated as before, when its service compensates on an
orchestrator's loss, when it has no checkpoint (it started before checkpoints were journaled, or a
recoverer has begun undoing it), when a call of it waits for a person (it is paused: it is resumed
once decided, not adopted), or when it was undoing what it did for another reason than a failed call
of a batch (cancelled, or failing). Calls a person decided are replayed as decided: a rejected one
told as such, an approved one with its approved arguments.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from orchestrator.errors import OrchestratorError
from orchestrator.loop.config import LoopConfig, Mode
from orchestrator.loop.replay import adopted_state
from orchestrator.loop.run import adopt_invocation
from orchestrator.loop.state import Emit
from orchestrator.memory import ChatMemory
from orchestrator.result import Result
from orchestrator.saga.async_journal import JournalRunner
from orchestrator.saga.coordinator import rollback_reason
from orchestrator.saga.journal import Journal
from orchestrator.saga.states import ApprovalState, CallState, InvocationState
from orchestrator.telemetry import continued_trace

__all__ = ["adoptable", "carry_on", "claim_adoption"]

log = logging.getLogger(__name__)


def adoptable(journal: Journal, invocation_id: str) -> bool:
    """Whether the invocation can be carried on from its checkpoints (see the module's docstring):
    running, or undoing the successes of a batch one of its calls failed (its loop goes on after)."""
    record = journal.invocation(invocation_id)
    if record is None or record.state not in (InvocationState.RUNNING, InvocationState.COMPENSATING):
        return False
    if journal.checkpoint(invocation_id) is None:
        return False
    if journal.approvals(invocation_id, state=ApprovalState.PENDING):  # paused: resumed, not adopted
        return False
    if record.state is InvocationState.COMPENSATING and record.error:
        return False  # its loop ended (cancelled, failed, or answered) owing compensations: recovery's
    if record.state is InvocationState.COMPENSATING:  # not cancelled, nor failing: a batch failed
        failed = {
            rollback_reason(c.tool, c.call_id)
            for c in journal.calls(invocation_id)
            if c.state is CallState.FAILED
        }
        planned = journal.compensations(invocation_id)
        return bool(planned) and all(c.reason in failed for c in planned)
    return True


async def claim_adoption(journal: JournalRunner, invocation_id: str, stale_after_s: float) -> bool:
    """Take the invocation over to carry it on, if it is adoptable and its owner has not beaten for
    `stale_after_s`: exactly one claimer wins."""
    stale_before = datetime.now(UTC) - timedelta(seconds=stale_after_s)

    def claim(j: Journal) -> bool:
        return adoptable(j, invocation_id) and j.adopt(invocation_id, stale_before)

    return await journal.run(claim)


async def carry_on(
    config: LoopConfig,
    invocation_id: str,
    *,
    mode: Mode,
    emit: Emit | None = None,
    memory: ChatMemory | None = None,
) -> Result:
    """Run an invocation this process adopted (`claim_adoption`) on to its end, from its checkpoints;
    `memory`: the conversation's, else the service's for its memory id (set to what it was)."""
    journal = config.journal if mode == "chat" else config.journal_runner
    if journal is None:
        raise OrchestratorError("This AiService has no journal: it cannot carry an invocation on")
    record = await journal.run(lambda j: j.invocation(invocation_id))
    checkpoint = await journal.run(lambda j: j.checkpoint(invocation_id))
    if record is None or checkpoint is None:
        raise OrchestratorError(f"The journal has no checkpointed invocation {invocation_id}")
    calls = await journal.run(lambda j: j.calls(invocation_id))
    approvals = await journal.run(lambda j: j.approvals(invocation_id))
    if config.catalog is not None:
        await config.catalog.refresh()
    state, history, turns = adopted_state(config, record, checkpoint, calls, approvals, mode, emit, memory)
    log.warning(
        "invocation %s adopted here from %s: %d journaled turn(s), %d call(s)",
        invocation_id,
        record.owner,
        len(turns),
        len(calls),
    )
    with continued_trace(record.invocation_json.get("trace_context")):
        return await adopt_invocation(config, state, history, turns)
