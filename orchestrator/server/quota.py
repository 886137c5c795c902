"""What a tenant may start: its daily budget not spent (else 429 `insufficient_quota`, as OpenAI answers
an account out of credit), and the priority its invocation runs at."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from orchestrator.errors import ApiError
from orchestrator.server.tenants import Viewer
from orchestrator.service import AiService
from workers.priorities import PRIORITY_PARAMETER, check_priority

__all__ = ["INSUFFICIENT_QUOTA", "with_priority", "within_budget"]

INSUFFICIENT_QUOTA = "insufficient_quota"


async def within_budget(service: AiService, tenant: str) -> None:
    """Refuse (429 `insufficient_quota`) to start an invocation for a tenant whose day's budget under
    `service` is spent, or cannot be checked (budgets fail closed)."""
    if not service.daily_budgets:
        return  # no daily budget: nothing to ask Redis
    why = await asyncio.to_thread(service.daily_budget_exhausted, tenant)
    if why is not None:
        raise ApiError(
            429,
            f"{why[0].upper()}{why[1:]}: no invocation starts until it is counted afresh at 00:00 UTC",
            code=INSUFFICIENT_QUOTA,
        )


def with_priority(
    parameters: Mapping[str, Any], asked: int | None, viewer: Viewer, param: str
) -> dict[str, Any]:
    """`parameters` with the invocation's priority: the request's (its field, else its parameter), at
    most its key's; else its key's; else none (the agent's own, or the default)."""
    given = asked if asked is not None else parameters.get(PRIORITY_PARAMETER)
    if given is not None:
        try:
            check_priority(given, param)
        except ValueError as exc:
            raise ApiError(400, f"invalid request: {exc}", param=param) from None
    if viewer.priority is not None:
        given = viewer.priority if given is None else min(given, viewer.priority)
    rest = {k: v for k, v in parameters.items() if k != PRIORITY_PARAMETER}
    return rest if given is None else {**rest, PRIORITY_PARAMETER: given}
