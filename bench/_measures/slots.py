"""Measure 13: what a fleet-wide concurrency slot adds to one call (`capped_noop` against `noop`)."""

from __future__ import annotations

from statistics import median

from bench._context import Bench, expect
from bench._timing import Measure, cpu_json, ms, summarize, walls
from workers import OutcomeKind

EXTRA_TARGET_MS = 0.5
WARMUP = 40  # pairs
ROUNDS = 7
PAIRS = 60  # per round


async def measure_slots(b: Bench) -> Measure:
    m = Measure(
        "concurrency_slot",
        "1 call of a concurrency-keyed tool: extra over a plain one",
        'One `capped_noop` call (`@tool(concurrency=1000, concurrency_key="tenant")`: a slot taken before '
        "it is published and freed at its outcome, two scripts on Redis) against one `noop` call, both "
        "through CeleryExecutor.execute on the same worker. Sides interleaved; the result is the median "
        "over rounds of each round's difference of medians.",
        f"median extra <= {EXTRA_TARGET_MS} ms",
    )
    capped = b.executor.registry.get("capped_noop")
    if capped is None:
        raise RuntimeError("bench.tools must define the tool capped_noop")

    async def capped_call() -> None:
        expect([await b.executor.execute(b.request("capped_noop"), capped)], OutcomeKind.SUCCESS)

    async def plain_call() -> None:
        expect([await b.executor.execute(b.request("noop"), b.noop)], OutcomeKind.SUCCESS)

    await b.timer.interleaved(capped_call, plain_call, b.reps(WARMUP))
    capped_runs, plain_runs, medians = await b.rounds(capped_call, plain_call, rounds=ROUNDS, pairs=PAIRS)
    extras = [ms(c - p) for c, p in medians]
    m.rounds = [
        {"capped_median_ms": ms(c), "plain_median_ms": ms(p), "extra_ms": ms(c - p)} for c, p in medians
    ]
    extra = median(extras)
    m.sides = {"capped": summarize(walls(capped_runs)), "plain": summarize(walls(plain_runs))}
    m.cpu = {"capped": cpu_json(capped_runs, 1), "plain": cpu_json(plain_runs, 1)}
    capped_ms, plain_ms = ms(median(walls(capped_runs))), ms(median(walls(plain_runs)))
    m.details = {"median_extra_ms": round(extra, 4), "ratio": round(capped_ms / plain_ms, 4)}
    m.met = extra <= EXTRA_TARGET_MS
    m.result = f"+{extra:.2f} ms (x{capped_ms / plain_ms:.2f}: {capped_ms:.2f} vs {plain_ms:.2f} ms)"
    return m
