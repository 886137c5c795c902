"""Tools of the saga-through-a-Redis-blip tests (`test_saga_redis_blips.py`).

The workers serving them run against a private Redis that the tests restart; every side effect is
counted in a second Redis that is never restarted (`SAGA_BLIP_COUNTS_URL`, also the test's own), so
what ran is known whatever the private Redis forgot. Keys, under the namespace `ns` a test passes:

- `blip:<ns>:balance`: the sum of the credits and deposits that stand;
- `blip:<ns>:undo_starts` / `blip:<ns>:undos`: compensations started / completed, and
  `blip:<ns>:undone_at` (time.time()) when the latest one completed;
- `blip:<ns>:done_by` / `blip:<ns>:undone_by`: lists of `<tool> <worker hostname>`, one entry per
  credit or deposit that ran / per compensation that completed, so a test can tell which worker
  did what (the hostname is `SAGA_BLIP_WORKER`, which the tests set for each worker);
- `blip:<ns>:failing`: set when `blip_fail` starts; with `hold`, it then waits for
  `blip:<ns>:release` before it fails, and writes `blip:<ns>:failed_at` (time.time()) just before.
"""

from __future__ import annotations

import os
import time

import redis

from tests.integration.side_effects import process_client
from workers import ToolErrorVisibleToLlm, compensate_for, tool

POOL = "sblip"  # served throughout a test
FAIL_POOL = "sblip-fail"  # the failing payment's pool
GONE_POOL = "sblip-gone"  # its worker is stopped before the compensation runs
DECLINED = "the payment desk declined"
HOLD_LIMIT_S = 30.0


def counts_client() -> redis.Redis:
    """This process' client of the Redis that counts side effects."""
    return process_client("SAGA_BLIP_COUNTS_URL", socket_timeout=5)


def key(ns: str, what: str) -> str:
    return f"blip:{ns}:{what}"


class Declined(ToolErrorVisibleToLlm, Exception):
    """A payment the desk refuses; the model is told."""


def _worker() -> str:
    return os.environ.get("SAGA_BLIP_WORKER", f"pid-{os.getpid()}")


def _do(ns: str, tool: str, amount: int) -> int:
    client = counts_client()
    client.rpush(key(ns, "done_by"), f"{tool} {_worker()}")
    return int(client.incrby(key(ns, "balance"), amount))


def _undo(ns: str, tool: str, amount: int, undo_s: float) -> None:
    client = counts_client()
    client.incr(key(ns, "undo_starts"))
    time.sleep(undo_s)
    client.incrby(key(ns, "balance"), -amount)
    client.set(key(ns, "undone_at"), repr(time.time()))
    client.rpush(key(ns, "undone_by"), f"{tool} {_worker()}")
    client.incr(key(ns, "undos"))


class BlipBank:
    """Credits and deposits counted in the counting Redis; each undone by its compensation."""

    @tool("Credits money to an account", pool=POOL, timeout=10)
    def blip_credit(self, ns: str, amount: int, undo_s: float = 0.0) -> str:
        balance = _do(ns, "blip_credit", amount)
        return f"Credited {amount}; balance {balance}"

    @compensate_for("blip_credit")
    def blip_uncredit(self, ns: str, amount: int, undo_s: float = 0.0) -> None:
        _undo(ns, "blip_credit", amount, undo_s)

    @tool("Deposits money on a pool whose worker goes away", pool=GONE_POOL, timeout=10)
    def blip_deposit(self, ns: str, amount: int) -> str:
        balance = _do(ns, "blip_deposit", amount)
        return f"Deposited {amount}; balance {balance}"

    @compensate_for("blip_deposit")
    def blip_undeposit(self, ns: str, amount: int) -> None:
        _undo(ns, "blip_deposit", amount, 0.0)

    @tool("A payment that is always declined", pool=FAIL_POOL, timeout=40)
    def blip_fail(self, ns: str, hold: bool = False) -> str:
        client = counts_client()
        client.set(key(ns, "failing"), "1")
        if hold:
            limit = time.monotonic() + HOLD_LIMIT_S
            while not client.exists(key(ns, "release")) and time.monotonic() < limit:
                time.sleep(0.01)
        client.set(key(ns, "failed_at"), repr(time.time()))
        raise Declined(DECLINED)


bank = BlipBank()
