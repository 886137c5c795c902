"""`LocalExecutor`: tools run in the orchestrator's own process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.errors import UnknownToolError
from orchestrator.executors._progress import progress_listener
from orchestrator.executors.base import Settled, execute_batch, idempotency_key
from workers import (
    OutcomeKind,
    ToolDefinition,
    ToolExecution,
    ToolExecutionRequest,
    ToolOutcome,
    ToolRegistry,
)
from workers.calls.compensating import arun_compensation, run_compensation
from workers.calls.invocation import Invocation, ToolCallIdentity
from workers.calls.progress import ToolProgressReporter, reporting
from workers.calls.retry import backoff_s, is_transient
from workers.calls.runner import arun_tool, bound_outcome, call_identity, run_tool
from workers.settings import Settings

__all__ = ["LocalExecutor"]

log = logging.getLogger(__name__)


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
        max_fanout: int | None = None,
        default_tool_timeout_s: float = 60.0,
        retry_backoff_s: float = 0.2,
        retry_backoff_max_s: float = 5.0,
        compensation_retries: int = 3,
        max_result_bytes: int = 4 << 20,
    ) -> None:
        self.registry = ToolRegistry(tools)
        # None: TOOLFLEET_MAX_FANOUT, the one fan-out knob, as on worker pools
        self.max_fanout = max_fanout if max_fanout is not None else Settings.from_env().max_fanout
        self.compensation_retries = compensation_retries
        self.max_result_bytes = max_result_bytes
        self._compensated: set[str] = set()
        self._lock = threading.Lock()
        self.default_tool_timeout_s = default_tool_timeout_s
        self._backoff = (retry_backoff_s, retry_backoff_max_s)
        self._threads = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="toolfleet-tool")

    async def execute(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition | None = None,
        invocation: Invocation | None = None,
        *,
        compensate_if_late: bool = False,
    ) -> ToolOutcome:
        """Run one call of `definition` (looked up by the request's name when not given).

        With `compensate_if_late`, a call that outlives its deadline is compensated here as soon as it
        completes successfully.
        """
        definition = definition or self.registry.get(request.name)
        if definition is None:
            # The same outcome a worker pool gives (no tool exception to describe), the live error kept.
            error = UnknownToolError(f"Unknown tool '{request.name}'")
            return ToolOutcome(
                OutcomeKind.EXECUTION_ERROR, str(error), error_type="UnknownToolError", exception=error
            )
        timeout_s = definition.timeout or self.default_tool_timeout_s
        deadline = time.monotonic() + timeout_s
        invocation = invocation or Invocation()
        late = compensate_if_late and definition.compensation is not None
        key = idempotency_key(invocation, request)
        attempt = 0
        while True:
            identity = call_identity(invocation, request, attempt=attempt + 1, key=key)
            outcome = await self._run_once(definition, request, invocation, identity, deadline, late)
            if outcome is None:
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

    async def _run_once(
        self,
        definition: ToolDefinition,
        request: ToolExecutionRequest,
        invocation: Invocation,
        identity: ToolCallIdentity,
        deadline: float,
        compensate_if_late: bool,
    ) -> ToolOutcome | None:
        """One attempt; `None` when the deadline passed first (the call runs on: a thread cannot stop)."""
        running: asyncio.Future[ToolOutcome] | concurrent.futures.Future[ToolOutcome]
        # Reports go straight to the invocation; no heartbeat is watched in-process. A call given up
        # (its deadline, a cancel) is told through its reporter: a thread cannot be stopped, the tool
        # stops at its next report.
        cancelled = threading.Event()
        reporter = ToolProgressReporter(progress_listener(), cancelled=cancelled.is_set)
        if definition.is_async:
            running = asyncio.ensure_future(
                _areporting(reporter, arun_tool, definition, request, invocation, identity)
            )
            waiting: asyncio.Future[ToolOutcome] = running
        else:
            running = self._threads.submit(
                _reporting, reporter, run_tool, definition, request, invocation, identity
            )
            waiting = asyncio.wrap_future(running)

        def abandon() -> None:  # at the deadline, or cancelled: the tool is told, a late success undone
            cancelled.set()
            if compensate_if_late:
                key = identity.idempotency_key
                running.add_done_callback(
                    lambda finished: self._compensate_late(definition, request, invocation, key, finished)
                )

        try:
            done, _ = await asyncio.wait({waiting}, timeout=max(deadline - time.monotonic(), 0.0))
        except asyncio.CancelledError:
            if isinstance(running, asyncio.Future):
                running.cancel()
            abandon()
            raise
        if waiting in done:
            return bound_outcome(waiting.result(), definition.name, self.max_result_bytes)
        abandon()
        return None

    def _compensate_late(
        self,
        definition: ToolDefinition,
        request: ToolExecutionRequest,
        invocation: Invocation,
        key: str,
        finished: asyncio.Future[ToolOutcome] | concurrent.futures.Future[ToolOutcome],
    ) -> None:
        if finished.cancelled() or finished.exception() is not None:
            return
        outcome = finished.result()
        if outcome.is_error:
            return
        execution = ToolExecution(
            request=request,
            result=outcome.text,
            result_object=outcome.result_object,
            attributes=dict(outcome.attributes),
        )
        log.warning(
            "tool %s call %s finished after its deadline; compensating it", definition.name, request.id
        )
        try:
            self._threads.submit(self._compensate_sync, definition, execution, invocation, key)
        except RuntimeError:  # the executor was closed meanwhile: undo it on this thread
            self._compensate_sync(definition, execution, invocation, key)

    def _compensate_sync(
        self, definition: ToolDefinition, execution: ToolExecution, invocation: Invocation, key: str
    ) -> ToolOutcome:
        with self._lock:
            if key in self._compensated:
                return ToolOutcome(OutcomeKind.SUCCESS, "Already compensated")
        request = execution.request
        outcome = run_compensation(
            definition, execution, invocation, call_identity(invocation, request, key=key)
        )
        for attempt in range(self.compensation_retries):
            if not outcome.is_error:
                break
            time.sleep(backoff_s(attempt, *self._backoff))
            identity = call_identity(invocation, request, attempt=attempt + 2, key=key)
            outcome = run_compensation(definition, execution, invocation, identity)
        if not outcome.is_error:
            with self._lock:
                self._compensated.add(key)
        return outcome

    async def compensate(
        self, definition: ToolDefinition, execution: ToolExecution, invocation: Invocation
    ) -> ToolOutcome:
        """Undo one successful call in this process, with retries and backoff; at most once per call."""
        key = idempotency_key(invocation, execution.request)
        with self._lock:
            if key in self._compensated:
                return ToolOutcome(OutcomeKind.SUCCESS, "Already compensated")
        timeout_s = definition.timeout or self.default_tool_timeout_s
        outcome = ToolOutcome(OutcomeKind.EXECUTION_ERROR, "not run", error_type="NotRun")
        for attempt in range(1 + self.compensation_retries):
            identity = call_identity(invocation, execution.request, attempt=attempt + 1, key=key)
            try:
                outcome = await asyncio.wait_for(
                    arun_compensation(definition, execution, invocation, identity, executor=self._threads),
                    timeout_s,
                )
            except TimeoutError:
                outcome = ToolOutcome(
                    OutcomeKind.TIMED_OUT,
                    f"Compensation of tool '{definition.name}' did not finish within {timeout_s:g} s",
                    error_type="TimeoutError",
                )
            if not outcome.is_error:
                with self._lock:
                    self._compensated.add(key)
                return outcome
            if attempt < self.compensation_retries:
                await asyncio.sleep(backoff_s(attempt, *self._backoff))
        return outcome

    async def execute_batch(
        self, calls: Sequence[tuple[ToolExecutionRequest, ToolDefinition | None]], invocation: Invocation
    ) -> list[ToolOutcome]:
        """All calls of one response at once, at most `max_fanout` in flight; outcomes in request order."""
        return await execute_batch(self, calls, invocation, max_fanout=self.max_fanout)

    def definition(self, name: str) -> ToolDefinition | None:
        """The tool of that name among this executor's own tools."""
        return self.registry.get(name)

    async def settle(self, key: str, definition: ToolDefinition | None) -> Settled | None:
        """None: a call run in-process leaves no state once its process is gone."""
        return None

    def run(self, request: ToolExecutionRequest, invocation: Invocation | None = None) -> ToolOutcome:
        """`execute` from synchronous code."""
        return asyncio.run(self.execute(request, None, invocation))

    def close(self) -> None:
        # Calls still running (abandoned at their deadline) finish, so they can still be compensated.
        self._threads.shutdown(wait=False, cancel_futures=False)


def _reporting(reporter: ToolProgressReporter, run: Callable[..., ToolOutcome], *args: Any) -> ToolOutcome:
    """`run(*args)` with `reporter` injected; its last report delivered before the outcome."""
    with reporting(reporter):
        return run(*args)


async def _areporting(
    reporter: ToolProgressReporter, run: Callable[..., Awaitable[ToolOutcome]], *args: Any
) -> ToolOutcome:
    """`await run(*args)` with `reporter` injected; its last report delivered before the outcome."""
    with reporting(reporter):
        return await run(*args)
