"""Tools of the telemetry tests, on two pools: `obs-a` holds a compensable `reserve`, `obs-b` a
`charge` that fails when asked to. What the tools did is kept in the test Redis under `obs:<ns>:*`."""

from __future__ import annotations

import time

from tests.integration.side_effects import process_client
from workers import ToolProgressReporter, compensate_for, tool
from workers.calls.progress import MIN_INTERVAL_S

POOL_A = "obs-a"
POOL_B = "obs-b"


class CardDeclined(Exception):
    """The card was declined."""


class Shop:
    @tool("Reserves an item", pool=POOL_A, timeout=10)
    def reserve(self, ns: str, item: str) -> str:
        process_client(socket_timeout=5).rpush(f"obs:{ns}:done", f"reserve {item}")
        return f"reserved {item}"

    @compensate_for("reserve")
    def release(self, ns: str, item: str) -> None:
        process_client(socket_timeout=5).rpush(f"obs:{ns}:done", f"release {item}")

    @tool("Charges a card", pool=POOL_B, timeout=10)
    def charge(self, ns: str, amount: int, decline: bool = False) -> str:
        if decline:
            raise CardDeclined("card declined")
        return f"charged {amount}"


shop = Shop()


@tool("Stays a while, saying which process runs it", pool=POOL_A, timeout=60)
def linger(ns: str, seconds: float) -> str:
    import os
    import time

    process_client(socket_timeout=5).set(f"obs:{ns}:pid", os.getpid())
    time.sleep(seconds)
    return "lingered"


@tool("Counts up, reporting each step", pool=POOL_B, timeout=30)
def tally(steps: int, progress: ToolProgressReporter) -> str:
    for step in range(1, steps + 1):
        progress.progress(fraction=step / steps, message=f"step {step}")
        time.sleep(MIN_INTERVAL_S * 1.5)  # each report sent, none folded into the next
    return f"counted to {steps}"
