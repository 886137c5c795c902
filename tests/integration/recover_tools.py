"""Compensable tools of the recovery tests (`test_recover_in_flight.py`), pool `recover`.

Each call blocks until the test releases it (`release(key)`), so a test can kill its orchestrator
while the call is queued or running, and decide when it finishes. Side effects and counters live in
the test Redis (`TOOLFLEET_REDIS_URL`), shared by the test, the worker and the orchestrator
subprocess. Under `recover:<key>:` each call keeps `runs` (started), `done` (finished), `effect`
(the credit, deleted when undone) and `comps` (compensations run).
"""

from __future__ import annotations

import time

import redis

from tests.integration.side_effects import process_client as _redis
from workers import compensate_for, tool

POOL = "recover"
GATE_WAIT_S = 30


def k(key: str, what: str) -> str:
    """The Redis key of one counter or mark of call `key`."""
    return f"recover:{key}:{what}"


def release(client: redis.Redis, key: str) -> None:
    """Let the call of `key` finish."""
    client.rpush(k(key, "gate"), "go")


def _wait_for_release(key: str) -> None:
    client = _redis()
    client.incr(k(key, "runs"))
    deadline = time.monotonic() + GATE_WAIT_S
    while client.blpop([k(key, "gate")], timeout=1) is None:  # short waits: within any socket timeout
        if time.monotonic() >= deadline:
            raise TimeoutError(f"call {key} was never released")


class RecoverTools:
    """A credit that is undone by a debit; a payment that is rejected."""

    @tool("Credits an account once released", pool=POOL, timeout=60)
    def rc_credit(self, key: str) -> str:
        _wait_for_release(key)
        client = _redis()
        client.set(k(key, "effect"), "credited")
        client.incr(k(key, "done"))
        return f"credited {key}"

    @compensate_for("rc_credit")
    def rc_debit(self, key: str) -> None:
        client = _redis()
        client.incr(k(key, "comps"))
        client.delete(k(key, "effect"))

    @tool("Pays once released; always rejected", pool=POOL, timeout=60)
    def rc_pay(self, key: str) -> str:
        _wait_for_release(key)
        _redis().incr(k(key, "done"))
        raise ValueError(f"payment {key} rejected")

    @compensate_for("rc_pay")
    def rc_refund(self, key: str) -> None:
        _redis().incr(k(key, "comps"))


tools = RecoverTools()
