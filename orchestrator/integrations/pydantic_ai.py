"""The fleet's tools as a Pydantic AI toolset (`pip install 'toolfleet[pydantic-ai]'`): the tools live
workers serve, read for each run, each call run on its pool's workers (`FleetClient`).

```python
from pydantic_ai import Agent
from orchestrator.integrations.pydantic_ai import FleetToolset

agent = Agent("openai:gpt-5", toolsets=[FleetToolset(pools=["reports"])])
```

A tool's failure is told to the model (`ToolFailed`: it does not spend the run's retries); each
progress report is a `FleetProgress` event of the run's event stream (`event_stream_handler`,
`run_stream_events`), with the call's id and tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic_ai import CustomEvent, RunContext, ToolDefinition, ToolFailed
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from orchestrator.integrations.fleet import FleetCall, FleetClient
from workers.calls.progress import ProgressReport

__all__ = ["FleetProgress", "FleetToolset"]

# The arguments go to the worker as the model wrote them: the worker validates them, as for any call.
_ANY_ARGUMENTS = SchemaValidator(core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()))


@dataclass(kw_only=True)
class FleetProgress(CustomEvent):
    """A progress report of a fleet tool's call."""

    fraction: float | None
    message: str | None


class FleetToolset(AbstractToolset[Any]):
    """The tools live workers of `pools` (all pools: None) serve."""

    def __init__(
        self,
        pools: Collection[str] | None = None,
        *,
        fleet: FleetClient | None = None,
        tenant: str | None = None,
        id: str = "toolfleet",
        max_retries: int = 1,
    ) -> None:
        self.fleet = fleet or FleetClient(pools=pools, origin="pydantic-ai")
        self.tenant = tenant
        self._id = id
        self.max_retries = max_retries

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        definitions = await asyncio.to_thread(self.fleet.tools)
        return {
            d.name: ToolsetTool(
                toolset=self,
                max_retries=self.max_retries,
                args_validator=_ANY_ARGUMENTS,
                tool_def=ToolDefinition(
                    name=d.name,
                    description=d.specification.description,
                    parameters_json_schema=d.specification.parameters or {"type": "object", "properties": {}},
                ),
            )
            for d in definitions
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call: FleetCall | None = None
        async for told in self.fleet.stream(name, tool_args, tenant=self.tenant):
            if isinstance(told, ProgressReport):
                await ctx.emit(FleetProgress(fraction=told.fraction, message=told.message))
            else:
                call = told
        if call is None or call.is_error:
            raise ToolFailed(call.text if call is not None else "the call ended without an outcome")
        return call.text
