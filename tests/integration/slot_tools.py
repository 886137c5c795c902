"""Tools with fleet-wide concurrency and rate limits, for tests/integration/test_concurrency_limits.py
and test_rate_limits.py.

Each call of a concurrency-limited tool counts itself in Redis while it runs (`TOOLFLEET_REDIS_URL`): how
many calls of its run were running at its start is pushed to the run's list, so the test reads the
fleet's concurrency from the tools' own record. Each call of a rate-limited tool pushes the time it
started, read back the same way.
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


def _started(run: str) -> str:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])
    try:
        client.rpush(f"test:rates:{run}:starts", repr(time.time()))
    finally:
        client.close()
    return "started"


@tool("Records when it started; at most 20 starts a second in the whole fleet", pool=POOL, rate_limit="20/s")
def paced(run: str, seconds: float) -> str:
    return _started(run)


@tool(
    "Records when it started; at most 2 starts a second per account",
    pool=POOL,
    rate_limit="2/s",
    rate_limit_key="account",
)
def paced_per_account(run: str, account: str, seconds: float) -> str:
    return _started(f"{run}:{account}")


@tool("Records when it started; one start every 10 s, within 1 s", pool=POOL, rate_limit="1/10s", timeout=1.0)
def rare(run: str, seconds: float) -> str:
    return _started(run)


@tool("Sleeps; no limit of its own", pool=POOL, timeout=60)
def unlimited_sleep(run: str, seconds: float) -> str:
    return _counted(run, seconds)


PRIORITY_POOL = "slots-priority"  # served by one worker running one call at a time


@tool("Records its label when it starts, then sleeps", pool=PRIORITY_POOL, timeout=120)
def labelled(run: str, label: str, seconds: float) -> str:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])
    try:
        client.rpush(f"test:priorities:{run}", label)
    finally:
        client.close()
    time.sleep(seconds)
    return label
