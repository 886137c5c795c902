"""MCP client sessions held by a worker process, on one background thread with its own event loop.

Celery runs tool calls on pool threads (or prefork children); MCP clients are async and keep a
connection open. `McpSessions` bridges the two: each server gets a long-lived task on a private event
loop that opens the SDK's `Client` and keeps it open, reconnecting with backoff whenever the
connection ends (the server restarted, its process died, the network dropped). `call()` and
`list_tools()` are thread-safe and blocking, each bounded by a timeout.

A call that was certainly never delivered (its session had already been seen to end, or an HTTP
server answered "session terminated" after a restart) waits for the new connection and is sent
there; a call whose connection ends while it is in flight fails with `McpConnectionError` (a
`ConnectionError`, so transient for tools declared with retries), since the server may have run it.
A stdio server's exit is seen at once (its stdout ends), so a session is reopened before the next
call unless that call races the exit.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from workers.calls.retry import backoff_s
from workers.errors import McpConnectionError, McpProtocolError, McpTimeoutError
from workers.mcp._transport import (
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    REQUEST_TIMEOUT,
    CallToolResult,
    Client,
    MCPError,
    StdioServerParameters,
    Tool,
    failure_reason,
    http_transport,
    stdio_client,
    watched,
)

__all__ = [
    "McpConnectionError",
    "McpEndpoint",
    "McpProtocolError",
    "McpSessions",
    "McpTimeoutError",
    "sessions",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

RECONNECT_BACKOFF_S = 0.25
RECONNECT_BACKOFF_MAX_S = 5.0
_SESSION_TERMINATED = "Session terminated"  # the HTTP client's text for a 404 on a known session
_CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class McpEndpoint:
    """How to reach one MCP server: a command speaking stdio, or a streamable HTTP URL."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] | None = None
    in_process: Any = None  # an `MCPServer` (or low-level `Server`) of this process

    def __post_init__(self) -> None:
        if sum(v is not None for v in (self.command, self.url, self.in_process)) != 1:
            raise ValueError(
                f"MCP server '{self.name}' needs exactly one of command (stdio), url (HTTP) or in_process"
            )

    def describe(self) -> str:
        if self.url is not None:
            return self.url
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return "in process"


class McpSessions:
    """Client sessions to MCP servers, one per server, on a background thread of this process.

    The thread, its loop and the connections are created on first use, and again in a forked child
    (a prefork pool's children each hold their own connections).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._endpoints: dict[str, McpEndpoint] = {}
        self._connections: dict[str, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=functools.partial(_forget_in_child, weakref.ref(self)))

    def _forget(self) -> None:
        """In a forked child: the parent's thread, loop and sessions are not here; start afresh."""
        self._lock = threading.Lock()
        self._loop, self._thread, self._connections = None, None, {}

    def add(self, endpoint: McpEndpoint) -> None:
        """Declare a server; the same name again must describe the same server."""
        with self._lock:
            known = self._endpoints.get(endpoint.name)
            if known is not None and known != endpoint:
                raise ValueError(f"Two different MCP servers are named '{endpoint.name}'")
            self._endpoints[endpoint.name] = endpoint

    def list_tools(self, server: str, timeout_s: float) -> list[Tool]:
        """Every tool the server lists now (all pages), connecting first if needed."""
        return self._run(server, lambda connection: connection.list_tools(timeout_s), timeout_s)

    def call(self, server: str, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallToolResult:
        """Call one tool and return its result (an `is_error` result is returned, not raised).

        Raises `McpConnectionError`, `McpTimeoutError` or `McpProtocolError`.
        """
        return self._run(server, lambda connection: connection.call(tool, arguments, timeout_s), timeout_s)

    def close(self, timeout_s: float = _CLOSE_TIMEOUT_S) -> None:
        """Close every session (stopping stdio servers) and the background thread."""
        with self._lock:
            loop, thread, connections = self._loop, self._thread, list(self._connections.values())
            if loop is None or thread is None:
                return
            self._loop, self._thread, self._connections = None, None, {}

        async def stop_all() -> None:
            await asyncio.gather(*(c.stop() for c in connections), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("MCP sessions did not close within %.1f s: %r", timeout_s, exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=timeout_s)
        if not thread.is_alive():
            loop.close()

    # -- internals ---------------------------------------------------------------------------------

    def _run(self, server: str, work: Callable[[_Connection], Coroutine[Any, Any, T]], timeout_s: float) -> T:
        loop, connection = self._connection(server)
        future = asyncio.run_coroutine_threadsafe(work(connection), loop)
        try:
            # The coroutine bounds itself by `timeout_s`; the margin lets it report why it stopped.
            return future.result(timeout_s + 2.0)
        except McpTimeoutError:  # the coroutine's own verdict (a TimeoutError too, so caught first)
            raise
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise McpTimeoutError(f"MCP server '{server}' did not answer within {timeout_s:g} s") from None

    def _connection(self, server: str) -> tuple[asyncio.AbstractEventLoop, _Connection]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="toolfleet-mcp", daemon=True
                )
                self._thread.start()
            loop = self._loop
            connection = self._connections.get(server)
            if connection is None:
                endpoint = self._endpoints.get(server)
                if endpoint is None:
                    raise ValueError(f"Unknown MCP server '{server}'")
                connection = self._connections[server] = _Connection(endpoint)
                loop.call_soon_threadsafe(connection.start)
            return loop, connection


class _Connection:
    """One server's session, kept open (and reopened) by a task on the sessions' loop."""

    def __init__(self, endpoint: McpEndpoint) -> None:
        self.endpoint = endpoint
        self._client: Client | None = None
        self._generation = 0
        self._ended = asyncio.Event()  # the current session is over: drop it and connect again
        self._wanted = asyncio.Event()  # a call waits for a session: cut the backoff short
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        # The outcome of the next connection attempt: None when it connected, else why it failed.
        self._attempt: asyncio.Future[McpConnectionError | None] | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._attempt = loop.create_future()
        self._task = loop.create_task(self._keep_connected())

    async def stop(self) -> None:
        self._stopping = True
        self._ended.set()
        if self._task is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._task, _CLOSE_TIMEOUT_S)

    async def list_tools(self, timeout_s: float) -> list[Tool]:
        try:
            async with asyncio.timeout(timeout_s):
                client, _ = await self._session()
                tools: list[Tool] = []
                cursor: str | None = None
                for _ in range(1000):  # a server whose pages never end must not hang the worker's start
                    page = await self._request(client, client.list_tools(cursor=cursor, cache_mode="bypass"))
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                return tools
        except McpTimeoutError:
            raise
        except TimeoutError:
            raise McpTimeoutError(
                f"MCP server '{self.endpoint.name}' did not list its tools within {timeout_s:g} s"
            ) from None

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallToolResult:
        try:
            async with asyncio.timeout(timeout_s):
                client, generation = await self._session()
                try:
                    return await self._request(client, client.call_tool(tool, arguments))
                except McpProtocolError as exc:
                    if exc.code != INVALID_REQUEST or _SESSION_TERMINATED not in str(exc):
                        raise
                # An HTTP server that restarted forgot our session and refused the call unread:
                # send it again, once, on a new session.
                self._end(generation)
                client, _ = await self._session()
                return await self._request(client, client.call_tool(tool, arguments))
        except McpTimeoutError:
            raise
        except TimeoutError:
            raise McpTimeoutError(
                f"MCP tool '{tool}' of server '{self.endpoint.name}' did not answer within {timeout_s:g} s"
            ) from None

    async def _session(self) -> tuple[Client, int]:
        """The live session; without one, wait for the next connection attempt and fail with it."""
        while True:
            client = self._client
            if client is not None and not self._ended.is_set():
                return client, self._generation
            assert self._attempt is not None
            self._wanted.set()
            error = await asyncio.shield(self._attempt)
            if error is not None:
                raise error

    async def _request(self, client: Client, request: Awaitable[T]) -> T:
        generation = self._generation
        try:
            return await request
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._end(generation)
                raise McpConnectionError(
                    f"Connection to MCP server '{self.endpoint.name}' ended during the request"
                ) from exc
            if exc.code == REQUEST_TIMEOUT:
                raise McpTimeoutError(f"MCP server '{self.endpoint.name}': {exc.message}") from exc
            raise McpProtocolError(f"MCP server '{self.endpoint.name}': {exc.message}", exc.code) from exc
        except (RuntimeError, ValueError) as exc:  # results the client rejects (output schema, claims)
            raise McpProtocolError(f"MCP server '{self.endpoint.name}': {exc}") from exc

    def _end(self, generation: int) -> None:
        """The session of `generation` is over (a newer one may already be open)."""
        if generation == self._generation:
            self._ended.set()

    def _settle_attempt(self, error: McpConnectionError | None) -> None:
        attempt = self._attempt
        self._attempt = asyncio.get_running_loop().create_future()
        if attempt is not None and not attempt.done():
            attempt.set_result(error)

    async def _keep_connected(self) -> None:
        failures = 0
        while not self._stopping:
            connected = False
            try:
                async with Client(self._target()) as client:
                    connected = True
                    self._generation += 1
                    self._client = client
                    self._ended.clear()
                    failures = 0
                    self._settle_attempt(None)
                    log.info(
                        "connected to MCP server '%s' (%s)", self.endpoint.name, self.endpoint.describe()
                    )
                    await self._ended.wait()
            except Exception as exc:  # the transport failed (often an ExceptionGroup from its task group)
                reason = failure_reason(exc)
                log.warning("MCP server '%s' (%s): %s", self.endpoint.name, self.endpoint.describe(), reason)
                if not connected:  # a session that failed later leaves its waiters to the next attempt
                    self._settle_attempt(
                        McpConnectionError(
                            f"MCP server '{self.endpoint.name}' ({self.endpoint.describe()}) "
                            f"is not reachable: {reason}"
                        )
                    )
            finally:
                self._client = None
            if self._stopping:
                break
            # Back off between attempts, but no longer than the first step once a call is waiting.
            self._wanted.clear()
            delay = backoff_s(failures, RECONNECT_BACKOFF_S, RECONNECT_BACKOFF_MAX_S)
            failures += 1
            await asyncio.sleep(min(delay, RECONNECT_BACKOFF_S))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), max(0.0, delay - RECONNECT_BACKOFF_S))
        self._settle_attempt(McpConnectionError(f"MCP server '{self.endpoint.name}': sessions closed"))

    def _target(self) -> Any:
        """What `Client` connects to: a transport that reports its end, or the in-process server."""
        endpoint = self.endpoint
        if endpoint.in_process is not None:
            return endpoint.in_process
        on_end = functools.partial(self._end, self._generation + 1)  # the session it will carry
        if endpoint.url is not None:
            return watched(http_transport(endpoint.url, endpoint.headers), on_end)
        assert endpoint.command is not None
        parameters = StdioServerParameters(
            command=endpoint.command,
            args=list(endpoint.args),
            env=dict(endpoint.env) if endpoint.env is not None else None,
            cwd=endpoint.cwd,
        )
        return watched(stdio_client(parameters, errlog=sys.__stderr__ or sys.stderr), on_end)


def _forget_in_child(ref: weakref.ref[McpSessions]) -> None:
    sessions = ref()
    if sessions is not None:
        sessions._forget()


_sessions = McpSessions()
atexit.register(_sessions.close)


def sessions() -> McpSessions:
    """The sessions of this process."""
    return _sessions
