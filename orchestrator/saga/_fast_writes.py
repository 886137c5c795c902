"""The journal's hot path on PostgreSQL straight through psycopg 3's async connections.

Measured on one process: a statement through SQLAlchemy's asyncio extension costs about 0.45 ms of
CPU (its greenlet bridge, pool and execution context), the same statement on a psycopg connection
about 0.1 ms. The hot path's single statements (`_journal_writes`) are compiled once per shape by
SQLAlchemy's PostgreSQL dialect and sent on connections of their own, in autocommit: one set per
database and event loop in a process (`shared_fast_writes`), at most `FAST_POOL_SIZE` at once (a
single statement holds one for a fraction of a millisecond), closed when the loop shuts down.
Errors are SQLAlchemy's, as everywhere else in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import Compiled

from orchestrator.saga._journal_writes import Write, Written

__all__ = ["FAST_POOL_SIZE", "FastWrites", "shared_fast_writes"]

# The connections one process keeps for the hot path per database and event loop, and never more:
# beside SQLAlchemy's pool (`ASYNC_POOL_SIZE`), within a server's connection limit across replicas.
FAST_POOL_SIZE = 4
CONNECT_TIMEOUT_S = 10  # a server that does not answer fails the write, it does not hang it
CONNECT_RETRY_S = 5.0  # a refused connection is tried again this long (a restart, a proxy between)
CONNECT_RETRY_EVERY_S = 0.25
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


class FastWrites:
    """Single statements of the journal on the PostgreSQL database of `url`."""

    def __init__(self, url: str | sa.URL) -> None:
        parsed = sa.make_url(url)
        self.conninfo = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        self._dialect: sa.Dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
        self._compiled: dict[tuple[int, frozenset[str]], Compiled] = {}
        self._loops: dict[asyncio.AbstractEventLoop, tuple[_Connections, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()

    async def execute(self, write: Write) -> Written:
        """Run `write` in autocommit: its returned rows and its row count. A write that may be sent
        again (`Write.again`) whose connection dropped (the server or a proxy restarting) is, on a
        fresh connection, for up to `RESEND_S`."""
        compiled = self._compile(write)
        sql, params = str(compiled), compiled.construct_params(write.params)
        connections = await self._connections()
        give_up = time.monotonic() + RESEND_S
        while True:
            try:
                async with connections.connection() as connection:
                    cursor = await connection.execute(sql, params)
                    rows = await cursor.fetchall() if cursor.description is not None else []
                    return Written([tuple(row) for row in rows], cursor.rowcount)
            except psycopg.OperationalError as exc:
                if write.again and time.monotonic() < give_up:
                    await asyncio.sleep(CONNECT_RETRY_EVERY_S)
                    continue
                raise sa.exc.DBAPIError.instance(
                    sql, params, exc, psycopg.Error, hide_parameters=True
                ) from exc
            except psycopg.Error as exc:
                raise sa.exc.DBAPIError.instance(
                    sql, params, exc, psycopg.Error, hide_parameters=True
                ) from exc

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

    async def _connections(self) -> _Connections:
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._loops.get(loop)
            ended = [self._loops.pop(other)[1] for other in list(self._loops) if other.is_closed()]
        if held is None:
            connections = _Connections(self.conninfo, FAST_POOL_SIZE)
            closer = _closed_at_shutdown(connections)
            await anext(closer)
            held = (connections, closer)
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
