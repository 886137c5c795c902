"""Tools of the `killable` pool: served only by the throw-away prefork workers of the kill tests.

The same counted sleep as `count_and_sleep` / `count_and_sleep_idempotent` in `tools.py`, under names
of their own so the live catalog never confuses them with the session `heavy` worker's tools.
"""

from __future__ import annotations

from tests.integration.side_effects import count_runs_and_sleep
from workers import tool


@tool("Counts its runs in Redis, then sleeps", pool="killable", timeout=20)
def count_and_sleep_killable(key: str, seconds: float) -> int:
    return count_runs_and_sleep(key, seconds)


@tool("Counts its runs in Redis, then sleeps", pool="killable", timeout=20, idempotent=True, retries=2)
def count_and_sleep_killable_idempotent(key: str, seconds: float) -> int:
    return count_runs_and_sleep(key, seconds)
