"""`toolfleet show`: one invocation from the SQL log: calls, outcomes, compensations, timings."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from orchestrator.cli.commands._command import add_command
from orchestrator.saga.states import CallState, InvocationState
from workers.redis_client import connect as connect_redis
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.saga.journal import CallRecord, CompensationRecord, InvocationRecord, Journal

HELP = "show one invocation: its calls, outcomes, compensations and timings"
DESCRIPTION = (
    HELP.capitalize() + ": what the user asked, the calls of each model turn, which failed "
    "call set off a rollback, and the final answer."
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = add_command(commands, "show", HELP, DESCRIPTION)
    parser.add_argument(
        "invocation", help="the invocation id, or a unique beginning of it (see `toolfleet runs`)"
    )
    return parser


def run(args: argparse.Namespace, settings: Settings) -> int:
    from orchestrator.cli.commands._journal_source import open_journal
    from orchestrator.saga import rollback_reason

    journal = open_journal(settings, "show")
    invocation_id = _resolve(journal, args.invocation, settings)
    if invocation_id is None:
        return 2
    record = journal.invocation(invocation_id)
    assert record is not None  # just found
    calls = journal.calls(record.id)
    compensations = {c.tool_call_id: c for c in journal.compensations(record.id)}
    _print_story(record, calls, compensations)
    reasons = {c.reason for c in compensations.values() if c.reason}
    causes = {
        c.id
        for c in calls
        if c.outcome not in (None, "success") and rollback_reason(c.tool, c.call_id) in reasons
    }
    turn: object = _NO_TURN_YET
    for call in calls:
        if call.turn != turn:
            turn = call.turn
            print(f"turn {call.turn}:" if call.turn is not None else "calls (model turn not journaled):")
        _print_call(settings, call, compensations.get(call.id), caused_rollback=call.id in causes)
    return 0


_NO_TURN_YET = object()
_CANDIDATES = 10  # an ambiguous beginning lists at most this many ids
_TEXT_CHARS = 4000  # the user's message and the final answer are shown up to this length


def _resolve(journal: Journal, given: str, settings: Settings) -> str | None:
    """The id `given` names, exactly or as its unique beginning; None after saying why not."""
    if journal.invocation(given) is not None:
        return given
    ids = journal.invocation_ids(given, limit=_CANDIDATES + 1)
    if len(ids) == 1:
        return ids[0]
    where = settings.redacted()["database_url"]
    if not ids:
        print(f"toolfleet show: no invocation {given} (nor one starting so) in {where}", file=sys.stderr)
        return None
    listed = "\n".join(f"  {i}" for i in ids[:_CANDIDATES])
    more = "\n  ... and more" if len(ids) > _CANDIDATES else ""
    print(
        f"toolfleet show: {given} is the beginning of several invocations; give more of the id:\n"
        f"{listed}{more}",
        file=sys.stderr,
    )
    return None


def _print_story(
    record: InvocationRecord, calls: list[CallRecord], compensations: dict[int, CompensationRecord]
) -> None:
    finished = f"  finished {record.finished_at:%Y-%m-%d %H:%M:%S}" if record.finished_at else ""
    print(f"invocation {record.id}  [{record.state}]  owner {record.owner}")
    print(
        f"  service {record.service_name or '-'}  memory {record.memory_id}  "
        f"started {record.started_at:%Y-%m-%d %H:%M:%S}{finished}"
    )
    print(f"  user: {_text(record.user_message) if record.user_message is not None else '(not journaled)'}")
    print(f"  answer: {_answer(record)}")
    if record.error:
        print(f"  error: {record.error}")
    by_row = {c.id: c for c in calls}
    for reason in dict.fromkeys(c.reason for c in compensations.values() if c.reason):
        undone = [by_row[c.tool_call_id] for c in compensations.values() if c.reason == reason]
        names = ", ".join(f"#{c.sequence} {c.tool}" for c in undone if c is not None)
        print(f"  rolled back ({names}) because {reason}")


def _answer(record: InvocationRecord) -> str:
    if record.final_answer is not None:
        return _text(record.final_answer)
    if not record.state.finished and record.finished_at is None:
        return "(none yet: the invocation has not ended)"
    if record.state == InvocationState.SUCCEEDED:
        return "(none journaled: it ended with a tool's result, or before answers were journaled)"
    if record.state == InvocationState.CANCELLED:
        return "(none: the invocation was cancelled)"
    return "(none: the invocation failed)"


def _print_call(
    settings: Settings,
    call: CallRecord,
    compensation: CompensationRecord | None,
    *,
    caused_rollback: bool,
) -> None:
    took = (
        f"{(call.finished_at - call.started_at).total_seconds() * 1000:.0f} ms" if call.finished_at else "-"
    )
    print(f"  #{call.sequence} call {call.call_id or '-'}  {call.tool}({call.arguments[:160]})")
    print(
        f"      {call.state} / {call.outcome or '-'}  pool {call.pool or '-'}  "
        f"worker {call.worker or '-'}  {took}"
    )
    if call.waited is not None:
        print(f"      {call.waited} before it was sent")
    if call.last_progress:
        print(f"      last progress: {progress_text(call.last_progress)}")
    if call.result:
        print(f"      -> {call.result[:160]}")
    for line in artifact_lines(call.result_object):
        print(f"      {line}")
    if caused_rollback:
        print("      this failure rolled back the successful calls before it")
    if compensation is not None:
        detail = f": {compensation.error}" if compensation.error else ""
        why = f" ({compensation.reason})" if compensation.reason else ""
        print(
            f"      compensation {compensation.state} after {compensation.attempts} attempt(s){why}{detail}"
        )
    if not call.compensable:
        return
    if call.state == CallState.ABANDONED:
        print(f"      late compensation: {_late_text(settings, call)}")
    elif call.state == CallState.FAILED:
        print("      nothing to undo: the call failed")
    elif call.state == CallState.DISPATCHED:
        print("      no outcome journaled: in flight, or its orchestrator stopped (`toolfleet recover`)")


def artifact_lines(result_object: Any) -> list[str]:
    """A line per artifact of a call's result: `artifact artifact:<id>  report.csv  text/csv  4.2 KB`."""
    from workers.artifacts import refs_in, size_text

    return [
        f"artifact {ref.ref}  {_printable(ref.name)}  {_printable(ref.media_type)}  {size_text(ref.size)}"
        for ref in refs_in(result_object)
    ]


def _printable(text: str) -> str:
    """`text` with each control character as `?`: a tool names its artifacts, not the terminal's state."""
    return "".join(c if c.isprintable() else "?" for c in text)


def progress_text(report: dict[str, Any]) -> str:
    """A journaled progress report in one line: `40% copying part 4 data {...} (at 12:03:05)`."""
    from datetime import datetime

    from orchestrator.cli.console import progress_text as people

    fraction, message = report.get("fraction"), report.get("message")
    parts = [people(fraction if isinstance(fraction, int | float) else None, str(message or "")[:160])]
    if report.get("data") is not None:
        parts.append(f"data {json.dumps(report['data'])[:160]}")
    if isinstance(report.get("at"), int | float):
        parts.append(f"(at {datetime.fromtimestamp(report['at']):%H:%M:%S})")
    return " ".join(parts)


def _text(text: str) -> str:
    if len(text) <= _TEXT_CHARS:
        return text
    return f"{text[:_TEXT_CHARS]}… ({len(text) - _TEXT_CHARS} more characters)"


def _late_text(settings: Settings, call: Any) -> str:
    """What became of an abandoned call, from Redis (workers journal nothing)."""
    import redis

    from orchestrator.saga import late_compensation

    client = connect_redis(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        late = late_compensation(client, call)
    except redis.RedisError as exc:
        return f"unknown (Redis unreachable: {exc})"
    finally:
        client.close()
    return f"{late.state}: {late.text} (task {late.task_id})"
