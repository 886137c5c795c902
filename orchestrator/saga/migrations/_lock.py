"""One schema migration at a time per database, across processes and machines.

PostgreSQL: a transaction-scoped advisory lock, released by the commit (or by the server when the
holder's connection dies). SQLite: an exclusive `flock` on a file beside the database, released
when the holder closes it or dies. Other databases run unlocked.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from orchestrator.errors import SchemaError

__all__ = ["LOCK_TIMEOUT_S", "locked_connection", "sqlite_lock_path"]

LOCK_TIMEOUT_S = 120.0
# Arbitrary, fixed: every toolfleet process asks for the same key ("toolflee" in ASCII).
_ADVISORY_KEY = 0x746F6F6C666C6565
_POLL_S = 0.02


def sqlite_lock_path(engine: Engine) -> str | None:
    """The lock file of an SQLite database on disk; None for an in-memory one."""
    database = engine.url.database
    if not database or database == ":memory:" or engine.url.query.get("mode") == "memory":
        return None
    if database.startswith("file:"):
        database = database[len("file:") :].split("?", 1)[0]
    return f"{database}.toolfleet-migrate.lock"


@contextmanager
def locked_connection(engine: Engine, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[Connection]:
    """A connection in a transaction, holding the database's migration lock until the block ends."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            # lock_timeout bounds the wait for the advisory lock too; SET LOCAL ends with the transaction.
            connection.execute(sa.text(f"SET LOCAL lock_timeout = '{int(timeout_s * 1000)}ms'"))
            try:
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_ADVISORY_KEY)))
            except sa.exc.OperationalError as exc:
                raise SchemaError(
                    f"another process held toolfleet's schema migration lock for more than {timeout_s:g} s"
                ) from exc
            yield connection
        return
    path = sqlite_lock_path(engine) if engine.dialect.name == "sqlite" else None
    if path is None:
        with engine.begin() as connection:
            yield connection
        return
    with _file_lock(path, timeout_s), engine.begin() as connection:
        yield connection


@contextmanager
def _file_lock(path: str, timeout_s: float) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise SchemaError(f"cannot open the schema migration lock file {path}: {exc.strerror}") from exc
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SchemaError(
                        f"another process held the schema migration lock file {path} "
                        f"for more than {timeout_s:g} s"
                    ) from None
                # flock offers no timed wait: poll, briefly, until the holder is done.
                time.sleep(_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock
