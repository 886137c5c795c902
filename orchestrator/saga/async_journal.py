"""The journal without blocking an event loop: `AsyncJournal`, on SQLAlchemy's asyncio extension.

Its SQL is the `Journal`'s own: `run(fn)` opens a transaction on an async connection and hands `fn`
a `Journal` bound to it (`Journal.on_connection`), run through `AsyncConnection.run_sync`, so each
statement is awaited on the loop while `fn` reads as plain synchronous code. The loop, the saga and
recovery call the journal only through `run`, the one method of `JournalRunner`, which the sync
`Journal` has too (it runs `fn` inline, for callers that may block).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from orchestrator._database_url import connected, database_engine, shared_loop_engines
from orchestrator.saga._journal_crypto import JournalCipher
from orchestrator.saga._journal_writes import Write, Written, heartbeat_write, written
from orchestrator.saga.journal import Journal, owner_id
from workers.settings import Settings

if TYPE_CHECKING:
    from orchestrator.saga._fast_writes import FastWrites

__all__ = ["AsyncJournal", "Beat", "JournalRunner", "beating", "journal_runner", "to_the_end"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class JournalRunner(Protocol):
    """Runs a function of a `Journal` in one transaction: `await runner.run(lambda j: j.calls(id))`;
    `execute` runs one statement of the hot path in autocommit (no `BEGIN` or `COMMIT` around it)."""

    async def run(self, fn: Callable[[Journal], _T]) -> _T: ...

    async def execute(self, write: Write) -> Written:
        """One statement of the journal's hot path (`_journal_writes`), in autocommit."""
        ...

    @property
    def cipher(self) -> JournalCipher:
        """What seals and opens the invocation parameters and checkpoints."""
        ...

    @property
    def backend(self) -> str:
        """The database's kind, as SQLAlchemy names it: `postgresql`, `sqlite`."""
        ...


class AsyncJournal:
    """The saga log on an async engine: every statement is awaited, none blocks the event loop.

    Built from a database URL (`sqlite:///...` is opened through aiosqlite, `postgresql+psycopg://...`
    through psycopg 3's async connections), from a `Journal` (the same database, and its keys), or
    from an `AsyncEngine` (used as it is, on the loop its owner uses it on). `keys` as the `Journal`'s.
    The schema is brought up to date (`ensure_schema`) in a thread before the first `run`. Each event
    loop gets its own engine, closed when that loop shuts down or by `dispose()`.
    """

    def __init__(
        self,
        source: str | Journal | AsyncEngine = "sqlite:///toolfleet.db",
        *,
        keys: str | Sequence[str] | None = None,
    ) -> None:
        if isinstance(source, Journal) and keys is None:
            self._cipher = source.cipher
        else:
            self._cipher = JournalCipher(Settings.from_env().journal_keys if keys is None else keys)
        self._given = source if isinstance(source, AsyncEngine) else None
        if isinstance(source, str):
            self._engines = shared_loop_engines(source)
        else:
            url = source.url if isinstance(source, AsyncEngine) else source.engine.url
            self._engines = shared_loop_engines(url)
        self._schema_ready = isinstance(source, Journal)  # a Journal ensured it when it was built
        self._schema_lock = threading.Lock()
        self._backend = sa.make_url(self._engines.url).get_backend_name()
        self._fast: FastWrites | None = None
        if self._given is None and sa.make_url(self._engines.url).drivername == "postgresql+psycopg":
            from orchestrator.saga._fast_writes import shared_fast_writes  # psycopg: the extra's

            self._fast = shared_fast_writes(self._engines.url)

    @property
    def cipher(self) -> JournalCipher:
        """What seals and opens the invocation parameters and checkpoints."""
        return self._cipher

    async def run(self, fn: Callable[[Journal], _T]) -> _T:
        """`fn(journal)` in one transaction on an async connection: committed when `fn` returns,
        rolled back when it raises. `fn` runs on the event loop: it should only call the journal."""
        cipher = self._cipher
        async with connected(await self._engine()) as connection, connection.begin():
            return await connection.run_sync(lambda sync: fn(Journal.on_connection(sync, cipher)))

    async def execute(self, write: Write) -> Written:
        """One statement of the journal's hot path (`_journal_writes`), in autocommit: on PostgreSQL
        straight through psycopg (`_fast_writes`), else on this journal's engine."""
        if self._fast is not None:
            if not self._schema_ready:
                await asyncio.to_thread(self._ensure_schema)
            return await self._fast.execute(write)
        async with connected(await self._engine()) as connection:
            autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
            return written(await autocommit.execute(write.statement, write.params))

    async def _engine(self) -> AsyncEngine:
        if not self._schema_ready:
            await asyncio.to_thread(self._ensure_schema)
        return self._given if self._given is not None else await self._engines.engine()

    @property
    def backend(self) -> str:
        return self._backend

    async def dispose(self) -> None:
        """Close the connections this journal holds for the running loop (the next `run` opens new
        ones); an `AsyncEngine` given is its owner's to dispose."""
        await self._engines.dispose()
        if self._fast is not None:
            await self._fast.dispose()

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if self._schema_ready:
                return
            from orchestrator.saga.migrations import ensure_schema  # Alembic loads only when needed

            engine = database_engine(_sync_url(self._engines.url))
            try:
                ensure_schema(engine)
            finally:
                engine.dispose()
            self._schema_ready = True


def journal_runner(journal: Journal | AsyncJournal | None) -> Journal | AsyncJournal | None:
    """What an `AiService` runs its invocations' journal I/O through: a `Journal` given is replaced
    by an `AsyncJournal` over the same database and keys, so an invocation never blocks its event
    loop; an in-memory SQLite journal is kept (another connection would open another database)."""
    if not isinstance(journal, Journal):
        return journal
    url = journal.engine.url
    if url.get_backend_name() == "sqlite" and (
        url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"
    ):
        return journal
    return AsyncJournal(journal)


def _sync_url(url: str) -> str:
    """The async URL's database as the sync engine that ensures its schema opens it."""
    parsed = sa.make_url(url)
    driver = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg"}.get(parsed.get_backend_name())
    return (parsed.set(drivername=driver) if driver else parsed).render_as_string(hide_password=False)


async def to_the_end(step: Awaitable[_T]) -> tuple[_T, bool]:
    """`step` run to its end even if the caller cancels meanwhile (a saga's outcome must be journaled
    and what it owes undone, once it has begun): its result, and whether the caller cancelled."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while True:  # however often the caller is cancelled meanwhile (a drain, then a shutdown)
        try:
            return await asyncio.shield(task), cancelled
        except asyncio.CancelledError:
            if task.cancelled():  # the step itself was cancelled, not its caller
                raise
            if task.done():  # it ended as its caller was cancelled: its outcome stands
                return task.result(), True
            cancelled = True


OVERDUE_BEATS = 2  # an owner whose last beat is older than this many intervals may have been taken over


def beating(
    journal: JournalRunner,
    invocation_id: str,
    every_s: float,
    on_taken_over: Callable[[str | None], None] | None = None,
) -> Beat:
    """A task keeping the invocation's journal heartbeat fresh every `every_s` for this process, its
    owner (an invocation's loop, or a recovery), until cancelled: recovery never takes over a live
    owner. A beat of an invocation another process took over writes nothing, and then, with
    `on_taken_over`, tells it (the new owner), once, and stops; a failed one is logged and the next
    tries again."""
    return Beat(journal, invocation_id, every_s, on_taken_over)


class Beat:
    """An owner's heartbeat of one invocation (`beating`), and the fence its calls pass before they
    are dispatched (`fence`)."""

    def __init__(
        self,
        journal: JournalRunner,
        invocation_id: str,
        every_s: float,
        on_taken_over: Callable[[str | None], None] | None,
    ) -> None:
        self.journal, self.invocation_id, self.every_s = journal, invocation_id, every_s
        self.on_taken_over = on_taken_over
        self.owner = owner_id()
        self.last_beat = time.monotonic()  # the invocation was claimed (started, adopted) just now
        self.told = False  # the takeover was told (once, by the beat or the fence that found it)
        self.task = asyncio.ensure_future(self._beating())

    def cancel(self) -> None:
        self.task.cancel()

    async def fence(self) -> None:
        """Before calls are dispatched: when this owner's last beat is overdue (the process stood
        still: a pause, a blocked loop, a database away), so that another may have counted it gone
        and taken the invocation over, beat now; taken over, stop here (`CancelledError`, the
        takeover told as a beat tells it) so that not one more call is dispatched."""
        if time.monotonic() - self.last_beat <= OVERDUE_BEATS * self.every_s:
            return
        if not await self._beat():
            await asyncio.sleep(0)  # the takeover's cancel of this task, if it is the loop's, lands here
            raise asyncio.CancelledError

    async def _beating(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            try:
                if not await self._beat():
                    return
            except Exception as exc:  # a journal hiccup must not end the invocation or its recovery
                log.warning("journal heartbeat of %s failed: %s", self.invocation_id, exc)

    async def _beat(self) -> bool:
        """One beat; False when another process took the invocation over (told to `on_taken_over`)."""
        invocation_id = self.invocation_id
        if (await self.journal.execute(heartbeat_write(invocation_id, self.owner))).rowcount:
            self.last_beat = time.monotonic()
            return True
        if self.on_taken_over is None:
            return True
        record = await self.journal.run(lambda j: j.invocation(invocation_id))
        if record is None or record.owner == self.owner:  # no row yet: not taken
            return True
        if not self.told:  # the beat and the fence may both have found it at once
            self.told = True
            self.on_taken_over(record.owner)
        return False
