"""Tools of the telemetry tests, on two pools: `obs-a` holds a compensable `reserve`, `obs-b` a
`charge` that fails when asked to. What the tools did is kept in the test Redis under `obs:<ns>:*`."""

from __future__ import annotations

from tests.integration.side_effects import process_client
from workers import compensate_for, tool

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
