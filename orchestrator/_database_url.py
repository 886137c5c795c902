"""Database URLs as people write them, turned into the form this package's SQLAlchemy engines use.

`postgres://` (Heroku's and libpq's spelling, which SQLAlchemy refuses) and `postgresql://` (which
SQLAlchemy reads as psycopg2, not shipped here) both mean PostgreSQL through psycopg 3, the driver
toolfleet depends on: `postgresql+psycopg://`. Every other URL is left as it is.
"""

from __future__ import annotations

import importlib.util

from workers.errors import SettingsError
from workers.settings import ENVIRONMENT, redact_url

__all__ = ["database_url"]

_DRIVER = "postgresql+psycopg"
_SHORT_SCHEMES = ("postgres", "postgresql")
_OTHER_DRIVERS = {
    "postgresql+psycopg2": "psycopg2",
    "postgresql+pg8000": "pg8000",
    "postgresql+asyncpg": "asyncpg",
}


def database_url(url: str) -> str:
    """`url` with a PostgreSQL scheme spelled for psycopg 3; a driver that is not installed is refused,
    naming the form to use."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    lowered = scheme.lower()
    if lowered in _SHORT_SCHEMES:
        return f"{_DRIVER}://{rest}"
    module = _OTHER_DRIVERS.get(lowered)
    if module is not None and importlib.util.find_spec(module) is None:
        raise SettingsError(
            f"{ENVIRONMENT['database_url']}={redact_url(url)!r} names the driver {module}, which is not "
            f"installed; use {redact_url(f'{_DRIVER}://{rest}')} (psycopg 3, installed with toolfleet)"
        )
    return url
