"""Waiting on a condition, the one way the tests wait: never a bare sleep standing for "long enough"."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for", "wait_until"]

T = TypeVar("T")


def wait_until(predicate: Callable[[], object], timeout_s: float, interval_s: float = 0.01) -> bool:
    """Poll `predicate` until it holds or `timeout_s` passes; whether it held (asked once more at the end)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


def wait_for(condition: Callable[[], T], timeout_s: float = 10.0, what: str = "condition") -> T:
    """The first truthy value of `condition` within `timeout_s`; an AssertionError naming `what` if none."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)
