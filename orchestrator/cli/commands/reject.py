"""`toolfleet reject`: reject a call waiting for a person; the model reads the reason."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.cli.commands._command import add_command
from orchestrator.cli.commands._decisions import add_decision_arguments, decide
from workers.settings import Settings

HELP = "reject a tool call a paused invocation waits on (it never runs; the model reads why)"
DESCRIPTION = (
    HELP.capitalize() + ". The model reads \"The user rejected the call to '<tool>': <reason>\" and the "
    "invocation goes on (here with --agent, or in a `toolfleet serve` replica serving its agent)."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "reject", HELP, DESCRIPTION)
    add_decision_arguments(parser)
    parser.add_argument("--reason", required=True, help="why: the model reads it")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.approvals import reject

    return decide("reject", args, settings, reject(args.reason))
