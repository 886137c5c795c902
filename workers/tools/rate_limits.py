"""A tool's rate limit as declared (`@tool(rate_limit="20/s")`): a number of starts per period."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["RateLimit", "parse_rate_limit"]

_PERIODS_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*(s|m|h|d)\s*")


@dataclass(frozen=True)
class RateLimit:
    """At most `limit` starts in any window of `period_ms` milliseconds (`"20/s"`, `"100/m"`,
    `"5/10s"`)."""

    limit: int
    period_ms: int

    def __str__(self) -> str:
        for unit, ms in _PERIODS_MS.items():
            if self.period_ms == ms:
                return f"{self.limit}/{unit}"
        return f"{self.limit}/{self.period_ms // 1000}s"


def parse_rate_limit(text: object) -> RateLimit:
    """`"N/s"`, `"N/m"`, `"N/h"`, `"N/d"`, or with a count of units (`"N/10s"`); ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError(_BAD.format(text=text))
    return _parsed(text)


_BAD = "a rate limit is a number of starts per period, like '10/s', '100/m', '5/10s', got {text!r}"


@functools.lru_cache(maxsize=1024)  # read for every call of a rate-limited tool, declared by a few
def _parsed(text: str) -> RateLimit:
    match = _RATE.fullmatch(text)
    if match is None or int(match[1]) < 1 or (match[2] and int(match[2]) < 1):
        raise ValueError(_BAD.format(text=text))
    return RateLimit(int(match[1]), int(match[2] or 1) * _PERIODS_MS[match[3]])
