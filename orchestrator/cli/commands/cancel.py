"""`toolfleet cancel`: stop a running invocation, whichever process runs it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.cli.commands._command import add_command
from workers.settings import Settings

HELP = "cancel an invocation: running (in any process or replica, through Redis) or paused"
DESCRIPTION = (
    HELP.capitalize() + ". Its running calls are abandoned as at a deadline (discarded if queued, "
    "terminated on a prefork pool, flagged for a cooperative tool on a threads pool), what it did is "
    "compensated, the journal says cancelled, and the model is not asked again. A paused invocation "
    "(waiting for approvals) is cancelled here: its waiting calls never run and what it did is compensated "
    "on its pools."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "cancel", HELP, DESCRIPTION)
    parser.add_argument("invocation", help="the invocation id (see `toolfleet runs`)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal
    from orchestrator.loop.cancellation import request_cancel
    from orchestrator.saga.states import InvocationState

    journal = open_journal(settings, "cancel")
    record = journal.invocation(args.invocation)
    if record is not None and record.state is InvocationState.PAUSED:
        return _cancel_paused(journal, settings, record.id)
    if record is not None and record.state.finished:
        print(f"toolfleet cancel: invocation {record.id} has already ended ({record.state})", file=sys.stderr)
        return 1
    heard = request_cancel(settings.redis_url, args.invocation)
    where = "" if record is not None else " (not in the journal: it may run without one)"
    print(f"cancel requested for invocation {args.invocation}{where}; {heard} process(es) listening")
    return 0


def _cancel_paused(journal: Any, settings: Settings, invocation_id: str) -> int:
    import asyncio

    from orchestrator.executors.celery import CeleryExecutor
    from orchestrator.saga.recovery import cancel_paused

    executor = CeleryExecutor(settings=settings)
    try:
        report = asyncio.run(cancel_paused(journal, executor, invocation_id))
    finally:
        executor.close()
    if report is None:
        print(f"toolfleet cancel: invocation {invocation_id} is no longer paused", file=sys.stderr)
        return 1
    undone = ", ".join(report.compensated) or "nothing to undo"
    owed = f"; compensations still owed: {', '.join(report.failed)}" if report.failed else ""
    print(f"cancelled paused invocation {invocation_id}; compensated: {undone}{owed}")
    return 1 if report.failed else 0
