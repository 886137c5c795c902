"""A worker module serving two MCP servers' tools on pool `mcp` (tests/integration/test_mcp.py).

`calc` runs as a stdio subprocess of the worker; `web` is a streamable HTTP server the test starts.
The test sets where they are: `TOOLFLEET_TEST_MCP_URL` (required) and, optionally,
`TOOLFLEET_TEST_MCP_COMMAND` (default: this Python running tests/integration/mcp_servers.py), and
may change the pool with `TOOLFLEET_TEST_MCP_POOL` (default `mcp`).
Importing the module connects to both servers and lists their tools; the module-level list of
definitions is what `toolfleet worker --tools tests.integration.mcp_tools` serves.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from workers.mcp import McpServer, mcp_tools

POOL = os.environ.get("TOOLFLEET_TEST_MCP_POOL", "mcp")
SERVERS_SCRIPT = str(Path(__file__).with_name("mcp_servers.py"))
STDIO_COMMAND = shlex.split(
    os.environ.get("TOOLFLEET_TEST_MCP_COMMAND") or f"{shlex.quote(sys.executable)} {SERVERS_SCRIPT} stdio"
)

servers = [
    McpServer(
        "calc",
        command=STDIO_COMMAND[0],
        args=[*STDIO_COMMAND[1:], "calc"],
        pool=POOL,
        prefix="calc_",
        exclude=["drop_everything"],
        always_visible=["add"],
        timeout_s=10,
        meta_as_attributes=True,
    ),
    McpServer(
        "web",
        url=os.environ["TOOLFLEET_TEST_MCP_URL"],
        pool=POOL,
        prefix="web_",
        include=["add", "fail", "sleep", "whoami", "header"],
        headers={"X-Toolfleet-Test": "sent by the worker"},
        timeout_s=3,
    ),
]

tools = mcp_tools(servers)
