"""The steps of a dispatched task, as `CallEvent`s for a `CeleryExecutor`'s `on_call` observer and for
the observer of the invocation that dispatched it (`observe_calls`), and the notifier that reports
them; an observer that fails is logged and never fails the call."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["CallEvent", "observe_calls"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallEvent:
    """A step of one dispatched task, for observers (`CeleryExecutor(on_call=...)`): `queued`,
    `started` (with the worker), then the outcome kind (`success`, `timed_out`, ...). `arguments` is
    the call's JSON arguments, so an observer can tell calls of one tool apart; `call_id` the model's
    id of the call (of a compensation: of the call it undoes)."""

    task_id: str
    task_name: str
    pool: str
    state: str
    worker: str | None
    at: float
    arguments: str = ""
    call_id: str | None = None


_invocation_observer: contextvars.ContextVar[Callable[[CallEvent], None] | None] = contextvars.ContextVar(
    "invocation_call_observer", default=None
)


@contextlib.contextmanager
def observe_calls(observer: Callable[[CallEvent], None]) -> Iterator[None]:
    """Report to `observer` the steps of every task dispatched in this block, and in the tasks it
    starts (an invocation's calls and compensations). The observer may be called from another
    thread than the block's (a worker's `started`): it must be thread-safe."""
    token = _invocation_observer.set(observer)
    try:
        yield
    finally:
        _invocation_observer.reset(token)


def call_notifier(
    on_call: Callable[[CallEvent], None] | None,
    task_id: str,
    task_name: str,
    pool: str,
    arguments: str = "",
    call_id: str | None = None,
) -> Callable[[str, str | None], None] | None:
    observers = [o for o in (on_call, _invocation_observer.get()) if o is not None]
    if not observers:
        return None

    def notify(state: str, worker: str | None) -> None:
        event = CallEvent(task_id, task_name, pool, state, worker, time.monotonic(), arguments, call_id)
        for observer in observers:
            try:
                observer(event)
            except Exception:
                log.exception("call observer failed")

    return notify
