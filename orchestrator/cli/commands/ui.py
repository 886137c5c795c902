"""`toolfleet ui`: the run view alone, on the service's database and Redis."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from workers.errors import ToolfleetError
from workers.settings import Settings
from workers.telemetry.logs import notice

log = logging.getLogger(__name__)

HELP = "show invocations, their calls and compensations, and the pools on a web page (the run view)"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "ui", HELP)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8001, help="port to listen on (default 8001)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.server.ui import UiSettings, create_ui_app, serve_ui

    try:
        ui = UiSettings.from_env(args.host, args.port)
        ui.check_listening()
    except (ValueError, ToolfleetError) as exc:
        return refuse("ui", exc)
    how = (
        "basic authentication"
        if ui.basic_auth
        else "API key sign-in"
        if ui.api_keys
        else "open, loopback only"
    )
    notice(log, f"toolfleet ui: the run view on http://{ui.host}:{ui.port}/ui ({how})")
    serve_ui(create_ui_app(ui, settings), ui)
    return 0
