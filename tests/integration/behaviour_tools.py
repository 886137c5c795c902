"""Tools on pool `behave` whose behaviour `toolfleet tools` shows: one a person approves first and a
compensation undoes (a method, so its compensation is `Class.method`), one that must beat while it
runs and is safe to run again, and one undone by a module-level function."""

from __future__ import annotations

from workers import ToolProgressReporter, compensate_for, tool

POOL = "behave"


class Payments:
    """Wires money between accounts; nothing is really moved."""

    @tool("Wires money to an account, once a person approves", pool=POOL, timeout=10, requires_approval=True)
    def wire(self, account: str, amount: float) -> str:
        return f"wired {amount:g} to {account}"

    @compensate_for("wire")
    def wire_back(self, account: str, amount: float) -> None:
        """Nothing was moved: nothing to move back."""


@tool("Watches a fare, beating as it goes", pool=POOL, timeout=60, heartbeat_timeout_s=5, idempotent=True)
def watch(route: str, progress: ToolProgressReporter) -> str:
    progress.heartbeat()
    return f"{route}: unchanged"


@tool("Holds a seat", pool=POOL, timeout=10)
def hold_seat(flight: str) -> str:
    return f"seat held on {flight}"


@compensate_for("hold_seat")
def release_seat(flight: str) -> None:
    """Nothing was held: nothing to release."""
