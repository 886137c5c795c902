"""A weather tool that takes its time (30 s), on a pool of its own: the one tool the fake model of
tests/_fake_openai.py calls, so a `toolfleet chat` test has a question that stays in flight."""

from __future__ import annotations

import time

from workers import tool

POOL = "slow-weather"


@tool("Looks up the weather in a city, slowly", pool=POOL, timeout=60)
def get_weather(city: str) -> str:
    time.sleep(30)
    return f"Forecast for {city}: 21.0°C, sunny."
