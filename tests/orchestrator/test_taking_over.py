"""Who may take over an invocation, and who writes its end: recovery never takes a live invocation
(its owner beats every `TOOLFLEET_INVOCATION_HEARTBEAT_S`, and `recover` refuses a staleness below
three beats), and once another process has taken an invocation over, neither its first owner nor an
earlier recoverer writes over it.

In-process (`LocalExecutor`, a SQLite journal); "another process" is a journal row whose owner names
another host, as a claim from there leaves it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel
from orchestrator.cli import main
from orchestrator.errors import InvocationTakenOverError
from orchestrator.executors.base import Settled
from orchestrator.saga.async_journal import AsyncJournal, beating
from orchestrator.saga.journal import Journal, invocations, utc_now
from orchestrator.saga.recovery import recover
from tests._waiting import wait_for
from tests.orchestrator._bank import Bank, compensating_service
from tests.orchestrator._service import call
from tests.orchestrator.test_recovery_settled import SettledExecutor, left_in_flight
from workers import compensate_for, tool
from workers.tools import discover_tools

ELSEWHERE = "another-host:4242"


def taken_over_by(journal: Journal, invocation_id: str, owner: str) -> None:
    """What a recoverer on another host leaves when it claims the invocation."""
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values(owner=owner, state="compensating")
        )


class Desk:
    """A booking that holds until the test lets it go, and its undo."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.undone = 0

    @tool("Books a seat")
    def book(self) -> str:
        self.started.set()
        assert self.release.wait(30), "the test never let the booking go"
        return "booked"

    @compensate_for("book")
    def unbook(self) -> None:
        self.undone += 1


def booking_service(desk: Desk, journal: Journal, executor: LocalExecutor) -> AiService:
    script: list[AiMessage | str] = [AiMessage(tool_execution_requests=[call("book", "b1")]), "booked"]
    return compensating_service(desk, executor, journal, script)


def chatting(service: AiService, message: str) -> tuple[threading.Thread, list[BaseException]]:
    """`service.chat(message)` running on a thread, and the list of what it raised (once ended)."""
    ended: list[BaseException] = []

    def chat() -> None:
        try:
            service.chat(message)
        except BaseException as exc:
            ended.append(exc)

    runner = threading.Thread(target=chat)
    runner.start()
    return runner, ended


@pytest.mark.parametrize(("stale_after", "heartbeat"), [("1", None), ("29.9", "10"), ("0.2", "0.1")])
def test_recover_refuses_a_staleness_below_three_heartbeats_in_one_line(
    stale_after: str,
    heartbeat: str | None,
    journal_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given: the invocations' heartbeat interval (10 s unless set)
    monkeypatch.setenv("TOOLFLEET_DATABASE_URL", f"sqlite:///{journal_file}")
    if heartbeat is None:
        monkeypatch.delenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", raising=False)
    else:
        monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", heartbeat)
    interval = float(heartbeat or 10)

    # when
    status = main(["recover", "--stale-after", stale_after])

    # then: status 2, one line naming the least staleness it takes
    error = capsys.readouterr().err
    assert status == 2
    assert error.splitlines() == [
        f"toolfleet recover: --stale-after {float(stale_after):g} is below {3 * interval:g} s, three "
        f"heartbeat intervals (TOOLFLEET_INVOCATION_HEARTBEAT_S={interval:g}): a live invocation would be "
        "taken over"
    ]
    assert not journal_file.exists() or Journal(f"sqlite:///{journal_file}").invocations() == []


def test_recover_takes_a_staleness_of_three_heartbeats(
    journal_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TOOLFLEET_DATABASE_URL", f"sqlite:///{journal_file}")
    monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", "0.1")
    assert main(["recover", "--stale-after", "0.3"]) == 0
    assert capsys.readouterr().out == "Nothing to recover: no stale unfinished invocation.\n"


def test_a_live_invocation_beats_often_enough_that_recovery_never_takes_it(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: invocations beat every 0.1 s; one books a seat that holds
    monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", "0.1")
    desk, executor = Desk(), LocalExecutor()
    service = booking_service(desk, journal, executor)
    answers: list[str] = []
    runner = threading.Thread(target=lambda: answers.append(service.chat("book").content or ""))
    runner.start()
    try:
        assert desk.started.wait(10)
        [record] = journal.invocations()

        # when: the invocation has run past the staleness recovery is asked for (1 s, over 3 beats)
        time.sleep(1.5)
        reports = asyncio.run(recover(journal, executor, stale_after_s=1.0))
    finally:
        desk.release.set()
        runner.join(30)
        executor.close()

    # then: recovery took nothing; the invocation ended as it would have, nothing undone
    assert reports == []
    assert answers == ["booked"]
    ended = journal.invocation(record.id)
    assert ended is not None and ended.state == "succeeded"
    assert desk.undone == 0


def test_an_owner_whose_invocation_was_taken_over_does_not_write_its_end(journal: Journal) -> None:
    # given: an invocation whose booking holds
    desk, executor = Desk(), LocalExecutor()
    runner, ended = chatting(booking_service(desk, journal, executor), "book")
    try:
        assert desk.started.wait(10)
        [record] = journal.invocations()

        # when: another host's recoverer takes it over, then the booking (and the invocation) ends here
        taken_over_by(journal, record.id, ELSEWHERE)
    finally:
        desk.release.set()
        runner.join(30)
        executor.close()

    # then: the journal is the recoverer's: not `succeeded` over its record; and this process's caller
    # is not handed an answer as the invocation's
    after = journal.invocation(record.id)
    assert after is not None
    assert (after.state, after.owner, after.finished_at) == ("compensating", ELSEWHERE, None)
    assert [type(exc) for exc in ended] == [InvocationTakenOverError]


class TwoDesks(Desk):
    """A booking that holds, then a second one the model asks for after it."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0

    @tool("Books a second seat")
    def book_again(self) -> str:
        self.seconds += 1
        return "booked again"


def test_an_invocation_taken_over_as_it_runs_stops_at_its_next_beat(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: invocations beat every 0.1 s; one books a seat that holds, and would then book another
    monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", "0.1")
    desk, executor = TwoDesks(), LocalExecutor()
    script: list[AiMessage | str] = [
        AiMessage(tool_execution_requests=[call("book", "b1")]),
        AiMessage(tool_execution_requests=[call("book_again", "b2")]),
        "booked twice",
    ]
    runner, ended = chatting(compensating_service(desk, executor, journal, script), "book two")
    try:
        assert desk.started.wait(10)
        [record] = journal.invocations()

        # when: another host's recoverer takes it over while the first booking holds
        taken_over_by(journal, record.id, ELSEWHERE)
        runner.join(5)
    finally:
        desk.release.set()
        runner.join(30)
        executor.close()

    # then: it stopped within a few beats, before its next call, undoing nothing (the new owner's),
    # and writing nothing over the new owner's record
    assert [type(exc) for exc in ended] == [InvocationTakenOverError], ended
    assert f"taken over by {ELSEWHERE}" in str(ended[0])
    assert (desk.seconds, desk.undone) == (0, 0)
    after = journal.invocation(record.id)
    assert after is not None
    assert (after.state, after.owner, after.finished_at) == ("compensating", ELSEWHERE, None)


class HandedOverExecutor(SettledExecutor):
    """Settles the call as failed, and meanwhile another host's recoverer takes the invocation over."""

    def __init__(self, journal: Journal, invocation_id: str) -> None:
        super().__init__(Settled("failed", "t-1", {"status": "FAILURE", "result": None}))
        self.journal, self.invocation_id = journal, invocation_id

    async def settle(self, key: str, definition: object) -> Settled:
        taken_over_by(self.journal, self.invocation_id, ELSEWHERE)
        return self.settled


def test_a_recovery_overtaken_by_another_does_not_write_its_end(journal: Journal) -> None:
    # given: an invocation left with a call in flight
    invocation_id = left_in_flight(journal)

    # when: this process recovers it, and another takes it over while it settles the call
    [report] = asyncio.run(recover(journal, HandedOverExecutor(journal, invocation_id), stale_after_s=0))

    # then: the end is the other's to write; this one wrote none
    assert report.nothing_to_undo == ["credit (c1)"]
    after = journal.invocation(invocation_id)
    assert after is not None
    assert (after.state, after.owner, after.error) == ("compensating", ELSEWHERE, None)


class SlowUndo(SettledExecutor):
    """Settles the call as a success to undo, and takes 1.6 s to undo it."""

    def __init__(self) -> None:
        result = {"kind": "success", "text": "credited 5", "worker": "bank@h"}
        super().__init__(Settled("succeeded", "t-1", {"status": "SUCCESS", "result": result}))

    async def compensate(self, definition: Any, execution: Any, invocation: Any) -> Any:
        await asyncio.sleep(1.6)
        return await super().compensate(definition, execution, invocation)


def test_a_recovery_that_runs_past_the_staleness_beats_and_is_not_taken_over(journal: Journal) -> None:
    # given: an invocation left 5 s ago with a call to undo, whose undoing takes 1.6 s
    invocation_id = left_in_flight(journal)
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values(heartbeat_at=utc_now() - timedelta(seconds=5))
        )
    executor = SlowUndo()
    known = {definition.name: definition for definition in discover_tools(Bank())}

    async def two_recoverers() -> tuple[list[Any], list[Any]]:
        first = asyncio.ensure_future(recover(journal, executor, known, stale_after_s=0.6))
        await asyncio.sleep(1.0)  # past the staleness, while the first still undoes
        second = await recover(journal, executor, known, stale_after_s=0.6)
        return await first, second

    # when: a second recoverer looks while the first is still at work
    first, second = asyncio.run(two_recoverers())

    # then: the first went on beating, so the second took nothing; the call was undone once
    assert [r.compensated for r in first] == [["credit (c1)"]]
    assert second == []
    assert executor.compensated == ["credited 5"]


def test_an_owner_that_stood_still_while_taken_over_dispatches_nothing_after(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: invocations beat every 0.1 s; the model's first answer asks for a second booking, but
    # while it answers the process stands still for 1 s (its event loop blocked: no beat goes out)
    monkeypatch.setenv("TOOLFLEET_INVOCATION_HEARTBEAT_S", "0.1")
    desk, executor = TwoDesks(), LocalExecutor()
    standing_still = threading.Event()

    def model(request: Any) -> AiMessage | str:
        if not standing_still.is_set():
            standing_still.set()
            time.sleep(1.0)
            return AiMessage(tool_execution_requests=[call("book_again", "b2")])
        return "booked"

    service = AiService(
        chat_model=ScriptedChatModel(model),
        tools=[desk],
        executor=executor,
        compensate_on_tool_errors=True,
        journal=journal,
    )
    runner, ended = chatting(service, "book")
    try:
        # when: meanwhile another host's recoverer, counting it gone, takes the invocation over
        assert standing_still.wait(10)
        [record] = wait_for(lambda: journal.invocations(), 5.0, "the invocation's row")
        taken_over_by(journal, record.id, ELSEWHERE)
        runner.join(10)
    finally:
        runner.join(30)
        executor.close()

    # then: once it moves again, the call its model asked for is not dispatched: it stops, undoing
    # nothing and writing nothing over the new owner's record
    assert [type(exc) for exc in ended] == [InvocationTakenOverError], ended
    assert desk.seconds == 0
    after = journal.invocation(record.id)
    assert after is not None
    assert (after.state, after.owner, after.finished_at) == ("compensating", ELSEWHERE, None)
    assert [c.tool for c in journal.calls(record.id)] == []


def test_a_takeover_found_by_the_beat_and_the_fence_at_once_is_told_once(journal: Journal) -> None:
    # given: an invocation another host took over, and this process's beat of it, overdue
    invocation_id = left_in_flight(journal)
    taken_over_by(journal, invocation_id, ELSEWHERE)
    told: list[str | None] = []

    async def both() -> list[Any]:
        beat = beating(AsyncJournal(journal), invocation_id, 60.0, told.append)
        beat.last_beat -= 1000
        try:
            # when: a beat and a dispatch's fence find it at the same moment
            return await asyncio.gather(beat._beat(), beat.fence(), return_exceptions=True)
        finally:
            beat.cancel()

    found = asyncio.run(both())

    # then: both stop, and the takeover is told once
    assert found[0] is False
    assert isinstance(found[1], asyncio.CancelledError)
    assert told == [ELSEWHERE]
