"""The journal's hot path as single statements: an invocation's start, a call's intent and outcome,
an owner's beat and an invocation's end, each one `Write` (a statement and its parameters).

Each statement is built once per shape, its values given as parameters, so that SQLAlchemy (or the
psycopg fast path of `_fast_writes`) compiles it once; each is atomic by itself, so it runs in
autocommit: one round trip, no `BEGIN` or `COMMIT` around it (on PostgreSQL, those of concurrent
invocations waiting at the same time share one round trip and one commit: `_fast_writes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from orchestrator.finite_json import dumps_finite
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_records import utc_now
from orchestrator.saga._journal_tables import invocations, owned_update, owner_id, tool_calls
from orchestrator.saga.states import CallState, InvocationState
from workers.calls.invocation import InvocationContext
from workers.protocol import ToolExecutionRequest, ToolOutcome, call_task_id
from workers.tenants import tenant_of

__all__ = [
    "MAX_ANSWER_CHARS",
    "Intent",
    "Write",
    "Written",
    "heartbeat_write",
    "intent_values",
    "intent_write",
    "outcome_write",
    "start_write",
    "state_write",
    "written",
    "written_rows",
]

MAX_ANSWER_CHARS = 100_000  # a final answer is journaled up to this length

_START = sa.insert(invocations)
_CALL_UPDATE = sa.update(tool_calls).where(tool_calls.c.id == sa.bindparam("b_row"))
_INTENT = sa.insert(tool_calls).returning(tool_calls.c.id)


@dataclass(frozen=True)
class Intent:
    """A call about to be published: what its journal row says before it has an outcome."""

    sequence: int
    request: ToolExecutionRequest
    pool: str | None
    compensable: bool
    idempotency_key: str


@dataclass(frozen=True)
class Write:
    """One statement of the journal and its parameters; `again`: written twice, it leaves what written
    once does, so a write whose connection dropped is sent again. On PostgreSQL writes waiting at the
    same time are committed together (`_fast_writes`): `alone`, never with others (a heartbeat,
    written while its invocation's own writes may be in flight); `row`, the call row it updates,
    those of one commit written in the order of their rows (as `Journal.abandon_in_flight` locks them,
    so neither waits for the other while holding what the other waits for)."""

    statement: sa.Insert | sa.Update
    params: dict[str, Any]
    again: bool = False
    alone: bool = False
    row: int | None = None


@dataclass(frozen=True)
class Written:
    """What a `Write` did: the rows it returned, and the rows it touched."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rowcount: int = 0


def written(result: sa.CursorResult[Any]) -> Written:
    """What a statement executed through SQLAlchemy did (its rows read at once)."""
    return Written(written_rows(result), result.rowcount)


def written_rows(result: sa.CursorResult[Any]) -> list[tuple[Any, ...]]:
    """The rows a statement executed through SQLAlchemy returned, if any."""
    return [tuple(row) for row in result] if result.returns_rows else []


def intent_values(invocation_id: str, intent: Intent, turn: int | None) -> dict[str, Any]:
    """The columns of a call's row as its intent writes them."""
    request = intent.request
    return {
        "invocation_id": invocation_id,
        "sequence": intent.sequence,
        "turn": turn,
        "call_id": request.id,
        "tool": request.name,
        "arguments": request.arguments,
        "pool": intent.pool,
        "compensable": intent.compensable,
        "idempotency_key": intent.idempotency_key,
        "task_id": call_task_id(intent.idempotency_key),
        "state": CallState.DISPATCHED.value,
        "started_at": utc_now(),
    }


def intent_write(invocation_id: str, intent: Intent, turn: int | None) -> Write:
    """A call's intent (its row's id returned)."""
    return Write(_INTENT, intent_values(invocation_id, intent, turn))


def start_write(
    cipher: JournalCipher,
    context: InvocationContext,
    invocation_json: dict[str, Any],
    opening: dict[str, Any] | None,
) -> Write:
    """The invocation's row; with `opening` (the conversation it starts from, JSON), its checkpoint."""
    now = utc_now()
    sealed_opening = None if opening is None else cipher.seal(dumps_finite(opening, "the opening messages"))
    return Write(
        _START,
        {
            "id": str(context.invocation_id),
            "service_name": context.service_name,
            "memory_id": context.memory_id,
            "user_message": context.user_message,
            "state": InvocationState.RUNNING.value,
            "owner": owner_id(),
            "started_at": now,
            "heartbeat_at": now,
            "invocation_json": cipher.seal(
                dumps_finite(invocation_json, "the invocation's context and parameters")
            ),
            "opening": sealed_opening,
            "tenant": tenant_of(invocation_json.get("parameters")),
        },
    )


def state_write(
    invocation_id: str,
    state: InvocationState,
    error: str | None,
    final_answer: str | None,
    owner: str | None,
    expected: InvocationState | None,
) -> Write:
    """The invocation's state (at its end, its error or final answer), only while `owner` owns it and
    it is in state `expected`, if given."""
    values: dict[str, Any] = {"state": state.value, "heartbeat_at": utc_now()}
    if state.finished:
        values["finished_at"] = utc_now()
    if error is not None:
        values["error"] = error[:4000]
    if final_answer is not None:
        values["final_answer"] = final_answer[:MAX_ANSWER_CHARS]
    where = {"b_id": invocation_id, "b_owner": owner, "b_state": None if expected is None else expected.value}
    return Write(owned_update(owner is not None, expected is not None), {**values, **where})


def heartbeat_write(invocation_id: str, owner: str | None) -> Write:
    """The invocation's owner is alive; with `owner`, only while the invocation is still its."""
    params = {"heartbeat_at": utc_now(), "b_id": invocation_id, "b_owner": owner}
    return Write(owned_update(owner is not None, False), params, alone=True)


def outcome_write(
    call_row: int,
    outcome: ToolOutcome,
    result_text: str,
    progress: dict[str, Any] | None,
    *,
    state: CallState | None = None,
) -> Write:
    """A call's outcome, with the last progress its tool reported (JSON), if any; its state the
    outcome's (succeeded, failed) unless given (abandoned: given up on in flight)."""
    if state is None:
        state = CallState.FAILED if outcome.is_error else CallState.SUCCEEDED
    return Write(
        _CALL_UPDATE,
        {
            "b_row": call_row,
            "state": state.value,
            "outcome": outcome.kind.value,
            "result": result_text,
            "result_object": None
            if outcome.result_object is None
            else dumps_finite(outcome.result_object, "the result object"),
            "task_id": outcome.task_id,
            "worker": outcome.worker,
            "last_progress": None if progress is None else dumps_finite(progress, "the progress report"),
            "waited_ms": None if outcome.waited_s is None else round(outcome.waited_s * 1000),
            "wait_reason": outcome.wait_reason,
            "queued_ms": None if outcome.queued_s is None else round(outcome.queued_s * 1000),
            "finished_at": utc_now(),
        },
        again=True,
        row=call_row,
    )
