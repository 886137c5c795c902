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

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_records import utc_now
from orchestrator.saga._journal_tables import invocations, owner_id, tool_calls, turns
from orchestrator.saga.states import CallState, InvocationState
from workers.protocol import ToolExecutionRequest, call_task_id

__all__ = ["Checkpoint", "Intent", "JournalCheckpoints", "intent_values"]

# The states an adopted invocation may be in: running, or compensating a failed batch's successes.
_CARRIED_ON = (InvocationState.RUNNING.value, InvocationState.COMPENSATING.value)


@dataclass(frozen=True)
class Intent:
    """A call about to be published: what its journal row says before it has an outcome."""

    sequence: int
    request: ToolExecutionRequest
    pool: str | None
    compensable: bool
    idempotency_key: str


@dataclass(frozen=True)
class Checkpoint:
    """What an adopter rebuilds an invocation from: the conversation it started from (JSON) and
    each journaled turn's AI message (JSON), by turn."""

    opening: dict[str, Any]  # `history` (the messages before it, JSON) and `user_message`
    turns: dict[int, dict[str, Any]]


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


class JournalCheckpoints:
    """The checkpoint methods of `Journal` (which provides the connections and the cipher)."""

    _tx: Callable[[], AbstractContextManager[Connection]]
    _read: Callable[[], AbstractContextManager[Connection]]
    _cipher: JournalCipher

    def seal_opening(self, opening: dict[str, Any]) -> str:
        """The `opening` column's value for the conversation an invocation starts from."""
        return self._cipher.seal(json.dumps(opening))

    def record_turn(
        self, invocation_id: str, turn: int, message: dict[str, Any], intents: Sequence[Intent]
    ) -> list[int]:
        """Model turn `turn`'s response (the AI message, JSON) and the intents of the calls of it
        about to be published, in one transaction; the calls' rows, in the order of `intents`."""
        with self._tx() as tx:
            tx.execute(
                sa.insert(turns).values(
                    invocation_id=invocation_id, turn=turn, message=json.dumps(message), created_at=utc_now()
                )
            )
            if not intents:
                return []
            inserted = tx.execute(
                sa.insert(tool_calls).returning(tool_calls.c.id, sort_by_parameter_order=True),
                [intent_values(invocation_id, intent, turn) for intent in intents],
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
