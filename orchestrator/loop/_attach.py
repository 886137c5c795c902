"""Re-attaching to a call an orchestrator that died published, when its invocation is adopted."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import datetime

from orchestrator.executors.base import ToolExecutor
from workers.calls.invocation import Invocation
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition

__all__ = ["attached"]


def attached(
    executor: ToolExecutor,
    request: ToolExecutionRequest,
    tool: ToolDefinition,
    invocation: Invocation,
    published_at: datetime,
    late: bool,
) -> Awaitable[ToolOutcome]:
    """The outcome of a call published at `published_at` by an orchestrator that died: awaited where
    it runs through an executor that can re-attach to it (`CeleryExecutor.attach`); through one that
    cannot (`LocalExecutor` ran it in the process that died), lost with that process."""
    attach = getattr(executor, "attach", None)
    if attach is not None:
        running: Awaitable[ToolOutcome] = attach(
            request, tool, invocation, published_at=published_at, compensate_if_late=late
        )
        return running

    async def lost() -> ToolOutcome:
        return ToolOutcome(
            OutcomeKind.WORKER_LOST,
            f"Tool '{tool.name}' ran in the orchestrator that stopped; whether it finished is not known",
            error_type="OrchestratorLost",
        )

    return lost()
