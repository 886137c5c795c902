"""`toolfleet show`: one invocation from the SQL log: calls, outcomes, compensations, timings."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from workers.settings import Settings

HELP = "show one invocation: its calls, outcomes, compensations and timings"


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser("show", help=HELP, description=HELP)
    parser.add_argument("invocation", help="the invocation id (see `toolfleet runs`)")
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.journal import Journal

    journal = Journal(settings.database_url)
    record = journal.invocation(args.invocation)
    if record is None:
        print(
            f"toolfleet show: no invocation {args.invocation} in {settings.redacted()['database_url']}",
            file=sys.stderr,
        )
        return 2
    print(f"invocation {record.id}  [{record.state}]  owner {record.owner}")
    print(
        f"  service {record.service_name or '-'}  memory {record.memory_id}  "
        f"started {record.started_at:%Y-%m-%d %H:%M:%S}"
    )
    if record.user_message:
        print(f"  user: {record.user_message[:200]}")
    if record.error:
        print(f"  error: {record.error}")
    compensations = {c.tool_call_id: c for c in journal.compensations(record.id)}
    for call in journal.calls(record.id):
        took = (
            f"{(call.finished_at - call.started_at).total_seconds() * 1000:.0f} ms"
            if call.finished_at
            else "-"
        )
        print(f"  #{call.sequence} {call.tool}({call.arguments[:80]})")
        print(
            f"      {call.state} / {call.outcome or '-'}  pool {call.pool or '-'}  "
            f"worker {call.worker or '-'}  {took}"
        )
        if call.result:
            print(f"      -> {call.result[:160]}")
        compensation = compensations.get(call.id)
        if compensation is not None:
            detail = f": {compensation.error}" if compensation.error else ""
            why = f" ({compensation.reason})" if compensation.reason else ""
            print(
                f"      compensation {compensation.state} after {compensation.attempts} attempt(s)"
                f"{why}{detail}"
            )
        if not call.compensable:
            continue
        if call.state == "abandoned":
            print(f"      late compensation: {_late_text(settings, call)}")
        elif call.state == "failed":
            print("      nothing to undo: the call failed")
        elif call.state == "dispatched":
            print("      no outcome journaled: in flight, or its orchestrator stopped (`toolfleet recover`)")
    return 0


def _late_text(settings: Settings, call: Any) -> str:
    """What became of an abandoned call, from Redis (workers journal nothing)."""
    import redis

    from orchestrator._late import late_compensation

    client = redis.Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        late = late_compensation(client, call)
    except redis.RedisError as exc:
        return f"unknown (Redis unreachable: {exc})"
    finally:
        client.close()
    return f"{late.state}: {late.text} (task {late.task_id})"
