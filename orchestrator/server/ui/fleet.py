"""The run view's fleet page, `/ui/fleet`: per pool and, under it, per tool, the calls of the last
15 minutes, hour or day at a glance (`fleet_data` reads the numbers), with small charts drawn here
as inline SVG: each pool's calls per bucket (failures in their own colour) and its latency p95 per
bucket, each with a title that says the numbers it draws. A tenant's viewer sees its own calls only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response

from orchestrator.server.ui import fleet_data
from orchestrator.server.ui.auth import Session
from orchestrator.server.ui.context import UiContext
from orchestrator.server.ui.fleet_data import Bucket, Fleet, PoolNumbers, Window
from orchestrator.server.ui.pages import common, guarded
from orchestrator.server.ui.render import html
from orchestrator.server.ui.waterfall_axis import duration_text

__all__ = [
    "CHART_HEIGHT",
    "CHART_WIDTH",
    "Bar",
    "Chart",
    "PoolView",
    "calls_chart",
    "latency_chart",
    "ms_text",
    "rate_text",
    "router",
]

router = APIRouter(prefix="/ui", include_in_schema=False)

CHART_WIDTH = 360
CHART_HEIGHT = 64


@dataclass(frozen=True)
class Bar:
    """One rectangle of a chart, in its SVG's units; `kind` its colour's class (ok, failed, latency)."""

    x: float
    y: float
    width: float
    height: float
    kind: str


@dataclass(frozen=True)
class Chart:
    """A small bar chart: what it draws, said in words with its numbers (its title and ARIA label)."""

    label: str
    bars: list[Bar]
    top: str  # the value of its full height, for the scale
    width: int = CHART_WIDTH
    height: int = CHART_HEIGHT


@dataclass(frozen=True)
class PoolView:
    """One pool's section of the page: its numbers and its two charts."""

    pool: PoolNumbers
    calls: Chart
    latency: Chart

    @property
    def title(self) -> str:
        return self.pool.name or "(no pool)"


@router.get("/fleet")
async def fleet_page(request: Request) -> Response:
    return await guarded(request, _fleet)


async def _fleet(request: Request, context: UiContext, session: Session) -> Response:
    chosen = request.query_params.get("window", fleet_data.DEFAULT_WINDOW)
    window = fleet_data.WINDOWS.get(chosen) or fleet_data.WINDOWS[fleet_data.DEFAULT_WINDOW]
    only = session.viewer.only  # a tenant's calls only, in SQL; an operator's: every tenant's
    readings = await context.journal.run(lambda journal: fleet_data.read(journal, window, only))
    fleet = await asyncio.to_thread(fleet_data.summarize, readings)  # percentiles may be Python's
    return html(
        "fleet.html",
        fleet=fleet,
        views=[_view(pool, fleet) for pool in fleet.pools],
        windows=list(fleet_data.WINDOWS.values()),
        every=_every(window),
        ms=ms_text,
        rate=rate_text,
        **common(context, session),
    )


def _view(pool: PoolNumbers, fleet: Fleet) -> PoolView:
    return PoolView(pool, calls_chart(pool, fleet.window), latency_chart(pool, fleet.window))


def calls_chart(pool: PoolNumbers, window: Window) -> Chart:
    """The pool's calls per bucket, oldest first, each bar's failed part on top in its own colour."""
    buckets = pool.buckets
    top = max((b.calls for b in buckets), default=0) or 1
    bars: list[Bar] = []
    for index, bucket in enumerate(buckets):
        x, width = _slot(index, len(buckets))
        ok_height = (bucket.calls - bucket.failed) / top * CHART_HEIGHT
        failed_height = bucket.failed / top * CHART_HEIGHT
        if ok_height:
            bars.append(Bar(x, CHART_HEIGHT - ok_height, width, ok_height, "ok"))
        if failed_height:
            bars.append(Bar(x, CHART_HEIGHT - ok_height - failed_height, width, failed_height, "failed"))
    said = ", ".join(_calls_said(bucket) for bucket in buckets)
    label = f"Calls of pool {_name(pool)} per {_every(window)}, {window.label}, oldest first: {said}"
    return Chart(label, bars, f"{top} call{'' if top == 1 else 's'}")


def latency_chart(pool: PoolNumbers, window: Window) -> Chart:
    """The pool's latency p95 per bucket, oldest first; a bucket without calls has no bar."""
    buckets = pool.buckets
    top = max((b.latency_p95_ms or 0.0 for b in buckets), default=0.0)
    bars: list[Bar] = []
    for index, bucket in enumerate(buckets):
        if bucket.latency_p95_ms is None or not top:
            continue
        x, width = _slot(index, len(buckets))
        height = max(bucket.latency_p95_ms / top * CHART_HEIGHT, 1.0)  # a fast bucket stays visible
        bars.append(Bar(x, CHART_HEIGHT - height, width, height, "latency"))
    said = ", ".join(ms_text(bucket.latency_p95_ms) for bucket in buckets)
    label = f"Latency p95 of pool {_name(pool)} per {_every(window)}, {window.label}, oldest first: {said}"
    return Chart(label, bars, ms_text(top) if top else "—")


def ms_text(value: float | None) -> str:
    """A duration in milliseconds, as the page shows it (`duration_text`); "—" when unknown."""
    return "—" if value is None else duration_text(value / 1000)


def rate_text(part: int, whole: int) -> str:
    """`part` of `whole` and its share ("2 (12.5 %)"); "0" when there is none."""
    if not part or not whole:
        return str(part)
    return f"{part} ({part / whole * 100:.1f} %)"


def _slot(index: int, count: int) -> tuple[float, float]:
    """Where bucket `index` of `count` is drawn: its x and width, a gap between neighbours."""
    step = CHART_WIDTH / max(count, 1)
    gap = 1.0 if step > 3 else 0.0
    return round(index * step, 2), round(step - gap, 2)


def _calls_said(bucket: Bucket) -> str:
    return f"{bucket.calls} ({bucket.failed} failed)" if bucket.failed else str(bucket.calls)


def _every(window: Window) -> str:
    minutes = window.bucket_s // 60
    return "minute" if minutes == 1 else f"{minutes} minutes"


def _name(pool: PoolNumbers) -> str:
    return pool.name or "(no pool)"
