"""Where the integration tests' tools record what they did: a Redis client of their own per process.

Tools run on the threads of a worker, in its prefork children, or in the test process itself; each
process (a forked child included) must use connections of its own, never its parent's sockets.
"""

from __future__ import annotations

import os
import threading
import time

import redis

_clients: dict[tuple[int, str, float | None], redis.Redis] = {}
_lock = threading.Lock()


def process_client(
    variable: str = "TOOLFLEET_REDIS_URL", *, socket_timeout: float | None = None
) -> redis.Redis:
    """This process' client of the Redis whose URL the environment variable `variable` holds."""
    url = os.environ[variable]
    key = (os.getpid(), url, socket_timeout)
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = redis.Redis.from_url(url, socket_timeout=socket_timeout)
        return client


def count_runs_and_sleep(key: str, seconds: float) -> int:
    """Counts a run of `key` (`test:runs:<key>`), sleeps `seconds`, counts it done (`test:done:<key>`);
    returns how many runs `key` has had."""
    client = process_client()
    runs = int(client.incr(f"test:runs:{key}"))
    time.sleep(seconds)
    client.incr(f"test:done:{key}")
    return runs
