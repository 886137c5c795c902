"""Log lines as one JSON object each (`TOOLFLEET_LOG_FORMAT=json`), carrying the call they are about.

A call's fields (invocation id, call id, tool, pool, worker) are bound in a context variable while
the call runs, on the worker as in the orchestrator; every line logged meanwhile carries them, and
the trace id of the current span when tracing is on. The fields are a mutable object: the
orchestrator learns the worker only when the outcome arrives, and the lines after it name it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from workers.telemetry.tracing import trace_id

__all__ = ["LOG_FORMATS", "CallFields", "JsonFormatter", "bound_call", "configure_logging", "current_call"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


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
    """One JSON object per line: time, level, logger, message, the call's fields, the trace id, and a
    traceback or a stack as one string field (its newlines escaped, as every control character)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        call = _current.get()
        if call is not None:
            entry.update({k: v for k, v in asdict(call).items() if v is not None})
        trace = trace_id()
        if trace is not None:
            entry["trace_id"] = trace
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


def configure_logging(log_format: str, level: int) -> None:
    """The root logger's one handler on standard error, in `log_format` (one of `LOG_FORMATS`)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
