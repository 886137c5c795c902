"""The waterfall's time axis and durations as text: round ticks in ms, s, min, h or days, and
durations written as people read them."""

from __future__ import annotations

__all__ = ["MAX_TICKS", "axis_ticks", "duration_text", "svg_number"]

MAX_TICKS = 8  # intervals of the axis, at most
_SECOND = 1000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
_STEPS_MS = (
    *(n * 10**e for e in range(3) for n in (1, 2, 5)),
    *(n * _SECOND for n in (1, 2, 5, 10, 15, 30)),
    *(n * _MINUTE for n in (1, 2, 5, 10, 15, 30)),
    *(n * _HOUR for n in (1, 2, 3, 6, 12)),
)
_UNITS = ((_DAY, "d"), (_HOUR, "h"), (_MINUTE, "min"), (_SECOND, "s"))


def axis_ticks(span_ms: float) -> list[tuple[int, str]]:
    """The axis' ticks over a span of `span_ms`, a round step apart (at most `MAX_TICKS` intervals):
    each tick's offset in ms and its label (`500 ms`, `1.5 s`, `1 min 30 s`, `1 d 12 h`)."""
    step = next((s for s in _STEPS_MS if span_ms / s <= MAX_TICKS), 0)
    days = 1
    while not step:
        step = next((n * days * _DAY for n in (1, 2, 5) if span_ms / (n * days * _DAY) <= MAX_TICKS), 0)
        days *= 10
    return [(i * step, _tick_label(i * step)) for i in range(int(span_ms // step) + 1)]


def _tick_label(offset_ms: int) -> str:
    if offset_ms == 0:
        return "0"
    if offset_ms < _SECOND:
        return f"{offset_ms} ms"
    if offset_ms % _SECOND:  # a step under a second
        return f"{svg_number(offset_ms / _SECOND)} s"
    parts = []  # the two largest units at most: the steps leave nothing in a third
    for size, unit in _UNITS:
        if offset_ms >= size:
            parts.append(f"{offset_ms // size} {unit}")
            offset_ms %= size
    return " ".join(parts)


def duration_text(seconds: float) -> str:
    """A duration as people read it: `2.5 ms`, `350 ms`, `1.25 s`, `12.3 s`, `2 min 5 s`, `3 h 2 min`,
    `2 d 3 h`."""
    if seconds < 0.01:
        return f"{seconds * 1000:.1f}".removesuffix(".0") + " ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes = int(seconds) // 60
    if minutes < 120:
        return f"{minutes} min {int(seconds) % 60} s"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} d {hours % 24} h"


def svg_number(value: float) -> str:
    """A coordinate as SVG writes it: two decimals at most, no trailing zeros (`380`, `396.67`)."""
    return f"{value:.2f}".rstrip("0").rstrip(".")
