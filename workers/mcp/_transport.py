"""The MCP SDK as a worker uses it (imported here only, with a clear error when it is missing), and
the transports an MCP session runs over: streamable HTTP with the endpoint's headers, and a
transport whose read side reports its end (a stdio server's process exited); and the text of a
transport's failure."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any

# The one place the MCP SDK is imported from: a clear error when it is not installed.
try:
    import anyio
    import httpx2
    from mcp import Client as Client
    from mcp import StdioServerParameters as StdioServerParameters
    from mcp.client.stdio import stdio_client as stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError as MCPError
    from mcp.shared.message import SessionMessage
    from mcp.types import CONNECTION_CLOSED as CONNECTION_CLOSED
    from mcp.types import INVALID_REQUEST as INVALID_REQUEST
    from mcp.types import REQUEST_TIMEOUT as REQUEST_TIMEOUT
    from mcp.types import CallToolResult as CallToolResult
    from mcp.types import Tool as Tool
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "MCP support needs the official MCP SDK: pip install 'toolfleet[mcp]' (mcp>=2.3)"
    ) from exc


def failure_reason(exc: BaseException) -> str:
    """The innermost useful text of a (possibly grouped) transport failure."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@contextlib.asynccontextmanager
async def http_transport(url: str, headers: Mapping[str, str] | None) -> AsyncIterator[Any]:
    if not headers:
        async with streamable_http_client(url) as streams:
            yield streams
        return
    timeout = httpx2.Timeout(30.0, read=300.0)  # the SDK's defaults for its own client
    async with (
        httpx2.AsyncClient(headers=dict(headers), timeout=timeout) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@contextlib.asynccontextmanager
async def watched(
    transport: contextlib.AbstractAsyncContextManager[Any], on_end: Callable[[], None]
) -> AsyncIterator[Any]:
    """`transport`, telling `on_end` when its read side ends (a stdio server's process exited)."""
    async with transport as (read_stream, write_stream):
        yield _EndWatchingReadStream(read_stream, on_end), write_stream


class _EndWatchingReadStream:
    """A transport's read stream that reports its end; everything else is passed through."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return item

    def __aiter__(self) -> _EndWatchingReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _EndWatchingReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
