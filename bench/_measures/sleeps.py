"""Measures 4 and 8: 100 `sleep_for(0.1)` calls at once on the worker's threads pool of 100, and 100
`async_sleep_for(0.1)` against them on the same pool."""

from __future__ import annotations

import json
from statistics import median

from bench._context import BATCH_SIZE, WORKER_CONCURRENCY, Bench, expect
from bench._timing import Measure, cpu_json, ms, summarize, walls
from workers import OutcomeKind

SLEEP_S = 0.1
TARGET_S = 0.25
WARMUP = 2
REPS = 12


async def measure_sleeps(b: Bench) -> Measure:
    m = Measure(
        "sleeps_100",
        f"{BATCH_SIZE} x sleep_for({SLEEP_S:g}), {WORKER_CONCURRENCY} threads",
        f"asyncio.gather of {BATCH_SIZE} CeleryExecutor.execute(sleep_for({SLEEP_S:g})) calls on the "
        f"worker's threads pool of {WORKER_CONCURRENCY} (floor {ms(SLEEP_S):.0f} ms).",
        f"median <= {ms(TARGET_S):.0f} ms",
    )
    arguments = json.dumps({"seconds": SLEEP_S})

    async def sleeps() -> None:
        expect(await b.calls(b.sleep_for, arguments, BATCH_SIZE), OutcomeKind.SUCCESS)

    runs = await b.repeat(sleeps, warmup=WARMUP, times=REPS)
    took = median(walls(runs))
    m.sides = {"executor": summarize(walls(runs))}
    m.cpu = {"executor": cpu_json(runs, BATCH_SIZE)}
    m.rounds = [{"ms": ms(run.wall)} for run in runs]
    m.details = {"floor_ms": ms(SLEEP_S), "overhead_ms": ms(took - SLEEP_S)}
    m.met = took <= TARGET_S
    m.result = f"{ms(took):.0f} ms"
    return m


ASYNC_PAIRS = 10
TOLERANCE = 1.10  # "no slower": the async median within 10 % of the sync one (the VM's noise)


async def measure_async_sleeps(b: Bench) -> Measure:
    m = Measure(
        "async_sleeps_100",
        f"{BATCH_SIZE} async vs sync sleeps of {SLEEP_S:g} s, {WORKER_CONCURRENCY} threads",
        f"asyncio.gather of {BATCH_SIZE} CeleryExecutor.execute(async_sleep_for({SLEEP_S:g})) calls (an "
        f"`async def` tool awaiting asyncio.sleep, run on each worker thread's long-lived loop) against "
        f"{BATCH_SIZE} sleep_for({SLEEP_S:g}) (time.sleep) on the same worker's threads pool of "
        f"{WORKER_CONCURRENCY}, interleaved; ratio = median async / median sync.",
        f"async no slower: ratio <= {TOLERANCE:.2f}",
    )
    async_sleep_for = b.executor.registry.get("async_sleep_for")
    if async_sleep_for is None:
        raise RuntimeError("bench.tools must define the tool async_sleep_for")
    arguments = json.dumps({"seconds": SLEEP_S})

    async def awaiting() -> None:
        expect(await b.calls(async_sleep_for, arguments, BATCH_SIZE), OutcomeKind.SUCCESS)

    async def sleeping() -> None:
        expect(await b.calls(b.sleep_for, arguments, BATCH_SIZE), OutcomeKind.SUCCESS)

    async_runs, sync_runs = await b.interleaved(awaiting, sleeping, warmup=WARMUP, pairs=ASYNC_PAIRS)
    async_ms, sync_ms = median(walls(async_runs)), median(walls(sync_runs))
    ratio = async_ms / sync_ms
    m.sides = {"async": summarize(walls(async_runs)), "sync": summarize(walls(sync_runs))}
    m.cpu = {"async": cpu_json(async_runs, BATCH_SIZE), "sync": cpu_json(sync_runs, BATCH_SIZE)}
    m.details = {"ratio": round(ratio, 3), "floor_ms": ms(SLEEP_S)}
    m.met = ratio <= TOLERANCE
    m.result = f"x{ratio:.2f} ({ms(async_ms):.0f} vs {ms(sync_ms):.0f} ms)"
    return m
