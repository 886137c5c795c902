"""The journal's hot path on PostgreSQL through psycopg directly (`_fast_writes`): the same rows as
SQLAlchemy would write, none of them through SQLAlchemy's engine, SQLAlchemy's errors, and a write
cut off midway that leaves no broken connection behind."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from bench.soak.proxy import FaultProxy
from orchestrator._database_url import CONNECT_RETRY_S
from orchestrator.memory import SqlChatMemoryStore
from orchestrator.messages import AiMessage, UserMessage, message_to_json
from orchestrator.saga._journal_checkpoints import turn_rows, turn_write
from orchestrator.saga._journal_writes import (
    Intent,
    Write,
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


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    with fresh_database("postgresql", tmp_path) as url:
        Journal(url).engine.dispose()  # the schema
        yield url


def test_the_hot_path_writes_the_rows_without_sqlalchemys_engine(postgres_url: str) -> None:
    statements: list[str] = []

    def note(connection: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    context = InvocationContext(memory_id="m1", user_message="hi")
    invocation_id = str(context.invocation_id)
    request = call("count", "c1", what="a")

    async def story() -> None:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            opening = {"history": [], "user_message": message_to_json(UserMessage("hi"))}
            await journal.execute(
                start_write(journal.cipher, context, Invocation(context).to_json(), opening)
            )
            intents = [Intent(1, request, "p", False, f"{invocation_id}:c1")]
            turn = message_to_json(AiMessage(tool_execution_requests=[request]))
            [row] = turn_rows(
                intents, (await journal.execute(turn_write(invocation_id, 1, turn, intents))).rows
            )
            await journal.execute(heartbeat_write(invocation_id, None))
            await journal.execute(
                outcome_write(row, ToolOutcome(OutcomeKind.SUCCESS, "counted a"), "counted a", None)
            )
            end = state_write(invocation_id, InvocationState.SUCCEEDED, None, "done", "nobody", None)
            assert (await journal.execute(end)).rowcount == 0  # not its owner: nothing written
            end = state_write(invocation_id, InvocationState.SUCCEEDED, None, "done", None, None)
            assert (await journal.execute(end)).rowcount == 1
        finally:
            await journal.dispose()

    sa.event.listen(sa.Engine, "before_cursor_execute", note)
    try:
        asyncio.run(story())
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", note)
    assert [s for s in statements if s.split()[0] in ("INSERT", "UPDATE")] == []
    journal = Journal(postgres_url, keys=[])
    try:
        record = journal.invocation(invocation_id)
        assert record is not None and record.state == "succeeded" and record.final_answer == "done"
        [row] = journal.calls(invocation_id)
        assert (row.call_id, row.state, row.result, row.turn) == ("c1", "succeeded", "counted a", 1)
        checkpoint = journal.checkpoint(invocation_id)
        assert checkpoint is not None and list(checkpoint.turns) == [1]
    finally:
        journal.engine.dispose()


def _drop_connections(url: str, waiting: bool = False) -> int:
    """Another session ends every other connection to the test's database (a server restart), or
    (`waiting`) those waiting for a lock, their statement cut off midway; how many."""
    only = " AND wait_event_type = 'Lock'" if waiting else ""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return len(
                connection.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        f"WHERE datname = current_database() AND pid <> pg_backend_pid(){only}"
                    )
                ).all()
            )
    finally:
        engine.dispose()


def test_errors_are_sqlalchemys_and_a_connection_dropped_while_idle_is_replaced(postgres_url: str) -> None:
    async def story() -> None:
        journal = AsyncJournal(postgres_url, keys=[])

        def start(memory_id: str) -> Write:
            context = InvocationContext(memory_id=memory_id, user_message="hi")
            return start_write(journal.cipher, context, Invocation(context).to_json(), None)

        try:
            first = start("m1")
            await journal.execute(first)
            with pytest.raises(sa.exc.IntegrityError):  # the same invocation twice
                await journal.execute(first)
            # the server (or a proxy restarted between) drops the journal's idle connections: the next
            # writes go through on new ones, none of them fails
            assert await asyncio.to_thread(_drop_connections, postgres_url) >= 1
            await asyncio.sleep(0.2)  # the termination reaches the idle connections' sockets
            await journal.execute(start("m2"))
            await journal.execute(start("m3"))
        finally:
            await journal.dispose()

    asyncio.run(story())


def test_the_journals_engines_replace_a_connection_dropped_while_idle(postgres_url: str) -> None:
    # the same on SQLAlchemy's side (everything but the hot path): its pooled connections are pinged
    journal = Journal(postgres_url, keys=[])
    context = InvocationContext(memory_id="m1", user_message="hi")
    try:
        journal.start_invocation(context, Invocation(context).to_json())
        assert _drop_connections(postgres_url) >= 1
        assert journal.invocation(str(context.invocation_id)) is not None
    finally:
        journal.engine.dispose()

    async def story() -> None:
        ajournal = AsyncJournal(postgres_url, keys=[])
        try:
            assert await ajournal.run(lambda j: j.invocation(str(context.invocation_id))) is not None
            assert await asyncio.to_thread(_drop_connections, postgres_url) >= 1
            assert await ajournal.run(lambda j: j.invocation(str(context.invocation_id))) is not None
        finally:
            await ajournal.dispose()

    asyncio.run(story())


@pytest.mark.parametrize("again", [True, False], ids=["may-be-sent-again", "may-not"])
def test_a_write_cut_off_midway_is_sent_again_only_when_that_is_harmless(
    postgres_url: str, again: bool
) -> None:
    # given: a call's row, locked by another session, so that its outcome's write waits on it
    context = InvocationContext(memory_id="m1", user_message="hi")
    invocation_id = str(context.invocation_id)
    request = call("count", "c1", what="a")
    locker = sa.create_engine(postgres_url)

    async def story() -> str | None:
        journal = AsyncJournal(postgres_url, keys=[])
        try:
            await journal.execute(start_write(journal.cipher, context, Invocation(context).to_json(), None))
            intents = [Intent(1, request, "p", False, f"{invocation_id}:c1")]
            turn = message_to_json(AiMessage(tool_execution_requests=[request]))
            [row] = turn_rows(
                intents, (await journal.execute(turn_write(invocation_id, 1, turn, intents))).rows
            )
            write = outcome_write(row, ToolOutcome(OutcomeKind.SUCCESS, "counted a"), "counted a", None)
            write = Write(write.statement, write.params, again=again)
            with locker.connect() as held:
                held.execute(
                    sa.text("SELECT id FROM toolfleet_tool_calls WHERE id = :row FOR UPDATE"), {"row": row}
                )
                writing = asyncio.ensure_future(journal.execute(write))
                # when: the waiting write's connection is ended midway (a server or proxy restart)
                for _ in range(100):
                    if await asyncio.to_thread(_drop_connections, postgres_url, True):
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the write never waited on the lock")
                await asyncio.sleep(0.3)
                held.rollback()  # the lock is let go
            try:
                await writing
            except sa.exc.OperationalError as exc:
                assert isinstance(exc.orig, psycopg.OperationalError)  # AdminShutdown: terminated
                return "failed"
            return None
        finally:
            await journal.dispose()

    try:
        failed = asyncio.run(story())
    finally:
        locker.dispose()
    # then: an outcome (the same row written again leaves the same row) is sent again and lands; a
    # write that may not be sent again fails as its connection did
    if again:
        assert failed is None
        journal = Journal(postgres_url, keys=[])
        try:
            [row] = journal.calls(invocation_id)
            assert (row.state, row.result) == ("succeeded", "counted a")
        finally:
            journal.engine.dispose()
    else:
        assert failed == "failed"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("how", ["transaction", "statement", "conversation"])
def test_a_journal_waits_out_a_database_that_refuses_connections_for_a_moment(
    postgres_url: str, how: str
) -> None:
    # given: the journal's database reached through a forwarder (a proxy, a server's port) that is gone
    port = _free_port()
    target = sa.make_url(postgres_url)
    through = target.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    context = InvocationContext(memory_id="m1", user_message="hi")
    invocation_id = str(context.invocation_id)
    forwarder = FaultProxy("postgres", ("127.0.0.1", port), (target.host or "127.0.0.1", target.port or 5432))
    forwarder.start()
    journal = AsyncJournal(through, keys=[])
    conversations = SqlChatMemoryStore(through)  # the conversation store's database, the same way

    async def story() -> float:
        try:
            await journal.execute(start_write(journal.cipher, context, Invocation(context).to_json(), None))
            await journal.dispose()  # no connection kept: the next statement connects anew
            forwarder.stop()  # connections refused from now on
            again = FaultProxy("postgres", forwarder.listen, forwarder.target)
            threading.Timer(1.0, again.start).start()  # back after a second, as a restarted one is
            started = time.monotonic()
            try:
                # when: the journal is used while it refuses
                if how == "transaction":
                    record = await journal.run(lambda j: j.invocation(invocation_id))
                    assert record is not None and record.id == invocation_id
                elif how == "statement":
                    await journal.execute(heartbeat_write(invocation_id, None))
                else:
                    await conversations.aupdate_messages("m1", [UserMessage("hi")])
                    assert [m.text for m in await conversations.aget_messages("m1")] == ["hi"]
                return time.monotonic() - started
            finally:
                await journal.dispose()
                await conversations.adispose()
                again.stop()
        finally:
            forwarder.stop()
            conversations.engine.dispose()

    # then: it connects once the database is back, and goes on, instead of failing
    waited = asyncio.run(story())
    assert 0.9 <= waited < CONNECT_RETRY_S, waited


def test_an_sqlite_journal_that_cannot_be_opened_fails_at_once(tmp_path: Path) -> None:
    # given: an SQLite journal whose directory is gone once its schema was made
    folder = tmp_path / "journal"
    folder.mkdir()
    journal = AsyncJournal(f"sqlite:///{folder / 'journal.db'}", keys=[])

    async def story() -> float:
        try:
            await journal.run(lambda j: j.invocations())
            await journal.dispose()
            shutil.rmtree(folder)
            started = time.monotonic()
            # when: it is used again
            with pytest.raises(sa.exc.OperationalError, match="unable to open database file"):
                await journal.run(lambda j: j.invocations())
            return time.monotonic() - started
        finally:
            await journal.dispose()

    # then: the error comes at once: a file that cannot be opened is no outage to wait out
    assert asyncio.run(story()) < 1.0
