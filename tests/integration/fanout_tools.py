"""A tool for the fan-out tests, on pool `fanout`: it counts, in the test Redis, the calls in flight.

Each call increments a counter when it starts and records the value it saw, holds its slot for a
while, then decrements the counter: the largest value recorded is the most calls that ran at once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from workers import tool

if TYPE_CHECKING:
    from workers.runtime.process import WorkerProcess

POOL = "fanout"


def in_flight_key(run: str) -> str:
    return f"fanout:{run}:in-flight"


def seen_key(run: str) -> str:
    return f"fanout:{run}:seen"


@tool("Holds one slot for `seconds`, counting the calls in flight", pool=POOL, timeout=20)
def occupy(run: str, seconds: float) -> int:
    client = redis.Redis.from_url(os.environ["TOOLFLEET_REDIS_URL"])
    try:
        now = int(client.incr(in_flight_key(run)))
        client.rpush(seen_key(run), now)
        try:
            time.sleep(seconds)  # the work: holding the slot is what is measured
        finally:
            client.decr(in_flight_key(run))
        return now
    finally:
        client.close()


def start_worker(redis_url: str, log_path: Path, hostname: str, concurrency: int) -> WorkerProcess:
    """A threads worker serving pool `fanout` (wait for it with `running()`)."""
    from tests.integration.worker_processes import tool_worker

    return tool_worker(redis_url, [POOL], [__name__], log_path, hostname, concurrency=concurrency)
