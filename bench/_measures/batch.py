"""Measure 2: 100 `noop` calls gathered at once against a `celery.group` of 100 raw tasks."""

from __future__ import annotations

from statistics import median

import celery

from bench._context import BATCH_SIZE, Bench, expect
from bench._timing import Measure, cpu_json, ms, summarize, walls
from workers import OutcomeKind

TARGET_S = 0.150
SPEEDUP_TARGET = 4.0
WARMUP = 2  # pairs
PAIRS = 12


async def measure_batch(b: Bench) -> Measure:
    m = Measure(
        "batch_100",
        f"{BATCH_SIZE} no-ops in one batch",
        f"asyncio.gather of {BATCH_SIZE} CeleryExecutor.execute(noop) calls, against "
        f"celery.group({BATCH_SIZE} x bench.raw_noop).apply_async().get() (GroupResult.get) on the same "
        "worker, interleaved; speed-up = median over pairs of group time / executor time.",
        f"median <= {ms(TARGET_S):.0f} ms and >= {SPEEDUP_TARGET:g}x faster than group",
    )

    async def tool_batch() -> None:
        expect(await b.calls(b.noop, "{}", BATCH_SIZE), OutcomeKind.SUCCESS)

    async def group_batch() -> None:
        result = celery.group(b.raw_noop.s() for _ in range(BATCH_SIZE)).apply_async()
        values = result.get(timeout=30)
        if len(values) != BATCH_SIZE:
            raise RuntimeError(f"group returned {len(values)} results")

    tool_runs, group_runs = await b.interleaved(tool_batch, group_batch, warmup=WARMUP, pairs=PAIRS)
    tool_times, group_times = walls(tool_runs), walls(group_runs)
    pairs = list(zip(tool_times, group_times, strict=True))
    speedup = median([g / t for t, g in pairs])
    took = median(tool_times)
    m.rounds = [{"executor_ms": ms(t), "group_ms": ms(g), "speedup": round(g / t, 3)} for t, g in pairs]
    m.sides = {"executor": summarize(tool_times), "celery_group": summarize(group_times)}
    m.cpu = {"executor": cpu_json(tool_runs, BATCH_SIZE), "celery_group": cpu_json(group_runs, BATCH_SIZE)}
    m.details = {
        "median_speedup": round(speedup, 3),
        "latency_met": took <= TARGET_S,
        "speedup_met": speedup >= SPEEDUP_TARGET,
        "ms_per_call": ms(took / BATCH_SIZE),
    }
    m.met = took <= TARGET_S and speedup >= SPEEDUP_TARGET
    m.result = f"{ms(took):.0f} ms, x{speedup:.1f} vs group ({ms(median(group_times)):.0f} ms)"
    return m
