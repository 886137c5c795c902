"""An invocation's timeline as an SVG waterfall drawn on the server, as a trace view draws spans: one
row per model turn, its calls under it, then the approvals it waits on and the compensations, each a
bar against one time axis from the invocation's start to its end (or now, while it runs).

A model turn runs from the end of the previous turn's calls (and of the compensations a failed batch
set off), or the invocation's start, to the moment its response was journaled. That response and
the intents of the calls it asks for are written in one transaction (`Journal.record_turn`), so
the turn's moment is its first call's `started_at`: the rows are built from a `Story` alone, with
no query of their own.

The SVG carries its own `<style>`, so that it renders alone; a page whose Content-Security-Policy
refuses inline styles gives the same rules from its own stylesheet (`WATERFALL_CSS`). The axis'
ticks and the durations' text are `waterfall_axis`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from markupsafe import Markup, escape

from orchestrator.saga.journal import CallRecord, CompensationRecord
from orchestrator.server.ui.data import Story
from orchestrator.server.ui.waterfall_axis import axis_ticks, duration_text, svg_number

__all__ = [
    "LABEL_W",
    "MIN_BAR_W",
    "PLOT_W",
    "WATERFALL_CSS",
    "Bar",
    "timeline_span",
    "waterfall_bars",
    "waterfall_svg",
]

LABEL_W = 280  # the label column; the plot starts here
PLOT_W = 700  # the plot's width: the timeline's whole span
WIDTH = LABEL_W + PLOT_W + 40  # and room for the last tick's label
TOP_H = 26  # the axis' labels
ROW_H = 22
BAR_H = 14
MIN_BAR_W = 1.0  # a bar of no duration is still seen
LABEL_CHARS = 42  # a longer label is cut (its whole text is in the row's hover text)
CHAR_W = 6.2  # the average width of a character of the 11px font, to tell whether a text fits

# The waterfall's rules, from the view's stylesheet of it: a page links it (its security policy refuses
# the SVG's own <style>), an SVG viewed on its own carries it.
WATERFALL_CSS = (
    resources.files("orchestrator.server.ui").joinpath("static", "waterfall.css").read_text("utf-8")
)


@dataclass(frozen=True)
class Bar:
    """One row of the waterfall: what it shows, from when to when, and how it ended."""

    label: str
    kind: str  # model, ok, error, timeout, abandoned, running, approval, undo-(ok|error|pending|running)
    start: datetime
    end: datetime
    is_open: bool  # runs on to the timeline's end: still running, or its end was never journaled
    detail: str  # the hover text's lines after the first: state, where it ran
    indent: int = 0  # 1: a call, under its model turn
    lead_ms: int = 0  # how long a call waited before it was published: the bar's lighter lead-in
    call_row: int | None = None  # the journal row of the call (of a call's bar) or undone (of an undo's)


def timeline_span(story: Story, now: datetime) -> tuple[datetime, datetime]:
    """The axis' first and last moments: the invocation's start and its end, or `now` while it has
    not ended; stretched to anything the journal saw outside them (clocks of several hosts)."""
    record = story.record
    starts = [record.started_at, *(c.started_at for c in story.calls)]
    starts += [c.created_at for c in story.compensations]
    starts += [a.requested_at for a in story.waiting]
    ends = [record.finished_at if record.finished_at is not None else now]
    ends += [c.finished_at for c in story.calls if c.finished_at is not None]
    ends += [c.updated_at for c in story.compensations]
    return min(starts), max(ends + starts)


def waterfall_bars(story: Story, now: datetime) -> list[Bar]:
    """The waterfall's rows, top to bottom: each model turn then its calls, in request order; the
    model's last turn (its answer, or its thinking now); the approvals waited on; the compensations."""
    last = timeline_span(story, now)[1]
    undone = [c.updated_at for c in story.compensations if c.state in ("succeeded", "failed")]
    bars: list[Bar] = []
    previous_end = story.record.started_at
    number = 0
    for turn in story.turns:
        asked = min(c.started_at for c in turn.calls)
        number = turn.turn if turn.turn is not None else number + 1
        label = f"model · turn {turn.turn if turn.turn is not None else '?'}"
        bars.append(_model_bar(label, _thinking_from(previous_end, asked, undone), asked, open_=False))
        bars += [_call_bar(call, last) for call in turn.calls]
        previous_end = max([asked, *(c.finished_at for c in turn.calls if c.finished_at is not None)])
    record = story.record
    running = any(bar.kind == "running" for bar in bars)
    if record.final_answer is not None and record.finished_at is not None:
        start = _thinking_from(previous_end, record.finished_at, undone)
        bars.append(_model_bar(f"model · turn {number + 1} · answer", start, record.finished_at, False))
    elif record.state == "running" and not running:
        start = _thinking_from(previous_end, last, undone)
        bars.append(_model_bar(f"model · turn {number + 1}", start, last, open_=True))
    bars += [_approval_bar(approval, last) for approval in story.waiting]
    bars += [_undo_bar(item, story.call_of(item.tool_call_id), last) for item in story.compensations]
    return bars


def _thinking_from(previous_end: datetime, asked: datetime, undone: list[datetime]) -> datetime:
    """When the model's turn began: after the previous turn's calls and the compensations a failed
    batch set off (they run before the model is told), never after the turn's own response."""
    return min(max([previous_end, *(t for t in undone if t <= asked)]), asked)


def _model_bar(label: str, start: datetime, end: datetime, open_: bool) -> Bar:
    return Bar(label, "model", start, end, open_, "thinking" if open_ else "model turn")


def _call_label(call: CallRecord) -> str:
    return f"{call.tool} · {call.pool or '—'} · {call.worker or '—'}"


def _call_kind(call: CallRecord) -> str:
    if call.state == "abandoned":
        return "abandoned"
    if call.finished_at is None:
        return "running"
    if call.outcome == "timed_out":
        return "timeout"
    if call.state == "failed" or (call.outcome not in (None, "success")):
        return "error"
    return "ok"


def _call_bar(call: CallRecord, last: datetime) -> Bar:
    state = str(call.state) + (f" ({call.outcome})" if call.outcome else "")
    if call.state == "dispatched" and call.finished_at is None:
        state = "running"
    lines = [state, f"pool {call.pool or '—'} · worker {call.worker or '—'}"]
    if call.waited:
        lines.append(call.waited)
    if call.finished_at is None and call.state != "dispatched":
        lines.append("its end was not journaled")
    end = call.finished_at if call.finished_at is not None else last
    return Bar(
        label=_call_label(call),
        kind=_call_kind(call),
        start=call.started_at,
        end=max(call.started_at, end),
        is_open=call.finished_at is None,
        detail="\n".join(lines),
        indent=1,
        lead_ms=call.waited_ms or 0,
        call_row=call.id,
    )


def _approval_bar(approval: Any, last: datetime) -> Bar:
    """A call waiting for a person's decision (an `ApprovalRecord`), to now."""
    detail = (
        f"waiting for approval\npool {approval.pool or '—'} · expires {approval.expires_at:%Y-%m-%d %H:%M:%S}"
    )
    return Bar(f"approval · {approval.tool}", "approval", approval.requested_at, last, True, detail)


_UNDO_KINDS = {
    "pending": "undo-pending",
    "running": "undo-running",
    "succeeded": "undo-ok",
    "failed": "undo-error",
}


def _undo_bar(item: CompensationRecord, call: CallRecord | None, last: datetime) -> Bar:
    label = f"undo {_call_label(call)}" if call is not None else f"undo {item.tool}"
    open_ = item.state in ("pending", "running")
    tried = f"undo {item.state} · {_count(item.attempts, 'attempt')}"
    detail = "\n".join([tried, item.error] if item.error else [tried])
    end = last if open_ else item.updated_at
    return Bar(
        label, _UNDO_KINDS[item.state], item.created_at, end, open_, detail, call_row=item.tool_call_id
    )


# -- drawing ---------------------------------------------------------------------------------------


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _tag(name: str, attributes: Mapping[str, object], inner: str = "") -> str:
    """An SVG element: its attributes escaped (numbers to two decimals at most); `inner` is SVG."""
    said = "".join(
        f' {key}="{escape(svg_number(value) if isinstance(value, float) else str(value))}"'
        for key, value in attributes.items()
    )
    return f"<{name}{said}>{inner}</{name}>" if inner else f"<{name}{said}/>"


class _Scale:
    """Moments to x coordinates: the span's first moment at `LABEL_W`, its last at `LABEL_W + PLOT_W`."""

    def __init__(self, first: datetime, last: datetime) -> None:
        self.first = first
        self.span_ms = max((last - first) / timedelta(milliseconds=1), 1.0)  # a span of none: 1 ms

    def x(self, moment: datetime) -> float:
        return self.at((moment - self.first) / timedelta(milliseconds=1))

    def at(self, offset_ms: float) -> float:
        return LABEL_W + PLOT_W * offset_ms / self.span_ms


def _axis(scale: _Scale, bottom: float) -> str:
    ticks = []
    for offset_ms, label in axis_ticks(scale.span_ms):
        x = scale.at(offset_ms)
        line = _tag("line", {"x1": x, "y1": TOP_H - 6.0, "x2": x, "y2": bottom})
        text = _tag("text", {"x": x, "y": TOP_H - 10.0, "text-anchor": "middle"}, str(escape(label)))
        ticks.append(_tag("g", {"class": "tick", "data-ms": offset_ms}, line + text))
    return _tag("g", {"class": "axis"}, "".join(ticks))


def _duration_label(bar: Bar, x: float, width: float, y: float) -> str:
    """The bar's duration as text: inside the bar when it fits, else beside it."""
    text = duration_text((bar.end - bar.start).total_seconds())
    needed = len(text) * CHAR_W + 8
    if width >= needed:
        at, anchor = x + width / 2, "middle"
    elif x + width + needed <= WIDTH:
        at, anchor = x + width + 4, "start"
    else:  # at the plot's end: before the bar
        at, anchor = x - 4, "end"
    return _tag("text", {"class": "duration", "x": at, "y": y, "text-anchor": anchor}, str(escape(text)))


def _row(bar: Bar, index: int, scale: _Scale) -> tuple[str, float]:
    """The row's SVG, and the x where its bar ends (for a link to it)."""
    mid = TOP_H + index * ROW_H + ROW_H / 2
    x = scale.x(bar.start)
    width = max(scale.x(bar.end) - x, MIN_BAR_W)
    offset = (bar.start - scale.first).total_seconds()
    took = duration_text((bar.end - bar.start).total_seconds()) + (" so far" if bar.is_open else "")
    hover = f"{bar.label}\n{bar.detail}\nstarts at +{duration_text(offset)} · took {took}"
    box = {"y": mid - BAR_H / 2, "height": BAR_H}
    inner = _tag("rect", {"class": "span", "x": x, "width": width, **box, "rx": 2})
    if bar.lead_ms:
        lead_end = min(bar.start + timedelta(milliseconds=bar.lead_ms), bar.end)
        inner += _tag("rect", {"class": "lead", "x": x, "width": max(scale.x(lead_end) - x, 0.0), **box})
    inner += _duration_label(bar, x, width, mid + 4)
    label = _cut(bar.label, LABEL_CHARS - 2 * bar.indent)
    classes = ["row", bar.kind, *(["open"] if bar.is_open else []), *(["undo"] if "undo" in bar.kind else [])]
    attributes: dict[str, object] = {"class": " ".join(classes), "data-kind": bar.kind}
    if bar.call_row is not None:
        attributes["data-call-row"] = bar.call_row
    svg = _tag(
        "g",
        attributes,
        f"<title>{escape(hover)}</title>"
        + _tag("text", {"class": "label", "x": 6 + 12 * bar.indent, "y": mid + 4}, str(escape(label)))
        + _tag("g", {"class": "bar"}, inner),
    )
    return svg, x + width


def waterfall_svg(story: Story, now: datetime) -> Markup:
    """The invocation's waterfall as an SVG element (every text escaped), scaled to its container by
    its viewBox; `now` closes whatever still runs (and the axis, while the invocation has not ended)."""
    first, last = timeline_span(story, now)
    scale = _Scale(first, last)
    bars = waterfall_bars(story, now)
    height = TOP_H + max(len(bars), 1) * ROW_H + 6
    parts = [_axis(scale, height - 6.0)]
    ends: dict[int, tuple[float, float]] = {}  # a call's row: where its bar ends, and its middle's y
    for index, bar in enumerate(bars):
        row, end = _row(bar, index, scale)
        mid = TOP_H + index * ROW_H + ROW_H / 2
        if bar.indent and bar.call_row is not None:
            ends[bar.call_row] = (end, mid)
        elif bar.call_row in ends:  # an undo, under the call it undoes
            call_end, call_mid = ends[bar.call_row]
            corners = (call_end, call_mid, mid, scale.x(bar.start))
            path = "M{} {} V{} H{}".format(*map(svg_number, corners))
            parts.append(_tag("path", {"class": "link", "data-call-row": bar.call_row, "d": path}))
        parts.append(row)
    if not bars:
        parts.append(_tag("text", {"class": "empty", "x": LABEL_W, "y": TOP_H + 15}, "nothing journaled yet"))
    svg = {
        "xmlns": "http://www.w3.org/2000/svg",
        "class": "waterfall",
        "viewBox": f"0 0 {WIDTH} {height}",
        "role": "img",
        "aria-label": _summary(story, bars, first, last),
    }
    return Markup(_tag("svg", svg, f"<style>{WATERFALL_CSS}</style>" + "".join(parts)))


def _summary(story: Story, bars: list[Bar], first: datetime, last: datetime) -> str:
    turns = sum(1 for bar in bars if bar.kind == "model")
    failed = sum(1 for bar in bars if bar.indent and bar.kind in ("error", "timeout", "abandoned"))
    words = [
        _count(turns, "model turn"),
        f"{_count(len(story.calls), 'call')} ({failed} failed)",
        _count(len(story.compensations), "compensation"),
    ]
    if story.waiting:
        words.append(f"{len(story.waiting)} waiting for approval")
    so_far = "" if story.record.finished_at is not None else " so far"
    took = duration_text((last - first).total_seconds())
    return (
        f"Timeline of invocation {story.record.id} ({story.record.state}): {', '.join(words)}; {took}{so_far}"
    )
