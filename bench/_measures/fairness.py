"""Measure 14: fairness between tenants on a shared limit — how much longer a small tenant's calls take
behind a large tenant's crowd than alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from bench._context import Bench, expect
from bench._timing import Measure
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.calls.invocation import Invocation

RATIO_TARGET = 2.0
SMALL, CROWD = 10, 200
# Each call's sleep. B alone runs its 10 calls in 3 waves of the 4 slots; behind the crowd it gets
# every other free slot, 5 waves: ~1.7x at best, however short the calls.
SECONDS = 0.5
ROUNDS = 3


async def measure_fairness(b: Bench) -> Measure:
    m = Measure(
        "tenant_fairness",
        f"{SMALL} calls of tenant B behind {CROWD} of tenant A, on a limit of 4: slowdown",
        f"`shared_sleep` (`@tool(concurrency=4)`, {SECONDS:g} s each). Tenant B's {SMALL} calls, in one "
        f"batch, alone; then again while tenant A's {CROWD} calls wait in line for the same 4 slots (A's "
        "line is given up once B's calls are done). Free slots go round-robin between tenants, so B "
        "waits for at most one of A's calls per slot turn. The result is the median over rounds of "
        "loaded / alone.",
        f"median ratio <= {RATIO_TARGET:g}",
    )
    shared = b.executor.registry.get("shared_sleep")
    if shared is None:
        raise RuntimeError("bench.tools must define the tool shared_sleep")

    def batch(tenant: str, count: int) -> asyncio.Future[list[ToolOutcome]]:
        calls = [
            (ToolExecutionRequest(f"{tenant}{i}", "shared_sleep", json.dumps({"seconds": SECONDS})), shared)
            for i in range(count)
        ]
        invocation = Invocation(parameters={"tenant": tenant})
        return asyncio.ensure_future(b.executor.execute_batch(calls, invocation))

    async def timed_small() -> float:
        started = time.perf_counter()
        expect(await batch("B", SMALL), OutcomeKind.SUCCESS)
        return time.perf_counter() - started

    rounds = []
    for _ in range(b.reps(ROUNDS)):
        alone = await timed_small()
        crowd = batch("A", CROWD)
        await asyncio.sleep(SECONDS * 3)  # A's calls run, the rest wait in line
        loaded = await timed_small()
        crowd_left = not crowd.done()
        crowd.cancel()  # the rest of A's line is given up: 200 calls would take 25 s
        with contextlib.suppress(asyncio.CancelledError):
            await crowd
        rounds.append({"alone_s": round(alone, 4), "loaded_s": round(loaded, 4), "crowd_waiting": crowd_left})
    ratios = sorted(r["loaded_s"] / r["alone_s"] for r in rounds)
    ratio = ratios[len(ratios) // 2]
    m.rounds = rounds
    m.details = {"median_ratio": round(ratio, 3), "ratios": [round(r, 3) for r in ratios]}
    m.met = ratio <= RATIO_TARGET and all(r["crowd_waiting"] for r in rounds)
    first = rounds[0]
    m.result = f"x{ratio:.2f} ({first['loaded_s']:.2f} s behind the crowd vs {first['alone_s']:.2f} s alone)"
    return m
