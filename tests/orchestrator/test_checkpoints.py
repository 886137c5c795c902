"""Checkpoints and adoption, in-process on a SQLite journal: what a journaled invocation writes (the
conversation it started from; each response with its calls' intents, in one transaction, before any
call runs), who may adopt it (one claimer; a live owner's never; one being undone never), and how an
adopted invocation goes on (journaled turns not asked again, journaled outcomes not run again, calls
in flight re-attached to through the executor)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from orchestrator import AiMessage, AiService, LocalExecutor, ScriptedChatModel, ToolExecuted, UserMessage
from orchestrator.loop.adopting import adoptable, claim_adoption
from orchestrator.messages import message_to_json
from orchestrator.saga._journal_checkpoints import turn_rows, turn_write
from orchestrator.saga._journal_tables import approvals, turns
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.coordinator import Saga, rollback_reason
from orchestrator.saga.journal import Intent, Journal, invocations, tool_calls, utc_now
from tests.orchestrator._databases import KINDS, fresh_database
from tests.orchestrator._service import call, calls
from workers import tool
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.tools import ToolDefinition


class Counter:
    """Tools that count their runs; `execute` of the executor below checks the journal first."""

    def __init__(self) -> None:
        self.runs: list[str] = []

    @tool("Counts a run of `what`")
    def count(self, what: str) -> str:
        self.runs.append(what)
        return f"counted {what}"


class CheckingExecutor(LocalExecutor):
    """Runs tools in-process, noting at each call what the journal held when it was about to run."""

    def __init__(self, journal: Journal) -> None:
        super().__init__()
        self.journal = journal
        self.seen: list[tuple[str, bool]] = []  # (call id, its turn and row journaled before it ran)
        self.attached: list[str] = []

    async def execute(
        self, request: ToolExecutionRequest, definition: Any = None, invocation: Any = None, **kw: Any
    ) -> ToolOutcome:
        with self.journal.engine.connect() as connection:
            turns = connection.execute(sa.text("SELECT count(*) FROM toolfleet_turns")).scalar_one()
            rows = connection.execute(
                sa.text("SELECT count(*) FROM toolfleet_tool_calls WHERE call_id = :id"), {"id": request.id}
            ).scalar_one()
        self.seen.append((request.id or "", turns >= 1 and rows == 1))
        return await super().execute(request, definition, invocation, **kw)

    async def attach(
        self,
        request: ToolExecutionRequest,
        definition: ToolDefinition,
        invocation: Invocation,
        *,
        published_at: Any,
        compensate_if_late: bool = False,
    ) -> ToolOutcome:
        self.attached.append(request.id or "")
        return ToolOutcome(OutcomeKind.SUCCESS, f"collected {request.id}")


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    journal = Journal(f"sqlite:///{tmp_path}/journal.db")
    yield journal
    journal.engine.dispose()


@pytest.fixture
def writes(journal: Journal) -> Iterator[list[tuple[str, bool]]]:
    """Each write to the journal's database, by any engine (the async one too): its statement's
    first words, and whether it ran in a transaction of several statements (else in autocommit)."""
    seen: list[tuple[str, bool]] = []
    database = journal.engine.url.database

    def note(connection: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        words = " ".join(statement.split()[:3])
        if connection.engine.url.database == database and words.split()[0] in ("INSERT", "UPDATE"):
            level = connection.get_execution_options().get("isolation_level")
            seen.append((words, level != "AUTOCOMMIT"))

    sa.event.listen(sa.Engine, "before_cursor_execute", note)
    yield seen
    sa.event.remove(sa.Engine, "before_cursor_execute", note)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_turn_is_journaled_with_its_intents_in_one_transaction_before_any_call_runs(
    journal: Journal, writes: list[tuple[str, bool]], streamed: bool
) -> None:
    # given: a journaled service whose model asks for two calls, then answers
    counter = Counter()
    executor = CheckingExecutor(journal)
    model = ScriptedChatModel([calls(call("count", "c1", what="a"), call("count", "c2", what="b")), "done"])
    service = AiService(chat_model=model, tools=[counter], executor=executor, journal=journal)

    # when
    async def run() -> str | None:
        if not streamed:
            return (await service.achat("count")).content
        return "".join([e.text for e in [x async for x in service.stream("count")] if hasattr(e, "text")])

    asyncio.run(run())

    # then: each call saw its turn and its row journaled before it ran (the streamed response's
    # calls too: none started before the whole response was journaled)
    assert sorted(executor.seen) == [("c1", True), ("c2", True)]
    # ... the turn and both intents in one transaction (on SQLite, a statement per row; on
    # PostgreSQL, one), every other write one statement in autocommit: the start, each outcome, the end
    intents = ("INSERT INTO toolfleet_tool_calls", True)
    assert writes[2:4] == [intents] * 2
    assert writes[:3] + writes[4:] == [
        ("INSERT INTO toolfleet_invocations", False),
        ("INSERT INTO toolfleet_turns", True),
        ("INSERT INTO toolfleet_tool_calls", True),
        ("UPDATE toolfleet_tool_calls SET", False),
        ("UPDATE toolfleet_tool_calls SET", False),
        ("UPDATE toolfleet_invocations SET", False),
    ]
    [record] = journal.invocations()
    checkpoint = journal.checkpoint(record.id)
    assert checkpoint is not None
    assert checkpoint.opening["user_message"] == message_to_json(UserMessage("count"))
    assert list(checkpoint.turns) == [1]
    assert [r["id"] for r in checkpoint.turns[1]["tool_execution_requests"]] == ["c1", "c2"]


def test_a_service_that_compensates_on_loss_writes_no_checkpoint(journal: Journal) -> None:
    service = AiService(
        chat_model=ScriptedChatModel([calls(call("count", what="a")), "done"]),
        tools=[Counter()],
        executor=LocalExecutor(),
        journal=journal,
        on_orchestrator_loss="compensate",
    )
    assert not service.carries_on
    service.chat("count")
    [record] = journal.invocations()
    assert journal.checkpoint(record.id) is None
    with pytest.raises(Exception, match="on_orchestrator_loss must be 'resume' or 'compensate'"):
        AiService(chat_model=ScriptedChatModel([]), journal=journal, on_orchestrator_loss="retry")  # type: ignore[arg-type]


def _left_by_a_dead_owner(journal: Journal) -> tuple[str, int, int]:
    """An invocation as an orchestrator that died leaves it: its first turn journaled with two calls,
    the first finished, the second still running; its owner silent for a minute. Its id and the
    calls' rows."""
    context = InvocationContext(service_name="counting", memory_id="m1", user_message="count")
    invocation_id = str(context.invocation_id)
    request_a, request_b = call("count", "c1", what="a"), call("count", "c2", what="b")
    opening = {"history": [], "user_message": message_to_json(UserMessage("count"))}
    journal.start_invocation(context, Invocation(context).to_json(), opening=opening)
    turn = message_to_json(AiMessage(tool_execution_requests=[request_a, request_b]))
    intents = [
        Intent(n, r, None, False, f"{invocation_id}:{r.id}") for n, r in ((1, request_a), (2, request_b))
    ]
    row_a, row_b = journal.record_turn(invocation_id, 1, turn, intents)
    journal.record_outcome(row_a, ToolOutcome(OutcomeKind.SUCCESS, "counted a"), "counted a")
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values(owner="dead-host:1", heartbeat_at=utc_now() - timedelta(minutes=1))
        )
    return invocation_id, row_a, row_b


def test_an_adopted_invocation_goes_on_from_its_checkpoints(journal: Journal) -> None:
    # given: an invocation a dead orchestrator left, and a service of its agent in this process
    invocation_id, _, _ = _left_by_a_dead_owner(journal)
    counter = Counter()
    executor = CheckingExecutor(journal)
    model = ScriptedChatModel(
        lambda request: "done: " + " | ".join(m.text or "" for m in request.messages[2:])
    )
    service = AiService(
        chat_model=model, tools=[counter], executor=executor, journal=journal, name="counting"
    )

    # when: it is adopted here
    result = asyncio.run(service.aadopt(invocation_id, stale_after_s=30))

    # then: the journaled turn was not asked again, the finished call not run again, the running one
    # re-attached to; the model heard both results and answered; the journal says so
    assert result is not None and result.content == "done: counted a | collected c2"
    assert len(model.requests) == 1
    assert counter.runs == [] and executor.seen == [] and executor.attached == ["c2"]
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "succeeded" and record.final_answer == result.content
    assert [(c.call_id, c.state) for c in journal.calls(invocation_id)] == [
        ("c1", "succeeded"),
        ("c2", "succeeded"),
    ]
    # ... and adopting it again takes nothing
    assert asyncio.run(service.aadopt(invocation_id, stale_after_s=30)) is None


def test_a_stream_carried_on_tells_the_end_of_each_call_its_journal_ended(
    journal: Journal, journal_file: Path
) -> None:
    # given: an invocation a dead orchestrator left, its first call's end journaled (perhaps never
    # told: it died as it would have), claimed here
    invocation_id, _, _ = _left_by_a_dead_owner(journal)
    model = ScriptedChatModel(lambda request: "done")
    service = AiService(
        chat_model=model,
        tools=[Counter()],
        executor=CheckingExecutor(journal),
        journal=journal,
        name="counting",
    )

    async def carried_on() -> list[Any]:
        assert await claim_adoption(AsyncJournal(f"sqlite:///{journal_file}"), invocation_id, 30)
        return [event async for event in service.stream_adopted(invocation_id)]

    # when: its stream is carried on here
    events = asyncio.run(carried_on())

    # then: it tells both calls' ends, the journaled one too (a server's stream passes over those it
    # told already)
    ended = [e.execution.request.id for e in events if isinstance(e, ToolExecuted)]
    assert ended == ["c1", "c2"]


def test_exactly_one_of_many_adopters_takes_an_invocation_and_never_a_live_or_undone_one(
    journal: Journal,
) -> None:
    invocation_id, _, _ = _left_by_a_dead_owner(journal)
    stale_before = utc_now() - timedelta(seconds=30)
    # a live owner's (its beat fresher than the staleness) is not taken
    assert not journal.adopt(invocation_id, utc_now() - timedelta(minutes=5))
    # eight adopters at once: one takes it
    start = threading.Barrier(8)
    taken: list[bool] = []

    def adopt() -> None:
        start.wait()
        taken.append(journal.adopt(invocation_id, stale_before))

    threads = [threading.Thread(target=adopt) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken) == [False] * 7 + [True]
    # one a recoverer has begun undoing is never carried on: its checkpoint is dropped
    other, _, _ = _left_by_a_dead_owner(journal)
    assert journal.claim(other, stale_before)
    assert journal.checkpoint(other) is None
    with journal.engine.begin() as connection:  # even should its beat go stale again
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == other)
            .values(heartbeat_at=utc_now() - timedelta(hours=1))
        )
    assert not journal.adopt(other, stale_before)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("order", [[1], [3, 1, 5, 2, 4]], ids=["one", "several"])
def test_a_turn_and_its_intents_written_on_either_database_give_the_rows_in_order(
    kind: str, order: list[int], tmp_path: Path
) -> None:
    with fresh_database(kind, tmp_path) as url:
        journal = Journal(url)
        try:
            context = InvocationContext(memory_id="m1", user_message="count")
            invocation_id = str(context.invocation_id)
            journal.start_invocation(context, Invocation(context).to_json(), opening={"history": []})
            requests = [call("count", f"c{n}", what=str(n)) for n in range(1, 6)]
            # sequences out of the requests' order: the rows follow the intents given, not the ids
            intents = [Intent(n, requests[n - 1], "p", False, f"k{n}") for n in order]
            turn = message_to_json(AiMessage(tool_execution_requests=requests))
            if journal.backend == "postgresql":  # one statement, as the saga writes it there
                rows = turn_rows(
                    intents, journal.execute_now(turn_write(invocation_id, 1, turn, intents)).rows
                )
            else:
                rows = journal.record_turn(invocation_id, 1, turn, intents)
            by_row = {c.id: c for c in journal.calls(invocation_id)}
            assert [by_row[row].sequence for row in rows] == order
            assert [by_row[row].call_id for row in rows] == [f"c{n}" for n in order]
            checkpoint = journal.checkpoint(invocation_id)
            assert checkpoint is not None and checkpoint.turns == {1: turn}
        finally:
            journal.engine.dispose()


def _decided(journal: Journal, invocation_id: str, call_id: str, state: str, **fields: Any) -> None:
    """A person's decision on a call of the invocation, as the approvals table keeps it."""
    now = utc_now()
    with journal.engine.begin() as connection:
        connection.execute(
            sa.insert(approvals).values(
                invocation_id=invocation_id,
                call_id=call_id,
                tool="count",
                arguments='{"what": "model"}',
                arguments_hash="-",
                state=state,
                requested_at=now,
                expires_at=now + timedelta(minutes=5),
                decided_at=now,
                **fields,
            )
        )


def test_an_adopted_invocation_replays_the_calls_a_person_decided_as_decided(journal: Journal) -> None:
    # given: a dead owner's turn whose first call ran, and whose two others waited for a person: one
    # rejected, one approved with edited arguments (the owner died before sending it)
    invocation_id, _, row_b = _left_by_a_dead_owner(journal)
    with journal.engine.begin() as connection:  # the second call waited: it has no intent
        connection.execute(sa.delete(tool_calls).where(tool_calls.c.id == row_b))
    turn = message_to_json(
        AiMessage(
            tool_execution_requests=[
                call("count", "c1", what="a"),
                call("count", "c2", what="model"),
                call("count", "c3", what="model"),
            ]
        )
    )
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(turns).where(turns.c.invocation_id == invocation_id).values(message=json.dumps(turn))
        )
    _decided(journal, invocation_id, "c2", "rejected", reason="not today")
    _decided(journal, invocation_id, "c3", "approved", approved_arguments='{"what": "edited"}')
    counter = Counter()
    model = ScriptedChatModel(lambda r: "done: " + " | ".join(m.text or "" for m in r.messages[2:]))
    service = AiService(
        chat_model=model, tools=[counter], executor=CheckingExecutor(journal), journal=journal
    )

    # when
    result = asyncio.run(service.aadopt(invocation_id, stale_after_s=30))

    # then: the rejected call did not run and the model reads why; the approved one ran as approved
    assert result is not None and result.content is not None
    assert counter.runs == ["edited"]
    assert result.content.startswith("done: counted a | ") and "not today" in result.content
    assert result.content.endswith(" | counted edited")


def test_an_adopted_invocation_asks_for_a_call_its_dead_owner_never_asked_for(journal: Journal) -> None:
    # given: a dead owner's turn whose first call ran and whose second was to wait for a person: the
    # owner died before it paused, so the call has no intent and no approval
    invocation_id, _, row_b = _left_by_a_dead_owner(journal)
    with journal.engine.begin() as connection:
        connection.execute(sa.delete(tool_calls).where(tool_calls.c.id == row_b))
    counter = Counter()
    service = AiService(
        chat_model=ScriptedChatModel(lambda r: "done"),
        tools=[counter],
        executor=CheckingExecutor(journal),
        journal=journal,
        approval_policy=lambda request, context: request.id == "c2",
    )

    # when
    result = asyncio.run(service.aadopt(invocation_id, stale_after_s=30))

    # then: it is not run unasked: the adopted invocation pauses for it
    assert result is not None and [a.call_id for a in result.pending_approvals] == ["c2"]
    assert counter.runs == []
    record = journal.invocation(invocation_id)
    assert record is not None and record.state == "paused"


def test_an_invocation_whose_loop_ended_owing_compensations_is_recovered_not_carried_on(
    journal: Journal,
) -> None:
    # given: a dead owner's invocation, compensating after its first call's batch failed
    invocation_id, row_a, row_b = _left_by_a_dead_owner(journal)
    journal.record_outcome(row_b, ToolOutcome(OutcomeKind.EXECUTION_ERROR, "no"), "no")
    journal.plan_compensations(
        invocation_id,
        [c for c in journal.calls(invocation_id) if c.id == row_a],
        rollback_reason("count", "c2"),
    )
    journal.set_invocation_state(invocation_id, "compensating", owner="dead-host:1")
    with journal.engine.begin() as connection:
        connection.execute(
            sa.update(invocations)
            .where(invocations.c.id == invocation_id)
            .values(heartbeat_at=utc_now() - timedelta(minutes=1))
        )
    # while its loop goes on after the batch, it can be carried on
    assert adoptable(journal, invocation_id)
    # once its loop ended owing what it could not undo (it was cancelled meanwhile), it is not:
    # carrying on would run a cancelled invocation again; recovery undoes what is owed
    journal.set_invocation_state(
        invocation_id, "compensating", "cancelled; 1 compensation(s) owed", owner="dead-host:1"
    )
    assert not adoptable(journal, invocation_id)


def test_calls_given_up_with_their_invocation_keep_an_outcome_journaled_meanwhile(
    journal: Journal, journal_file: Path
) -> None:
    # given: an invocation's two calls, the first's success journaled, the second still in flight
    invocation_id, row_a, row_b = _left_by_a_dead_owner(journal)

    # when: its cancel gives both up (the first's outcome came as the cancel did)
    saga = Saga(LocalExecutor(), AsyncJournal(f"sqlite:///{journal_file}"), invocation_id)
    asyncio.run(saga.abandon([row_a, row_b]))

    # then: the success stands as journaled (undone with the invocation's end), the other is abandoned
    assert [(c.call_id, str(c.state)) for c in journal.calls(invocation_id)] == [
        ("c1", "succeeded"),
        ("c2", "abandoned"),
    ]
