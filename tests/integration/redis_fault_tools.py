"""Tools of the Redis and worker fault-injection tests (`redis_faults/`), pools `rf*`.

Their runs are counted in a file, not in Redis, so the count survives a Redis that is down: each tool
appends one line to the file named by its `ledger` argument when it starts (`run <key>`) and when it
finishes (`done <key>`), and each compensation when it undoes a call (`undo <key>`). Lines are short
and appended with O_APPEND, so concurrent writers (threads, processes) never interleave them.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from workers import ToolErrorVisibleToLlm, compensate_for, tool

POOL = "rfault"  # a threads worker on the private Redis, heartbeat TTL 6 s
HEARTBEAT_POOL = "rf-hb"  # a threads worker on the private Redis, heartbeat TTL 2 s
NARROW_POOL = "rf-narrow"  # two threads on the private Redis: calls queue behind them
DOOMED_POOL = "rf-doomed"  # one thread on the shared Redis, SIGKILLed by the test
PREFORK_POOL = "rf-prefork"  # one prefork child on the shared Redis
EMPTY_POOL = "rf-nobody"  # never served
DECLINED = "the booking desk declined"


def note(ledger: str, what: str, key: str) -> None:
    line = f"{what} {key} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def tally(ledger: Path, what: str) -> Counter[str]:
    """How many `what` lines each key has in the ledger."""
    if not ledger.exists():
        return Counter()
    return Counter(
        parts[1] for parts in (line.split() for line in ledger.read_text().splitlines()) if parts[0] == what
    )


def finished_at(ledger: Path, what: str) -> dict[str, float]:
    """When (time.time()) each key's latest `what` line was written."""
    if not ledger.exists():
        return {}
    found: dict[str, float] = {}
    for parts in (line.split() for line in ledger.read_text().splitlines()):
        if parts[0] == what:
            found[parts[1]] = float(parts[3])
    return found


def _slept(ledger: str, key: str, seconds: float) -> str:
    """Notes the run of `key`, sleeps `seconds`, notes it done."""
    note(ledger, "run", key)
    time.sleep(seconds)
    note(ledger, "done", key)
    return f"slept {key}"


class Declined(ToolErrorVisibleToLlm, Exception):
    """A booking the desk refuses; the model is told."""


class RedisFaultTools:
    """Sleeping tools whose runs are counted in a ledger file."""

    @tool("Sleeps, then answers", pool=POOL, timeout=20)
    def rf_sleep(self, ledger: str, key: str, seconds: float) -> str:
        return _slept(ledger, key, seconds)

    @tool("Books after sleeping; undone by rf_unbook", pool=POOL, timeout=20)
    def rf_book(self, ledger: str, key: str, seconds: float) -> str:
        _slept(ledger, key, seconds)
        return f"booked {key}"

    @compensate_for("rf_book")
    def rf_unbook(self, ledger: str, key: str, seconds: float) -> None:
        note(ledger, "undo", key)

    @tool("Always declines", pool=POOL, timeout=20)
    def rf_decline(self, ledger: str, key: str) -> str:
        note(ledger, "run", key)
        raise Declined(DECLINED)

    @tool("Sleeps on the pool with a short heartbeat", pool=HEARTBEAT_POOL, timeout=40)
    def rf_hb_sleep(self, ledger: str, key: str, seconds: float) -> str:
        return _slept(ledger, key, seconds)

    @tool("Sleeps on the narrow pool", pool=NARROW_POOL, timeout=20)
    def rf_queued(self, ledger: str, key: str, seconds: float) -> str:
        return _slept(ledger, key, seconds)

    @tool("Declines on a prefork pool", pool=PREFORK_POOL, timeout=5)
    def rf_refuse(self, ledger: str, key: str) -> str:
        note(ledger, "run", key)
        raise Declined(DECLINED)

    @tool("Answers on a prefork pool", pool=PREFORK_POOL, timeout=5)
    def rf_fine(self, ledger: str, key: str) -> str:
        note(ledger, "run", key)
        return f"fine {key}"

    @tool("Sleeps on a pool whose worker is killed", pool=DOOMED_POOL, timeout=30)
    def rf_doomed(self, ledger: str, key: str, seconds: float) -> str:
        return _slept(ledger, key, seconds)

    @tool("Served by no worker at all", pool=EMPTY_POOL, timeout=30)
    def rf_nobody(self) -> str:
        return "unreachable"


tools = RedisFaultTools()
