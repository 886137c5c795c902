"""`toolfleet sagas`: compensations from the SQL log, e.g. those that need a person."""

from __future__ import annotations

import argparse
from typing import Any

from workers.settings import Settings

HELP = "list compensations from the SQL log (--failed: those that need a person)"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser("sagas", help=HELP, description=HELP)
    parser.add_argument("--failed", action="store_true", help="only compensations that kept failing")
    parser.add_argument("--invocation", default=None, help="only this invocation's compensations")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.journal import Journal

    journal = Journal(settings.database_url)
    rows = journal.compensations(args.invocation, state="failed" if args.failed else None)
    if not rows:
        print("No failed compensations." if args.failed else "No compensations.")
        return 0
    print(f"{'invocation':36}  {'tool':20}  {'state':9}  {'tries':5}  {'updated':19}  error")
    for row in rows:
        updated = row.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        error = (row.error or "").replace("\n", " ")[:80]
        print(
            f"{row.invocation_id:36}  {row.tool[:20]:20}  {row.state:9}  {row.attempts:5}  "
            f"{updated:19}  {error}"
        )
    return 0
