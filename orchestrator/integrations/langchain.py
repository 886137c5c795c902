"""The fleet's tools as LangChain tools (`pip install 'toolfleet[langchain]'`): usable by
`langchain.agents.create_agent`, LangGraph's `ToolNode`, or any LangChain agent, each call run on its
pool's workers (`FleetClient`).

```python
from langchain.agents import create_agent
from orchestrator.integrations.langchain import fleet_tools

agent = create_agent(model, fleet_tools(pools=["reports"]))
```

A tool's failure is a `ToolException` (with `handle_tool_error`, the model reads its text); each
progress report of the tool is a custom callback event `toolfleet.progress` (`astream_events`'
`on_custom_event`, or a handler's `on_custom_event`) with the tool, its fraction and message.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Collection
from typing import Any

from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.tools import BaseTool, ToolException

from orchestrator.integrations.fleet import FleetCall, FleetClient
from workers.calls.progress import ProgressReport

__all__ = ["PROGRESS_EVENT", "FleetTool", "fleet_tools"]

PROGRESS_EVENT = "toolfleet.progress"


class FleetTool(BaseTool):
    """One fleet tool: its name, description and JSON schema as the catalog has them."""

    fleet: Any  # the FleetClient that runs it
    tenant: str | None = None
    handle_tool_error: bool = True

    async def _arun(self, *args: Any, **arguments: Any) -> str:
        call: FleetCall | None = None
        async for told in self.fleet.stream(self.name, arguments, tenant=self.tenant):
            if isinstance(told, ProgressReport):
                await adispatch_custom_event(PROGRESS_EVENT, _progress(self.name, told))
            else:
                call = told
        return _answer(call)

    def _run(self, *args: Any, **arguments: Any) -> str:
        told: queue.Queue[ProgressReport | FleetCall | BaseException] = queue.Queue()

        async def run() -> None:
            async for item in self.fleet.stream(self.name, arguments, tenant=self.tenant):
                told.put(item)

        def in_thread() -> None:  # a loop of its own, whatever runs in this thread
            try:
                asyncio.run(run())
            except BaseException as exc:
                told.put(exc)

        threading.Thread(target=in_thread, name=f"fleet-{self.name}", daemon=True).start()
        while True:
            item = told.get()
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, ProgressReport):
                dispatch_custom_event(PROGRESS_EVENT, _progress(self.name, item))
                continue
            return _answer(item)


def fleet_tools(
    pools: Collection[str] | None = None, *, fleet: FleetClient | None = None, tenant: str | None = None
) -> list[BaseTool]:
    """The tools live workers of `pools` (all pools: None) serve now, as LangChain tools; `fleet`: the
    client to run them with (one is made from the TOOLFLEET_* environment when not given)."""
    fleet = fleet or FleetClient(pools=pools, origin="langchain")
    return [
        FleetTool(
            name=d.name,
            description=d.specification.description or d.name,
            args_schema=d.specification.parameters or {"type": "object", "properties": {}},
            fleet=fleet,
            tenant=tenant,
        )
        for d in fleet.tools()
    ]


def _progress(tool: str, report: ProgressReport) -> dict[str, Any]:
    return {"tool": tool, "fraction": report.fraction, "message": report.message, "data": report.data}


def _answer(call: FleetCall | None) -> str:
    if call is None:
        raise ToolException("the call ended without an outcome")
    if call.is_error:
        raise ToolException(call.text)
    return call.text
