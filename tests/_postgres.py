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

__all__ = [
    "DEFAULT_POSTGRES_URL",
    "POSTGRES_VARIABLE",
    "in_ci",
    "postgres_error",
    "postgres_unreachable",
    "postgres_url",
    "reachable_postgres",
]

DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"  # the test server's database
POSTGRES_VARIABLE = "TOOLFLEET_TEST_POSTGRES_URL"


def postgres_url() -> str:
    """The tests' PostgreSQL database: `TOOLFLEET_TEST_POSTGRES_URL`, else `DEFAULT_POSTGRES_URL` (each
    process of a parallel run has a database of its own there, tests/_parallel.py)."""
    return os.environ.get(POSTGRES_VARIABLE) or DEFAULT_POSTGRES_URL


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


def reachable_postgres(url: str | None = None) -> str:
    """`url` (default: `postgres_url()`), once its server answers; else the test is skipped (failed in
    CI)."""
    url = url or postgres_url()
    error = postgres_error(url)
    if error is not None:
        postgres_unreachable(url, error)
    return url
