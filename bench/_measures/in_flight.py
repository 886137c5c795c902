"""Measure 5: 200 `execute_batch` calls in flight in one asyncio loop, and the threads they cost.

Runs of 200 batches alternate with runs of 20; `threading.active_count()` is sampled every 2 ms, and
the thread count may not grow with the number of batches (no thread per waiting batch).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from statistics import median
from typing import Any

from bench._context import WORKER_CONCURRENCY, Bench, expect
from bench._timing import Measure, cpu_json, ms, summarize, walls
from orchestrator.executors.base import execute_batch
from workers import OutcomeKind, ToolOutcome
from workers.invocation import Invocation

BATCHES = 200
FEW_BATCHES = 20
SLEEP_S = 0.2
TARGET_S = 1.5
SAMPLE_EVERY_S = 0.002
WARMUP = 1  # pairs
PAIRS = 5


@dataclass
class InFlightRun:
    """One run of `batches` concurrent batches: its time and the thread counts seen meanwhile."""

    batches: int
    elapsed: float
    threads_before: int
    threads_peak: int
    peak_in_flight: int

    @property
    def growth(self) -> int:
        return self.threads_peak - self.threads_before

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "elapsed_ms": ms(self.elapsed),
            "threads_before": self.threads_before,
            "threads_peak": self.threads_peak,
            "thread_growth": self.growth,
            "peak_batches_in_flight": self.peak_in_flight,
        }


async def batches_in_flight(b: Bench, count: int) -> InFlightRun:
    """`count` concurrent `execute_batch` calls of one sleep_for call each; samples the thread count."""
    in_flight = 0
    peak_in_flight = 0
    finished = asyncio.Event()
    arguments = json.dumps({"seconds": SLEEP_S})

    async def one_batch() -> list[ToolOutcome]:
        nonlocal in_flight, peak_in_flight
        in_flight += 1
        peak_in_flight = max(peak_in_flight, in_flight)
        try:
            calls = [(b.request("sleep_for", arguments), b.sleep_for)]
            return await execute_batch(b.executor, calls, Invocation(), max_fanout=b.settings.max_fanout)
        finally:
            in_flight -= 1

    threads_before = threading.active_count()
    threads_peak = threads_before

    async def sample_threads() -> None:
        nonlocal threads_peak
        while not finished.is_set():
            threads_peak = max(threads_peak, threading.active_count())
            await asyncio.sleep(SAMPLE_EVERY_S)

    sampler = asyncio.create_task(sample_threads())
    start = time.perf_counter()
    try:
        results = await asyncio.gather(*(one_batch() for _ in range(count)))
    finally:
        elapsed = time.perf_counter() - start
        finished.set()
        await sampler
    expect([outcome for batch in results for outcome in batch], OutcomeKind.SUCCESS)
    return InFlightRun(count, elapsed, threads_before, threads_peak, peak_in_flight)


async def measure_in_flight(b: Bench) -> Measure:
    m = Measure(
        "batches_in_flight",
        f"{BATCHES} batches in flight, 1 orchestrator",
        f"{BATCHES} concurrent execute_batch() calls in one asyncio loop, each waiting on one "
        f"sleep_for({SLEEP_S:g}) call ({BATCHES} calls on {WORKER_CONCURRENCY} worker "
        f"threads: floor {ms(SLEEP_S * 2):.0f} ms). Interleaved with runs of {FEW_BATCHES} "
        "batches; threading.active_count() is sampled every 2 ms and its growth must not depend on the "
        "number of batches.",
        f"median <= {ms(TARGET_S):.0f} ms, no thread per batch",
    )
    runs: list[InFlightRun] = []

    async def many() -> None:
        runs.append(await batches_in_flight(b, BATCHES))

    async def few() -> None:
        runs.append(await batches_in_flight(b, FEW_BATCHES))

    await b.timer.interleaved(many, few, b.reps(WARMUP))
    runs.clear()
    many_runs, few_runs = await b.timer.interleaved(many, few, b.reps(PAIRS))
    many_info = [r for r in runs if r.batches == BATCHES]
    few_info = [r for r in runs if r.batches == FEW_BATCHES]
    growth_many = max(r.growth for r in many_info)
    growth_few = max(r.growth for r in few_info)
    took = median(walls(many_runs))
    threads_before = min(r.threads_before for r in many_info)
    threads_peak = max(r.threads_peak for r in many_info)
    no_thread_per_batch = growth_many <= growth_few and growth_many < FEW_BATCHES
    m.sides = {
        f"{BATCHES}_batches": summarize(walls(many_runs)),
        f"{FEW_BATCHES}_batches": summarize(walls(few_runs)),
    }
    m.cpu = {
        f"{BATCHES}_batches": cpu_json(many_runs, BATCHES),
        f"{FEW_BATCHES}_batches": cpu_json(few_runs, FEW_BATCHES),
    }
    m.rounds = [r.to_json() for r in runs]
    m.details = {
        "thread_growth_max": {str(BATCHES): growth_many, str(FEW_BATCHES): growth_few},
        "threads_before": threads_before,
        "threads_peak": threads_peak,
        "peak_batches_in_flight": max(r.peak_in_flight for r in many_info),
        "no_thread_per_batch": no_thread_per_batch,
        "latency_met": took <= TARGET_S,
        "floor_ms": ms(SLEEP_S * 2),
    }
    m.met = took <= TARGET_S and no_thread_per_batch
    m.result = f"{ms(took):.0f} ms, threads {threads_before}->{threads_peak}"
    return m
