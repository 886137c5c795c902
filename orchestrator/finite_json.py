"""JSON text read as the standard has it. Python's `json` reads `NaN`, `Infinity` and `-Infinity`, and
a number too large for a float (`1e400`) as an infinity; none of them is JSON, `json.dumps` writes them
back as `NaN` or `Infinity`, and every other reader (PostgreSQL's `jsonb`, a browser, another
language's client) refuses that text. `loads_finite` reads JSON refusing them, naming where the first
one is, so that such a value is turned away where it arrives and never stored or sent on."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from orchestrator.errors import NonFiniteNumberError

__all__ = ["dumps_finite", "loads_finite", "nul_at"]


class _NonFinite:
    """Where the reader met a number that is not finite: the number as written."""

    __slots__ = ("written",)

    def __init__(self, written: str) -> None:
        self.written = written


def dumps_finite(value: Any, what: str) -> str:
    """`value` as JSON text (as `json.dumps` writes it), or `NonFiniteNumberError` when it holds a NaN
    or an infinity, which JSON has no room for: `what` says what it was to be (`the parameters`)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        reason = f"{what} hold NaN or an infinity, which JSON has no room for: not written"
        raise NonFiniteNumberError(reason, location=None, written="NaN or Infinity") from None


def loads_finite(text: str | bytes) -> Any:
    """The value of the JSON `text`, as `json.loads` reads it; `NonFiniteNumberError` (a `ValueError`)
    naming where the first `NaN`, `Infinity`, `-Infinity` or too large a number is, as a dotted path
    (`parameters.limit`, `messages.0.content`). Text that is not JSON raises as `json.loads` does."""
    seen: list[str] = []

    def constant(written: str) -> _NonFinite:  # NaN, Infinity, -Infinity
        seen.append(written)
        return _NonFinite(written)

    def number(written: str) -> float | _NonFinite:
        value = float(written)
        if math.isfinite(value):
            return value
        seen.append(written)
        return _NonFinite(written)

    value = json.loads(text, parse_constant=constant, parse_float=number)
    if not seen:
        return value
    # The first in the value, in the text's order (one under a key given twice is read over: no path).
    path, written = _first(value) or ((), seen[0])
    location = ".".join(str(part) for part in path) or None
    reason = (
        f"{written} is not a JSON number (JSON has no NaN or infinities)"
        if written in ("NaN", "Infinity", "-Infinity")
        else f"{written} is too large a number (a float would hold it as infinite)"
    )
    message = f"{location}: {reason}" if location else reason
    raise NonFiniteNumberError(message, location=location, written=written)


def _first(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """The path to the first non-finite number in `value`, depth first in document order, and how it
    was written; None when there is none."""
    for path, node in _nodes(value):
        if isinstance(node, _NonFinite):
            return path, node.written
    return None


def nul_at(value: Any) -> str | None:
    """Where the first string (or key) holding NUL (`\\u0000`) is in `value`, as a dotted path (""
    for `value` itself); None when none holds one. JSON carries NUL, PostgreSQL's text refuses it."""
    for path, node in _nodes(value):
        if (isinstance(node, str) and "\x00" in node) or (
            isinstance(node, dict) and any("\x00" in key for key in node)
        ):
            return ".".join(str(part) for part in path)
    return None


def _nodes(value: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every node of `value` with its path, depth first in document order. Iterative: as deep a value
    as `json.loads` reads."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        yield path, node
        children: list[tuple[str | int, Any]]
        if isinstance(node, dict):
            children = list(node.items())
        elif isinstance(node, list):
            children = list(enumerate(node))
        else:
            continue
        stack.extend(((*path, key), child) for key, child in reversed(children))
