"""An invocation ending on an error settles what it left in flight before its end is written; a journal
failing meanwhile (a restart: the invocation's error may be its own) is tried again, so no call is left
`dispatched` under an ended invocation, which nobody would settle."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy.exc

from orchestrator import AiMessage, LocalExecutor
from orchestrator.errors import ScriptExhaustedError
from orchestrator.loop import settling
from orchestrator.saga.coordinator import Saga
from orchestrator.saga.journal import Journal
from orchestrator.saga.states import InvocationState
from tests.orchestrator._bank import Bank, compensating_service
from tests.orchestrator._service import call


def test_settling_is_tried_again_while_the_journal_fails_then_the_end_is_written(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a journal that fails the first two tries to settle (it is restarting)
    monkeypatch.setattr(settling, "SETTLE_RETRIES_S", (0.01, 0.01, 0.01))
    settle, tries = Saga.settle_left, []

    async def failing_twice(self: Saga, *args: Any) -> None:
        tries.append(self.invocation_id)
        if len(tries) <= 2:
            raise sqlalchemy.exc.OperationalError("UPDATE", {}, Exception("server closed the connection"))
        await settle(self, *args)

    monkeypatch.setattr(Saga, "settle_left", failing_twice)
    # and: an invocation that deposits, then fails (its model has nothing more to say)
    bank, executor = Bank(), LocalExecutor()
    service = compensating_service(
        bank, executor, journal, [AiMessage(tool_execution_requests=[call("deposit", "d1", amount=40)])]
    )
    try:
        # when
        with pytest.raises(ScriptExhaustedError):
            service.chat("deposit 40")
    finally:
        executor.close()
    # then: settled on the third try, and only then ended, failed, its deposit undone
    assert len(tries) == 3 and len(set(tries)) == 1
    record = journal.invocation(tries[0])
    assert record is not None and record.state is InvocationState.FAILED
    assert bank.balance == 0 and bank.undone == ["deposit 40"]
