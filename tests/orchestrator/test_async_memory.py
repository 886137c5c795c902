"""The conversation store from a coroutine: `SqlChatMemoryStore.aget_messages` / `aupdate_messages`
read and write what its blocking methods do (SQLite and PostgreSQL), without using its blocking
engine."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from orchestrator import (
    AiMessage,
    SqlChatMemoryStore,
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
