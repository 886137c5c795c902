"""The fleet's tools as OpenAI Agents SDK tools (`pip install 'toolfleet[openai-agents]'`): each a
`FunctionTool` with a strict JSON schema where the tool's schema allows one, its calls run on its
pool's workers (`FleetClient`).

```python
from agents import Agent, Runner
from orchestrator.integrations.openai_agents import fleet_tools

agent = Agent(name="analyst", tools=fleet_tools(pools=["reports"]))
```

Strict schemas make every parameter required: an optional one accepts `null` instead, and a null is
not sent to the tool (its default applies). A schema that cannot be made strict (an open object) is
sent as it is. A tool's failure is told to the model as `Error: <text>` (the run goes on); progress
reports go to `on_progress(context, report)` when given.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from agents import FunctionTool
from agents.exceptions import UserError
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext

from orchestrator.integrations.fleet import FleetCall, FleetClient
from workers.calls.progress import ProgressReport
from workers.tools import ToolDefinition

__all__ = ["fleet_tools"]

Progress = Callable[[ToolContext[Any], ProgressReport], Awaitable[None] | None]


def fleet_tools(
    pools: Collection[str] | None = None,
    *,
    fleet: FleetClient | None = None,
    tenant: str | None = None,
    on_progress: Progress | None = None,
) -> list[FunctionTool]:
    """The tools live workers of `pools` (all pools: None) serve now, as `FunctionTool`s."""
    fleet = fleet or FleetClient(pools=pools, origin="openai-agents")
    return [_function_tool(fleet, d, tenant, on_progress) for d in fleet.tools()]


def _function_tool(
    fleet: FleetClient, definition: ToolDefinition, tenant: str | None, on_progress: Progress | None
) -> FunctionTool:
    name = definition.name
    given = {"type": "object", "properties": {}, **(definition.specification.parameters or {})}
    optional: set[str] = set()
    try:
        schema = copy.deepcopy(given)
        optional = set(schema["properties"]) - set(schema.get("required", []))
        for key in optional:
            schema["properties"][key] = {"anyOf": [schema["properties"][key], {"type": "null"}]}
        schema, strict = ensure_strict_json_schema(schema), True
    except UserError:
        schema, optional, strict = given, set(), False

    async def invoke(context: ToolContext[Any], arguments_json: str) -> str:
        arguments = json.loads(arguments_json) if arguments_json else {}
        arguments = {k: v for k, v in arguments.items() if not (k in optional and v is None)}
        call: FleetCall | None = None
        async for told in fleet.stream(name, arguments, tenant=tenant):
            if isinstance(told, ProgressReport):
                if on_progress is not None:
                    heard = on_progress(context, told)
                    if heard is not None:
                        await heard
            else:
                call = told
        if call is None:
            return "Error: the call ended without an outcome"
        return f"Error: {call.text}" if call.is_error else call.text

    return FunctionTool(
        name=name,
        description=definition.specification.description or name,
        params_json_schema=schema,
        on_invoke_tool=invoke,
        strict_json_schema=strict,
    )
