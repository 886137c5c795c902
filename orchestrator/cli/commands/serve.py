"""`toolfleet serve`: the agents as an HTTP service, spoken to as OpenAI's chat completions."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from workers.errors import ToolfleetError
from workers.settings import Settings
from workers.telemetry.logs import notice

log = logging.getLogger(__name__)

HELP = "serve agents over HTTP (OpenAI-compatible chat completions and native invocations)"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "serve", HELP)
    parser.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:ATTRIBUTE",
        help="an agent clients name as `model`: an AiService, or a callable returning one (repeatable; "
        "also TOOLFLEET_AGENTS, comma-separated)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.server.agents import load_agents
    from orchestrator.server.app import create_app
    from orchestrator.server.process import serve_until_signalled
    from orchestrator.server.settings import SERVE_ENVIRONMENT, ServeSettings
    from orchestrator.server.ui import UiSettings
    from orchestrator.telemetry import setup_tracing, stop_tracing

    if os.getcwd() not in sys.path:
        sys.path.insert(
            0, os.getcwd()
        )  # agent modules are found from where the command runs, as a worker's tools
    try:
        serve = ServeSettings.from_env(args.agent, args.host, args.port)
        ui = UiSettings.from_env(serve.host, serve.port)
        agents = load_agents(serve.agents)
    except (ValueError, ToolfleetError) as exc:
        return refuse("serve", exc)
    if not serve.api_keys:
        notice(
            log,
            f"toolfleet serve: no API keys ({SERVE_ENVIRONMENT['api_keys']} and "
            f"{SERVE_ENVIRONMENT['api_keys_file']} give none): every request is accepted, as an operator "
            f"of the default tenant, so the service listens on {serve.host} only",
            logging.WARNING,
        )
    else:
        tenants = sorted({key.tenant for key in serve.api_keys})
        notice(log, f"toolfleet serve: API keys of tenants {', '.join(tenants)}")
    notice(log, f"toolfleet serve: agents {', '.join(agents)} on http://{serve.host}:{serve.port}/v1")
    setup_tracing("toolfleet-orchestrator", record_content=settings.trace_content)
    try:
        serve_until_signalled(create_app(agents, serve, settings, ui), serve)
    finally:
        stop_tracing()  # the last spans out, waiting a bounded time for the collector
    return 0
