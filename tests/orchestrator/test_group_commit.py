"""The journal's writes on PostgreSQL waiting at the same time are committed together (`_fast_writes`):
one transaction for many writes, each caller still told its own result; a write the database
refuses, or a value psycopg cannot send, costs the others nothing; a heartbeat is never held up by
other invocations' writes; outcomes committed together lock their rows in order, as abandoning calls
does, so that neither waits for the other while holding what it needs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator.messages import AiMessage, message_to_json
from orchestrator.saga import _fast_writes
from orchestrator.saga._fast_writes import FastWrites
from orchestrator.saga._journal_checkpoints import turn_rows, turn_write
from orchestrator.saga._journal_writes import (
    Intent,
    Write,
    Written,
    heartbeat_write,
    outcome_write,
    start_write,
    state_write,
)
from orchestrator.saga.async_journal import AsyncJournal
from orchestrator.saga.journal import Journal
from orchestrator.saga.states import InvocationState
from tests.orchestrator._databases import fresh_database
from tests.orchestrator._service import call
from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import OutcomeKind, ToolOutcome

CALLS = 3


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        Journal(url).engine.dispose()  # the schema
        yield url


@pytest.fixture
def session(postgres_url: str) -> Iterator[sa.Engine]:
    """Another session on the test's database (locks, reading rows' transaction ids)."""
    engine = sa.create_engine(postgres_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _start(journal: AsyncJournal) -> tuple[str, Write]:
    context = InvocationContext(memory_id="m1", user_message="hi")
    invocation_json = Invocation(context).to_json()
    return str(context.invocation_id), start_write(journal.cipher, context, invocation_json, None)


def _lock(connection: sa.Connection, table: str, row: int | str) -> None:
    """Lock a row of `table` in `connection`'s transaction, until it ends."""
    connection.execute(sa.text(f"SELECT id FROM {table} WHERE id = :row FOR UPDATE"), {"row": row})


async def _invocation_with_calls(journal: AsyncJournal) -> tuple[str, list[int]]:
    """A started invocation whose first turn journaled `CALLS` intents; their rows, in order."""
    invocation_id, start = _start(journal)
    await journal.execute(start)
    requests = [call("count", f"c{i}", what=str(i)) for i in range(CALLS)]
    intents = [Intent(i + 1, r, "p", False, f"{invocation_id}:{r.id}") for i, r in enumerate(requests)]
    turn = message_to_json(AiMessage(tool_execution_requests=requests))
    written = await journal.execute(turn_write(invocation_id, 1, turn, intents))
    return invocation_id, turn_rows(intents, written.rows)


def _outcome(row: int, text: str) -> Write:
    return outcome_write(row, ToolOutcome(OutcomeKind.SUCCESS, text), text, None)


def _transactions(session: sa.Engine, table: str) -> int:
    """How many transactions wrote the rows of `table` as they are now (their `xmin`)."""
    with session.connect() as connection:
        query = sa.text(f"SELECT count(DISTINCT xmin::text) FROM {table}")
        return int(connection.execute(query).scalar_one())


def _waiting_on_a_lock(session: sa.Engine) -> bool:
    with session.connect() as connection:
        query = sa.text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return bool(connection.execute(query).scalar_one())


def _lockable(session: sa.Engine, row: int) -> bool:
    """Whether another session may lock the call row `row` right now."""
    with session.connect() as connection:
        try:
            connection.execute(
                sa.text("SELECT id FROM toolfleet_tool_calls WHERE id = :row FOR UPDATE NOWAIT"), {"row": row}
            )
        except sa.exc.OperationalError:
            return False
        return True


async def _until(condition: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(condition):  # type: ignore[arg-type]
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.02)


def test_writes_waiting_together_share_one_transaction_and_each_is_told_its_own_result(
    postgres_url: str, session: sa.Engine
) -> None:
    async def story() -> list[int]:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            invocation_id, rows = await _invocation_with_calls(journal)
            starts = [_start(journal)[1] for _ in range(20)]
            outcomes = [_outcome(row, f"counted {i}") for i, row in enumerate(rows)]
            end = state_write(invocation_id, InvocationState.SUCCEEDED, None, "done", "somebody else", None)
            written = await asyncio.gather(*(journal.execute(w) for w in [*starts, *outcomes, end]))
            return [w.rowcount for w in written]
        finally:
            await journal.dispose()

    # the end's owner is not this process: it wrote nothing, and says so
    assert asyncio.run(story()) == [1] * 20 + [1] * CALLS + [0]
    journal = Journal(postgres_url, keys=[])
    try:
        assert len(journal.invocations()) == 21
        [calls] = [journal.calls(r.id) for r in journal.invocations() if journal.calls(r.id)]
        assert [(c.state, c.result) for c in calls] == [("succeeded", f"counted {i}") for i in range(CALLS)]
    finally:
        journal.engine.dispose()
    # the first write went at once, alone (nothing else was in flight); the 19 other starts and the
    # outcomes, written as it was, share one commit (beside the first invocation's start, earlier)
    assert _transactions(session, "toolfleet_invocations") == 3
    assert _transactions(session, "toolfleet_tool_calls") == 1


def test_a_write_refused_fails_alone(postgres_url: str) -> None:
    async def story() -> tuple[list[object], list[object]]:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            _, first = _start(journal)
            await journal.execute(first)
            _, rows = await _invocation_with_calls(journal)
            # (each time the first write goes at once, alone; those after it wait, and go together)
            # a value psycopg cannot send fails on this side, after the statements before it were sent
            unsendable = [_outcome(rows[0], "counted"), _outcome(rows[1], "nul \x00")]
            sent = await asyncio.gather(
                *(journal.execute(w) for w in [_start(journal)[1], _start(journal)[1], *unsendable]),
                return_exceptions=True,
            )
            # the same invocation twice: refused by the server
            refused = [_start(journal)[1], _start(journal)[1], first]
            told = await asyncio.gather(*(journal.execute(w) for w in refused), return_exceptions=True)
            return sent, told
        finally:
            await journal.dispose()

    (_, start, outcome, nul), (_, later, twice) = asyncio.run(story())
    assert [start.rowcount, outcome.rowcount, later.rowcount] == [1, 1, 1]  # type: ignore[union-attr]
    assert isinstance(nul, sa.exc.DataError)
    assert isinstance(twice, sa.exc.IntegrityError)
    journal = Journal(postgres_url, keys=[])
    try:
        assert len(journal.invocations()) == 6
        states = {c.result: c.state for r in journal.invocations() for c in journal.calls(r.id)}
        assert states == {"counted": "succeeded", None: "dispatched"}
    finally:
        journal.engine.dispose()


def test_a_heartbeat_is_not_held_up_by_a_write_waiting_on_a_lock(
    postgres_url: str, session: sa.Engine
) -> None:
    async def story() -> None:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            locked_id, locked = _start(journal)
            beating_id, beating = _start(journal)
            await asyncio.gather(journal.execute(locked), journal.execute(beating))
            with session.connect() as held:
                _lock(held, "toolfleet_invocations", locked_id)
                end = state_write(locked_id, InvocationState.SUCCEEDED, None, "done", None, None)
                # the end waits for a write in flight, then goes with the next batch
                leading = asyncio.ensure_future(journal.execute(_start(journal)[1]))
                ending = asyncio.ensure_future(journal.execute(end))
                beat = asyncio.ensure_future(journal.execute(heartbeat_write(beating_id, None)))
                # the beat goes on while the other invocation's end waits for its row
                assert (await asyncio.wait_for(beat, 5)).rowcount == 1
                assert not ending.done()
                held.rollback()
            assert (await asyncio.wait_for(ending, 5)).rowcount == 1
            await leading
        finally:
            await journal.dispose()

    asyncio.run(story())


def test_outcomes_committed_together_lock_their_rows_in_order(postgres_url: str, session: sa.Engine) -> None:
    async def story() -> None:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            _, rows = await _invocation_with_calls(journal)
            first, last = rows[0], rows[-1]
            with session.connect() as held:
                _lock(held, "toolfleet_tool_calls", first)
                # the later row's outcome comes first (after a write in flight, so that the two go
                # together): still, the first row is locked first, and waited on
                outcomes = [_outcome(row, "done") for row in (last, first)]
                writing = asyncio.gather(*(journal.execute(w) for w in [_start(journal)[1], *outcomes]))
                await _until(lambda: _waiting_on_a_lock(session), "the outcomes wait for the first row")
                assert await asyncio.to_thread(_lockable, session, last)
                held.rollback()
            await asyncio.wait_for(writing, 5)
        finally:
            await journal.dispose()

    asyncio.run(story())


def test_abandoning_calls_locks_their_rows_in_order(postgres_url: str, session: sa.Engine) -> None:
    async def story() -> list[int]:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            return (await _invocation_with_calls(journal))[1]
        finally:
            await journal.dispose()

    rows = asyncio.run(story())
    first, last = rows[0], rows[-1]
    with session.begin() as connection:  # the first row's new version now lies after the others
        moved = sa.text("UPDATE toolfleet_tool_calls SET pool = 'q' WHERE id = :row")
        connection.execute(moved, {"row": first})
    journal = Journal(postgres_url, keys=[])
    try:
        with session.connect() as held:
            _lock(held, "toolfleet_tool_calls", first)
            abandoning = threading.Thread(target=journal.abandon_in_flight, args=(rows[::-1],))
            abandoning.start()
            asyncio.run(_until(lambda: _waiting_on_a_lock(session), "abandoning waits for the first row"))
            assert _lockable(session, last)  # not taken before the first one
            held.rollback()
        abandoning.join(10)
        assert not abandoning.is_alive()
        [record] = journal.invocations()
        assert [c.state for c in journal.calls(record.id)] == ["abandoned"] * CALLS
    finally:
        journal.engine.dispose()


def test_a_write_put_as_every_sender_finishes_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: as many batches in flight as there are connections, each of one write, ending together
    gates: list[asyncio.Event] = []
    sent: list[int] = []

    async def send(self: _fast_writes._Batches, batch: list[_fast_writes._Pending]) -> None:
        sent.append(len(batch))
        await gates[min(len(sent) - 1, 1)].wait()  # the first write's own gate, then the senders'
        for pending in batch:
            pending.future.set_result(Written([], 1))

    monkeypatch.setattr(_fast_writes._Batches, "send", send)
    write = state_write("i1", InvocationState.SUCCEEDED, None, "done", None, None)

    async def story() -> None:
        gates.extend([asyncio.Event(), asyncio.Event()])
        writes = FastWrites("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never reached

        async def put() -> asyncio.Future[Written]:
            writing = asyncio.ensure_future(writes.execute(write))
            for _ in range(3):  # sent alone: from its task (the first), else by a sender of its own
                await asyncio.sleep(0)
            return writing

        alone = await put()
        first = [await put() for _ in range(_fast_writes.FAST_POOL_SIZE - 1)]
        gates[0].set()
        await alone
        first.append(await put())  # the senders now busy: one per connection
        assert sent == [1] * (_fast_writes.FAST_POOL_SIZE + 1)
        gates[1].set()
        # when: a write comes in the very turn of the loop in which the senders find nothing left
        last = asyncio.ensure_future(writes.execute(write))
        await asyncio.gather(*first)
        # then: it is sent (not left waiting for senders that are gone)
        assert (await asyncio.wait_for(last, 2)).rowcount == 1

    asyncio.run(story())
