"""Tools for the progress and heartbeat tests, on pool `progresspool`: a slow tool reporting its
steps, one reporting in a tight loop, and watched tools that beat, or never do."""

from __future__ import annotations

import time

from workers import ToolProgressReporter, tool


@tool("Works through its steps over some seconds, reporting each", pool="progresspool", timeout=30)
def steps(count: int, seconds: float, progress: ToolProgressReporter) -> str:
    for step in range(1, count + 1):
        time.sleep(seconds / count)
        progress.progress(fraction=step / count, message=f"step {step} of {count}", data={"step": step})
    return f"{count} steps done"


@tool("Reports progress as fast as it can", pool="progresspool", timeout=30)
def flood(count: int, progress: ToolProgressReporter) -> str:
    for step in range(1, count + 1):
        progress.progress(fraction=step / count, message=f"report {step}")
    return f"{count} reports made"


@tool("Sleeps, beating every tenth of a second", pool="progresspool", timeout=30, heartbeat_timeout_s=1)
def beating(seconds: float, progress: ToolProgressReporter) -> str:
    progress.progress(fraction=0.0, message="started")
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        time.sleep(0.1)
        progress.heartbeat()
    return "slept"


@tool("Sleeps without ever beating", pool="progresspool", timeout=30, heartbeat_timeout_s=1)
def silent(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"
