"""Measure 4: 100 `sleep_for(0.1)` calls at once on the worker's threads pool of 100."""

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
