"""`toolfleet approvals`: the tool calls waiting for a person's decision."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from orchestrator.cli.commands._command import add_command
from workers.settings import Settings

HELP = "list the tool calls paused invocations wait on (tool, arguments, who asked, since when)"
DESCRIPTION = (
    HELP.capitalize() + ". Calls whose time ran out are expired first (they never run). Decide with "
    "`toolfleet approve <invocation> <call>` or `toolfleet reject <invocation> <call> --reason ...`."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "approvals", HELP, DESCRIPTION)
    parser.add_argument("--invocation", default=None, help="only the calls of this invocation")
    parser.add_argument(
        "--all", action="store_true", help="decided, expired and cancelled calls too, not only those waiting"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.approvals import ApprovalState
    from orchestrator.cli.commands._journal_source import open_journal

    journal = open_journal(settings, "approvals")
    journal.expire_approvals()
    state = None if args.all else ApprovalState.PENDING
    found = journal.approvals(args.invocation, state=state)
    now = datetime.now(UTC)
    for approval in found:
        if args.json:  # the arguments as the JSON object they are, when they are one
            print(json.dumps({**approval.to_json(), "arguments": _parsed(approval.arguments)}))
            continue
        waited = int((now - approval.requested_at).total_seconds())
        print(
            f"{approval.invocation_id} {approval.call_id} {approval.state.value}: {approval.tool}"
            f"({approval.arguments[:200]}) on {approval.pool or 'this process'}, asked by "
            f"{approval.requested_by or '?'} {waited} s ago, expires "
            f"{approval.expires_at:%Y-%m-%d %H:%M:%S %Z}"
            + (f", decided by {approval.decided_by}" if approval.decided_by else "")
            + (f": {approval.reason}" if approval.reason else "")
        )
    if not found and not args.json:
        print("no call waits for approval" if not args.all else "no approvals")
    return 0


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
