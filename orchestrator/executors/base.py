"""The seam between the LLM loop and the place tools run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from workers import ToolDefinition, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.calls.invocation import Invocation
from workers.calls.invocation import idempotency_key as _call_key
from workers.settings import Settings

__all__ = ["ToolExecutor", "execute_batch", "fanout_limit", "idempotency_key"]


def idempotency_key(invocation: Invocation, request: ToolExecutionRequest) -> str:
    """The key that identifies one call everywhere: invocation id and call id."""
    return _call_key(invocation.context.invocation_id, request.id or request.name)


class ToolExecutor(Protocol):
    """Runs one tool call and returns its structured outcome; a tool's failure is an outcome, not a raise."""

    async def execute(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition | None,
        invocation: Invocation | None,
        *,
        compensate_if_late: bool = False,
    ) -> ToolOutcome: ...

    async def compensate(
        self, definition: ToolDefinition, execution: ToolExecution, invocation: Invocation
    ) -> ToolOutcome: ...


def fanout_limit(executor: object) -> int:
    """How many calls of one response may be in flight at once on `executor`.

    The one fan-out knob is `max_fanout` (`TOOLFLEET_MAX_FANOUT`): an executor's own `max_fanout`
    (`LocalExecutor`), else its settings' (`CeleryExecutor`), else the environment's.
    """
    for source in (executor, getattr(executor, "settings", None)):
        limit = getattr(source, "max_fanout", None)
        if isinstance(limit, int) and not isinstance(limit, bool):
            return limit
    return Settings.from_env().max_fanout


async def execute_batch(
    executor: ToolExecutor,
    calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition | None]],
    invocation: Invocation,
    *,
    max_fanout: int,
) -> list[ToolOutcome]:
    """Run one response's calls at once, at most `max_fanout` in flight; outcomes in request order."""
    if max_fanout < 1:
        raise ValueError(f"max_fanout must be at least 1, got {max_fanout}")
    gate = asyncio.Semaphore(max_fanout)

    async def run(request: ToolExecutionRequest, definition: ToolDefinition | None) -> ToolOutcome:
        async with gate:
            return await executor.execute(request, definition, invocation)

    return list(await asyncio.gather(*(run(request, definition) for request, definition in calls)))
