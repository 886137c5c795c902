"""Tools measured by the benchmarks."""

from __future__ import annotations

import asyncio
import time

from workers import ToolProgressReporter, tool


@tool("Does nothing", pool="bench", timeout=30)
def noop() -> str:
    return "ok"


@tool("Does nothing, on a worker with task events off (measures 1 and 2)", pool="bench.quiet", timeout=30)
def quiet_noop() -> str:
    return "ok"


@tool(
    "Does nothing, at most 1,000 calls at once per tenant in the fleet",
    pool="bench",
    timeout=30,
    concurrency=1000,
    concurrency_key="tenant",
)
def capped_noop() -> str:
    return "ok"


@tool(
    "Sleeps for the given seconds, at most 4 calls at once in the fleet (served to tenants in turn)",
    pool="bench",
    timeout=120,
    concurrency=4,
)
def shared_sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@tool("Sleeps for the given seconds", pool="bench", timeout=30)
def sleep_for(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@tool("Sleeps for the given seconds, awaiting", pool="bench", timeout=30)
async def async_sleep_for(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"


@tool("Reports progress at a steady pace", pool="bench", timeout=60)
def report_steps(count: int, interval_s: float, progress: ToolProgressReporter) -> str:
    for step in range(1, count + 1):
        progress.progress(fraction=step / count, message=f"step {step}")
        time.sleep(interval_s)
    return "reported"
