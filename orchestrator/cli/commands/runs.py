"""`toolfleet runs`: recent invocations from the SQL log."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.cli.commands._command import add_command
from orchestrator.saga.states import InvocationState
from workers.settings import Settings

HELP = "list recent invocations from the SQL log"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "runs", HELP)
    parser.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    parser.add_argument("--state", choices=[state.value for state in InvocationState], default=None)
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal

    journal = open_journal(settings, "runs")
    records = journal.invocations(limit=args.limit, state=args.state)
    if not records:
        print("No invocations recorded.")
        return 0
    print(f"{'invocation':36}  {'started':19}  {'state':12}  {'calls':5}  user message")
    for record in records:
        calls = len(journal.calls(record.id))
        started = record.started_at.strftime("%Y-%m-%d %H:%M:%S")
        message = (record.user_message or "").replace("\n", " ")[:50]
        print(f"{record.id:36}  {started:19}  {record.state:12}  {calls:5}  {message}")
    return 0
