"""Tools measured by the benchmarks."""

from __future__ import annotations

import asyncio
import time

from workers import tool


@tool("Does nothing", pool="bench", timeout=30)
def noop() -> str:
    return "ok"


@tool("Sleeps for the given seconds", pool="bench", timeout=30)
def sleep_for(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@tool("Sleeps for the given seconds, awaiting", pool="bench", timeout=30)
async def async_sleep_for(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"
