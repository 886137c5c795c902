"""MCP servers as tools of a worker pool."""

from workers.mcp._server import (
    McpConnectionError,
    McpProtocolError,
    McpServer,
    McpTimeoutError,
    McpToolError,
    mcp_tool_definition,
    mcp_tools,
    result_value,
)

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
