"""Cancelling a paused invocation makes this process its owner while it undoes what it did: it beats
as an invocation does, so that no recovery takes a slow undo for an abandoned one; and when another
process takes it over all the same, the cancel does not say it ended (its end is that process's)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime

import pytest
import sqlalchemy as sa

from orchestrator import (
    AiMessage,
    AiService,
    InvocationState,
    Journal,
    LocalExecutor,
    ScriptedChatModel,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
)
from orchestrator.models.base import ChatRequest
from orchestrator.saga._journal_tables import invocations
from workers import compensate_for, tool

# What the undo of a booking does while it runs, set by each test: given the invocation's id.
DURING_UNDO: list[Callable[[str], None]] = []
INVOCATION: list[str] = []


class Desk:
    @tool
    def book(self, ref: str) -> str:
        return f"booked {ref}"

    @compensate_for("book")
    def unbook(self, ref: str) -> None:
        for step in DURING_UNDO:
            step(INVOCATION[0])

    @tool(requires_approval=True)
    def pay(self, amount: int) -> str:
        return f"paid {amount}"


def _script(request: ChatRequest) -> AiMessage | str:
    if any(isinstance(m, ToolExecutionResultMessage) for m in request.messages):
        return "done"
    return AiMessage(
        tool_execution_requests=[
            ToolExecutionRequest("b1", "book", json.dumps({"ref": "r1"})),
            ToolExecutionRequest("p1", "pay", json.dumps({"amount": 5})),
        ]
    )


def _paused(journal: Journal) -> tuple[AiService, str]:
    """A service whose invocation booked, then paused for the payment's approval."""
    service = AiService(
        chat_model=ScriptedChatModel(_script),
        tools=[Desk()],
        executor=LocalExecutor(),
        journal=journal,
    )
    result = service.chat("book and pay")
    assert result.invocation_id is not None
    record = journal.invocation(result.invocation_id)
    assert record is not None and record.state is InvocationState.PAUSED
    INVOCATION[:] = [result.invocation_id]
    return service, result.invocation_id


@pytest.fixture(autouse=True)
def _clear() -> None:
    DURING_UNDO.clear()
    INVOCATION.clear()


def test_a_slow_undo_of_a_cancelled_paused_invocation_keeps_its_heartbeat_fresh(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: invocations beat every 50 ms, and a paused invocation whose booking's undo takes 0.5 s
    monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", "0.05")
    service, invocation_id = _paused(journal)
    beats: list[datetime] = []

    def slow(invocation: str) -> None:
        for _ in range(2):
            record = journal.invocation(invocation)
            assert record is not None
            beats.append(record.heartbeat_at)
            time.sleep(0.5)

    DURING_UNDO.append(slow)

    # when: it is cancelled
    assert service.cancel(invocation_id) is True

    # then: its heartbeat moved on while the undo ran, and it ended cancelled
    assert len(beats) == 2 and beats[1] > beats[0], beats
    record = journal.invocation(invocation_id)
    assert record is not None and record.state is InvocationState.CANCELLED


def test_a_cancel_taken_over_during_its_undo_does_not_say_it_ended(journal: Journal) -> None:
    # given: a paused invocation that another process takes over (a recovery) while its undo runs
    service, invocation_id = _paused(journal)

    def taken_over(invocation: str) -> None:
        with journal.engine.begin() as connection:
            connection.execute(
                sa.update(invocations).where(invocations.c.id == invocation).values(owner="other-host:1")
            )

    DURING_UNDO.append(taken_over)

    # when: it is cancelled
    cancelled = service.cancel(invocation_id)

    # then: the cancel did not end it (it is not told cancelled here), and the journal keeps the
    # other process's claim
    assert cancelled is False
    record = journal.invocation(invocation_id)
    assert record is not None and record.owner == "other-host:1"
    assert record.state is InvocationState.COMPENSATING
