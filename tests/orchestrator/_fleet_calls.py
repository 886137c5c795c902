"""Journaled calls of known pools, tools, tenants, outcomes, times and queue waits, written straight
into a journal's tables (so that their times are exactly the test's), for the fleet page's tests."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from orchestrator.saga._journal_tables import invocations, tool_calls
from orchestrator.saga.journal import Journal

__all__ = ["Call", "write_calls"]


@dataclass(frozen=True)
class Call:
    """A call of `tool` on `pool` for an invocation of `tenant`, that took `duration_ms` from its intent
    to its outcome and ended at `finished_at`; no `outcome`: still in flight (no outcome, no end)."""

    tenant: str
    pool: str
    tool: str
    outcome: str | None
    finished_at: datetime
    duration_ms: int
    queued_ms: int | None = None


def write_calls(journal: Journal, calls: list[Call]) -> None:
    """Each call in an invocation of its tenant's (one per tenant), in the order given."""
    tenants = {call.tenant: str(uuid.uuid4()) for call in calls}
    with journal.engine.begin() as connection:
        for tenant, invocation_id in tenants.items():
            when = min(c.finished_at for c in calls) - timedelta(hours=1)
            connection.execute(
                sa.insert(invocations).values(
                    id=invocation_id,
                    memory_id="default",
                    state="succeeded",
                    owner="host:1",
                    started_at=when,
                    heartbeat_at=when,
                    tenant=tenant,
                )
            )
        for sequence, call in enumerate(calls, start=1):
            connection.execute(
                sa.insert(tool_calls).values(
                    invocation_id=tenants[call.tenant],
                    sequence=sequence,
                    tool=call.tool,
                    arguments="{}",
                    pool=call.pool,
                    compensable=False,
                    idempotency_key=f"{call.tenant}-{sequence}",
                    state="dispatched" if call.outcome is None else "succeeded",
                    outcome=call.outcome,
                    started_at=call.finished_at - timedelta(milliseconds=call.duration_ms),
                    finished_at=None if call.outcome is None else call.finished_at,
                    queued_ms=call.queued_ms,
                )
            )
