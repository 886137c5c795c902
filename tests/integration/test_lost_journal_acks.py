"""A journal write the database made but whose answer never came back (the connection dropped as it
answered: a restarted server, a proxy between) fails the invocation without leaving a call behind:
the call row it wrote is settled as the invocation ends, never left `dispatched`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

import tests.integration.cancel_tools as ct
from orchestrator import AiService, CeleryExecutor, Journal, LocalExecutor, ScriptedChatModel
from orchestrator.saga._journal_writes import Write, Written
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import tool_calls
from tests.integration.scripts import ask, call
from tests.integration.side_effects import process_client
from workers import compensate_for, tool
from workers.settings import Settings

pytestmark = pytest.mark.integration

_T = TypeVar("_T")


class AnswerLostOnce(AsyncJournal):
    """A journal whose first write of a call's row is made, then answered by a dropped connection."""

    lost = False

    async def run(self, fn: Callable[[Journal], _T]) -> _T:
        return self._answered(await super().run(fn))

    async def execute(self, write: Write) -> Written:
        return self._answered(await super().execute(write))

    def _answered(self, result: _T) -> _T:
        if not self.lost and self._calls_written():
            self.lost = True
            error = ConnectionError("server closed the connection unexpectedly")
            raise sa.exc.OperationalError("INSERT INTO toolfleet_tool_calls", {}, error)
        return result

    def _calls_written(self) -> bool:
        with Journal(self.url).engine.connect() as connection:
            return bool(connection.execute(sa.select(sa.func.count()).select_from(tool_calls)).scalar())

    url = ""


def test_a_call_written_though_its_write_failed_is_settled_as_its_invocation_fails(
    settings: Settings, tmp_path: Path
) -> None:
    # given: a booking whose call row is written, its write answered by a dropped connection
    ns = uuid.uuid4().hex[:10]
    journal_url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = AnswerLostOnce(Journal(journal_url))
    journal.url = journal_url
    service = AiService(
        chat_model=ScriptedChatModel([ask(call("r1", "reserve", ns=ns)), "done"]),
        tools=[ct.Desk()],
        executor=CeleryExecutor(settings=settings),
        journal=journal,
    )
    invocation_id = str(uuid.uuid4())

    # when: the invocation runs
    with pytest.raises(sa.exc.OperationalError):
        asyncio.run(service.achat("book", invocation_id=invocation_id))

    # then: it failed, and the call it lost track of is abandoned (its worker would undo it if it ran),
    # not left dispatched; the booking was never made
    assert journal.lost
    reader = Journal(journal_url)
    record = reader.invocation(invocation_id)
    assert record is not None and record.state == "failed"
    assert [(c.call_id, str(c.state)) for c in reader.calls(invocation_id)] == [("r1", "abandoned")]
    assert not process_client().get(f"cancel:{ns}:booked")


UNDONE: list[str] = []


class Desk:
    @tool("Books a seat")
    def book(self, seat: str) -> str:
        return f"booked {seat}"

    @compensate_for("book")
    def unbook(self, seat: str) -> None:
        UNDONE.append(seat)


DOWN: list[bool] = []  # set: the journal's next transaction meets the database restarting


@tool("Refuses, always")
def refuse() -> str:
    DOWN.append(True)  # the next transaction, planning the undo, meets the restart
    raise ValueError("refused")


class DownOnce(AsyncJournal):
    """A journal whose database is away for one transaction once `DOWN` is set."""

    async def run(self, fn: Callable[[Journal], _T]) -> _T:
        if DOWN:
            DOWN.clear()
            raise sa.exc.OperationalError("BEGIN", {}, ConnectionRefusedError("connection refused"))
        return await super().run(fn)


def test_what_a_failed_batch_owes_is_undone_though_its_plan_met_a_database_restart(tmp_path: Path) -> None:
    # given: a booking, then a refusal whose undoing meets the database restarting
    UNDONE.clear()
    DOWN.clear()
    journal = DownOnce(Journal(f"sqlite:///{tmp_path / 'journal.db'}"))

    def model(request: Any) -> Any:
        results = [m for m in request.messages if getattr(m, "tool_name", None)]
        if not results:
            return ask(call("b1", "book", seat="4A"))
        if len(results) == 1:
            return ask(call("r1", "refuse"))
        return "done"

    service = AiService(
        chat_model=ScriptedChatModel(model),
        tools=[Desk(), refuse],
        executor=LocalExecutor(),
        journal=journal,
        compensate_on_tool_errors=True,
    )

    # when: the invocation runs
    with pytest.raises(sa.exc.OperationalError):
        service.chat("book, then refuse")

    # then: the booking is undone all the same, once
    assert UNDONE == ["4A"]


class OutcomeAnswerLost(AsyncJournal):
    """A journal whose first write of a call's outcome is made, then answered by a dropped connection
    (a write whose every try meets it: sent again, it would land the same)."""

    lost = False

    async def execute(self, write: Write) -> Written:
        written = await super().execute(write)
        if not self.lost and "outcome" in write.params:
            self.lost = True
            error = ConnectionError("server closed the connection unexpectedly")
            raise sa.exc.OperationalError("UPDATE toolfleet_tool_calls", {}, error)
        return written


def test_a_success_journaled_though_its_write_failed_is_undone_as_its_invocation_fails(
    tmp_path: Path,
) -> None:
    # given: a booking whose success is journaled, its write answered by a dropped connection
    UNDONE.clear()
    journal_url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = OutcomeAnswerLost(Journal(journal_url))
    service = AiService(
        chat_model=ScriptedChatModel([ask(call("b1", "book", seat="s1")), "done"]),
        tools=[Desk()],
        executor=LocalExecutor(),
        journal=journal,
        compensate_on_tool_errors=True,
    )
    invocation_id = str(uuid.uuid4())

    # when: the invocation runs, and fails on it
    with pytest.raises(sa.exc.OperationalError):
        asyncio.run(service.achat("book", invocation_id=invocation_id))

    # then: the booking the journal has standing is undone, though the run never heard it succeeded
    assert journal.lost and UNDONE == ["s1"]
    reader = Journal(journal_url)
    record = reader.invocation(invocation_id)
    assert record is not None and record.state == "failed"
    assert [(c.call_id, str(c.state)) for c in reader.calls(invocation_id)] == [("b1", "compensated")]
