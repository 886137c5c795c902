"""`LocalExecutor`: tools run in the orchestrator's own process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from orchestrator.errors import UnknownToolError
from orchestrator.executors.base import execute_batch
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome, ToolRegistry
from workers.invocation import Invocation
from workers.runner import arun_tool, error_outcome

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """Runs tool calls in this process: `async` tools on the event loop, others on a thread pool.

    Arguments are bound and results converted by the same code a worker uses, so an invocation
    behaves the same here as on worker pools. `tools` lets it run calls on its own, without a
    service: `LocalExecutor(tools=[BankTools()]).run(request)`.
    """

    def __init__(self, tools: Iterable[object] = (), *, max_threads: int = 32, max_fanout: int = 64) -> None:
        self.registry = ToolRegistry(tools)
        self.max_fanout = max_fanout
        self._threads = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="toolfleet-tool")

    async def execute(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition | None = None,
        invocation: Invocation | None = None,
    ) -> ToolOutcome:
        """Run one call of `definition` (looked up by the request's name when not given)."""
        definition = definition or self.registry.get(request.name)
        if definition is None:
            error = UnknownToolError(f"Unknown tool '{request.name}'")
            return error_outcome(error, OutcomeKind.EXECUTION_ERROR)
        return await arun_tool(definition, request, invocation or Invocation(), executor=self._threads)

    async def execute_batch(
        self, calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition | None]], invocation: Invocation
    ) -> list[ToolOutcome]:
        """All calls of one response at once, at most `max_fanout` in flight; outcomes in request order."""
        return await execute_batch(self, calls, invocation, max_fanout=self.max_fanout)

    def run(self, request: ToolExecutionRequest, invocation: Invocation | None = None) -> ToolOutcome:
        """`execute` from synchronous code."""
        return asyncio.run(self.execute(request, None, invocation))

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
