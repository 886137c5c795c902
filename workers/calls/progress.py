"""Progress reports and heartbeats from a running tool: `ToolProgressReporter` and what it sends.

A tool asks for a reporter by annotating a parameter `ToolProgressReporter` (injected, never shown to
the model) and calls `progress(fraction=..., message=..., data=...)` as it goes, or `heartbeat()` to
say only that it is alive. Each report is checked in the tool (`ToolProgressError` says what is
wrong) and handed to the reporter's sink: on a worker, the call's result backend state `PROGRESS`
(`workers/runtime/tasks.py`); in-process (`LocalExecutor`), the orchestrator directly.

Rate limit: at most one state every `min_interval_s` (50 ms) travels per call. A report made sooner
is held, the latest replacing an older one, and sent when the interval has passed (by a timer
thread) or when the call ends (`close()`, before its final state), so a tool reporting in a tight
loop costs a few states and the last report is never lost.

Heartbeats follow Temporal's model: a tool declared `@tool(heartbeat_timeout_s=N)` must beat — a
progress report counts as one, `heartbeat()` is one — at least every N seconds, starting when the
call starts; the worker never beats on the tool's behalf. Each state sent is a beat: it carries
`beats`, a count the orchestrator's collector watches (`orchestrator/executors/_collector.py`),
declaring the call lost when it has not changed for N seconds. A tool without a heartbeat timeout
sends nothing for `heartbeat()`.

Cancellation is cooperative where the work cannot be killed (a threads pool, in-process): a reporter
given `cancelled` (a check of whether the call was asked to stop) raises `ToolCancelled` from the
tool's next `progress()` or `heartbeat()` once it holds, and `reporter.cancelled` lets a tool look
without reporting. The check is asked at most once per `min_interval_s`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from workers.errors import ToolCancelled, ToolProgressError

__all__ = [
    "MAX_PROGRESS_DATA_BYTES",
    "MAX_PROGRESS_MESSAGE_CHARS",
    "MIN_INTERVAL_S",
    "ProgressReport",
    "ToolProgressReporter",
    "current_reporter",
    "reporting",
]

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.05  # at most one state per call per this many seconds travels
MAX_PROGRESS_MESSAGE_CHARS = 2000
MAX_PROGRESS_DATA_BYTES = 16 << 10


@dataclass(frozen=True)
class ProgressReport:
    """What travels for one report: the tool's latest progress and the beat that carries it.

    `seq` counts the tool's `progress()` calls (0: none yet, a heartbeat only); `at` is when the
    latest was made (epoch seconds); `beats` counts the states this call's reporter sent; `worker`
    names the worker that runs the call (None in-process).
    """

    seq: int
    fraction: float | None
    message: str | None
    data: Any
    at: float
    beats: int = 0
    worker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgressReport:
        fraction = data.get("fraction")
        worker = data.get("worker")
        return cls(
            seq=int(data.get("seq") or 0),
            fraction=None if fraction is None else float(fraction),
            message=None if data.get("message") is None else str(data["message"]),
            data=data.get("data"),
            at=float(data.get("at") or 0.0),
            beats=int(data.get("beats") or 0),
            worker=worker if isinstance(worker, str) else None,
        )


Sink = Callable[[ProgressReport], None]


class ToolProgressReporter:
    """Injected into a tool parameter of this type: `progress()` reports how far the call is,
    `heartbeat()` says it is alive (for tools declared with `heartbeat_timeout_s`).

    Safe to call from any thread, any number of times: reports are rate-limited per call, the
    latest always delivered before the call's result. Reports after the call ended are dropped.
    """

    def __init__(
        self,
        sink: Sink | None = None,
        *,
        heartbeat_timeout_s: float | None = None,
        min_interval_s: float = MIN_INTERVAL_S,
        worker: str | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> None:
        self._sink = sink
        self._cancelled_check = cancelled
        self._was_cancelled = False
        self._checked_at = -math.inf
        self._beating = heartbeat_timeout_s is not None
        self._interval = min_interval_s
        self._worker = worker
        self._lock = threading.Lock()
        self._latest = ProgressReport(0, None, None, None, time.time(), worker=worker)
        self._beats = 0
        self._dirty = False
        self._closed = False
        self._last_sent = -math.inf
        self._timer: threading.Timer | None = None

    def progress(self, fraction: float | None = None, message: str | None = None, data: Any = None) -> None:
        """Report progress: `fraction` done in [0, 1], a `message` for people, JSON `data` for programs.

        Raises `ToolProgressError` for a value that cannot travel (out of range, not JSON, too large),
        and `ToolCancelled` once the call was asked to stop.
        """
        self._raise_if_cancelled()
        checked = _checked_fraction(fraction)
        if message is not None and not isinstance(message, str):
            raise ToolProgressError(f"progress(message=...) must be a str, got {type(message).__name__}")
        if message is not None and len(message) > MAX_PROGRESS_MESSAGE_CHARS:
            raise ToolProgressError(
                f"progress(message=...) is {len(message)} characters, over {MAX_PROGRESS_MESSAGE_CHARS}"
            )
        _check_data(data)
        at = time.time()
        with self._lock:
            latest = self._latest
            self._latest = ProgressReport(latest.seq + 1, checked, message, data, at, worker=self._worker)
            self._offer()

    def heartbeat(self) -> None:
        """Say the call is alive. Needed only by tools declared `@tool(heartbeat_timeout_s=N)`: they
        must beat (or report progress) at least every N seconds, or the call is declared lost. Raises
        `ToolCancelled` once the call was asked to stop."""
        self._raise_if_cancelled()
        if not self._beating:
            return
        with self._lock:
            self._offer()

    @property
    def cancelled(self) -> bool:
        """Whether the call was asked to stop (cooperative cancellation: the tool decides when)."""
        if self._was_cancelled or self._cancelled_check is None:
            return self._was_cancelled
        now = time.monotonic()
        if now - self._checked_at >= self._interval:
            self._checked_at = now
            try:
                self._was_cancelled = bool(self._cancelled_check())
            except Exception as exc:  # an unreadable flag is not a cancellation
                log.debug("cancellation check failed: %s", exc)
        return self._was_cancelled

    def _raise_if_cancelled(self) -> None:
        if self.cancelled:
            raise ToolCancelled("the call was cancelled")

    def close(self) -> None:
        """Send what is held and stop: called when the call ends, before its final state."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._dirty and not self._closed:
                self._send()
            self._closed = True

    def _offer(self) -> None:
        """Send now, or hold until the interval has passed (the lock is held)."""
        if self._closed:
            log.debug("a progress report after its call ended was dropped")
            return
        self._dirty = True
        wait = self._last_sent + self._interval - time.monotonic()
        if wait <= 0:
            self._send()
        elif self._timer is None:
            self._timer = threading.Timer(wait, self._on_timer)
            self._timer.daemon = True
            self._timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if not self._dirty or self._closed:
                return
            # A timer late under load may find a report sent meanwhile (when one came after the
            # interval): it waits out the interval since then, so that two never go out within one.
            wait = self._last_sent + self._interval - time.monotonic()
            if wait > 0:
                self._timer = threading.Timer(wait, self._on_timer)
                self._timer.daemon = True
                self._timer.start()
            else:
                self._send()

    def _send(self) -> None:
        self._dirty = False
        self._last_sent = time.monotonic()
        self._beats += 1
        if self._sink is None:
            return
        latest = self._latest
        report = ProgressReport(
            latest.seq, latest.fraction, latest.message, latest.data, latest.at, self._beats, self._worker
        )
        try:
            self._sink(report)
        except Exception as exc:  # a report that cannot travel never fails the tool
            log.warning("a progress report was not delivered: %s", exc)


def _checked_fraction(fraction: Any) -> float | None:
    if fraction is None:
        return None
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise ToolProgressError(f"progress(fraction=...) must be a number, got {type(fraction).__name__}")
    if not 0.0 <= fraction <= 1.0:  # NaN fails this too
        raise ToolProgressError(f"progress(fraction=...) must be between 0 and 1, got {fraction!r}")
    return float(fraction)


def _check_data(data: Any) -> None:
    if data is None:
        return
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolProgressError(f"progress(data=...) must be JSON-serializable: {exc}") from None
    if len(text.encode()) > MAX_PROGRESS_DATA_BYTES:
        raise ToolProgressError(
            f"progress(data=...) is {len(text.encode())} bytes as JSON, over {MAX_PROGRESS_DATA_BYTES}"
        )


_current: contextvars.ContextVar[ToolProgressReporter | None] = contextvars.ContextVar(
    "toolfleet_progress_reporter", default=None
)


@contextlib.contextmanager
def reporting(reporter: ToolProgressReporter) -> Iterator[ToolProgressReporter]:
    """Inject `reporter` into the calls bound in this block, and close it (sending what it holds)
    when the block ends."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)
        reporter.close()


def current_reporter() -> ToolProgressReporter:
    """The reporter a call bound now receives: the one `reporting()` set, else one that only checks."""
    return _current.get() or ToolProgressReporter()
