"""A dead replica's invocations carried on by this one: adopted from the journal, run here in the
background as if they had started here, their event stream going on (`invocation.adopted`, then the
rest of their events through to their end), their conversation written back when they end."""

from __future__ import annotations

import logging
import uuid

from orchestrator.loop.adopting import adoptable, claim_adoption
from orchestrator.memory import ChatMemory
from orchestrator.messages import UserMessage
from orchestrator.saga.journal import owner_id
from orchestrator.server.conversations import start_turn
from orchestrator.server.events import tell_settled
from orchestrator.server.invocations import Run
from orchestrator.server.replicas import ADOPTED, ELSEWHERE
from orchestrator.server.state import ServiceState
from workers.protocol import CANCELLED_KEY

__all__ = ["adopt_in_background"]

log = logging.getLogger(__name__)


async def adopt_in_background(
    state: ServiceState, invocation_id: str, dead: str, stale_after_s: float
) -> str:
    """Carry on here the invocation of `dead` (a replica whose heartbeat expired), if this replica
    serves its agent, the agent carries invocations on (`AiService.carries_on`) and the invocation
    can be (`adopting.adoptable`): `ADOPTED` (exactly one process adopts it); `ELSEWHERE` when it
    could go on but this replica does not serve its agent, or is draining; else "" (undo it)."""
    if await state.redis.exists(CANCELLED_KEY.format(invocation_id)):
        return ""  # cancelled by its client: undone, not carried on (it would stop at once, unjournaled)
    if await state.events.ended(invocation_id):
        return ""  # its clients were told it ended (its run failed, its journal unwritten): undone to match
    origin = await state.events.first(invocation_id) or {}
    record = await state.journal.run(lambda j: j.invocation(invocation_id))
    if record is None:
        return ""
    agent = str(origin.get("agent") or record.service_name or "")
    service = state.agents.get(agent)
    if service is not None and not service.carries_on:
        return ""  # its agent undoes on an orchestrator's loss
    if service is None or state.draining:
        return ELSEWHERE if await state.journal.run(lambda j: adoptable(j, invocation_id)) else ""
    if not await claim_adoption(state.journal, invocation_id, stale_after_s):
        return ""
    here = owner_id()
    log.warning("replica %s stopped: its invocation %s goes on here", dead, invocation_id)
    # The stream is this adoption's from now on: a run taken for dead yet still going writes no more
    # (its run here may start later, once the conversation is free: it would write meanwhile).
    token = uuid.uuid4().hex
    runner: str | None = token
    try:
        await state.events.take(invocation_id, token)
    except Exception as exc:  # Redis away: the run takes it as it starts
        log.warning("invocation %s: its stream not taken at adoption: %s", invocation_id, exc)
        runner = None
    adopted = {"type": "invocation.adopted", "invocation_id": invocation_id, "replica": here, "from": dead}
    await state.events.add(invocation_id, adopted, runner=runner)
    # the calls its dead replica journaled the end of without telling it: the run goes on past them
    await tell_settled(state.journal, state.events, invocation_id)
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
            conversation_id,
            tenant=record.tenant,
            adopting=True,
            runner=runner,
        )

    await start_turn(state, state.admit_adopted(), agent, conversation_id, [], run, tenant=record.tenant)
    return ADOPTED
