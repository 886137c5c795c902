"""MCP servers as tools of a worker pool."""

from workers.mcp import _server
from workers.mcp._server import *  # noqa: F403 - the names listed once in `_server.__all__`

__all__ = list(_server.__all__)
