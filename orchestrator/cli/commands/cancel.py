"""`toolfleet cancel`: stop a running invocation, whichever process runs it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command
from workers.settings import Settings

HELP = "cancel a running invocation, whichever process or replica runs it (through Redis)"
DESCRIPTION = (
    HELP.capitalize() + ". Its running calls are abandoned as at a deadline (discarded if queued, "
    "terminated on a prefork pool, flagged for a cooperative tool on a threads pool), what it did is "
    "compensated, the journal says cancelled, and the model is not asked again."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "cancel", HELP, DESCRIPTION)
    parser.add_argument("invocation", help="the invocation id (see `toolfleet runs`)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal
    from orchestrator.loop.cancellation import request_cancel

    record = open_journal(settings, "cancel").invocation(args.invocation)
    if record is not None and record.state.finished:
        print(f"toolfleet cancel: invocation {record.id} has already ended ({record.state})", file=sys.stderr)
        return 1
    heard = request_cancel(settings.redis_url, args.invocation)
    where = "" if record is not None else " (not in the journal: it may run without one)"
    print(f"cancel requested for invocation {args.invocation}{where}; {heard} process(es) listening")
    return 0
