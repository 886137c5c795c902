"""Tools of the cancellation tests, on a threads pool and a prefork pool of their own. What they did
is in the test Redis under `cancel:<ns>:*`, `ns` an argument (one per test):

- `cancel:<ns>:pid` the process a `hold` call runs in; `cancel:<ns>:held` set when it starts;
  `cancel:<ns>:finished` set if it ever ends;
- `cancel:<ns>:steps` (counter) the reports a `crawl` made; `cancel:<ns>:saw` set when it saw the
  cancellation (`ToolCancelled`);
- `cancel:<ns>:booked` / `cancel:<ns>:undone` (counters) bookings and their compensations.
"""

from __future__ import annotations

import os
import time

from tests.integration.side_effects import process_client
from workers import ToolCancelled, ToolProgressReporter, compensate_for, tool

THREADS = "cancel-threads"
PREFORK = "cancel-prefork"


@tool("Holds its process for a while", pool=PREFORK, timeout=60)
def hold(ns: str, seconds: float) -> str:
    client = process_client()
    client.set(f"cancel:{ns}:pid", os.getpid())
    client.set(f"cancel:{ns}:held", 1)
    time.sleep(seconds)
    client.set(f"cancel:{ns}:finished", 1)
    return "held"


@tool("Crawls in steps, reporting each", pool=THREADS, timeout=60)
def crawl(ns: str, steps: int, progress: ToolProgressReporter) -> str:
    client = process_client()
    try:
        for step in range(steps):
            progress.progress(fraction=step / steps, message=f"step {step}")
            client.incr(f"cancel:{ns}:steps")
            time.sleep(0.1)
    except ToolCancelled:
        client.set(f"cancel:{ns}:saw", 1)
        raise
    return "crawled"


class Desk:
    @tool("Books a seat", pool=THREADS, timeout=10)
    def reserve(self, ns: str) -> str:
        process_client().incr(f"cancel:{ns}:booked")
        return "reserved"

    @compensate_for("reserve")
    def release(self, ns: str) -> None:
        process_client().incr(f"cancel:{ns}:undone")
