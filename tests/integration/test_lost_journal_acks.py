"""A journal write the database made but whose answer never came back (the connection dropped as it
answered: a restarted server, a proxy between) fails the invocation without leaving a call behind:
the call row it wrote is settled as the invocation ends, never left `dispatched`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import sqlalchemy as sa

import tests.integration.cancel_tools as ct
from orchestrator import AiService, CeleryExecutor, Journal, ScriptedChatModel
from orchestrator.saga._journal_writes import Write, Written
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import tool_calls
from tests.integration.scripts import ask, call
from tests.integration.side_effects import process_client
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
