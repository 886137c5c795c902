"""Compensable tools of the saga fault-injection tests (`test_saga_faults.py`), pools `faults*`.

Every side effect lives in the test Redis (`TOOLFLEET_REDIS_URL`), so the test, the worker processes
and the orchestrator subprocesses all see it. Under `fault:<key>:` each call keeps:

- `runs` / `done`: tool runs started / finished; `effect`: the side effect ("booked"), deleted when
  undone; `finished_at`: when the tool finished (time.time());
- `comp_starts` / `comps`: compensation runs started / completed; `comp_at`: when the latest one
  started; `comp_pid`: the process that runs it.

`fault:order:<group>` lists the keys in the order their compensations started. Tool names start with
`fault_` / `heavy_` so the live catalog never confuses them with other tests' tools.
"""

from __future__ import annotations

import os
import time

from tests.integration.side_effects import process_client as _redis
from workers import compensate_for, tool

POOL = "faults"
HEAVY_POOL = "faults-heavy"


def k(key: str, what: str) -> str:
    """The Redis key of one counter or mark of call `key`."""
    return f"fault:{key}:{what}"


def order_key(group: str) -> str:
    return f"fault:order:{group}"


def _book(key: str, seconds: float = 0.0) -> str:
    client = _redis()
    client.incr(k(key, "runs"))
    if seconds:
        time.sleep(seconds)
    client.set(k(key, "effect"), "booked")
    client.incr(k(key, "done"))
    client.set(k(key, "finished_at"), repr(time.time()))
    return f"booked {key}"


def _undo_started(key: str, group: str) -> None:
    client = _redis()
    client.set(k(key, "comp_at"), repr(time.time()))
    client.set(k(key, "comp_pid"), os.getpid())
    client.incr(k(key, "comp_starts"))
    if group:
        client.rpush(order_key(group), key)


def _undo(key: str, group: str, seconds: float = 0.0) -> None:
    _undo_started(key, group)
    if seconds:
        time.sleep(seconds)
    client = _redis()
    client.delete(k(key, "effect"))
    client.incr(k(key, "comps"))


class FaultTools:
    """Bookings whose undo is counted; one that fails; one whose undo always fails."""

    @tool("Books after `seconds`; its deadline is 0.3 s", pool=POOL, timeout=0.3)
    def fault_late(self, key: str, seconds: float) -> str:
        return _book(key, seconds)

    @compensate_for("fault_late")
    def undo_late(self, key: str, seconds: float) -> None:
        _undo(key, "")

    @tool("Books at once; its undo takes `undo_seconds`", pool=POOL, timeout=10)
    def fault_book(self, key: str, group: str, undo_seconds: float) -> str:
        return _book(key)

    @compensate_for("fault_book")
    def undo_book(self, key: str, group: str, undo_seconds: float) -> None:
        _undo(key, group, undo_seconds)

    @tool("Books after `seconds`; its undo is instant", pool=POOL, timeout=10)
    def fault_slow_book(self, key: str, group: str, seconds: float) -> str:
        return _book(key, seconds)

    @compensate_for("fault_slow_book")
    def undo_slow_book(self, key: str, group: str, seconds: float) -> None:
        _undo(key, group)

    @tool("Books at once; its undo always fails", pool=POOL, timeout=10)
    def fault_fragile(self, key: str) -> str:
        return _book(key)

    @compensate_for("fault_fragile")
    def undo_fragile(self, key: str) -> None:
        _undo_started(key, "")
        raise RuntimeError(f"the booking {key} cannot be cancelled")

    @tool("Always fails", pool=POOL, timeout=10)
    def fault_fail(self, reason: str) -> str:
        raise ValueError(f"fault_fail: {reason}")

    @tool("Books at once on the prefork pool; its undo takes `undo_seconds`", pool=HEAVY_POOL, timeout=10)
    def heavy_book(self, key: str, group: str, undo_seconds: float) -> str:
        return _book(key)

    @compensate_for("heavy_book")
    def undo_heavy_book(self, key: str, group: str, undo_seconds: float) -> None:
        _undo(key, group, undo_seconds)

    @tool("Books at once on the prefork pool, then holds for `seconds`", pool=HEAVY_POOL, timeout=20)
    def heavy_hold(self, key: str, seconds: float) -> str:
        booked = _book(key)
        time.sleep(seconds)
        return booked

    @compensate_for("heavy_hold")
    def undo_heavy_hold(self, key: str, seconds: float) -> None:
        _undo(key, "")


tools = FaultTools()
