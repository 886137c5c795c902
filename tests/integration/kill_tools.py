"""Tools of the `killable` pool: served only by the throw-away prefork workers of the kill tests.

Copies of `count_and_sleep` / `count_and_sleep_idempotent` from `tools.py`, under their own names so
the live catalog never confuses them with the session `heavy` worker's tools.
"""

from __future__ import annotations

import os
import time

import redis

from workers import tool


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])


@tool("Counts its runs in Redis, then sleeps", pool="killable", timeout=20)
def count_and_sleep_killable(key: str, seconds: float) -> int:
    runs = int(_redis().incr(f"test:runs:{key}"))
    time.sleep(seconds)
    _redis().incr(f"test:done:{key}")
    return runs


@tool("Counts its runs in Redis, then sleeps", pool="killable", timeout=20, idempotent=True, retries=2)
def count_and_sleep_killable_idempotent(key: str, seconds: float) -> int:
    runs = int(_redis().incr(f"test:runs:{key}"))
    time.sleep(seconds)
    _redis().incr(f"test:done:{key}")
    return runs
