"""`TOOLFLEET_LOG_FORMAT=json`: `configure_logging("json", ...)` writes each record as exactly one JSON
object on one line of standard error, carrying the call bound around it (invocation id, call id, tool,
pool, worker), the current trace id when a span is current and the record's own fields; a traceback,
newlines and non-ASCII text stay inside that one line. Python's warnings, uncaught exceptions and a
command's notices are records too; in text mode they are left as Python writes them."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests._tracing import traced_to_memory
from workers.telemetry.logs import FIELDS, CallFields, bound_call, configure_logging, json_logging, notice
from workers.telemetry.tracing import span

log = logging.getLogger("tests.json_logs")

CALL = CallFields("inv-7f3a", "call_42", "get_weather", "io", "w1@host")
CALL_KEYS = {"invocation_id": "inv-7f3a", "call_id": "call_42", "tool": "get_weather", "pool": "io"}


@contextlib.contextmanager
def logging_configured(level: int = logging.DEBUG, log_format: str = "json") -> Iterator[io.StringIO]:
    """The root logger as `configure_logging(log_format, level)` leaves it, pytest's own handlers set
    aside meanwhile; yields the text its one handler writes (to standard error, in a process). The
    process's hooks (warnings, uncaught exceptions) are put back afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    hooks = (warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook)
    root.handlers = []
    try:
        configure_logging(log_format, level)
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
        written = io.StringIO()
        handler.setStream(written)
        yield written
    finally:
        logging.captureWarnings(False)
        warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook = hooks
        root.handlers, root.level = saved


def parsed(written: str) -> list[dict[str, Any]]:
    """Each line of `written` as the one JSON object it must be."""
    assert written.endswith("\n"), repr(written[-200:])
    entries = []
    for line in written.splitlines():
        entry = json.loads(line)  # one line, one object: a line holding less or more does not parse
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


@pytest.fixture
def lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """JSON logging configured for the test; yields what reads the test's own lines written so far
    (every line must parse; those of other loggers, such as a background thread left by an earlier
    test, are not the test's to count)."""
    with logging_configured() as written:
        yield lambda: [entry for entry in parsed(written.getvalue()) if entry["logger"] == log.name]


@pytest.fixture
def tracing() -> Iterator[InMemorySpanExporter]:
    with traced_to_memory("json-logs-test") as exporter:
        yield exporter


def test_a_line_inside_a_call_carries_its_fields_and_a_line_outside_none(
    lines: Callable[[], list[dict[str, Any]]],
) -> None:
    # given no tracing; when one line is logged outside a call and one inside, then one outside again
    log.info("before %s", "the call")
    with bound_call(CALL):
        log.warning("during the call")
    log.info("after")
    before, during, after = lines()
    # then each is one object with the record's own fields
    assert (before["level"], before["logger"], before["message"]) == ("INFO", log.name, "before the call")
    assert {"time", "process"} <= set(before)
    # and only the line inside the call carries the call, the worker included
    assert {k: during.get(k) for k in CALL_KEYS} == CALL_KEYS and during["worker"] == "w1@host"
    for outside in (before, after):
        assert not set(outside) & {*CALL_KEYS, "worker"}, outside
    # and without tracing no line has a trace id
    assert all(entry.get("trace_id") is None for entry in (before, during, after))


def test_a_field_learned_during_the_call_shows_on_the_lines_after_it(
    lines: Callable[[], list[dict[str, Any]]],
) -> None:
    # given a call bound before its worker is known (the orchestrator learns it from the outcome)
    fields = CallFields("inv-1", "call_1", "add", "math")
    with bound_call(fields):
        log.info("dispatched")
        fields.worker = "w2@host"
        log.info("answered")
    dispatched, answered = lines()
    assert "worker" not in dispatched
    assert answered["worker"] == "w2@host"


def test_the_trace_id_is_the_current_spans_and_absent_outside_any(
    lines: Callable[[], list[dict[str, Any]]], tracing: InMemorySpanExporter
) -> None:
    # given tracing on an SDK provider: a line in a call under a span, and one with no span current
    with span("execute_tool get_weather"), bound_call(CALL):
        log.info("in the span")
    log.info("no span")
    inside, outside = lines()
    # then the line in the span carries that span's trace id, in hex, beside the call's fields
    (finished,) = tracing.get_finished_spans()
    assert finished.context is not None
    assert inside["trace_id"] == format(finished.context.trace_id, "032x")
    assert {k: inside.get(k) for k in CALL_KEYS} == CALL_KEYS
    # and the line outside any span has none
    assert outside.get("trace_id") is None


def test_a_traceback_newlines_and_non_ascii_stay_inside_one_line(
    lines: Callable[[], list[dict[str, Any]]],
) -> None:
    message = 'line one\nline two\r\n\ttabbed "quoted" \u2028 café ☂ 東京 \U0001f327'
    with bound_call(CALL):
        try:
            raise ValueError("broken\nacross lines: ünïcode")
        except ValueError:
            log.exception("the tool failed: %s", message)
        log.error(message)
        log.info("where", stack_info=True)
    failed, plain, stacked = lines()  # three records, three lines: nothing spilled onto lines of its own
    # then the message and the traceback come back whole from the JSON
    assert failed["message"] == f"the tool failed: {message}"
    assert failed["exception"].startswith("Traceback (most recent call last):")
    assert failed["exception"].rstrip().endswith("ValueError: broken\nacross lines: ünïcode")
    assert failed["call_id"] == "call_42"
    assert plain["message"] == message and "exception" not in plain
    assert stacked["stack"].startswith("Stack (most recent call last):")
    assert "test_a_traceback_newlines_and_non_ascii_stay_inside_one_line" in stacked["stack"]


def test_the_line_written_is_ascii_with_every_control_character_escaped() -> None:
    # when a record holding a newline, a Unicode line separator and a non-ASCII letter is logged
    with logging_configured(logging.INFO) as written:
        log.warning("a\nb\u2028c é")
    text = written.getvalue()
    # then it is one ASCII line: a reader splitting on any line break still sees one line
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.isascii(), text
    assert "\\n" in text and "\\u2028" in text and "\\u00e9" in text


@pytest.mark.parametrize("wrong", ["bogus", "JSON", ""])
def test_configure_logging_refuses_a_format_it_does_not_know(wrong: str) -> None:
    with pytest.raises(ValueError, match=r"must be one of text, json, got"):
        configure_logging(wrong, logging.INFO)


def test_a_records_own_fields_join_its_object_and_never_replace_a_common_one(
    lines: Callable[[], list[dict[str, Any]]],
) -> None:
    # when a record carries fields of its own, some named as fields every line has
    with bound_call(CALL):
        log.info("started", extra={FIELDS: {"pools": ["io"], "message": "forged", "call_id": "forged"}})
    (entry,) = lines()
    # then its own are added, and the common ones keep their values
    assert entry["pools"] == ["io"]
    assert (entry["message"], entry["call_id"]) == ("started", "call_42")


def test_a_message_whose_arguments_do_not_fit_is_still_one_line_naming_them() -> None:
    # when a record's arguments do not fit its message (logging would write its error report instead)
    with logging_configured(logging.INFO) as written:
        log.warning("%d calls of %s", "many")
    # then its line is one object that shows the message, the arguments and why they do not fit
    (entry,) = [e for e in parsed(written.getvalue()) if e["logger"] == log.name]
    assert entry["message"].startswith("'%d calls of %s' % ('many',)"), entry
    assert "do not fit: TypeError" in entry["message"]


def test_in_json_mode_a_warning_is_a_record_of_py_warnings() -> None:
    # given JSON logging; when code warns
    with logging_configured(logging.INFO) as written, warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("the tool's cache is stale\nrebuild it", UserWarning, stacklevel=1)
    # then the warning is one line, one object, at WARNING, its text whole
    (entry,) = [e for e in parsed(written.getvalue()) if e["logger"] == "py.warnings"]
    assert entry["level"] == "WARNING"
    assert "UserWarning: the tool's cache is stale\nrebuild it" in entry["message"]


def test_in_json_mode_uncaught_exceptions_are_records_with_their_traceback() -> None:
    def fail() -> None:
        raise KeyError("lost\nkey")

    with logging_configured(logging.INFO) as written:
        # when a thread ends with an exception, the main thread's hook gets one, and one is unraisable
        thread = threading.Thread(target=fail, name="stray-thread")
        thread.start()
        thread.join()
        try:
            fail()
        except KeyError:
            sys.excepthook(*sys.exc_info())
        holder = object()
        try:
            fail()
        except KeyError as exc:
            sys.unraisablehook(_Unraisable(exc, holder))
    # then each is one record of one line, the traceback in its `exception`
    entries = [e for e in parsed(written.getvalue()) if e["logger"] == "workers.telemetry.logs"]
    assert [e["level"] for e in entries] == ["ERROR", "CRITICAL", "ERROR"], entries
    in_thread, uncaught, unraisable = entries
    assert in_thread["message"] == "uncaught KeyError in thread stray-thread: 'lost\\nkey'"
    assert uncaught["message"] == "uncaught KeyError: 'lost\\nkey'"
    assert unraisable["message"] == f"Exception ignored in: {holder!r}"
    for entry in entries:
        assert entry["exception"].startswith("Traceback (most recent call last):"), entry
        assert "in fail" in entry["exception"]
        assert entry["exception"].rstrip().endswith("KeyError: 'lost\\nkey'")


class _Unraisable:
    """What Python gives `sys.unraisablehook`."""

    def __init__(self, exc: BaseException, holder: object) -> None:
        self.exc_type, self.exc_value, self.exc_traceback = type(exc), exc, exc.__traceback__
        self.err_msg: str | None = None
        self.object = holder


def test_text_mode_leaves_warnings_and_uncaught_exceptions_to_python() -> None:
    before = (warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook)
    with logging_configured(logging.INFO, log_format="text"):
        after = (warnings.showwarning, sys.excepthook, threading.excepthook, sys.unraisablehook)
        assert not json_logging()
    assert after == before


def test_a_notice_is_written_whatever_the_level_as_a_record_in_json_mode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # given JSON logging at WARNING; when a command gives a notice at INFO
    with logging_configured(logging.WARNING) as written:
        assert json_logging()
        notice(log, "toolfleet serve: agents assistant on http://127.0.0.1:8000/v1")
    # then it is one record, though below the level, and nothing else is written
    (entry,) = parsed(written.getvalue())
    assert (entry["level"], entry["logger"]) == ("INFO", log.name)
    assert entry["message"] == "toolfleet serve: agents assistant on http://127.0.0.1:8000/v1"
    assert capsys.readouterr().err == ""


def test_a_notice_in_text_mode_is_its_line_on_standard_error(capsys: pytest.CaptureFixture[str]) -> None:
    with logging_configured(logging.WARNING, log_format="text") as written:
        notice(log, "toolfleet ui: the run view on http://127.0.0.1:8001/ui", logging.ERROR)
    assert capsys.readouterr().err == "toolfleet ui: the run view on http://127.0.0.1:8001/ui\n"
    assert written.getvalue() == ""


def test_a_thread_ending_itself_with_system_exit_is_no_uncaught_exception() -> None:
    with logging_configured(logging.INFO) as written:
        thread = threading.Thread(target=sys.exit, args=(3,))
        thread.start()
        thread.join()
    assert written.getvalue() == ""
