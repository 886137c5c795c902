"""`toolfleet sagas`: compensations from the SQL log, e.g. those that need a person."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from orchestrator.cli.commands._command import add_command
from orchestrator.saga.recovery import STALE_AFTER_S
from orchestrator.saga.states import CompensationState
from workers.redis_client import connect as connect_redis
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.saga.journal import CallRecord, CompensationRecord, Journal

HELP = "list compensations from the SQL log (--failed: those owed, that need recover or a person)"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "sagas", HELP)
    parser.add_argument("--failed", action="store_true", help="only compensations that kept failing")
    parser.add_argument("--invocation", default=None, help="only this invocation's compensations")
    parser.add_argument(
        "--stale-after",
        type=float,
        default=STALE_AFTER_S,
        metavar="S",
        help="with --failed, also list compensations never finished by an invocation that has not "
        f"beaten for S seconds (default {STALE_AFTER_S:g}, as `toolfleet recover`)",
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal

    journal = open_journal(settings, "sagas")
    rows = journal.compensations(args.invocation, state=CompensationState.FAILED if args.failed else None)
    if args.failed:
        rows = sorted(rows + _unfinished(journal, args.invocation, args.stale_after), key=lambda r: r.id)
    late = _late_rows(settings, journal.abandoned_calls(args.invocation), failed_only=args.failed)
    if not rows and not late:
        print("No failed compensations." if args.failed else "No compensations.")
        return 0
    calls: dict[str, dict[int, CallRecord]] = {}
    print(
        f"{'invocation':36}  {'call':16}  {'tool(arguments)':{_CALL_WIDTH}}  {'state':9}  {'tries':5}  "
        f"{'updated':19}  error"
    )
    for row in rows:
        if row.invocation_id not in calls:
            calls[row.invocation_id] = {c.id: c for c in journal.calls(row.invocation_id)}
        call = calls[row.invocation_id].get(row.tool_call_id)
        updated = row.updated_at.strftime("%Y-%m-%d %H:%M:%S")
        stuck = args.failed and row.state != CompensationState.FAILED  # owed by an invocation that stopped
        error = (row.error or (_NOT_FINISHED if stuck else "")).replace("\n", " ")[:80]
        print(
            f"{row.invocation_id:36}  {_call_id(call):16}  {_call_text(row.tool, call):{_CALL_WIDTH}}  "
            f"{row.state:9}  {row.attempts:5}  {updated:19}  {error}"
        )
    for line in late:
        print(line)
    return 0


_NOT_FINISHED = "not finished; its invocation stopped (`toolfleet recover`)"

_CALL_WIDTH = 48  # `tool(arguments)`, cut with an ellipsis past this


def _call_id(call: CallRecord | None) -> str:
    return _bounded(call.call_id or "-", 16) if call is not None else "?"


def _call_text(tool: str, call: CallRecord | None) -> str:
    """The call a compensation undoes, as `tool(arguments)` on one bounded line."""
    arguments = " ".join(call.arguments.split()) if call is not None else "?"
    return _bounded(f"{tool}({arguments})", _CALL_WIDTH)


def _bounded(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _unfinished(
    journal: Journal, invocation_id: str | None, stale_after_s: float
) -> list[CompensationRecord]:
    """Compensations left pending or running by an invocation whose owner stopped beating: they are
    owed as much as failed ones (`toolfleet recover` runs them)."""
    rows: list[CompensationRecord] = []
    for record in journal.unfinished(stale_after_s):
        if invocation_id is None or record.id == invocation_id:
            rows += [
                c
                for c in journal.compensations(record.id)
                if c.state in (CompensationState.PENDING, CompensationState.RUNNING)
            ]
    return rows


def _late_rows(settings: Settings, calls: list[Any], *, failed_only: bool) -> list[str]:
    """Compensations that workers enqueued for calls finished after their deadline (state in Redis)."""
    if not calls:
        return []
    import redis

    from orchestrator.saga import LateState, late_compensation

    client = connect_redis(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
    lines = []
    try:
        for call in calls:
            try:
                late = late_compensation(client, call)
            except redis.RedisError as exc:
                lines.append(f"(the late compensations of {len(calls)} abandoned call(s): Redis: {exc})")
                break
            if late.state == LateState.NOT_FINISHED or (failed_only and late.state != LateState.FAILED):
                continue
            text = f"late, by its worker: {late.text}".replace("\n", " ")[:80]
            lines.append(
                f"{call.invocation_id:36}  {_call_id(call):16}  {_call_text(call.tool, call):{_CALL_WIDTH}}  "
                f"{late.state:9}  {'-':5}  {'-':19}  {text}"
            )
    finally:
        client.close()
    return lines
