"""The seam between the LLM loop and the place tools run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from workers import ToolDefinition, ToolExecution, ToolExecutionRequest, ToolOutcome
from workers.calls.invocation import Invocation
from workers.calls.invocation import idempotency_key as _call_key

__all__ = ["Settled", "ToolExecutor", "execute_batch", "fanout_limit", "idempotency_key"]


def idempotency_key(invocation: Invocation, request: ToolExecutionRequest) -> str:
    """The key that identifies one call everywhere: invocation id and call id."""
    return _call_key(invocation.context.invocation_id, request.id or request.name)


@dataclass(frozen=True)
class Settled:
    """What became of a call whose outcome was never journaled (`ToolExecutor.settle`).

    `state`: succeeded (undo it), failed (nothing to undo) or abandoned (revoked; its worker undoes it
    if it finishes), the texts of the journal's call states. `meta` is the call's stored final state;
    None for a success whose result never arrived, whose outcome is then unknown."""

    state: Literal["succeeded", "failed", "abandoned"]
    task_id: str
    meta: dict[str, Any] | None = None


class ToolExecutor(Protocol):
    """Runs one tool call and returns its structured outcome; a tool's failure is an outcome, not a raise.

    Besides running calls and their compensations, an executor names its fan-out limit, finds a tool's
    definition by name, and reads what became of a call dispatched by an orchestrator that died (when
    it can: `settle` returns None when nothing outlives the process, as with `LocalExecutor`).
    """

    @property
    def max_fanout(self) -> int:
        """How many calls of one response may be in flight at once."""
        ...

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

    async def execute_batch(
        self, calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition | None]], invocation: Invocation
    ) -> list[ToolOutcome]:
        """All calls of one response at once, at most `max_fanout` in flight; outcomes in request order."""
        ...

    def definition(self, name: str) -> ToolDefinition | None:
        """The definition of the tool of that name, or None when this executor knows none."""
        ...

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled | None:
        """What became of the call of idempotency key `key` whose outcome was never journaled; None
        when this executor cannot know."""
        ...

    def close(self) -> None:
        """Release what the executor holds (threads, connections)."""
        ...


def fanout_limit(executor: ToolExecutor) -> int:
    """How many calls of one response may be in flight at once on `executor`: its `max_fanout`, the
    one fan-out knob (`TOOLFLEET_MAX_FANOUT` unless the executor was given its own)."""
    return executor.max_fanout


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
