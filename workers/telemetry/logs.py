"""Log lines as one JSON object each (`TOOLFLEET_LOG_FORMAT=json`), carrying the call they are about.

A call's fields (invocation id, call id, tool, pool, worker) are bound in a context variable while
the call runs, on the worker as in the orchestrator; every line logged meanwhile carries them, and
the trace id of the current span when tracing is on. The fields are a mutable object: the
orchestrator learns the worker only when the outcome arrives, and the lines after it name it.

In JSON mode nothing a process writes as a log escapes the format: Python's warnings and uncaught
exceptions (the main thread's, other threads', those Python can only report as ignored) are records,
and so are a command's own notices (`notice`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType

from workers.telemetry.tracing import trace_id

__all__ = [
    "FIELDS",
    "LOG_FORMATS",
    "CallFields",
    "JsonFormatter",
    "bound_call",
    "configure_logging",
    "current_call",
    "json_logging",
    "notice",
]

log = logging.getLogger(__name__)

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"
# A record's own fields, given as `extra={FIELDS: {...}}`, are added to its JSON object; they never
# replace a field every line has (`time`, `message`, ...) or the call's.
FIELDS = "fields"


@dataclass
class CallFields:
    """The call a log line is about."""

    invocation_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    pool: str | None = None
    worker: str | None = None


_current: contextvars.ContextVar[CallFields | None] = contextvars.ContextVar("toolfleet_call", default=None)


def current_call() -> CallFields | None:
    """The fields of the call running in this context, if any."""
    return _current.get()


@contextlib.contextmanager
def bound_call(fields: CallFields) -> Iterator[CallFields]:
    """Bind `fields` to every line logged in this context until the block ends."""
    token = _current.set(fields)
    try:
        yield fields
    finally:
        _current.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the call's fields, the trace id, the
    record's own `FIELDS`, and a traceback or a stack as one string field (its newlines escaped, as
    every control character)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(record),
            "process": record.process,
        }
        call = _current.get()
        if call is not None:
            entry.update({k: v for k, v in asdict(call).items() if v is not None})
        trace = trace_id()
        if trace is not None:
            entry["trace_id"] = trace
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, Mapping):
            entry.update({str(k): v for k, v in fields.items() if str(k) not in entry})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def _message(record: logging.LogRecord) -> str:
    """The record's message; one whose arguments do not fit it is shown with them, instead of being
    left to logging's error report (lines of plain text on standard error)."""
    try:
        return record.getMessage()
    except Exception as exc:
        return f"{record.msg!r} % {record.args!r} (the arguments do not fit: {type(exc).__name__}: {exc})"


def configure_logging(log_format: str, level: int) -> None:
    """The root logger's one handler on standard error, in `log_format` (one of `LOG_FORMATS`).

    In JSON mode Python's warnings (logger `py.warnings`) and uncaught exceptions (this module's
    logger, the traceback in the line's `exception`) are logged too, instead of written as text.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    if log_format == "json":
        logging.captureWarnings(True)
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread
        sys.unraisablehook = _log_unraisable


def json_logging() -> bool:
    """Whether the root logger writes JSON: `configure_logging("json", ...)` configured it."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


def notice(logger: logging.Logger, message: str, level: int = logging.INFO) -> None:
    """A command's own line on standard error, written whatever the log level: the line itself in
    text mode, one record of `logger` in JSON mode."""
    if not json_logging():
        print(message, file=sys.stderr, flush=True)
        return
    logger.handle(logger.makeRecord(logger.name, level, "(notice)", 0, message, (), None))


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    log.critical("uncaught %s: %s", kind.__name__, value, exc_info=(kind, value, tb))


def _log_uncaught_in_thread(hook: threading.ExceptHookArgs) -> None:
    if hook.exc_type is SystemExit:
        return  # a thread ending itself: the default hook says nothing either
    value = hook.exc_value if hook.exc_value is not None else hook.exc_type()
    name = hook.thread.name if hook.thread is not None else "(unknown)"
    log.error(
        "uncaught %s in thread %s: %s",
        hook.exc_type.__name__,
        name,
        value,
        exc_info=(hook.exc_type, value, hook.exc_traceback),
    )


def _log_unraisable(hook: sys.UnraisableHookArgs) -> None:
    exc_info = None if hook.exc_value is None else (hook.exc_type, hook.exc_value, hook.exc_traceback)
    log.error("%s: %r", hook.err_msg or "Exception ignored in", hook.object, exc_info=exc_info)
