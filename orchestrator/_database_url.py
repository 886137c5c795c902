"""Database URLs as people write them, and the one SQLAlchemy engine this package opens for them.

`postgres://` (Heroku's and libpq's spelling, which SQLAlchemy refuses) and `postgresql://` (which
SQLAlchemy reads as psycopg2) both mean PostgreSQL through psycopg 3: `postgresql+psycopg://`.
psycopg 3 comes with the `postgres` extra (`pip install 'toolfleet[postgres]'`), not with a plain
install: a PostgreSQL URL without it is refused saying so. Every other URL is left as it is.
`database_engine(url)` is what the journal, the conversation store and `toolfleet db upgrade` open;
`LoopEngines(url)` is their asyncio side (`AsyncJournal`, `SqlChatMemoryStore.aget_messages`): SQLite
through aiosqlite, PostgreSQL through psycopg 3's async connections, one engine per event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from workers.errors import SettingsError
from workers.settings import ENVIRONMENT, redact_url

__all__ = [
    "ASYNC_POOL_SIZE",
    "CONNECT_RETRY_EVERY_S",
    "CONNECT_RETRY_S",
    "SQLITE_BUSY_TIMEOUT_S",
    "LoopEngines",
    "async_database_url",
    "connected",
    "database_engine",
    "database_url",
    "shared_loop_engines",
]

# How long an SQLite connection waits for another process's write lock before failing: the journal
# and the conversation store are written by many processes at once.
SQLITE_BUSY_TIMEOUT_S = 30
# The connections an event loop's engine keeps to a database server, and never more: many coroutines
# share them, each holding one for a transaction of a few statements; connections opened beyond a
# pool's size are closed when given back, and reopening them under load costs more than the wait.
ASYNC_POOL_SIZE = 20
# A connection the server (or a proxy before it) refuses is tried again this long, every quarter of a
# second: nothing was sent on it yet, so a statement waits out a restart instead of failing.
CONNECT_RETRY_S = 5.0
CONNECT_RETRY_EVERY_S = 0.25
_DRIVER = "postgresql+psycopg"
_SHORT_SCHEMES = ("postgres", "postgresql")
_EXTRA = "pip install 'toolfleet[postgres]'"
_OTHER_DRIVERS = {
    "postgresql+psycopg2": "psycopg2",
    "postgresql+pg8000": "pg8000",
    "postgresql+asyncpg": "asyncpg",
}
_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "sqlite+pysqlite": "sqlite+aiosqlite"}


def database_url(url: str) -> str:
    """`url` with a PostgreSQL scheme spelled for psycopg 3; a driver that is not installed is refused,
    naming what to install or the form to use."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    lowered = scheme.lower()
    if lowered in _SHORT_SCHEMES or lowered == _DRIVER:
        if importlib.util.find_spec("psycopg") is None:
            raise SettingsError(
                f"{ENVIRONMENT['database_url']}={redact_url(url)!r} is a PostgreSQL database, whose driver "
                f"psycopg 3 is not installed: {_EXTRA}"
            )
        return f"{_DRIVER}://{rest}"
    module = _OTHER_DRIVERS.get(lowered)
    if module is not None and importlib.util.find_spec(module) is None:
        raise SettingsError(
            f"{ENVIRONMENT['database_url']}={redact_url(url)!r} names the driver {module}, which is not "
            f"installed; use {redact_url(f'{_DRIVER}://{rest}')} (psycopg 3: {_EXTRA})"
        )
    return url


def database_engine(url: str) -> Engine:
    """The engine for `url` (see `database_url`); SQLite connections wait `SQLITE_BUSY_TIMEOUT_S` for
    a lock held by another process."""
    url = database_url(url)
    return sa.create_engine(url, connect_args=_connect_args(url), **_pinged(url))


def async_database_url(url: str | sa.URL) -> str:
    """`url` (see `database_url`) for SQLAlchemy's asyncio extension: SQLite through aiosqlite;
    psycopg 3 is async-capable, so a PostgreSQL URL stays as it is, as does any other."""
    text = url.render_as_string(hide_password=False) if isinstance(url, sa.URL) else url
    parsed = sa.make_url(database_url(text))
    driver = _ASYNC_DRIVERS.get(parsed.drivername.lower())
    return (parsed.set(drivername=driver) if driver else parsed).render_as_string(hide_password=False)


def _pinged(url: str) -> dict[str, bool]:
    """A server database's pooled connections are checked before each use (a connection its server,
    or a proxy between, closed while it was idle is replaced, not handed to a write that would fail)."""
    return {} if sa.make_url(url).get_backend_name() == "sqlite" else {"pool_pre_ping": True}


class LoopEngines:
    """The async engine of one database for each event loop that uses it.

    An async engine's pooled connections belong to the loop that opened them, so each loop gets its
    own engine. Its connections are closed when its loop shuts down (`asyncio.run` closes the open
    async generators then, one of which waits for that here), else by the next use from another loop
    once its loop has closed, or by `dispose()`.
    """

    def __init__(self, url: str | sa.URL) -> None:
        self.url = async_database_url(url)
        self._engines: dict[asyncio.AbstractEventLoop, tuple[AsyncEngine, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()  # loops of several threads may ask at once
        sqlite = sa.make_url(self.url).get_backend_name() == "sqlite"  # its pool is SQLAlchemy's choice
        self._pool = {} if sqlite else {"pool_size": ASYNC_POOL_SIZE, "max_overflow": 0, **_pinged(self.url)}

    async def engine(self) -> AsyncEngine:
        """The engine of the running loop, made on its first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._engines.get(loop)
            ended = [self._engines.pop(other)[1] for other in list(self._engines) if other.is_closed()]
        if held is None:  # nothing below suspends before the engine is registered for this loop
            engine = create_async_engine(self.url, connect_args=_connect_args(self.url), **self._pool)
            closer = _closed_at_shutdown(engine)
            await anext(closer)
            held = (engine, closer)
            with self._lock:
                self._engines[loop] = held
        for other in ended:  # engines of loops closed without shutting down their async generators
            await other.aclose()
        return held[0]

    async def dispose(self) -> None:
        """Close the connections of the running loop's engine (a later use opens new ones)."""
        with self._lock:
            held = self._engines.pop(asyncio.get_running_loop(), None)
        if held is not None:
            await held[1].aclose()


_shared: dict[str, LoopEngines] = {}
_shared_lock = threading.Lock()


@contextlib.asynccontextmanager
async def connected(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection of `engine`, closed after the block; its connect tried again for
    `CONNECT_RETRY_S` while a database server cannot be connected to: a failed connect sent nothing
    of the caller's. (An SQLite file that cannot be opened is no outage: it fails at once.)"""
    deadline = time.monotonic() + CONNECT_RETRY_S
    while True:
        try:
            connection = await engine.connect()
            break
        except sa.exc.OperationalError:
            if engine.dialect.name == "sqlite" or time.monotonic() >= deadline:
                raise
            await asyncio.sleep(CONNECT_RETRY_EVERY_S)
    try:
        yield connection
    finally:
        await connection.close()


def shared_loop_engines(url: str | sa.URL) -> LoopEngines:
    """The process' one `LoopEngines` of a database: every journal and conversation store of a
    process that opens the same database shares its engines (one pool per loop, not one per user),
    so many services in one process cannot exhaust the server's connections."""
    key = async_database_url(url)
    with _shared_lock:
        engines = _shared.get(key)
        if engines is None:
            engines = _shared[key] = LoopEngines(key)
        return engines


async def _closed_at_shutdown(engine: AsyncEngine) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:  # closed: by its loop shutting down, by `dispose`, or by a use from another loop
        await engine.dispose()


def _connect_args(url: str) -> dict[str, object]:
    return {"timeout": SQLITE_BUSY_TIMEOUT_S} if url.lower().startswith("sqlite") else {}
