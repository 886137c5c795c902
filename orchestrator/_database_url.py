"""Database URLs as people write them, and the one SQLAlchemy engine this package opens for them.

`postgres://` (Heroku's and libpq's spelling, which SQLAlchemy refuses) and `postgresql://` (which
SQLAlchemy reads as psycopg2) both mean PostgreSQL through psycopg 3: `postgresql+psycopg://`.
psycopg 3 comes with the `postgres` extra (`pip install 'toolfleet[postgres]'`), not with a plain
install: a PostgreSQL URL without it is refused saying so. Every other URL is left as it is.
`database_engine(url)` is what the journal, the conversation store and `toolfleet db upgrade` open.
"""

from __future__ import annotations

import importlib.util

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from workers.errors import SettingsError
from workers.settings import ENVIRONMENT, redact_url

__all__ = ["SQLITE_BUSY_TIMEOUT_S", "database_engine", "database_url"]

# How long an SQLite connection waits for another process's write lock before failing: the journal
# and the conversation store are written by many processes at once.
SQLITE_BUSY_TIMEOUT_S = 30
_DRIVER = "postgresql+psycopg"
_SHORT_SCHEMES = ("postgres", "postgresql")
_EXTRA = "pip install 'toolfleet[postgres]'"
_OTHER_DRIVERS = {
    "postgresql+psycopg2": "psycopg2",
    "postgresql+pg8000": "pg8000",
    "postgresql+asyncpg": "asyncpg",
}


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
    connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_S} if url.lower().startswith("sqlite") else {}
    return sa.create_engine(url, connect_args=connect_args)
