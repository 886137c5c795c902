"""Small MCP servers written with the SDK's own server API (`MCPServer`), for the MCP tests.

    python tests/integration/mcp_servers.py stdio [NAME]        serve over stdin/stdout
    python tests/integration/mcp_servers.py http PORT [NAME]    serve streamable HTTP on 127.0.0.1:PORT/mcp

Every server has the same tools; NAME (default "calc") shows in their results, so a test can tell
which server answered. `build(name)` returns the server for in-process use (the unit tests).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from typing import Any

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent

# A 1x1 red PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
PIXEL_BASE64 = base64.b64encode(PIXEL_PNG).decode()


def build(name: str = "calc") -> MCPServer:
    """An MCP server named `name` with the tools the tests call."""
    server = MCPServer(name, log_level="WARNING")

    @server.tool(description="Adds two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Always fails, saying why.")
    def fail(reason: str = "no reason") -> str:
        raise ToolError(f"{name} refused: {reason}")

    @server.tool(description="Shows a picture and says what it is.", structured_output=False)
    def describe_image() -> list[Any]:
        return [Image(data=PIXEL_PNG, format="png"), "a single red pixel"]

    @server.tool(description="Labels something; the label also comes back in the result's _meta.")
    def tag(label: str) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=f"tagged {label}")],
            _meta={"label": label, "server": name},
        )

    @server.tool(description="Which server process answers.")
    def whoami() -> dict[str, Any]:
        return {"server": name, "pid": os.getpid()}

    @server.tool(description="Waits, then says how long it waited.")
    async def sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="The value of one header of the HTTP request (empty over stdio).")
    def header(name: str, ctx: Context) -> str:
        return (ctx.headers or {}).get(name.lower(), "")

    @server.tool(description="Something no model should be offered.")
    def drop_everything() -> str:
        return "dropped"

    return server


def main(argv: list[str]) -> int:
    if len(argv) >= 1 and argv[0] == "stdio":
        build(argv[1] if len(argv) > 1 else "calc").run("stdio")
        return 0
    if len(argv) >= 2 and argv[0] == "http":
        server = build(argv[2] if len(argv) > 2 else "calc")
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
