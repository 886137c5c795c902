"""Calls that require approval, made by a client that cannot be asked (no MCP elicitation): each one
waits in the journal as a paused invocation of one call, decided as any approval is (`toolfleet
approvals`, `toolfleet approve`, `toolfleet reject`, the run view), and runs when the client calls
again with the same arguments (the arguments a person approved, edited or not), once.

Until then the call is answered with why it cannot run yet; a call rejected (or expired, or
cancelled) is told so once, and the next call with the same arguments waits for a decision anew.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from orchestrator.approvals import DEFAULT_APPROVAL_TIMEOUT_S
from orchestrator.integrations.fleet import FleetCall
from orchestrator.saga._journal_approvals import WaitingCall, arguments_hash
from orchestrator.saga._journal_records import utc_now
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal, owner_id
from orchestrator.saga.states import ApprovalState, InvocationState
from workers.calls.invocation import Invocation, InvocationContext
from workers.tenants import DEFAULT_TENANT, TENANT_PARAMETER
from workers.tools import ToolDefinition

__all__ = ["Approved", "PausedCalls"]


@dataclass(frozen=True)
class Approved:
    """A call a person approved: the arguments to run it with; `ended` journals how it went."""

    arguments: dict[str, Any]
    invocation_id: str
    journal: AsyncJournal

    async def ended(self, call: FleetCall | None) -> None:
        """Journal the call's end (None: it never ended, cancelled or failing on its way)."""
        if call is None or call.is_error:
            state, error, answer = InvocationState.FAILED, call.text if call else "the call did not end", None
        else:
            state, error, answer = InvocationState.SUCCEEDED, None, call.text
        await self.journal.run(
            lambda j: j.set_invocation_state(
                self.invocation_id, state, error, final_answer=answer, owner=owner_id()
            )
        )


class PausedCalls:
    """The journal's paused calls of one gateway (`service`: the name its invocations carry)."""

    def __init__(
        self, journal: AsyncJournal, *, service: str = "mcp", timeout_s: float = DEFAULT_APPROVAL_TIMEOUT_S
    ) -> None:
        self.journal = journal
        self.service = service
        self.timeout_s = timeout_s

    async def approved(
        self, definition: ToolDefinition, arguments: dict[str, Any], tenant: str | None
    ) -> Approved | str:
        """The call as a person approved it (taken: no other call runs it), or why it cannot run yet."""
        name = definition.name
        text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        hashed, tenant = arguments_hash(text), tenant or DEFAULT_TENANT
        found = await self.journal.run(lambda j: j.paused_call(self.service, name, hashed, tenant))
        if found is None:
            invocation_id, call_id = await self._pause(definition, text, tenant)
            return (
                f"tool {name!r} requires approval: the call waits as call {call_id} of invocation "
                f"{invocation_id} (toolfleet approvals); once it is approved, call it again with the "
                "same arguments"
            )
        where = f"call {found.call_id} of invocation {found.invocation_id}"
        if found.state is ApprovalState.PENDING:
            return f"tool {name!r} still waits for approval ({where})"
        if found.state is ApprovalState.APPROVED:
            if await self.journal.run(lambda j: j.claim_paused(found.invocation_id, owner_id())) is None:
                return f"the approved call of {name!r} ({where}) is being run by another request"
            approved: dict[str, Any] = json.loads(found.arguments_to_run)
            return Approved(approved, found.invocation_id, self.journal)
        why = f"{found.state}" + (f": {found.reason}" if found.reason else "")
        await self.journal.run(
            lambda j: j.set_invocation_state(
                found.invocation_id,
                InvocationState.FAILED,
                f"not approved ({why})",
                expected=InvocationState.PAUSED,
            )
        )
        return f"the call of {name!r} was not approved ({why}; {where})"

    async def _pause(self, definition: ToolDefinition, text: str, tenant: str) -> tuple[str, str]:
        """Journal the call as a paused invocation of its own; its invocation and call ids."""
        context = InvocationContext(
            service_name=self.service, memory_id=self.service, user_message=f"{definition.name} {text}"
        )
        invocation_id, call_id = str(context.invocation_id), f"call_{uuid.uuid4().hex[:12]}"
        invocation = Invocation(context, {TENANT_PARAMETER: tenant})
        waiting = [WaitingCall(call_id, definition.name, definition.pool, text)]
        expires_at = utc_now() + timedelta(seconds=self.timeout_s)

        def pause(journal: Journal) -> None:
            journal.start_invocation(context, invocation.to_json())
            journal.pause(invocation_id, {}, waiting, expires_at=expires_at, requested_by=self.service)

        await self.journal.run(pause)
        return invocation_id, call_id
