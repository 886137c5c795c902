"""Measure 1: one `noop` call through `CeleryExecutor.execute` against a raw Celery task's round trip."""

from __future__ import annotations

from statistics import median

from bench._commands import commands_per_call, total
from bench._context import Bench, expect
from bench._timing import Measure, cpu_json, ms, summarize, walls
from workers import OutcomeKind

RATIO_TARGET = 1.25
WARMUP = 40  # pairs
ROUNDS = 7
PAIRS = 60  # per round
COUNTED = 200  # calls of each side whose Redis commands are counted


async def measure_single(b: Bench) -> Measure:
    m = Measure(
        "single_call",
        "1 no-op call: executor / raw Celery",
        "One `noop` tool call through CeleryExecutor.execute, against `bench.raw_noop.apply_async().get()` "
        "with the worker app's Redis result backend, on the same worker. Sides interleaved (AB, BA, …); "
        "the result is the median over rounds of each round's ratio of medians.",
        f"median ratio <= {RATIO_TARGET}",
    )

    async def tool_call() -> None:
        expect([await b.executor.execute(b.request("noop"), b.noop)], OutcomeKind.SUCCESS)

    async def raw_call() -> None:
        b.raw_noop.apply_async().get(timeout=10)

    await b.timer.interleaved(tool_call, raw_call, b.reps(WARMUP))
    tool_runs, raw_runs, medians = await b.rounds(tool_call, raw_call, rounds=ROUNDS, pairs=PAIRS)
    ratios = [tool_median / raw_median for tool_median, raw_median in medians]
    m.rounds = [
        {"executor_median_ms": ms(t), "celery_median_ms": ms(r), "ratio": round(t / r, 4)} for t, r in medians
    ]
    commands = {
        "executor": await commands_per_call(b.redis, tool_call, b.reps(COUNTED)),
        "celery": await commands_per_call(b.redis, raw_call, b.reps(COUNTED)),
    }
    ratio = median(ratios)
    m.sides = {"executor": summarize(walls(tool_runs)), "celery": summarize(walls(raw_runs))}
    m.cpu = {"executor": cpu_json(tool_runs, 1), "celery": cpu_json(raw_runs, 1)}
    m.details = {
        "median_ratio": round(ratio, 4),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "redis_commands_per_call": {side: total(counts) for side, counts in commands.items()},
        "redis_commands": commands,
    }
    m.met = ratio <= RATIO_TARGET
    tool_ms, raw_ms = ms(median(walls(tool_runs))), ms(median(walls(raw_runs)))
    m.result = (
        f"x{ratio:.2f} ({tool_ms:.2f} vs {raw_ms:.2f} ms; "
        f"{total(commands['executor']):g} vs {total(commands['celery']):g} Redis commands)"
    )
    return m
