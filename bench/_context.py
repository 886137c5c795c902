"""What every measure shares: the benchmark's Redis database and the `Bench` context (executor, tool
definitions, raw Celery tasks, timer, repetitions)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
from collections.abc import Sequence
from statistics import median
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis

from bench._timing import Sample, Side, Timer, walls
from orchestrator.executors.celery import CeleryExecutor
from workers import OutcomeKind, ToolDefinition, ToolExecutionRequest, ToolOutcome
from workers.app import make_publisher
from workers.settings import Settings

__all__ = [
    "BATCH_SIZE",
    "WORKER_CONCURRENCY",
    "Bench",
    "bench_redis_url",
    "expect",
]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BENCH_DB = "14"
WORKER_CONCURRENCY = 100
BATCH_SIZE = 100  # calls gathered at once by measures 2 and 4


def bench_redis_url() -> str:
    """The `TOOLFLEET_REDIS_URL` server with the benchmark's own database (`TOOLFLEET_BENCH_REDIS_DB`)."""
    base = os.environ.get("TOOLFLEET_REDIS_URL") or DEFAULT_REDIS_URL
    db = os.environ.get("TOOLFLEET_BENCH_REDIS_DB") or BENCH_DB
    parts = urlsplit(base)
    if parts.scheme not in ("redis", "rediss"):
        raise SystemExit(
            f"bench: TOOLFLEET_REDIS_URL must be a redis:// or rediss:// URL, not {parts.scheme}://"
        )
    return urlunsplit(parts._replace(path=f"/{db}"))


class Bench:
    """What the measures share: the executor, the tool definitions and the raw Celery tasks."""

    def __init__(self, *, quick: bool, worker_pid: int | None) -> None:
        # Imported only now: bench.worker builds its app from the TOOLFLEET_* variables main() sets.
        from bench import tools
        from bench import worker as bench_worker

        self.quick = quick
        self.timer = Timer(worker_pid)
        self.settings = Settings.from_env()
        self.raw_noop: Any = bench_worker.raw_noop
        self.raw_sleep: Any = bench_worker.raw_sleep
        self.executor = CeleryExecutor(settings=self.settings, tools=[tools])
        self.publisher = make_publisher(self.settings)
        self.redis = redis.Redis.from_url(self.settings.redis_url)
        noop = self.executor.registry.get("noop")
        sleep_for = self.executor.registry.get("sleep_for")
        if noop is None or sleep_for is None:
            raise RuntimeError("bench.tools must define the tools noop and sleep_for")
        self.noop: ToolDefinition = noop
        self.sleep_for: ToolDefinition = sleep_for
        self._ids = itertools.count(1)

    def reps(self, count: int) -> int:
        """A measure's repetition count; with `--quick` (a smoke run, noisier) a third of it, rounded up."""
        return math.ceil(count / 3) if self.quick else count

    async def interleaved(
        self, a: Side, b: Side, *, warmup: int, pairs: int
    ) -> tuple[list[Sample], list[Sample]]:
        """`warmup` pairs of `a` and `b` thrown away, then the `pairs` that count (`Timer.interleaved`);
        both counts scaled by `reps`."""
        await self.timer.interleaved(a, b, self.reps(warmup))
        return await self.timer.interleaved(a, b, self.reps(pairs))

    async def rounds(
        self, a: Side, b: Side, *, rounds: int, pairs: int
    ) -> tuple[list[Sample], list[Sample], list[tuple[float, float]]]:
        """`rounds` rounds of `pairs` interleaved pairs (both scaled by `reps`): every run of `a` and of
        `b`, and each round's median wall time of `a` and of `b`."""
        runs_a: list[Sample] = []
        runs_b: list[Sample] = []
        medians: list[tuple[float, float]] = []
        for _ in range(self.reps(rounds)):
            round_a, round_b = await self.timer.interleaved(a, b, self.reps(pairs))
            runs_a += round_a
            runs_b += round_b
            medians.append((median(walls(round_a)), median(walls(round_b))))
        return runs_a, runs_b, medians

    async def repeat(self, side: Side, *, warmup: int, times: int) -> list[Sample]:
        """`warmup` runs of `side` thrown away, then the `times` that count; both scaled by `reps`."""
        await self.timer.repeat(side, self.reps(warmup))
        return await self.timer.repeat(side, self.reps(times))

    def request(self, name: str, arguments: str = "{}") -> ToolExecutionRequest:
        return ToolExecutionRequest(f"bench-{next(self._ids)}", name, arguments)

    async def calls(self, definition: ToolDefinition, arguments: str, count: int) -> list[ToolOutcome]:
        """`count` calls at once: asyncio.gather of `execute`."""
        requests = [self.request(definition.name, arguments) for _ in range(count)]
        return list(await asyncio.gather(*(self.executor.execute(r, definition) for r in requests)))

    def close(self) -> None:
        self.executor.close()
        self.publisher.close()
        self.redis.close()
        # The executor's shared result collector (a daemon thread) is process-wide; stop it too.
        with contextlib.suppress(ImportError, AttributeError):
            from orchestrator.executors._collector import ResultCollector

            ResultCollector.shared(self.settings.redis_url).close()


def expect(outcomes: Sequence[ToolOutcome], kind: OutcomeKind) -> None:
    """Raise unless every outcome is of `kind`: a measure times only calls that did what it expects."""
    for outcome in outcomes:
        if outcome.kind is not kind:
            raise RuntimeError(f"expected a {kind} outcome, got {outcome.kind}: {outcome.text}")
