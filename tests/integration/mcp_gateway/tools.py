"""The tools the MCP gateway's tests reach through it, on pools of their own. What they did is in the
test Redis under `gateway:<ns>:*`, `ns` an argument (one per test)."""

from __future__ import annotations

import os
import time

from tests.integration.side_effects import process_client
from workers import Artifact, InvocationParameters, ToolCancelled, ToolProgressReporter, tool

POOL = "gateway"
OTHER_POOL = "gateway-other"


@tool("Adds two numbers", pool=POOL, timeout=10)
def add(a: int, b: int) -> str:
    return f"{a + b} (on {os.getpid()})"


@tool("Walks in steps, reporting each one", pool=POOL, timeout=60)
def walk(ns: str, steps: int, progress: ToolProgressReporter) -> str:
    client = process_client()
    try:
        for step in range(steps):
            progress.progress(fraction=(step + 1) / steps, message=f"step {step + 1} of {steps}")
            client.incr(f"gateway:{ns}:steps")
            time.sleep(0.1)
    except ToolCancelled:
        client.set(f"gateway:{ns}:stopped", 1)
        raise
    return f"walked {steps} steps"


@tool("Wires money: a person approves each wire", pool=POOL, timeout=10, requires_approval=True)
def wire(ns: str, amount: int) -> str:
    process_client().incrby(f"gateway:{ns}:wired", amount)
    return f"wired {amount}"


@tool("Says whose call it is", pool=POOL, timeout=10)
def whose(params: InvocationParameters) -> str:
    return f"tenant {params.get('tenant')}"


@tool("Refuses, always", pool=POOL, timeout=10)
def refuse(reason: str) -> str:
    raise ValueError(f"refused: {reason}")


@tool("Exports `rows` rows as a CSV file", pool=POOL, timeout=10)
def export(rows: int) -> Artifact:
    return Artifact("".join(f"{n},{n * n}\n" for n in range(rows)), name="squares.csv", media_type="text/csv")


@tool("Served by another pool", pool=OTHER_POOL, timeout=10)
def elsewhere() -> str:
    return "elsewhere"


LATE_POOL = "gateway-late"


@tool("Served once a late pool starts", pool=LATE_POOL, timeout=10)
def late() -> str:
    return "late"
