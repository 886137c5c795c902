"""A report rendered on the heavy pool and returned as an artifact: the demo's outlook story.

`render_outlook` takes the forecasts a conversation gathered (from `get_weather`) and writes an hourly
temperature outlook of each city as a Markdown report of a few hundred KB. The report is streamed
into the artifact store a table row at a time, never held whole; the model reads its first lines and
its reference (`artifact:<id>`), which a client fetches from `toolfleet serve` (`GET
/v1/artifacts/<id>`) or from the store itself. Its compensation removes it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Annotated

from workers import Param, ToolErrorVisibleToLlm, ToolExecution, compensate_for, tool
from workers.artifacts import Artifact, delete_artifacts

__all__ = ["MAX_CITIES", "MAX_DAYS", "CityForecast", "outlook_lines", "render_outlook"]

MAX_DAYS = 92  # a quarter: the longest outlook the tool renders
MAX_CITIES = 20
_ROWS_PER_CHUNK = 256  # table rows written to the store at once


class OutlookRefused(ToolErrorVisibleToLlm, Exception):
    """The outlook asked for is larger than the tool renders, or names no city."""


@dataclass(frozen=True)
class CityForecast:
    """One city's forecast, as `get_weather` gives it (the unit is Celsius)."""

    city: str
    temperature: float
    summary: str = ""


@tool(
    "Renders an hourly temperature outlook of the forecast cities as a Markdown report (a file the user "
    "can download); returns the report",
    pool="heavy",
    timeout=30,
)
def render_outlook(
    title: Annotated[str, Param("The report's title")],
    forecasts: Annotated[list[CityForecast], Param("The cities' forecasts, as get_weather returned them")],
    days: Annotated[int, Param(f"How many days the outlook covers, 1 to {MAX_DAYS}")] = 30,
    start: Annotated[date | None, Param("The first day of the outlook (default: today)")] = None,
) -> Artifact:
    if not forecasts or len(forecasts) > MAX_CITIES:
        raise OutlookRefused(f"an outlook covers 1 to {MAX_CITIES} cities, not {len(forecasts)}")
    if not 1 <= days <= MAX_DAYS:
        raise OutlookRefused(f"an outlook covers 1 to {MAX_DAYS} days, not {days}")
    first = start or datetime.now(UTC).date()
    chunks = _chunks(outlook_lines(title, forecasts, days, first))
    return Artifact(stream=chunks, name="outlook.md", media_type="text/markdown; charset=utf-8")


@compensate_for("render_outlook")
def discard_outlook(execution: ToolExecution) -> None:
    """An outlook undone with its invocation is removed from the artifact store."""
    delete_artifacts(execution)


def outlook_lines(title: str, forecasts: list[CityForecast], days: int, first: date) -> Iterator[str]:
    """The report's lines: a summary table of each city, then its hourly outlook."""
    hours = days * 24
    series = {f.city: [_temperature(f, hour) for hour in range(hours)] for f in forecasts}
    yield f"# {title}\n\n"
    yield f"An hourly outlook of {len(forecasts)} cities over {days} days from {first.isoformat()}.\n\n"
    yield "| city | forecast | min °C | mean °C | max °C |\n|---|---|---:|---:|---:|\n"
    for forecast in forecasts:
        values = series[forecast.city]
        yield (
            f"| {forecast.city} | {forecast.temperature:.1f} °C, {forecast.summary or '-'} | "
            f"{min(values):.1f} | {sum(values) / len(values):.1f} | {max(values):.1f} |\n"
        )
    midnight = datetime(first.year, first.month, first.day, tzinfo=UTC)
    for forecast in forecasts:
        yield f"\n## {forecast.city}\n\n| hour (UTC) | °C | feels like °C |\n|---|---:|---:|\n"
        for hour, value in enumerate(series[forecast.city]):
            at = midnight + timedelta(hours=hour)
            yield f"| {at:%Y-%m-%d %H:00} | {value:.1f} | {value - _wind_chill(forecast, hour):.1f} |\n"


def _temperature(forecast: CityForecast, hour: int) -> float:
    """The forecast temperature, warmer in the afternoon, drifting a little from day to day."""
    daily = 4.0 * math.sin(2 * math.pi * ((hour % 24) - 9) / 24)
    drift = 3.0 * math.sin(2 * math.pi * hour / (24 * 11) + _phase(forecast.city))
    return forecast.temperature + daily + drift


def _wind_chill(forecast: CityForecast, hour: int) -> float:
    return 1.5 + 1.5 * math.sin(2 * math.pi * hour / 17 + _phase(forecast.city))


def _phase(city: str) -> float:
    return hashlib.sha256(city.lower().encode()).digest()[0] / 255 * 2 * math.pi


def _chunks(lines: Iterator[str]) -> Iterator[bytes]:
    """`lines` encoded, a few hundred table rows at a time."""
    batch: list[str] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= _ROWS_PER_CHUNK:
            yield "".join(batch).encode("utf-8")
            batch.clear()
    if batch:
        yield "".join(batch).encode("utf-8")
