"""`LocalExecutor`: tools run in the orchestrator's own process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from orchestrator.errors import UnknownToolError
from orchestrator.executors.base import execute_batch
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome, ToolRegistry
from workers.invocation import Invocation
from workers.retry import backoff_s, is_transient
from workers.runner import arun_tool, error_outcome

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """Runs tool calls in this process: `async` tools on the event loop, others on a thread pool.

    Deadlines and retries follow the same rules as on worker pools: a call past its tool's
    `timeout` is a timeout outcome, and transient failures are retried with backoff within it.

    Arguments are bound and results converted by the same code a worker uses, so an invocation
    behaves the same here as on worker pools. `tools` lets it run calls on its own, without a
    service: `LocalExecutor(tools=[BankTools()]).run(request)`.
    """

    def __init__(
        self,
        tools: Iterable[object] = (),
        *,
        max_threads: int = 32,
        max_fanout: int = 64,
        default_tool_timeout_s: float = 60.0,
        retry_backoff_s: float = 0.2,
        retry_backoff_max_s: float = 5.0,
    ) -> None:
        self.registry = ToolRegistry(tools)
        self.max_fanout = max_fanout
        self.default_tool_timeout_s = default_tool_timeout_s
        self._backoff = (retry_backoff_s, retry_backoff_max_s)
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
        timeout_s = definition.timeout or self.default_tool_timeout_s
        deadline = time.monotonic() + timeout_s
        invocation = invocation or Invocation()
        attempt = 0
        while True:
            try:
                outcome = await asyncio.wait_for(
                    arun_tool(definition, request, invocation, executor=self._threads),
                    max(deadline - time.monotonic(), 0.0),
                )
            except TimeoutError:
                # A thread cannot be stopped: the call runs on, and its result is dropped.
                return ToolOutcome(
                    kind=OutcomeKind.TIMED_OUT,
                    text=f"Tool '{definition.name}' did not finish within {timeout_s:g} s",
                    error_type="TimeoutError",
                )
            if attempt >= definition.options.retries or not is_transient(outcome, definition):
                return outcome
            pause = backoff_s(attempt, *self._backoff)
            if time.monotonic() + pause >= deadline:
                return outcome
            attempt += 1
            await asyncio.sleep(pause)

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
