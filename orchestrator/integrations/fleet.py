"""One call of a fleet tool from outside toolfleet's loop: what the MCP gateway and the framework
adapters share, so that there is one way to reach the fleet, not one per integration.

A `FleetClient` lists the tools the live catalog serves (all of them, or those of some pools) and runs
one call of one of them on its pool, as the loop runs a call: the tool's deadline and retries, the
worker's argument validation, progress reports as they come, and a cancel (the awaiting task
cancelled) abandoning the call on its worker as `AiService.cancel_call` does. A call here is a saga of
one: there is nothing before it to undo, and nothing after it is undone when it fails.

```python
from orchestrator.integrations.fleet import FleetClient

fleet = FleetClient(pools=["reports"])
[tool.name for tool in fleet.tools()]
outcome = fleet.call_sync("render", {"report": "q3"})
print(outcome.text, outcome.is_error)
```
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import UnknownFleetToolError
from orchestrator.executors import CeleryExecutor
from orchestrator.executors._progress import observe_progress
from orchestrator.loop.catalog_tools import LiveCatalogTools
from orchestrator.telemetry.metrics import DEADLINE_MISSES, TOOL_CALLS, TOOL_DURATION
from workers.calls.invocation import Invocation, InvocationContext
from workers.calls.progress import ProgressReport
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.settings import Settings
from workers.telemetry.tracing import span
from workers.tenants import TENANT_PARAMETER
from workers.tools import ToolDefinition

__all__ = ["FleetCall", "FleetClient", "UnknownFleetToolError"]


@dataclass(frozen=True)
class FleetCall:
    """One call as it ended: the tool's text (its result, or what failed), whether it failed, its
    outcome (kind, contents, the worker that ran it) and its id (`call_id`, in Flower and the logs)."""

    call_id: str
    text: str
    is_error: bool
    outcome: ToolOutcome


class FleetClient:
    """The tools of the live catalog (`pools`: only theirs) and one call of any of them."""

    def __init__(
        self,
        executor: CeleryExecutor | None = None,
        *,
        pools: Collection[str] | None = None,
        settings: Settings | None = None,
        origin: str = "fleet",
    ) -> None:
        self._owned = executor is None
        self.executor = executor or CeleryExecutor(settings=settings or Settings.from_env())
        self.pools = frozenset(pools) if pools else None
        self.origin = origin  # who calls (`mcp`, `langchain`...): the service name its calls carry
        self._catalog = LiveCatalogTools(self.executor)

    def tools(self) -> list[ToolDefinition]:
        """The tools live workers of the client's pools serve now, by name (read at most once a
        second); an `OrchestratorError` saying what to check when the catalog cannot be read."""
        served = self._catalog.current()
        return sorted((d for d in served if self.pools is None or d.pool in self.pools), key=lambda d: d.name)

    def tool(self, name: str) -> ToolDefinition:
        """The definition of tool `name`; `UnknownFleetToolError` when no live worker serves it."""
        for definition in self.tools():
            if definition.name == name:
                return definition
        where = "" if self.pools is None else f" of the pools {', '.join(sorted(self.pools))}"
        raise UnknownFleetToolError(f"no live worker{where} serves a tool named {name!r}")

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        progress: Callable[[ProgressReport], None] | None = None,
        tenant: str | None = None,
        call_id: str | None = None,
        definition: ToolDefinition | None = None,
    ) -> FleetCall:
        """Run one call of tool `name` on its pool and wait for its end (its deadline at most).

        `progress` is told each report of the call (from another thread); cancelling the awaiting
        task abandons the call on its worker. A tool's failure is a `FleetCall` with `is_error`; an
        unknown tool is `UnknownFleetToolError`."""
        definition = definition or self.tool(name)
        text = arguments if isinstance(arguments, str) else json.dumps(dict(arguments or {}))
        call_id = call_id or f"call_{uuid.uuid4().hex[:16]}"
        request = ToolExecutionRequest(call_id, name, text)
        parameters = {TENANT_PARAMETER: tenant} if tenant else {}
        context = InvocationContext(service_name=self.origin, memory_id=self.origin)
        invocation = Invocation(context, parameters)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        attributes |= {"gen_ai.tool.call.id": call_id, "toolfleet.pool": definition.pool}
        started, kind = time.perf_counter(), "error"
        try:
            with span(f"execute_tool {name}", attributes) as current, observe_progress(progress or _unheard):
                outcome = await self.executor.execute(request, definition, invocation)
                kind = outcome.kind.value
                current.set_attributes(
                    {"toolfleet.outcome.kind": kind, "toolfleet.worker": outcome.worker or ""}
                )
        except asyncio.CancelledError:
            kind = "cancelled"
            raise
        finally:
            TOOL_CALLS.labels(name, definition.pool, kind).inc()
            TOOL_DURATION.labels(name, definition.pool).observe(time.perf_counter() - started)
            if kind == OutcomeKind.TIMED_OUT.value:
                DEADLINE_MISSES.labels(name, definition.pool).inc()
        return FleetCall(call_id, outcome.text, outcome.is_error, outcome)

    async def stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        tenant: str | None = None,
        call_id: str | None = None,
        definition: ToolDefinition | None = None,
    ) -> AsyncIterator[ProgressReport | FleetCall]:
        """`call`, as what it tells in order on the caller's event loop: each progress report the tool
        makes (not the heartbeats), then the `FleetCall` it ended with. Leaving the iteration early
        abandons the call on its worker."""
        loop = asyncio.get_running_loop()
        reports: asyncio.Queue[ProgressReport] = asyncio.Queue()

        def heard(report: ProgressReport) -> None:  # from the executor's thread
            if report.seq:
                loop.call_soon_threadsafe(reports.put_nowait, report)

        calling = asyncio.ensure_future(
            self.call(name, arguments, progress=heard, tenant=tenant, call_id=call_id, definition=definition)
        )
        try:
            while not calling.done():
                getting = asyncio.ensure_future(reports.get())
                await asyncio.wait({calling, getting}, return_when=asyncio.FIRST_COMPLETED)
                if getting.done():
                    yield getting.result()
                else:
                    getting.cancel()
            await asyncio.sleep(0)  # the reports handed over just before the end
            while not reports.empty():
                yield reports.get_nowait()
            yield calling.result()
        finally:
            if not calling.done():
                calling.cancel()
                await asyncio.gather(calling, return_exceptions=True)

    def call_sync(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        progress: Callable[[ProgressReport], None] | None = None,
        tenant: str | None = None,
    ) -> FleetCall:
        """`call`, from code that is not a coroutine (not from a running event loop)."""
        return asyncio.run(self.call(name, arguments, progress=progress, tenant=tenant))

    def close(self) -> None:
        """Close the executor this client made (one given to it stays its owner's)."""
        if self._owned:
            self.executor.close()


def _unheard(report: ProgressReport) -> None:
    """No one listens to this call's progress."""
