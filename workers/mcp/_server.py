"""MCP servers as tools of a worker pool.

Declare the servers a pool serves; `mcp_tools` connects to each (the official `mcp` SDK), lists its
tools and returns one `ToolDefinition` per tool. A worker serves them like any other tool — task
`tool.<name>`, the pool's queue, the live catalog, deadlines, Flower — while the MCP client session
lives in the worker process, so the orchestrator needs neither the SDK nor the server.

```python
# my_pool/tools.py, served by `toolfleet worker --pool files --tools my_pool.tools`
from workers.mcp import McpServer, mcp_tools

tools = mcp_tools([
    McpServer("fs", command="npx", args=["-y", "@modelcontextprotocol/server-filesystem", "/data"],
              pool="files", prefix="fs_", exclude=["write_file"], always_visible=["read_file"]),
    McpServer("search", url="http://search:8000/mcp", pool="files", timeout_s=10,
              meta_as_attributes=True),
])
```

What the model sees of a tool: its name (with the server's `prefix`), description and input schema,
as the server lists them. Its arguments go to the server as the model wrote them; the server
validates them. Results: text parts become text, images `ImageContent`, several parts a list of
contents, structured content the result object; an error result (`isError`) fails the call with the
server's text, visible to the model (`McpToolError`); the result's `_meta` becomes the result's
attributes with `meta_as_attributes`. A session that ends (the server restarted, its process died)
is reopened and calls wait for it within their timeout; a call in flight when its connection ends
fails with `McpConnectionError` (retried only for servers declared with `retries`).

The tools are listed once, when the worker starts (when this module is imported): a tool the server
adds later is served after a restart of the worker.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workers.calls.results import ToolExecutionResult
from workers.contents import Content, Image, ImageContent, TextContent
from workers.errors import ToolDefinitionError, ToolErrorVisibleToLlm, ToolfleetError
from workers.mcp._session import (
    McpConnectionError,
    McpEndpoint,
    McpProtocolError,
    McpSessions,
    McpTimeoutError,
    sessions,
)
from workers.tools import ToolDefinition, ToolOptions
from workers.tools.specification import SearchBehavior, ToolSpecification

try:
    from mcp import types as mcp_types
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError("MCP support needs the official MCP SDK: pip install 'toolfleet[mcp]'") from exc

__all__ = [
    "McpConnectionError",
    "McpProtocolError",
    "McpServer",
    "McpTimeoutError",
    "McpToolError",
    "mcp_tool_definition",
    "mcp_tools",
    "result_value",
]

_POOL_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_RESERVED_META = "io.modelcontextprotocol/"  # keys the SDK stamps on every result (server info, ...)
_STARTUP_RETRY_S = 0.5


class McpToolError(ToolErrorVisibleToLlm, ToolfleetError):
    """An MCP tool returned an error result (`isError`); its text is what the model sees."""


@dataclass(frozen=True)
class McpServer:
    """One MCP server whose tools a pool serves: a stdio `command`, or a streamable HTTP `url`.

    A stdio server runs as a subprocess of the worker (of each prefork child), in `cwd`, with the
    SDK's safe environment variables (PATH, HOME, ...) plus `env`. `headers` go with every HTTP
    request (authorization, for one).

    `prefix` is put before every tool name (to keep servers' names apart); `include` (names as the
    server lists them; `None` for all) and `exclude` choose the tools exposed; `always_visible`
    names tools the model sees even when tool search is on. `timeout_s` bounds each call (it is
    also the tools' deadline) and the listing at start. `retries` retries a call that failed on a
    lost connection or a timeout (only for tools safe to run twice: a call whose connection ended
    may have run). `requires_approval` names tools (as the server lists them) whose every call waits
    for a person's approval; `True` marks them all. `meta_as_attributes` keeps a result's `_meta` as
    the result's attributes.
    `in_process` serves an `MCPServer` object of this process instead (tests, or an app that
    already builds one).
    """

    name: str
    command: str | None = field(default=None, kw_only=True)
    args: Sequence[str] = field(default=(), kw_only=True)
    env: Mapping[str, str] | None = field(default=None, kw_only=True)
    cwd: str | None = field(default=None, kw_only=True)
    url: str | None = field(default=None, kw_only=True)
    headers: Mapping[str, str] | None = field(default=None, kw_only=True)
    in_process: Any = field(default=None, kw_only=True)
    pool: str = field(default="default", kw_only=True)
    prefix: str = field(default="", kw_only=True)
    include: Collection[str] | None = field(default=None, kw_only=True)
    exclude: Collection[str] = field(default=(), kw_only=True)
    always_visible: Collection[str] = field(default=(), kw_only=True)
    timeout_s: float = field(default=30.0, kw_only=True)
    retries: int = field(default=0, kw_only=True)
    meta_as_attributes: bool = field(default=False, kw_only=True)
    requires_approval: bool | Collection[str] = field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        where = f"McpServer('{self.name}')"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ToolDefinitionError("McpServer needs a non-blank name")
        given = [k for k in ("command", "url", "in_process") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ToolDefinitionError(f"{where} needs exactly one of command=, url= or in_process=")
        if not _POOL_NAME.fullmatch(self.pool):
            raise ToolDefinitionError(f"{where}: pool must be letters, digits, '_', '.', '-': {self.pool!r}")
        if not self.timeout_s > 0:
            raise ToolDefinitionError(f"{where}: timeout_s must be positive seconds, got {self.timeout_s}")
        if self.retries < 0:
            raise ToolDefinitionError(f"{where}: retries must be 0 or more, got {self.retries}")
        if isinstance(self.args, str) or any(isinstance(v, str) for v in (self.include, self.exclude)):
            raise ToolDefinitionError(f"{where}: args, include and exclude take lists of strings")
        if isinstance(self.always_visible, str):
            raise ToolDefinitionError(f"{where}: always_visible takes a list of tool names")
        if isinstance(self.requires_approval, str):
            raise ToolDefinitionError(f"{where}: requires_approval takes True or a list of tool names")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "include", None if self.include is None else frozenset(self.include))
        object.__setattr__(self, "exclude", frozenset(self.exclude))
        object.__setattr__(self, "always_visible", frozenset(self.always_visible))
        if not isinstance(self.requires_approval, bool):
            object.__setattr__(self, "requires_approval", frozenset(self.requires_approval))

    def approval_required(self, tool_name: str) -> bool:
        """Whether calls of the server's tool `tool_name` wait for a person's approval."""
        marked = self.requires_approval
        return marked if isinstance(marked, bool) else tool_name in marked

    def endpoint(self) -> McpEndpoint:
        """How the worker reaches the server."""
        return McpEndpoint(
            name=self.name,
            command=self.command,
            args=tuple(self.args),
            env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd,
            url=self.url,
            headers=dict(self.headers) if self.headers is not None else None,
            in_process=self.in_process,
        )

    def exposes(self, tool_name: str) -> bool:
        """Whether `include` and `exclude` let the server's tool `tool_name` through."""
        return (self.include is None or tool_name in self.include) and tool_name not in self.exclude


def mcp_tools(servers: Sequence[McpServer], *, using: McpSessions | None = None) -> list[ToolDefinition]:
    """Connect to every server, list its tools and return their definitions, ready for a registry.

    Waits up to each server's `timeout_s` for it to become reachable. Raises `ToolDefinitionError`
    when a server cannot be listed, a name in `include` or `always_visible` is not one of its
    tools, or two tools end up with the same name.
    """
    held = using or sessions()
    definitions: list[ToolDefinition] = []
    seen: dict[str, str] = {}
    for server in servers:
        try:
            held.add(server.endpoint())
        except ValueError as exc:
            raise ToolDefinitionError(str(exc)) from None
        listed = _list_tools(held, server)
        names = {tool.name for tool in listed}
        approval = () if isinstance(server.requires_approval, bool) else server.requires_approval
        checked = (
            ("include", server.include or ()),
            ("always_visible", server.always_visible),
            ("requires_approval", approval),
        )
        for option, wanted in checked:
            unknown = sorted(set(wanted) - names)
            if unknown:
                raise ToolDefinitionError(
                    f"McpServer('{server.name}', {option}=...) names tools the server does not have: "
                    f"{', '.join(unknown)} (it has: {', '.join(sorted(names))})"
                )
        for tool in listed:
            if not server.exposes(tool.name):
                continue
            definition = mcp_tool_definition(server, tool, held)
            if definition.name in seen:
                raise ToolDefinitionError(
                    f"Tool '{definition.name}' of MCP server '{server.name}' clashes with the one of "
                    f"'{seen[definition.name]}': give one of the servers a prefix"
                )
            seen[definition.name] = server.name
            definitions.append(definition)
    return definitions


def _list_tools(held: McpSessions, server: McpServer) -> list[mcp_types.Tool]:
    deadline = time.monotonic() + server.timeout_s
    while True:
        try:
            return held.list_tools(server.name, max(0.1, deadline - time.monotonic()))
        except McpConnectionError as exc:
            if time.monotonic() + _STARTUP_RETRY_S >= deadline:
                raise ToolDefinitionError(
                    f"Cannot list the tools of MCP server '{server.name}': {exc}"
                ) from exc
            time.sleep(_STARTUP_RETRY_S)
        except (McpTimeoutError, McpProtocolError) as exc:
            raise ToolDefinitionError(f"Cannot list the tools of MCP server '{server.name}': {exc}") from exc


def mcp_tool_definition(
    server: McpServer, tool: mcp_types.Tool, held: McpSessions | None = None
) -> ToolDefinition:
    """The definition of one listed tool of `server`: calling it calls the MCP tool."""
    name = server.prefix + tool.name
    description = tool.description or tool.title or (tool.annotations.title if tool.annotations else None)
    search = (
        SearchBehavior.ALWAYS_VISIBLE if tool.name in server.always_visible else SearchBehavior.SEARCHABLE
    )
    options = ToolOptions(
        name=name,
        description=description,
        search_behavior=search,
        pool=server.pool,
        timeout=server.timeout_s,
        retries=server.retries,
        requires_approval=server.approval_required(tool.name),
    )
    return ToolDefinition(
        specification=ToolSpecification(name=name, description=description, parameters=_parameters(tool)),
        function=_caller(server, tool, held or sessions()),
        parameters=(),
        options=options,
        returns_none=False,
        is_async=False,
        raw_arguments=True,
    )


def _parameters(tool: mcp_types.Tool) -> dict[str, Any] | None:
    """The tool's input schema, or `None` when it takes no arguments (no properties, no constraints)."""
    schema = dict(tool.input_schema or {})
    if not schema:
        return None
    shape = {k: v for k, v in schema.items() if k not in ("type", "title", "description", "$schema")}
    if shape in ({}, {"properties": {}}) and schema.get("type", "object") == "object":
        return None
    return schema


def _caller(server: McpServer, tool: mcp_types.Tool, held: McpSessions) -> Callable[..., Any]:
    schema = tool.input_schema or {}
    tool_name = tool.name

    def call(arguments: dict[str, Any]) -> Any:
        result = held.call(server.name, tool_name, _without_strict_nulls(arguments, schema), server.timeout_s)
        return result_value(result, meta_as_attributes=server.meta_as_attributes)

    call.__name__ = call.__qualname__ = server.prefix + tool_name
    call.__doc__ = tool.description
    return call


def _without_strict_nulls(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Drop `null`s the model sent for optional properties whose schema does not allow null.

    Strict tool rendering (OpenAI) makes every optional property nullable, so a model may send
    `null` for "not given"; the MCP server would reject it as the wrong type.
    """
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    required = set(schema.get("required") or ())
    return {
        key: value
        for key, value in arguments.items()
        if value is not None or key in required or _allows_null(properties.get(key))
    }


def _allows_null(schema: Any) -> bool:
    if not isinstance(schema, Mapping) or not schema:
        return True  # unknown property or anything goes: leave it to the server
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "enum" in schema and None in schema["enum"]:
        return True
    options = [*schema.get("anyOf", ()), *schema.get("oneOf", ())]
    return any(_allows_null(option) for option in options if isinstance(option, Mapping))


def result_value(result: mcp_types.CallToolResult, *, meta_as_attributes: bool = False) -> Any:
    """What a tool function returns for an MCP tool result; an error result raises `McpToolError`."""
    contents = [part for block in result.content for part in _contents(block)]
    texts = [part.text for part in contents if isinstance(part, TextContent)]
    if result.is_error:
        message = "\n".join(texts).strip()
        raise McpToolError(message or "The MCP tool reported an error without a message")
    attributes = _attributes(result.meta) if meta_as_attributes else {}
    if any(isinstance(part, ImageContent) for part in contents):
        return ToolExecutionResult(contents=contents, attributes=attributes)
    if result.structured_content is not None:
        text = "\n".join(texts) if texts else None
        return ToolExecutionResult(
            result_object=result.structured_content, result_text=text, attributes=attributes
        )
    if len(contents) > 1:
        return ToolExecutionResult(contents=contents, attributes=attributes)
    if len(texts) == 1:
        return ToolExecutionResult(result_object=texts[0], attributes=attributes)
    return ToolExecutionResult(result_text="", attributes=attributes)


def _attributes(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: value for key, value in (meta or {}).items() if not key.startswith(_RESERVED_META)}


def _contents(block: mcp_types.ContentBlock) -> list[Content]:
    """One MCP content block as toolfleet contents: text and images carried over, others described."""
    if isinstance(block, mcp_types.TextContent):
        return [TextContent(block.text)]
    if isinstance(block, mcp_types.ImageContent):
        return [ImageContent(Image(base64_data=block.data, mime_type=block.mime_type))]
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return [TextContent(resource.text)]
        if (resource.mime_type or "").startswith("image/"):
            return [ImageContent(Image(base64_data=resource.blob, mime_type=resource.mime_type))]
        return [TextContent(_describe({"resource": resource.uri, "mime_type": resource.mime_type}))]
    if isinstance(block, mcp_types.ResourceLink):
        link = {"resource_link": block.uri, "name": block.name, "description": block.description}
        return [TextContent(_describe({**link, "mime_type": block.mime_type}))]
    if isinstance(block, mcp_types.AudioContent):
        return [TextContent(_describe({"audio": block.mime_type, "base64_characters": len(block.data)}))]
    return []  # pragma: no cover - a content type newer than this code


def _describe(fields: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in fields.items() if v is not None}, ensure_ascii=False)
