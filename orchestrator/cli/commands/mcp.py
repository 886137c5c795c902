"""`toolfleet mcp serve`: the fleet's tools as an MCP server, over streamable HTTP or stdio."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from workers.errors import ToolfleetError
from workers.settings import Settings

HELP = "serve the fleet's tools to any MCP client"
SERVE_HELP = "an MCP server whose tools are the live catalog's (or the named pools')"
SERVE_DESCRIPTION = (
    "Serve the tools live workers serve (all pools, or --pool ...) as an MCP server: over streamable "
    "HTTP at http://HOST:PORT/mcp (--transport http, the default) or on this process' stdin and stdout "
    "(--transport stdio, for a client that starts the server itself). Each tools/call is one call on the "
    "tool's pool, with its deadline and retries; progress and cancellation reach the worker. A tool that "
    "requires approval is asked about through the client, or waits in the journal (TOOLFLEET_DATABASE_URL) "
    "for `toolfleet approve` when the client cannot be asked. Over HTTP, "
    "requests need a bearer key of TOOLFLEET_API_KEYS (or TOOLFLEET_API_KEYS_FILE) when keys are set; "
    "without keys the server listens on a loopback address only."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "mcp", HELP)
    actions = parser.add_subparsers(dest="mcp_command", metavar="ACTION")
    actions.required = True
    serve = actions.add_parser("serve", help=SERVE_HELP, description=SERVE_DESCRIPTION)
    serve.add_argument(
        "--pool", action="append", default=None, help="only this pool's tools (repeat for several)"
    )
    serve.add_argument("--transport", choices=("http", "stdio"), default="http", help="default http")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        from orchestrator.integrations.fleet import FleetClient
        from orchestrator.integrations.mcp_server import PATH, FleetMcpServer
        from orchestrator.integrations.paused_calls import PausedCalls
    except ImportError as exc:  # the SDK is the `mcp` extra's
        return refuse("mcp serve", ToolfleetError(f"the MCP SDK is missing ({exc}): install toolfleet[mcp]"))
    from orchestrator.saga.async_journal import AsyncJournal
    from orchestrator.server.settings import is_loopback
    from orchestrator.server.tenants import configured_keys

    try:
        keys = configured_keys(os.environ)
    except (ValueError, ToolfleetError) as exc:
        return refuse("mcp serve", exc)
    pools = [p.strip() for item in args.pool or [] for p in item.split(",") if p.strip()]
    fleet = FleetClient(pools=pools or None, settings=settings, origin="mcp")
    journal = AsyncJournal(settings.database_url, keys=settings.journal_keys)
    server = FleetMcpServer(fleet, paused=PausedCalls(journal))
    try:
        if args.transport == "stdio":
            asyncio.run(server.run_stdio())
            return 0
        if not keys and not is_loopback(args.host):
            return refuse(
                "mcp serve",
                ToolfleetError(
                    f"no API keys (TOOLFLEET_API_KEYS): an MCP server without keys listens on a loopback "
                    f"address only, not {args.host}"
                ),
            )
        import uvicorn

        where = "" if not pools else f" of pools {', '.join(pools)}"
        print(
            f"toolfleet mcp serve: the fleet's tools{where} on http://{args.host}:{args.port}{PATH}",
            file=sys.stderr,
        )
        uvicorn.run(server.http_app(keys), host=args.host, port=args.port, log_level="warning")
        return 0
    finally:
        fleet.close()
