"""Tools of the `srch` pool, served by the throw-away worker of the service tools and streaming tests.

A small catalog for tool search (names and descriptions chosen so the scores are known exactly), and
a probe that reports where it ran and the whole invocation context it received.
"""

from __future__ import annotations

import os
import socket

from workers import InvocationContext, InvocationParameters, SearchBehavior, ToolMemoryId, tool

POOL = "srch"


@tool("Tells the current time", pool=POOL, timeout=10, search_behavior=SearchBehavior.ALWAYS_VISIBLE)
def current_time() -> str:
    return "12:00"


@tool("Sun strength; depends on the weather", pool=POOL, timeout=10)
def uv_index(city: str) -> str:
    return f"uv 5 in {city}"


@tool("Severe alerts", pool=POOL, timeout=10)
def weather_alerts(city: str) -> str:
    return f"no alerts in {city}"


@tool("Current weather for a city", pool=POOL, timeout=10)
def get_weather(city: str) -> str:
    return f"sunny in {city} (pid {os.getpid()})"


@tool("Forecast of the weather for the coming days", pool=POOL, timeout=10)
def weather_forecast(city: str, days: int = 3) -> str:
    return f"{days} sunny days in {city}"


@tool("Books a flight between two airports", pool=POOL, timeout=10)
def book_flight(origin: str, destination: str) -> str:
    return f"booked {origin}-{destination}"


@tool("Converts an amount between currencies", pool=POOL, timeout=10)
def convert_currency(amount: float, source: str, target: str) -> str:
    return f"{amount} {source} is {amount * 2} {target}"


@tool("Reports the invocation it belongs to and where it ran", pool=POOL, timeout=10)
def context_probe(
    params: InvocationParameters, context: InvocationContext, memory_id: ToolMemoryId
) -> dict[str, object]:
    return {
        "params": dict(params),
        "context": context.to_json(),
        "memory_id": str(memory_id),
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }


# In the order a test hands them to a service: scores for the term "weather" are 1, 2, 3, 3, 0, 0, 0
# (plus current_time: 0), so "best first" must reorder them.
SEARCHABLE = [uv_index, weather_alerts, get_weather, weather_forecast, book_flight, convert_currency]
