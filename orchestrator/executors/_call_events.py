"""The steps of a dispatched task, as `CallEvent`s for a `CeleryExecutor`'s `on_call` observer, and the
notifier that reports them; an observer that fails is logged and never fails the call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CallEvent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallEvent:
    """A step of one dispatched task, for observers (`CeleryExecutor(on_call=...)`): `queued`,
    `started` (with the worker), then the outcome kind (`success`, `timed_out`, ...). `arguments` is
    the call's JSON arguments, so an observer can tell calls of one tool apart."""

    task_id: str
    task_name: str
    pool: str
    state: str
    worker: str | None
    at: float
    arguments: str = ""


def call_notifier(
    on_call: Callable[[CallEvent], None] | None, task_id: str, task_name: str, pool: str, arguments: str = ""
) -> Callable[[str, str | None], None] | None:
    if on_call is None:
        return None

    def notify(state: str, worker: str | None) -> None:
        try:
            on_call(CallEvent(task_id, task_name, pool, state, worker, time.monotonic(), arguments))
        except Exception:
            log.exception("on_call observer failed")

    return notify
