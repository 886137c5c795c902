"""Chat memory: a window of the conversation per memory id, kept in a pluggable store."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from orchestrator._database_url import connected, database_engine, shared_loop_engines
from orchestrator._memory_tables import memory_table
from orchestrator.messages import (
    AiMessage,
    ChatMessage,
    SystemMessage,
    ToolExecutionResultMessage,
    messages_from_json,
    messages_to_json,
)

__all__ = [
    "AsyncChatMemory",
    "AsyncChatMemoryStore",
    "ChatMemory",
    "ChatMemoryStore",
    "InMemoryChatMemoryStore",
    "MessageWindowChatMemory",
    "SqlChatMemoryStore",
]


class ChatMemoryStore(Protocol):
    """Where a memory's messages live between invocations."""

    def get_messages(self, memory_id: str) -> list[ChatMessage]: ...

    def update_messages(self, memory_id: str, messages: Sequence[ChatMessage]) -> None: ...

    def delete_messages(self, memory_id: str) -> None: ...


@runtime_checkable
class AsyncChatMemoryStore(Protocol):
    """A store that can also be read and written from a coroutine without blocking its event loop
    (`SqlChatMemoryStore`): the loop of an invocation uses these when its memory's store has them."""

    async def aget_messages(self, memory_id: str) -> list[ChatMessage]: ...

    async def aupdate_messages(self, memory_id: str, messages: Sequence[ChatMessage]) -> None: ...


class InMemoryChatMemoryStore:
    """Messages in a dict of this process; the default store."""

    def __init__(self) -> None:
        self._messages: dict[str, list[ChatMessage]] = {}
        self._lock = threading.Lock()

    def get_messages(self, memory_id: str) -> list[ChatMessage]:
        with self._lock:
            return list(self._messages.get(memory_id, []))

    def update_messages(self, memory_id: str, messages: Sequence[ChatMessage]) -> None:
        with self._lock:
            self._messages[memory_id] = list(messages)

    def delete_messages(self, memory_id: str) -> None:
        with self._lock:
            self._messages.pop(memory_id, None)


class SqlChatMemoryStore:
    """Messages as JSON in one SQL row per memory id (SQLAlchemy 2; SQLite by default).

    Stateless orchestrator replicas share conversations through it: point them at one database,
    e.g. `SqlChatMemoryStore("postgresql+psycopg://...")`. Building it brings the database's schema
    up to date (`orchestrator.saga.migrations.ensure_schema`), safely when many replicas start at once.
    From a coroutine, `aget_messages` and `aupdate_messages` do the same without blocking the event
    loop, on SQLAlchemy's asyncio extension (aiosqlite for SQLite, psycopg 3's async connections for
    PostgreSQL; each loop its own engine, closed when the loop shuts down or by `adispose`).
    """

    def __init__(self, url_or_engine: str | Engine = "sqlite:///toolfleet.db") -> None:
        self.engine = database_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
        self._async_engines = shared_loop_engines(self.engine.url)
        from orchestrator.saga.migrations import ensure_schema  # Alembic loads only for a SQL store

        ensure_schema(self.engine)

    def get_messages(self, memory_id: str) -> list[ChatMessage]:
        with self.engine.connect() as connection:
            return _read_messages(connection, memory_id)

    def update_messages(self, memory_id: str, messages: Sequence[ChatMessage]) -> None:
        with self.engine.begin() as connection:
            _write_messages(connection, memory_id, messages)

    async def aget_messages(self, memory_id: str) -> list[ChatMessage]:
        """`get_messages` awaited on an async connection."""
        async with connected(await self._async_engines.engine()) as connection:
            return await connection.run_sync(_read_messages, memory_id)

    async def aupdate_messages(self, memory_id: str, messages: Sequence[ChatMessage]) -> None:
        """`update_messages` awaited on an async connection, in one transaction."""
        async with connected(await self._async_engines.engine()) as connection, connection.begin():
            await connection.run_sync(_write_messages, memory_id, messages)

    async def adispose(self) -> None:
        """Close the async connections this store holds for the running loop."""
        await self._async_engines.dispose()

    def delete_messages(self, memory_id: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(sa.delete(memory_table).where(memory_table.c.memory_id == memory_id))


def _read_messages(connection: Connection, memory_id: str) -> list[ChatMessage]:
    raw = connection.execute(
        sa.select(memory_table.c.messages).where(memory_table.c.memory_id == memory_id)
    ).scalar_one_or_none()
    return messages_from_json(json.loads(raw)) if raw else []


def _write_messages(connection: Connection, memory_id: str, messages: Sequence[ChatMessage]) -> None:
    """One statement that writes the row whether or not it exists (PostgreSQL and SQLite's `INSERT ...
    ON CONFLICT DO UPDATE`): two first writes of one memory id at once are no primary-key violation."""
    payload = json.dumps(messages_to_json(messages), ensure_ascii=False)
    now = datetime.now(UTC)
    dialect = connection.dialect.name
    if dialect in _UPSERTS:
        insert = _UPSERTS[dialect](memory_table).values(memory_id=memory_id, messages=payload, updated_at=now)
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=[memory_table.c.memory_id], set_={"messages": payload, "updated_at": now}
            )
        )
        return
    updated = connection.execute(
        sa.update(memory_table)
        .where(memory_table.c.memory_id == memory_id)
        .values(messages=payload, updated_at=now)
    ).rowcount
    if not updated:
        connection.execute(
            sa.insert(memory_table).values(memory_id=memory_id, messages=payload, updated_at=now)
        )


_UPSERTS: dict[str, Any] = {"postgresql": postgresql_insert, "sqlite": sqlite_insert}


class ChatMemory(Protocol):
    """The conversation of one memory id, as the loop reads and writes it."""

    id: str | None

    def add(self, message: ChatMessage) -> None: ...

    def messages(self) -> list[ChatMessage]: ...

    def set_messages(self, messages: Sequence[ChatMessage]) -> None: ...

    def clear(self) -> None: ...


@runtime_checkable
class AsyncChatMemory(Protocol):
    """A memory an invocation's loop can read and write from its coroutines without blocking."""

    async def amessages(self) -> list[ChatMessage]: ...

    async def aadd(self, *messages: ChatMessage) -> None: ...

    async def aset_messages(self, messages: Sequence[ChatMessage]) -> None: ...


class MessageWindowChatMemory:
    """Keeps the last `max_messages` messages, and the system message always.

    Evicting an AI message that called tools evicts its tool results with it, so the model is never
    sent a result without its call (or a call without its results).
    """

    def __init__(
        self, max_messages: int, *, id: str | None = None, store: ChatMemoryStore | None = None
    ) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        self.max_messages = max_messages
        self.id = id
        self.store: ChatMemoryStore = store if store is not None else InMemoryChatMemoryStore()

    @property
    def _key(self) -> str:
        return self.id or "default"

    def messages(self) -> list[ChatMessage]:
        return self.store.get_messages(self._key)

    def add(self, message: ChatMessage) -> None:
        added = _with(self.messages(), message)
        if added is not None:
            self.store.update_messages(self._key, _evict(added, self.max_messages))

    def set_messages(self, messages: Sequence[ChatMessage]) -> None:
        self.store.update_messages(self._key, _evict(list(messages), self.max_messages))

    # From a coroutine (an invocation's loop): the store's own coroutines when it has them, so a
    # database write waiting for a lock never blocks the event loop, whose other tasks may hold it.

    async def amessages(self) -> list[ChatMessage]:
        if isinstance(self.store, AsyncChatMemoryStore):
            return await self.store.aget_messages(self._key)
        return self.messages()

    async def aadd(self, *messages: ChatMessage) -> None:
        """Add `messages` in order, as many `add`s would, with one read and one write."""
        window, changed = await self.amessages(), False
        for message in messages:
            added = _with(window, message)
            if added is not None:
                window, changed = _evict(added, self.max_messages), True
        if changed:
            await self.aset_messages(window)

    async def aset_messages(self, messages: Sequence[ChatMessage]) -> None:
        if isinstance(self.store, AsyncChatMemoryStore):
            await self.store.aupdate_messages(self._key, _evict(list(messages), self.max_messages))
        else:
            self.set_messages(messages)

    def clear(self) -> None:
        self.store.delete_messages(self._key)


def _with(messages: list[ChatMessage], message: ChatMessage) -> list[ChatMessage] | None:
    """`messages` with `message` added (a system message replaces the one there, first); None when
    it is the system message already there."""
    if not isinstance(message, SystemMessage):
        return [*messages, message]
    existing = next((m for m in messages if isinstance(m, SystemMessage)), None)
    if existing == message:
        return None
    return [message, *(m for m in messages if not isinstance(m, SystemMessage))]


def _evict(messages: list[ChatMessage], limit: int) -> list[ChatMessage]:
    while len(messages) > limit:
        index = next((i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), None)
        if index is None:
            break
        evicted = messages.pop(index)
        if isinstance(evicted, AiMessage) and evicted.tool_execution_requests:
            while index < len(messages) and isinstance(messages[index], ToolExecutionResultMessage):
                messages.pop(index)
    # Never leave results whose call was evicted at the front of the window.
    first = next((i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), None)
    while (
        first is not None
        and first < len(messages)
        and isinstance(messages[first], ToolExecutionResultMessage)
    ):
        messages.pop(first)
    return messages
