"""What a test does when the PostgreSQL server it needs does not answer.

On a developer's machine without PostgreSQL the test is skipped, saying why. In CI (`CI` set, as CI
services set it) a PostgreSQL check must be shown passing, so an unreachable server fails the test:
a green run with the check skipped would claim what it never checked.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
import sqlalchemy as sa

__all__ = ["POSTGRES_URL", "in_ci", "postgres_error", "postgres_unreachable", "reachable_postgres"]

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"  # the test server's database


def in_ci() -> bool:
    """Whether the tests run in CI: `CI` set to anything but an empty or false value."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def postgres_unreachable(url: str, error: BaseException) -> NoReturn:
    """Skip the test (fail it in CI): the PostgreSQL server at `url` does not answer."""
    message = f"PostgreSQL does not answer at {url}: {error}"
    if in_ci():
        pytest.fail(f"{message} (CI is set: a PostgreSQL test may not be skipped)")
    pytest.skip(message)


def postgres_error(url: str) -> Exception | None:
    """Why the PostgreSQL server at `url` does not answer (within 2 s), or None when it does."""
    engine = sa.create_engine(url, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("select 1"))
    except Exception as exc:
        return exc
    finally:
        engine.dispose()
    return None


def reachable_postgres(url: str = POSTGRES_URL) -> str:
    """`url`, once its server answers; else the test is skipped (failed in CI)."""
    error = postgres_error(url)
    if error is not None:
        postgres_unreachable(url, error)
    return url
