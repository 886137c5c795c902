"""Long-running travel tools of the demo's fifth story: a fare search that reports each airline it
asked, and a fare watch that runs until the fare drops or someone stops it (cooperatively: it looks
at each report whether it was cancelled)."""

from __future__ import annotations

import time

from workers import ToolProgressReporter, tool

AIRLINES = ("TAP", "Ryanair", "LOT", "Lufthansa", "KLM", "Air France", "Iberia", "Wizz Air")
FARES = {"TAP": 182.0, "Ryanair": 96.0, "LOT": 141.0, "Lufthansa": 205.0}
STEP_S = 0.15  # how long each airline takes to answer
WATCH_EVERY_S = 0.1


@tool("Searches the fares to a city, asking each airline in turn", pool="io", timeout=30)
def search_fares(destination: str, progress: ToolProgressReporter) -> str:
    found: dict[str, float] = {}
    for asked, airline in enumerate(AIRLINES, 1):
        time.sleep(STEP_S)
        if airline in FARES:
            found[airline] = FARES[airline]
        progress.progress(
            fraction=asked / len(AIRLINES), message=f"asked {airline}", data={"found": len(found)}
        )
    cheapest = min(found, key=found.__getitem__)
    return f"{len(found)} fares to {destination}; the cheapest is {cheapest} at {found[cheapest]:.0f} EUR"


@tool("Watches a fare until it drops below a price, checking it again and again", pool="io", timeout=60)
def watch_fare(destination: str, below: float, progress: ToolProgressReporter) -> str:
    checks = 0
    while True:  # the fare never drops in the demo: it runs until cancelled, or its deadline
        checks += 1
        progress.progress(message=f"checked {checks} times, still above {below:.0f} EUR")
        time.sleep(WATCH_EVERY_S)
