"""The journal's hot path on PostgreSQL straight through psycopg 3's async connections.

Measured on one process: a statement through SQLAlchemy's asyncio extension costs about 0.45 ms of
CPU (its greenlet bridge, pool and execution context), the same statement on a psycopg connection
about 0.1 ms. The hot path's single statements (`_journal_writes`) are compiled once per shape by
SQLAlchemy's PostgreSQL dialect and sent on connections of their own, in autocommit: one set per
database and event loop in a process (`shared_fast_writes`), at most `FAST_POOL_SIZE` at once (a
round trip holds one for a fraction of a millisecond), closed when the loop shuts down. Errors are
SQLAlchemy's, as everywhere else in the journal.

Group commit: the writes of a loop's invocations that wait at the same time (written while another
is in flight) go out together, up to `MAX_BATCH`, in one round trip (a pipeline) and one
transaction: one commit, one WAL flush, however many invocations they are of. A write never waits
for others to come: with nothing in flight it goes at once, from its caller's task; else a sender
takes it at the loop's next turn, with whatever waits by then, as soon as one of the connections is
free; so batches grow only with the load. Each caller waits until its own write is committed, so
each write promises what it did alone (an intent durable before its call is published, an outcome
before its invocation goes on), and `synchronous_commit` is left as the server has it. A batch the
database refuses (or with a value psycopg cannot send) is rolled back whole, then its writes are
sent one by one, each told its own result or error.

No batch waits for another while holding what that one waits for: an invocation has one write in
flight at a time, but for its concurrent calls' intents and outcomes (rows of their own) and its
heartbeat, which is never batched (`Write.alone`); a batch writes the outcomes it holds in the
order of their rows, as `Journal.abandon_in_flight` (which may run while they are in flight) locks
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import Compiled

from orchestrator._database_url import CONNECT_RETRY_EVERY_S, CONNECT_RETRY_S
from orchestrator.saga._journal_writes import Write, Written

__all__ = ["FAST_POOL_SIZE", "MAX_BATCH", "FastWrites", "shared_fast_writes"]

# The connections one process keeps for the hot path per database and event loop, and never more:
# beside SQLAlchemy's pool (`ASYNC_POOL_SIZE`), within a server's connection limit across replicas.
FAST_POOL_SIZE = 4
MAX_BATCH = 64  # writes sent in one round trip and committed together, at most
CONNECT_TIMEOUT_S = 10  # a server that does not answer fails the write, it does not hang it
RESEND_S = 15.0  # a write that may be sent again is, this long, while its connection keeps dropping


class _Connections:
    """The connections of one event loop: reused, at most `size` in use at once."""

    def __init__(self, conninfo: str, size: int) -> None:
        self.conninfo = conninfo
        self.idle: list[psycopg.AsyncConnection[Any]] = []
        self.slots = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self.slots:
            connection = self.idle.pop() if self.idle else None
            if connection is not None and _dropped(connection):  # the server (or a proxy) hung up
                with contextlib.suppress(Exception):
                    await connection.close()
                connection = None
            if connection is None:
                connection = await self._connect()
            try:
                yield connection
            finally:
                if not (connection.closed or connection.broken):  # one the server dropped is not reused
                    self.idle.append(connection)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection, tried again for `CONNECT_RETRY_S` while the server (or a proxy before it)
        refuses: nothing was sent yet, so a write waits out a brief outage instead of failing."""
        deadline = time.monotonic() + CONNECT_RETRY_S
        while True:
            try:
                return await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
            except psycopg.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(CONNECT_RETRY_EVERY_S)

    async def close(self) -> None:
        idle, self.idle = self.idle, []
        for connection in idle:
            with contextlib.suppress(Exception):
                await connection.close()


def _dropped(connection: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection was closed by the other side: an idle connection's server sends
    nothing, so anything to read (its end of file, or a termination notice) means it is gone. One
    `select` with no wait, where a ping would cost a round trip on every write."""
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


@dataclass(eq=False)
class _Pending:
    """A write waiting for its batch: its SQL, parameters and the caller's future."""

    sql: str
    params: Mapping[str, Any] | None
    again: bool
    row: int  # the call row it updates (`Write.row`), else -1
    future: asyncio.Future[Written]
    give_up: float = field(default_factory=lambda: time.monotonic() + RESEND_S)

    def fail(self, exc: psycopg.Error) -> None:
        if not self.future.done():
            error = sa.exc.DBAPIError.instance(
                self.sql, self.params, exc, psycopg.Error, hide_parameters=True
            )
            self.future.set_exception(error)


class _Batches:
    """The writes of one event loop waiting to be sent, and the tasks sending them: at most one per
    connection, each taking all that waits (up to `MAX_BATCH`) in one round trip."""

    def __init__(self, connections: _Connections) -> None:
        self.connections = connections
        self.waiting: list[_Pending] = []
        self.sending = 0  # writes sent from their caller's task, and senders not yet out of work
        self._senders: set[asyncio.Task[None]] = set()  # referenced while they run

    async def submit(self, pending: _Pending) -> None:
        """Send `pending` (its future tells its result): at once from the caller's task when nothing
        else is in flight (no one to share a commit with), else with the next batch."""
        if self.sending or self.waiting:
            self.waiting.append(pending)
            self._start_sender()
            return
        self.sending += 1
        try:
            await self.send([pending])
        finally:
            self.sending -= 1
            self._start_sender()  # for the writes that came meanwhile

    def _start_sender(self) -> None:
        if self.waiting and self.sending < FAST_POOL_SIZE:  # else a busy one takes them next
            self.sending += 1
            sender = asyncio.ensure_future(self._send_waiting())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)

    async def _send_waiting(self) -> None:
        try:
            while self.waiting:
                batch = [p for p in self.waiting[:MAX_BATCH] if not p.future.done()]  # its caller gone
                del self.waiting[:MAX_BATCH]
                batch.sort(key=lambda pending: pending.row)  # call rows locked in their order
                if batch:
                    await self.send(batch)
        finally:  # counted out as it finds nothing waiting, in the same step: no write is left behind
            self.sending -= 1

    async def send(self, batch: list[_Pending]) -> None:
        """Send `batch` in one round trip, committed as one transaction, and settle each future (one
        left unsettled would hang its caller, whatever happens here)."""
        try:
            await self._send(batch)
        except BaseException as exc:
            for pending in batch:
                if not pending.future.done():
                    if isinstance(exc, asyncio.CancelledError):
                        pending.future.cancel()
                    else:
                        pending.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def _send(self, batch: list[_Pending]) -> None:
        """A batch refused by the database is sent again one write at a time; on a connection dropped
        meanwhile, the writes that may be sent again are, for up to `RESEND_S`, the others fail."""
        while batch:
            connection: psycopg.AsyncConnection[Any] | None = None
            try:
                async with self.connections.connection() as connection:
                    results = await _run(connection, batch)
            except psycopg.Error as exc:
                lost = connection is None or connection.closed or connection.broken
                if not lost and len(batch) > 1:  # rolled back whole: each alone, its own result
                    for pending in batch:
                        if not pending.future.done():  # else its caller is gone
                            await self._send([pending])
                    return
                resend = lost or isinstance(exc, psycopg.OperationalError)
                again = [p for p in batch if resend and p.again and time.monotonic() < p.give_up]
                for pending in batch:
                    if pending not in again:
                        pending.fail(exc)
                batch = [p for p in again if not p.future.done()]
                if batch:
                    await asyncio.sleep(CONNECT_RETRY_EVERY_S)
                continue
            for pending, result in zip(batch, results, strict=True):
                if not pending.future.done():
                    pending.future.set_result(result)
            return


async def _run(connection: psycopg.AsyncConnection[Any], batch: list[_Pending]) -> list[Written]:
    """The statements of `batch` on `connection` (autocommit): one alone, or several in one
    transaction sent as one pipeline (one round trip): all committed, or none, whatever fails, on
    either side (a value psycopg cannot send fails on this side, after the statements before it)."""
    if len(batch) == 1:
        cursor = await connection.execute(batch[0].sql, batch[0].params)
        return [await _written(cursor)]
    async with connection.pipeline(), connection.transaction():
        cursors = [await connection.execute(pending.sql, pending.params) for pending in batch]
    return [await _written(cursor) for cursor in cursors]


async def _written(cursor: psycopg.AsyncCursor[Any]) -> Written:
    rows = await cursor.fetchall() if cursor.description is not None else []
    return Written([tuple(row) for row in rows], cursor.rowcount)


class FastWrites:
    """Single statements of the journal on the PostgreSQL database of `url`."""

    def __init__(self, url: str | sa.URL) -> None:
        parsed = sa.make_url(url)
        self.conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        self._dialect: sa.Dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
        self._compiled: dict[tuple[int, frozenset[str]], Compiled] = {}
        self._loops: dict[asyncio.AbstractEventLoop, tuple[_Batches, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()

    async def execute(self, write: Write) -> Written:
        """Run `write`, committed when this returns: its returned rows and its row count. Writes of
        other invocations waiting at the same time share its round trip and its commit (see the
        module), unless it is to go `alone`. A write that may be sent again (`Write.again`) whose
        connection dropped (the server or a proxy restarting) is, on a fresh connection, for up to
        `RESEND_S`."""
        compiled = self._compile(write)
        batches = await self._batches()
        pending = _Pending(
            str(compiled),
            compiled.construct_params(write.params),
            write.again,
            -1 if write.row is None else write.row,
            asyncio.get_running_loop().create_future(),
        )
        await (batches.send([pending]) if write.alone else batches.submit(pending))
        return await pending.future

    def _compile(self, write: Write) -> Compiled:
        key = (id(write.statement), frozenset(write.params))
        compiled = self._compiled.get(key)
        if compiled is None:
            table = getattr(write.statement, "table", None)
            columns = set(table.c.keys()) if table is not None else set()
            keys = [name for name in write.params if name in columns]
            statement: sa.ClauseElement = write.statement
            compiled = statement.compile(dialect=self._dialect, column_keys=keys)
            self._compiled[key] = compiled
        return compiled

    async def _batches(self) -> _Batches:
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._loops.get(loop)
            ended = [self._loops.pop(other)[1] for other in list(self._loops) if other.is_closed()]
        if held is None:
            connections = _Connections(self.conninfo, FAST_POOL_SIZE)
            closer = _closed_at_shutdown(connections)
            await anext(closer)
            held = (_Batches(connections), closer)
            with self._lock:
                self._loops[loop] = held
        for other in ended:
            await other.aclose()
        return held[0]

    async def dispose(self) -> None:
        """Close the running loop's connections (a later write opens new ones)."""
        with self._lock:
            held = self._loops.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[1].aclose()


_shared: dict[str, FastWrites] = {}
_shared_lock = threading.Lock()


def shared_fast_writes(url: str | sa.URL) -> FastWrites:
    """The process' one `FastWrites` of a database, whichever journals write to it."""
    key = sa.make_url(url).render_as_string(hide_password=False)
    with _shared_lock:
        writes = _shared.get(key)
        if writes is None:
            writes = _shared[key] = FastWrites(key)
        return writes


async def _closed_at_shutdown(connections: _Connections) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:  # by its loop shutting down, by `dispose`, or by a use from another loop
        await connections.close()
