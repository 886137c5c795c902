"""The journal's checkpoints: what an invocation started from and each model turn's response, enough
for another process to carry the invocation on when its owner dies (adoption).

An invocation's row keeps the conversation it started from (`opening`, sealed as its parameters
are). Each response that asked for tools is a `toolfleet_turns` row, written with the intents of
the calls it asks for in one transaction, before any of them is published. With the calls' outcomes
(journaled as they come) the invocation's state is known at every point. Adoption is one conditional
`UPDATE`: only an invocation still running, whose owner's beat is stale and that has an opening is
taken, and by one process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from orchestrator.finite_json import dumps_finite
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_records import utc_now
from orchestrator.saga._journal_tables import invocations, owner_id, tool_calls, turns
from orchestrator.saga._journal_writes import (
    Intent,
    Write,
    Written,
    intent_values,
    intent_write,
    written_rows,
)
from orchestrator.saga.states import InvocationState
from workers.protocol import ToolExecutionRequest

__all__ = ["Checkpoint", "JournalCheckpoints", "turn_rows", "turn_write"]

# The states an adopted invocation may be in: running, or compensating a failed batch's successes.
_CARRIED_ON = (InvocationState.RUNNING.value, InvocationState.COMPENSATING.value)


@dataclass(frozen=True)
class Checkpoint:
    """What an adopter rebuilds an invocation from: the conversation it started from (JSON) and
    each journaled turn's AI message (JSON), by turn."""

    opening: dict[str, Any]  # `history` (the messages before it, JSON) and `user_message`
    turns: dict[int, dict[str, Any]]


_TURN = sa.insert(turns)  # its values given as parameters: compiled once
_INTENT_COLUMNS = (
    "invocation_id",
    "sequence",
    "turn",
    "call_id",
    "tool",
    "arguments",
    "pool",
    "compensable",
    "idempotency_key",
    "task_id",
    "state",
    "started_at",
)


@functools.lru_cache(maxsize=128)
def _turn_with_intents(count: int) -> sa.Insert:
    """PostgreSQL's one statement writing a turn (parameters `t_<column>`) and `count` intents
    (`<column>_<index>`), built once per count; that of one intent is compiled once (SQLAlchemy
    caches no statement of several VALUES rows: those are compiled per turn)."""
    turn = sa.insert(turns).values(
        {c: sa.bindparam(f"t_{c}") for c in ("invocation_id", "turn", "message", "created_at")}
    )
    rows = [
        {c: sa.bindparam(f"{c}_{i}", type_=tool_calls.c[c].type) for c in _INTENT_COLUMNS}
        for i in range(count)
    ]
    return (
        sa.insert(tool_calls)
        .values(rows if count > 1 else rows[0])
        .add_cte(turn.cte("written_turn"))
        .returning(tool_calls.c.sequence, tool_calls.c.id)
    )


def turn_write(invocation_id: str, turn: int, message: dict[str, Any], intents: Sequence[Intent]) -> Write:
    """PostgreSQL's one statement for a turn and its intents (`turn_rows` reads its rows)."""
    rows = [intent_values(invocation_id, intent, turn) for intent in intents]
    statement, params = _turn_statement(_turn_values(invocation_id, turn, message), rows)
    return Write(statement, params)


def turn_rows(intents: Sequence[Intent], returned: list[tuple[Any, ...]]) -> list[int]:
    """The intents' rows, in their order, from what `turn_write`'s statement returned."""
    ids = {int(sequence): int(row) for sequence, row in returned}
    return [ids[intent.sequence] for intent in intents]


def _turn_values(invocation_id: str, turn: int, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "invocation_id": invocation_id,
        "turn": turn,
        "message": dumps_finite(message, "the model's message"),
        "created_at": utc_now(),
    }


def _turn_statement(written: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[sa.Insert, dict[str, Any]]:
    params = {f"t_{name}": value for name, value in written.items()}
    for index, row in enumerate(rows):
        params.update({f"{name}_{index}": value for name, value in row.items()})
    return _turn_with_intents(len(rows)), params


class JournalCheckpoints:
    """The checkpoint methods of `Journal` (which provides the connections and the cipher): calls'
    intents, alone or with their turn's response, and adoption."""

    _tx: Callable[[], AbstractContextManager[Connection]]
    _read: Callable[[], AbstractContextManager[Connection]]
    _cipher: JournalCipher
    execute_now: Callable[[Write], Written]

    def seal_opening(self, opening: dict[str, Any]) -> str:
        """The `opening` column's value for the conversation an invocation starts from."""
        return self._cipher.seal(dumps_finite(opening, "the opening messages"))

    def record_intent(
        self,
        invocation_id: str,
        sequence: int,
        request: ToolExecutionRequest,
        *,
        pool: str | None,
        compensable: bool,
        idempotency_key: str,
        turn: int | None = None,
    ) -> int:
        """Write the call before it is dispatched; returns the row id. `turn`: the model turn (from 1).

        The row carries the task id of the call's first dispatch, derived from its idempotency key,
        so the call's state is found even if its orchestrator dies before the outcome is written.
        """
        intent = Intent(sequence, request, pool, compensable, idempotency_key)
        return int(self.execute_now(intent_write(invocation_id, intent, turn)).rows[0][0])

    def record_turn(
        self, invocation_id: str, turn: int, message: dict[str, Any], intents: Sequence[Intent]
    ) -> list[int]:
        """Model turn `turn`'s response (the AI message, JSON) and the intents of the calls of it
        about to be published, in one transaction (on PostgreSQL one statement: the turn's insert a
        CTE of the intents'); the calls' rows, in the order of `intents`."""
        written = _turn_values(invocation_id, turn, message)
        rows = [intent_values(invocation_id, intent, turn) for intent in intents]
        with self._tx() as tx:
            if rows and tx.dialect.name == "postgresql":  # one statement: the turn in a CTE
                return turn_rows(intents, written_rows(tx.execute(*_turn_statement(written, rows))))
            tx.execute(_TURN, written)
            if not rows:
                return []
            inserted = tx.execute(
                sa.insert(tool_calls).returning(tool_calls.c.id, sort_by_parameter_order=True), rows
            )
            return [int(row[0]) for row in inserted]

    def checkpoint(self, invocation_id: str) -> Checkpoint | None:
        """The invocation's checkpoint; None when it has none (it started before checkpoints, or its
        service compensates on an orchestrator's loss)."""
        with self._read() as connection:
            sealed = connection.execute(
                sa.select(invocations.c.opening).where(invocations.c.id == invocation_id)
            ).scalar_one_or_none()
            if sealed is None:
                return None
            rows = connection.execute(
                sa.select(turns.c.turn, turns.c.message).where(turns.c.invocation_id == invocation_id)
            ).all()
        opening: dict[str, Any] = json.loads(self._cipher.open(sealed, invocation_id=invocation_id))
        return Checkpoint(opening, {int(turn): json.loads(message) for turn, message in rows})

    def adopt(self, invocation_id: str, stale_before: datetime) -> bool:
        """Take over an invocation whose owner stopped beating before `stale_before`, to carry it on
        (running, or undoing a failed batch before it goes on: it stays so, now this process's);
        atomic across adopters and recoverers (a recoverer's claim drops the checkpoint)."""
        with self._tx() as tx:
            taken = tx.execute(
                sa.update(invocations)
                .where(
                    invocations.c.id == invocation_id,
                    invocations.c.state.in_(_CARRIED_ON),
                    invocations.c.heartbeat_at <= stale_before,
                    invocations.c.opening.is_not(None),
                )
                .values(owner=owner_id(), heartbeat_at=utc_now())
            ).rowcount
        return bool(taken)
