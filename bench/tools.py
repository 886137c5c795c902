"""Tools measured by the benchmarks."""

from __future__ import annotations

import time

from workers import tool


@tool("Does nothing", pool="bench", timeout=30)
def noop() -> str:
    return "ok"


@tool("Sleeps for the given seconds", pool="bench", timeout=30)
def sleep_for(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"
