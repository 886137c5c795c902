"""The soak's faults: a schedule drawn from the seed, and an injector that makes them on time.

The kinds come round in turns, each turn in an order of its own drawn from the seed, so every kind
comes about as often as the others; the gaps between faults are drawn too (a fault may start while
an earlier one still holds: they overlap, as on a bad day). Each fault ends by itself after a drawn
time (a killed process started again, a link healed), and is logged with its times.

A cut or stall takes one link: a worker's to Redis, a replica's to Redis, or its clients' to it.
PostgreSQL's faults are the forwarder's restarts (every connection through it dropped at once) and
latency: a replica cut off from its journal for seconds fails the invocations that write meanwhile
(see docs/RELIABILITY.md).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.soak.fleet import HEARTBEAT_TTL_S, REPLICAS, WORKERS, Fleet

__all__ = ["KINDS", "Fault", "Injector", "schedule"]

KINDS = (
    "kill_worker",
    "kill_child",
    "kill_replica",
    "stop_worker",
    "restart_redis",
    "cut_link",
    "stall_link",
    "latency",
    "restart_postgres_forwarder",
)
WARMUP_S = 5.0  # the fleet serves a few requests before the first fault
TARGET_WAIT_S = 60.0  # a fault waits at most this long for an earlier one on its target to end


@dataclass
class Fault:
    """One fault: when (seconds after the load started), what, on what, for how long."""

    at_s: float
    kind: str
    target: str
    duration_s: float
    latency_ms: float = 0.0
    started: float | None = None  # wall-clock times, once made
    ended: float | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def schedule(seed: int, seconds: float, every_s: float, kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """The faults of a run of `seconds`, one every `every_s` on average, of `kinds`, from `seed`."""
    rng = random.Random(f"faults-{seed}")
    faults: list[Fault] = []
    at, turn = WARMUP_S, []
    prefork = [name for name, kind in WORKERS.items() if kind == "prefork"]
    while at < seconds - WARMUP_S:
        if not turn:
            turn = list(kinds)
            rng.shuffle(turn)
        kind = turn.pop()
        duration, latency_ms = rng.uniform(0.5, 3.0), 0.0
        if kind in ("kill_worker", "stop_worker"):
            target = rng.choice(list(WORKERS))
            if kind == "stop_worker":
                duration = HEARTBEAT_TTL_S + rng.uniform(1.0, 4.0)
        elif kind == "kill_child":
            target = rng.choice(prefork)
        elif kind == "kill_replica":
            target = rng.choice(REPLICAS)
        elif kind in ("cut_link", "stall_link"):  # a worker's link to Redis; a replica's, or its clients'
            host = rng.choice([*WORKERS, *REPLICAS])
            target = f"{host}>redis" if host in WORKERS else rng.choice([f"{host}>redis", f"load>{host}"])
            duration = rng.uniform(1.0, 10.0)
        elif kind == "latency":
            target = rng.choice([*WORKERS, *REPLICAS])
            duration, latency_ms = rng.uniform(5.0, 20.0), rng.uniform(5.0, 50.0)
        elif kind == "restart_redis":
            target = "redis"
        else:
            target = "postgres"
        faults.append(Fault(round(at, 2), kind, target, round(duration, 2), round(latency_ms, 1)))
        at += rng.uniform(0.5, 1.5) * every_s
    return faults


@dataclass
class Injector:
    """Makes `faults` on `fleet`, each on a thread of its own, at its time after `start`."""

    fleet: Fleet
    faults: list[Fault]
    seed: int
    _threads: list[threading.Thread] = field(default_factory=list)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Injector:
        self._rng = random.Random(f"inject-{self.seed}")
        self._began = time.monotonic()
        self._timer = threading.Thread(target=self._run, name="faults", daemon=True)
        self._timer.start()
        return self

    def stop(self) -> None:
        """Make no more faults; wait for those under way to end (each is bounded)."""
        self._stopping.set()
        self._timer.join(timeout=30)
        for thread in self._threads:
            thread.join(timeout=TARGET_WAIT_S + 30)

    def _run(self) -> None:
        for fault in self.faults:
            delay = fault.at_s - (time.monotonic() - self._began)
            if self._stopping.wait(max(delay, 0)):
                return
            thread = threading.Thread(
                target=self._make, args=(fault,), name=f"fault-{fault.kind}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _make(self, fault: Fault) -> None:
        lock = self._locks.setdefault(fault.target, threading.Lock())
        if not lock.acquire(timeout=TARGET_WAIT_S):
            fault.detail = "skipped: its target was still under an earlier fault"
            return
        try:
            fault.started = time.time()
            getattr(self, f"_{fault.kind}")(fault)
        except Exception as exc:  # a fault that could not be made is logged, and the soak goes on
            fault.detail = f"failed: {type(exc).__name__}: {exc}"[:300]
        finally:
            fault.ended = time.time()
            lock.release()

    # -- the kinds -----------------------------------------------------------------------------------

    def _kill_worker(self, fault: Fault) -> None:
        self._kill_and_restart(fault)

    def _kill_replica(self, fault: Fault) -> None:
        self._kill_and_restart(fault)

    def _restart_redis(self, fault: Fault) -> None:
        self._kill_and_restart(fault)

    def _kill_and_restart(self, fault: Fault) -> None:
        proc = self.fleet.procs[fault.target]
        proc.kill()
        time.sleep(fault.duration_s)
        proc.start()

    def _kill_child(self, fault: Fault) -> None:
        children = self.fleet.procs[fault.target].children()
        if not children:
            fault.detail = "skipped: no pool process"
            return
        child = self._rng.choice(children)
        os.kill(child, signal.SIGKILL)
        fault.detail = f"pid {child}"

    def _stop_worker(self, fault: Fault) -> None:
        proc = self.fleet.procs[fault.target]
        proc.signal_group(signal.SIGSTOP)
        try:
            time.sleep(fault.duration_s)
        finally:
            proc.signal_group(signal.SIGCONT)

    def _cut_link(self, fault: Fault) -> None:
        self._links_of(fault.target, "cut", fault.duration_s)

    def _stall_link(self, fault: Fault) -> None:
        self._links_of(fault.target, "stall", fault.duration_s)

    def _links_of(self, link: str, how: str, seconds: float) -> None:
        getattr(self.fleet.links[link], how)()
        try:
            time.sleep(seconds)
        finally:
            self.fleet.links[link].heal()

    def _latency(self, fault: Fault) -> None:
        names = [name for name in self.fleet.links if name.startswith(f"{fault.target}>")]
        for name in names:
            self.fleet.links[name].add_latency(fault.latency_ms / 1000)
        try:
            time.sleep(fault.duration_s)
        finally:
            for name in names:
                self.fleet.links[name].add_latency(0)

    def _restart_postgres_forwarder(self, fault: Fault) -> None:
        for name in [name for name in self.fleet.links if name.endswith(">postgres")]:
            self.fleet.restart_link(name)
