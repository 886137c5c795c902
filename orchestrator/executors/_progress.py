"""A running call's progress reports, for whoever runs the call: `observe_progress`.

The loop sets an observer around each call it hands to an executor; the executor passes the call's
reports to it as they arrive — `CeleryExecutor` from its result collector's thread (the `PROGRESS`
states of the call's task), `LocalExecutor` from the tool's own thread — so an observer must be
thread-safe. An observer that fails is logged and never fails the call.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator
from typing import Any

from workers.calls.progress import ProgressReport

__all__ = ["ProgressObserver", "meta_listener", "observe_progress", "progress_listener"]

log = logging.getLogger(__name__)

ProgressObserver = Callable[[ProgressReport], None]

_observer: contextvars.ContextVar[ProgressObserver | None] = contextvars.ContextVar(
    "toolfleet_progress_observer", default=None
)


@contextlib.contextmanager
def observe_progress(observer: ProgressObserver) -> Iterator[None]:
    """Pass to `observer` the progress reports of the call dispatched in this block."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


def progress_listener() -> Callable[[ProgressReport], None] | None:
    """The observer of the call being dispatched, guarded so that its failure is only logged."""
    observer = _observer.get()
    if observer is None:
        return None

    def listen(report: ProgressReport) -> None:
        try:
            observer(report)
        except Exception:
            log.exception("progress observer failed")

    return listen


def meta_listener(listen: Callable[[ProgressReport], None] | None) -> Callable[[dict[str, Any]], None] | None:
    """`listen` fed with the JSON of reports, as the result collector hears them."""
    if listen is None:
        return None
    return lambda report: listen(ProgressReport.from_json(report))
