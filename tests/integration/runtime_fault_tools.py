"""Tools of the worker-runtime fault tests (`test_runtime_faults.py`), pools `rt-*`.

The workers of those tests run on a private redis-server that the tests stop and start; the tools
count their runs in ANOTHER Redis, named by `TOOLFLEET_TEST_COUNTER_URL` (the shared test Redis,
never restarted), so what ran is known whatever happened to the private one. Each tool increments
`rt:run:<key>` when it starts and `rt:done:<key>` when it finishes, and records when (`time.time()`)
under `rt:at:<what>:<key>`; a compensation increments `rt:undo:<key>`.
"""

from __future__ import annotations

import time

import redis

from tests.integration.side_effects import process_client
from workers import compensate_for, tool

IDEMPOTENT_POOL = "rt-idem"  # killed and replaced by the redelivery tests
OUTAGE_POOL = "rt-outage"  # rides out a Redis outage
CATALOG_POOL = "rt-catalog"  # re-announces itself after a Redis restart
BUILTINS_POOL = "rt-builtins"  # receives forged messages for Celery's built-in tasks


def counter() -> redis.Redis:
    """This process' client of the counting Redis (a forked pool child makes its own)."""
    return process_client("TOOLFLEET_TEST_COUNTER_URL")


def note(what: str, key: str) -> int:
    pipe = counter().pipeline(transaction=True)
    pipe.incr(f"rt:{what}:{key}")
    pipe.set(f"rt:at:{what}:{key}", repr(time.time()))
    return int(pipe.execute()[0])


def _slept(key: str, seconds: float) -> str:
    """Notes the run of `key`, sleeps `seconds`, notes it done."""
    note("run", key)
    time.sleep(seconds)
    note("done", key)
    return f"slept {key}"


class RuntimeFaultTools:
    """Sleeping tools whose runs are counted in the counting Redis."""

    @tool("Sleeps; safe to run again", pool=IDEMPOTENT_POOL, timeout=15, idempotent=True)
    def rt_idem_sleep(self, key: str, seconds: float) -> str:
        return _slept(key, seconds)

    @tool("Sleeps; safe to run again, retried", pool=IDEMPOTENT_POOL, timeout=15, idempotent=True, retries=2)
    def rt_idem_retry_sleep(self, key: str, seconds: float) -> str:
        return _slept(key, seconds)

    @tool("Sleeps, then answers", pool=OUTAGE_POOL, timeout=25)
    def rt_sleep(self, key: str, seconds: float) -> str:
        return _slept(key, seconds)

    @tool("Books; undone by rt_unbook", pool=CATALOG_POOL, timeout=10)
    def rt_book(self, key: str) -> str:
        note("run", key)
        return f"booked {key}"

    @compensate_for("rt_book")
    def rt_unbook(self, key: str) -> None:
        note("undo", key)

    @tool("Answers", pool=BUILTINS_POOL, timeout=10)
    def rt_ping(self, key: str) -> str:
        note("run", key)
        return f"pong {key}"


tools = RuntimeFaultTools()
