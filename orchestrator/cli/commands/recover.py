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
        "--agent",
        action="append",
        default=[],
        metavar="NAME=MODULE:ATTRIBUTE",
        help="carry on, rather than undo, the invocations of this agent (its AiService, as `toolfleet "
        "serve --agent` takes it; repeatable): they go on from their checkpoints to their answer",
    )
    parser.add_argument(
        "--tools",
        default="",
        help="modules with the tools, comma-separated (default: the live worker catalog)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._carry_on import carry_on_stale
    from orchestrator.executors.celery import CeleryExecutor
    from orchestrator.saga.journal import Journal
    from orchestrator.saga.recovery import recover
    from orchestrator.server.agents import load_agents
    from orchestrator.server.settings import parse_agents
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
    try:
        agents = load_agents(parse_agents(args.agent))
    except (ValueError, ToolfleetError) as exc:
        return refuse("recover", exc)
    journal = Journal(settings.database_url, keys=settings.journal_keys)
    carried = asyncio.run(carry_on_stale(journal, agents, settings, args.stale_after, args.invocation))
    if not agents and carried.undone:
        print(
            f"{len(carried.undone)} invocation(s) could go on from their checkpoints, but no --agent "
            "NAME=MODULE:ATTRIBUTE names their agent: they are undone"
        )
    executor = CeleryExecutor(settings=settings, tools=tools)
    try:
        reports = asyncio.run(
            recover(journal, executor, stale_after_s=args.stale_after, invocation_id=args.invocation)
        )
    finally:
        executor.close()
    for invocation_id, answer in carried.answers:
        print(f"invocation {invocation_id}:")
        print(f"  carried on   to its answer: {answer!r}")
    if not reports:
        if not carried.answers:
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
