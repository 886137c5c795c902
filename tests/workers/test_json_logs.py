"""`TOOLFLEET_LOG_FORMAT=json`: `configure_logging("json", ...)` writes each record as exactly one JSON
object on one line of standard error, carrying the call bound around it (invocation id, call id, tool,
pool, worker) and the current trace id when a span is current; a traceback, newlines and non-ASCII
text stay inside that one line."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests._tracing import traced_to_memory
from workers.telemetry.logs import CallFields, bound_call, configure_logging
from workers.telemetry.tracing import span

log = logging.getLogger("tests.json_logs")

CALL = CallFields("inv-7f3a", "call_42", "get_weather", "io", "w1@host")
CALL_KEYS = {"invocation_id": "inv-7f3a", "call_id": "call_42", "tool": "get_weather", "pool": "io"}


@contextlib.contextmanager
def json_logging(level: int = logging.DEBUG) -> Iterator[io.StringIO]:
    """The root logger as `configure_logging("json", level)` leaves it, pytest's own handlers set aside
    meanwhile; yields the text its one handler writes (to standard error, in a process)."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    root.handlers = []
    try:
        configure_logging("json", level)
        (handler,) = root.handlers
        assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
        written = io.StringIO()
        handler.setStream(written)
        yield written
    finally:
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
    with json_logging() as written:
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
    with json_logging(logging.INFO) as written:
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
