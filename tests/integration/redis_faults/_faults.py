"""What the fault-injection tests share: injecting a Redis outage, starting workers on a given
Redis, running calls in the background and timing each outcome as it arrives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import CeleryExecutor, ToolExecutionRequest
from tests._waiting import wait_for
from tests.integration.private_redis import PrivateRedis
from tests.integration.redis_fault_tools import tally
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolOutcome
from workers.calls.invocation import Invocation
from workers.runtime.process import WorkerProcess

TOOLS_MODULE = "tests.integration.redis_fault_tools"
SHORT_TTL_S = 2.0  # heartbeat TTL of the workers whose death the tests wait for
RECOVERY_BOUND_S = 6.0  # from Redis answering again (or the tool finishing, if later) to the outcome
FINAL_STATES = {kind.value for kind in OutcomeKind}


def count(ledger: Path, what: str) -> int:
    return sum(tally(ledger, what).values())


def once_each(*keys: str) -> Counter[str]:
    return Counter(dict.fromkeys(keys, 1))


@dataclass(frozen=True)
class Timed:
    """An outcome, and when (monotonic) the orchestrator had it."""

    outcome: ToolOutcome
    at: float


def timed_calls(executor: CeleryExecutor, requests: Sequence[ToolExecutionRequest]) -> list[Timed]:
    """All calls at once, as one response's batch would run; each outcome timed as it arrives."""
    invocation = Invocation()

    async def one(call: ToolExecutionRequest) -> Timed:
        outcome = await executor.execute(call, executor.definition(call.name), invocation)
        return Timed(outcome, time.monotonic())

    async def run_all() -> list[Timed]:
        return list(await asyncio.gather(*(one(call) for call in requests)))

    return asyncio.run(run_all())


@dataclass(frozen=True)
class Outage:
    stopped_at: float
    up_at: float

    @property
    def down_s(self) -> float:
        return self.up_at - self.stopped_at


def outage(
    server: PrivateRedis,
    *,
    min_down_s: float,
    until: Callable[[], bool] = lambda: True,
    timeout_s: float = 15,
) -> Outage:
    """Stop Redis (SIGTERM, wait), keep it down `min_down_s` and until `until()`, start it again."""
    stopped = server.stop()
    wait_for(lambda: time.monotonic() - stopped >= min_down_s and until(), timeout_s, "the outage's end")
    return Outage(stopped, server.start())


class CollectorRetries(logging.Handler):
    """When the result collector will next try to reconnect, from its own log records."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.attempts: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("result subscription interrupted") and isinstance(record.args, tuple):
            self.attempts.append(time.monotonic() + float(record.args[1]))


def outage_ending_before_a_reconnect(
    server: PrivateRedis, retries: CollectorRetries, *, min_down_s: float, lead_s: float = 0.035
) -> Outage:
    """Stop Redis for at least `min_down_s`, then start it `lead_s` before the collector's next
    reconnection attempt (Redis answers ~10 ms after it starts): the orchestrator reconnects and checks
    liveness at once, while the workers' heartbeat comes back 0.05-0.6 s after Redis does."""
    stopped = server.stop()
    time.sleep(min_down_s)
    deadline = time.monotonic() + 10
    while True:
        now = time.monotonic()
        upcoming = [t for t in retries.attempts if t > now + lead_s + 0.02]
        if upcoming:
            break
        assert now < deadline, "the result collector stopped retrying"
        time.sleep(0.005)
    time.sleep(max(0.0, min(upcoming) - lead_s - time.monotonic()))
    return Outage(stopped, server.start())


def start_worker(
    redis_url: str, logs: Path, pool: str, kind: str, concurrency: int, heartbeat_ttl_s: float
) -> WorkerProcess:
    hostname = f"{pool}-{os.getpid()}-{time.monotonic_ns() % 10**8}@rfaults"
    env = {"TOOLFLEET_HEARTBEAT_TTL_S": str(heartbeat_ttl_s)}
    log_path = logs / f"{pool}.log"
    return tool_worker(
        redis_url, [pool], [TOOLS_MODULE], log_path, hostname, kind=kind, concurrency=concurrency, env=env
    )


class Respawning:
    """One worker process, started again if an earlier test's outage made it exit."""

    def __init__(self, start: Callable[[], WorkerProcess]) -> None:
        self._start = start
        self.worker: WorkerProcess | None = None

    def ready(self) -> WorkerProcess:
        if self.worker is not None and self.worker.process.poll() is not None:
            self.worker.stop()
            self.worker = None
        if self.worker is None:
            self.worker = self._start()
        return self.worker.wait_ready(timeout_s=60)  # and back in the catalog after an outage

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
