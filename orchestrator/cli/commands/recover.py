"""`toolfleet recover`: finish the sagas an orchestrator left unfinished."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from orchestrator.cli.commands._command import add_command, refuse
from orchestrator.saga.recovery import STALE_AFTER_S, stale_after_floor
from workers.settings import Settings

HELP = "complete the compensations of invocations whose orchestrator stopped mid-saga"
DESCRIPTION = (
    HELP.capitalize() + ". Reads the SQL log (TOOLFLEET_DATABASE_URL), claims each stale "
    "invocation, settles the calls it left in flight (a success is undone, a call still queued or "
    "running is revoked and abandoned) and runs its remaining compensations on the tools' pools."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "recover", HELP, DESCRIPTION)
    parser.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="S",
        help=(
            f"seconds without heartbeat (default {STALE_AFTER_S:g}; at least three of the invocations' "
            "heartbeat intervals, TOOLFLEET_INVOCATION_HEARTBEAT_S)"
        ),
    )
    parser.add_argument("--invocation", default=None, help="recover this invocation id only")
    parser.add_argument(
        "--tools",
        default="",
        help="modules with the tools, comma-separated (default: the live worker catalog)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.executors.celery import CeleryExecutor
    from orchestrator.saga.journal import Journal
    from orchestrator.saga.recovery import recover
    from workers.errors import ToolfleetError
    from workers.runtime.worker import load_tools

    floor = stale_after_floor(settings)
    if args.stale_after < floor:
        return refuse(
            "recover",
            ValueError(
                f"--stale-after {args.stale_after:g} is below {floor:g} s, three heartbeat intervals "
                f"(TOOLFLEET_INVOCATION_HEARTBEAT_S={settings.invocation_heartbeat_s:g}): a live "
                "invocation would be taken over"
            ),
        )
    try:
        tools = load_tools(args.tools.split(","))
    except ToolfleetError as exc:
        return refuse("recover", exc)
    journal = Journal(settings.database_url, keys=settings.journal_keys)
    executor = CeleryExecutor(settings=settings, tools=tools)
    try:
        reports = asyncio.run(
            recover(journal, executor, stale_after_s=args.stale_after, invocation_id=args.invocation)
        )
    finally:
        executor.close()
    if not reports:
        print("Nothing to recover: no stale unfinished invocation.")
        return 0
    failed = 0
    for report in reports:
        print(f"invocation {report.invocation_id}:")
        if report.error is not None:
            print(f"  NOT RECOVERED  {report.error}")
            failed += 1
            continue
        for label in report.compensated:
            print(f"  compensated  {label}")
        for label in report.failed:
            print(f"  FAILED       {label}  (see `toolfleet sagas --failed`)")
        for label in report.nothing_to_undo:
            print(f"  not undone   {label}  (it failed: nothing to undo)")
        for label in report.abandoned:
            print(
                f"  abandoned    {label}  (still queued or running: revoked; undone by its worker "
                "if it finishes anyway)"
            )
        for label in report.unknown:
            print(f"  unknown      {label}  (dispatched, outcome never recorded: check it by hand)")
        failed += len(report.failed)
    return 1 if failed else 0
