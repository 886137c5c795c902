"""A weather service stand-in: deterministic forecasts with a configurable delay, for fan-out."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from enum import Enum
from typing import Annotated

from workers import Param, tool


class TemperatureUnit(Enum):
    CELSIUS = "C"
    FAHRENHEIT = "F"


@dataclass(frozen=True)
class Forecast:
    city: str
    temperature: float
    unit: TemperatureUnit
    summary: str


_SUMMARIES = ("sunny", "cloudy", "rain", "windy", "snow", "fog")


@tool("Returns the weather forecast for a given city", pool="io", timeout=10, idempotent=True)
def get_weather(
    city: Annotated[str, Param("The city for which the weather forecast should be returned")],
    unit: TemperatureUnit = TemperatureUnit.CELSIUS,
    delay_s: Annotated[float, Param("Artificial latency of the lookup, in seconds")] = 0.0,
) -> Forecast:
    digest = hashlib.sha256(city.strip().lower().encode()).digest()
    celsius = round(digest[0] / 255 * 40 - 5, 1)
    temperature = celsius if unit is TemperatureUnit.CELSIUS else round(celsius * 9 / 5 + 32, 1)
    if delay_s > 0:
        time.sleep(min(delay_s, 5.0))
    return Forecast(
        city=city, temperature=temperature, unit=unit, summary=_SUMMARIES[digest[1] % len(_SUMMARIES)]
    )
