"""The conversation store from a coroutine: `SqlChatMemoryStore.aget_messages` / `aupdate_messages`
read and write what its blocking methods do (SQLite and PostgreSQL), without using its blocking
engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import orchestrator._database_url as database_url_module
from orchestrator import (
    AiMessage,
    AiService,
    ChatRequest,
    ChatResponse,
    MessageWindowChatMemory,
    ScriptedChatModel,
    SqlChatMemoryStore,
    SystemMessage,
    ToolExecutionRequest,
    ToolExecutionResultMessage,
    UserMessage,
)
from tests.orchestrator._databases import KINDS, fresh_database

CONVERSATION = [
    UserMessage("what is 2 + 2?"),
    AiMessage(tool_execution_requests=[ToolExecutionRequest("c1", "add", '{"a": 2, "b": 2}')]),
    ToolExecutionResultMessage("c1", "add", "4"),
    AiMessage("4, ünïcode kept"),
]


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlChatMemoryStore]:
    with fresh_database(request.param, tmp_path) as url:
        store = SqlChatMemoryStore(url)
        yield store
        store.engine.dispose()


def test_what_aupdate_writes_get_reads_and_back(store: SqlChatMemoryStore) -> None:
    # given: every checkout of the store's blocking engine is counted
    checkouts: list[object] = []
    sa.event.listen(store.engine, "checkout", lambda *args: checkouts.append(args))

    # when: a conversation is written, read, extended and read again from coroutines
    async def turn() -> tuple[list[object], list[object], list[object]]:
        try:
            empty = await store.aget_messages("m1")
            await store.aupdate_messages("m1", CONVERSATION[:2])
            first = await store.aget_messages("m1")
            await store.aupdate_messages("m1", CONVERSATION)  # an update of the row written above
            return list(empty), list(first), list(await store.aget_messages("m1"))
        finally:
            await store.adispose()

    empty, first, second = asyncio.run(turn())

    # then: the coroutines never used the blocking engine, and the blocking reader agrees with them
    assert checkouts == []
    assert (empty, first, second) == ([], CONVERSATION[:2], CONVERSATION)
    assert store.get_messages("m1") == CONVERSATION
    store.update_messages("m2", CONVERSATION[:1])
    assert asyncio.run(store.aget_messages("m2")) == CONVERSATION[:1]


def test_the_window_read_and_written_from_coroutines_is_the_window_of_the_blocking_methods(
    store: SqlChatMemoryStore,
) -> None:
    # given: the same messages added one by one through the blocking methods, and at once from a
    # coroutine, to windows of four messages over the same store
    messages = [SystemMessage("s"), *CONVERSATION, SystemMessage("s"), UserMessage("again")]
    blocking = MessageWindowChatMemory(4, id="blocking", store=store)
    for message in messages:
        blocking.add(message)
    awaited = MessageWindowChatMemory(4, id="awaited", store=store)

    async def add() -> list[object]:
        try:
            await awaited.aadd(*messages[:3])
            await awaited.aadd(*messages[3:])
            return list(await awaited.amessages())
        finally:
            await store.adispose()

    # then: both windows hold the same, and the blocking reader agrees
    assert asyncio.run(add()) == blocking.messages() == awaited.messages()
    assert awaited.messages() == [SystemMessage("s"), AiMessage("4, ünïcode kept"), UserMessage("again")]


class _HoldsTheDatabase:
    """A model that, before it answers, has another task of the event loop take the SQLite write
    lock of the conversation's database and hold it across an await for `hold_s`."""

    provider = "scripted"

    def __init__(self, url: str, hold_s: float) -> None:
        self.scripted = ScriptedChatModel(["the answer"])
        self.engine = create_async_engine(url.replace("sqlite://", "sqlite+aiosqlite://"))
        self.hold_s = hold_s
        self.held: asyncio.Task[None] | None = None

    async def chat(self, request: ChatRequest) -> ChatResponse:
        locked = asyncio.Event()

        async def hold() -> None:
            async with self.engine.begin() as connection:
                await connection.execute(sa.text("INSERT INTO held VALUES (1)"))  # the write lock
                locked.set()
                await asyncio.sleep(self.hold_s)
            await self.engine.dispose()

        self.held = asyncio.ensure_future(hold())
        await locked.wait()
        return await self.scripted.chat(request)


def test_a_memory_write_waiting_for_a_lock_held_by_another_task_of_the_loop_does_not_block_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a service whose conversation is kept in SQLite, whose connections give up waiting for
    # a lock after 5 s, and a model that has another task hold the write lock as it answers
    monkeypatch.setattr(database_url_module, "SQLITE_BUSY_TIMEOUT_S", 5)
    url = f"sqlite:///{tmp_path}/conversation.db"
    store = SqlChatMemoryStore(url)
    with store.engine.begin() as connection:
        connection.execute(sa.text("CREATE TABLE held (n INTEGER)"))
    model = _HoldsTheDatabase(url, hold_s=0.5)
    service = AiService(
        chat_model=model,
        chat_memory_provider=lambda memory_id: MessageWindowChatMemory(20, id=memory_id, store=store),
    )

    # when: the answer is written to the conversation while the lock is held
    async def chat() -> str | None:
        try:
            result = await service.achat("hello", memory_id="m1")
            assert model.held is not None
            await model.held
            return result.content
        finally:
            await store.adispose()

    started = time.monotonic()
    answer = asyncio.run(chat())

    # then: the write waited for the lock to be let go (the loop went on meanwhile: a write that
    # blocked it would wait for a lock its own loop holds, and fail when the 5 s are up)
    assert answer == "the answer"
    assert time.monotonic() - started < 4
    assert store.get_messages("m1") == [UserMessage("hello"), AiMessage("the answer")]
    with store.engine.connect() as connection:
        assert connection.execute(sa.text("SELECT count(*) FROM held")).scalar_one() == 1
