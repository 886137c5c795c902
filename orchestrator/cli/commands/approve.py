"""`toolfleet approve`: approve a call waiting for a person, as asked or with edited arguments."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command
from orchestrator.cli.commands._decisions import add_decision_arguments, decide
from workers.settings import Settings

HELP = "approve a tool call a paused invocation waits on (it then runs exactly once)"
DESCRIPTION = (
    HELP.capitalize() + ". The approval is bound to the call's arguments: with --arguments, the call "
    "runs with those, never the model's. Once no call of the invocation waits, it goes on here (with "
    "--agent) or in a `toolfleet serve` replica serving its agent."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "approve", HELP, DESCRIPTION)
    add_decision_arguments(parser)
    parser.add_argument(
        "--arguments", default=None, metavar="JSON", help="run the call with these arguments (a JSON object)"
    )
    parser.add_argument(
        "--hash", default=None, help="approve only if the call waits with arguments of this hash"
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.approvals import approve
    from orchestrator.errors import OrchestratorError

    try:
        decision = approve(args.arguments, arguments_hash=args.hash)
    except OrchestratorError as exc:
        print(f"toolfleet approve: {exc}", file=sys.stderr)
        return 2
    return decide("approve", args, settings, decision)
