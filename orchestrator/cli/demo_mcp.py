"""The demo's last story: the fleet from another agent. `toolfleet mcp serve --pool io` runs as a process
of its own, and an MCP client (the official SDK, as an IDE or another framework's agent would use it)
lists the pool's tools and calls the fare search, hearing each airline it asks as MCP progress."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO

import httpx

from orchestrator.errors import OrchestratorError

__all__ = ["MCP_POOL", "MCP_STORY", "mcp_story", "running_gateway"]

MCP_POOL = "io"
MCP_STORY = "Any agent: an MCP client calls the io pool's fare search"
START_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_gateway(
    env: Mapping[str, str], log_path: Path, pools: Sequence[str], *, port: int | None = None
) -> Iterator[str]:
    """`toolfleet mcp serve --pool P ...` in a process (and session) of its own with the environment
    `env`, once it answers; its URL. Stopped (SIGTERM, then SIGKILL) when the block ends."""
    port = port or _free_port()
    command = [sys.executable, "-m", "orchestrator.cli", "mcp", "serve", "--port", str(port)]
    command += [part for pool in pools for part in ("--pool", pool)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise OrchestratorError(f"toolfleet mcp serve stopped: {log_path.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.post(url, json={}, timeout=2).status_code < 500:  # up (401: asking for a key)
                    break
            if time.monotonic() > deadline:
                raise OrchestratorError(f"toolfleet mcp serve did not answer in {START_TIMEOUT_S:g} s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _client(out: TextIO, url: str) -> None:
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        out.write(f"  MCP progress {progress:.0%}: {message}\n")

    async with (
        create_mcp_http_client() as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = (await session.list_tools()).tools
        out.write(f"  tools/list: {', '.join(sorted(t.name for t in tools))}\n")
        out.write('  tools/call search_fares {"destination": "Lisbon"}\n')
        result = await session.call_tool("search_fares", {"destination": "Lisbon"}, progress_callback=heard)
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        out.write(f"  {'Error' if result.is_error else 'Result'}: {text}\n")


def mcp_story(out: TextIO, environment: Mapping[str, str], scratch: str) -> None:
    """Run the story: the gateway started, the client's calls shown, the gateway stopped."""
    began = time.monotonic()
    env = {**os.environ, **environment}
    for name in ("TOOLFLEET_API_KEYS", "TOOLFLEET_API_KEYS_FILE"):  # no keys: it listens on loopback
        env.pop(name, None)
    with running_gateway(env, Path(scratch) / "mcp-gateway.log", [MCP_POOL]) as url:
        out.write(f"  toolfleet mcp serve --pool {MCP_POOL}: {url}\n")
        asyncio.run(_client(out, url))
    out.write(f"  ({time.monotonic() - began:.2f} s, the gateway started and stopped included)\n\n")
