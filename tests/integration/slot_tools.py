"""Tools with fleet-wide concurrency limits, for tests/integration/test_concurrency_limits.py.

Each call counts itself in Redis while it runs (`TOOLFLEET_REDIS_URL`): how many calls of its run were
running at its start is pushed to the run's list, so the test reads the fleet's concurrency from the
tools' own record.
"""

from __future__ import annotations

import os
import time

import redis

from workers import tool

POOL = "slots"
LIMITED_POOL = "slots-pool"  # its workers run with --pool-concurrency


def _counted(run: str, seconds: float) -> str:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])
    running = client.incr(f"test:slots:{run}:running")
    client.rpush(f"test:slots:{run}:seen", running)
    try:
        time.sleep(seconds)
    finally:
        client.decr(f"test:slots:{run}:running")
        client.close()
    return f"slept {seconds:g} s"


@tool("Sleeps, at most 3 calls at once in the whole fleet", pool=POOL, concurrency=3, timeout=60)
def capped_sleep(run: str, seconds: float) -> str:
    return _counted(run, seconds)


@tool(
    "Sleeps, at most 1 call at once per account",
    pool=POOL,
    concurrency=1,
    concurrency_key="account",
    timeout=60,
)
def per_account_sleep(run: str, account: str, seconds: float) -> str:
    return _counted(f"{run}:{account}", seconds)


@tool("Sleeps, one call at a time in the whole fleet, within 1 s", pool=POOL, concurrency=1, timeout=1.0)
def one_at_a_time(run: str, seconds: float) -> str:
    return _counted(run, seconds)


@tool(
    "Sleeps, one call at a time in the whole fleet, for longer than a slot's lease",
    pool=POOL,
    concurrency=1,
    timeout=60,
)
def long_single(run: str, seconds: float) -> str:
    return _counted(run, seconds)


@tool(
    "Sleeps, at most 4 calls at once in the whole fleet, shared between tenants",
    pool=POOL,
    concurrency=4,
    timeout=120,
)
def shared_sleep(run: str, seconds: float) -> str:
    return _counted(run, seconds)


@tool(
    "Sleeps; its pool runs at most as many calls at once as its workers announce",
    pool=LIMITED_POOL,
    timeout=60,
)
def pooled_sleep(run: str, seconds: float) -> str:
    return _counted(run, seconds)
