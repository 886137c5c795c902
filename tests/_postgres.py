"""What a test does when the PostgreSQL server it needs does not answer.

On a developer's machine without PostgreSQL the test is skipped, saying why. In CI (`CI` set, as CI
services set it) a PostgreSQL check must be shown passing, so an unreachable server fails the test:
a green run with the check skipped would claim what it never checked.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["in_ci", "postgres_unreachable"]


def in_ci() -> bool:
    """Whether the tests run in CI: `CI` set to anything but an empty or false value."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def postgres_unreachable(url: str, error: BaseException) -> NoReturn:
    """Skip the test (fail it in CI): the PostgreSQL server at `url` does not answer."""
    message = f"PostgreSQL does not answer at {url}: {error}"
    if in_ci():
        pytest.fail(f"{message} (CI is set: a PostgreSQL test may not be skipped)")
    pytest.skip(message)
