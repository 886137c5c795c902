"""Whose an invocation is, and who asks: every route that names an invocation answers a tenant
that does not own it exactly as it answers an unknown id (404, the same body), so nothing of another
tenant's invocations is told, not even that they exist.

An invocation's tenant is written twice, by the request that starts it: in its first event
(`invocation.started`, field `tenant`) and in its journal row (column `tenant`, for an agent that
journals). Either tells it on any replica; the journal's outlives the event stream (a day).
"""

from __future__ import annotations

from fastapi import Request

from orchestrator.saga.async_journal import JournalRunner
from orchestrator.saga.journal import Journal
from orchestrator.server.events import EventLog
from orchestrator.server.tenants import DEFAULT_TENANT, Viewer

__all__ = ["VIEWER_SCOPE_KEY", "owner_of", "sees_invocation", "viewer_of"]

VIEWER_SCOPE_KEY = "toolfleet.viewer"  # the ASGI scope's entry the key middleware sets


def viewer_of(request: Request) -> Viewer:
    """Who sent `request`, as the key middleware found (its key's tenant and scopes)."""
    viewer = request.scope.get(VIEWER_SCOPE_KEY)
    if not isinstance(viewer, Viewer):  # a route the middleware did not see: refuse, never guess
        raise RuntimeError(f"{request.url.path} was reached without its key checked")
    return viewer


async def owner_of(events: EventLog, journal: JournalRunner, invocation_id: str) -> str | None:
    """The tenant of the invocation: its first event's, else its journal row's; None when neither
    is known (no such invocation, or its stream lost its first event and it has no row)."""
    first = await events.first(invocation_id)
    if first is not None and first.get("type") == "invocation.started":
        # events written before tenants were the default tenant's
        return str(first.get("tenant") or DEFAULT_TENANT)
    return await journal.run(lambda j: _journal_tenant(j, invocation_id))


async def sees_invocation(
    viewer: Viewer, events: EventLog, journal: JournalRunner, invocation_id: str
) -> bool:
    """Whether `viewer` may see and act on the invocation (an operator sees every one, even one
    whose tenant is not known)."""
    return viewer.admin or viewer.sees(await owner_of(events, journal, invocation_id))


def _journal_tenant(journal: Journal, invocation_id: str) -> str | None:
    record = journal.invocation(invocation_id)
    return None if record is None else record.tenant
