"""`ToolProgressReporter`: what a tool may report (checked in the tool, with a clear error), the rate
limit (latest wins, the last report always delivered on close), heartbeats only for tools that are
watched, and its injection into a tool parameter the model never sees."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, ClassVar

import pytest

from tests._waiting import wait_until
from workers import ToolProgressError, ToolProgressReporter, tool
from workers.calls.invocation import Invocation
from workers.calls.progress import ProgressReport, reporting
from workers.calls.runner import run_tool
from workers.protocol import OutcomeKind, ToolExecutionRequest
from workers.tools.registry import ToolRegistry


class Sink:
    def __init__(self) -> None:
        self.reports: list[ProgressReport] = []
        self.lock = threading.Lock()

    def __call__(self, report: ProgressReport) -> None:
        with self.lock:
            self.reports.append(report)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"fraction": 1.5}, "between 0 and 1"),
        ({"fraction": -0.1}, "between 0 and 1"),
        ({"fraction": math.nan}, "between 0 and 1"),
        ({"fraction": "half"}, "must be a number"),
        ({"fraction": True}, "must be a number"),
        ({"message": 42}, "must be a str"),
        ({"message": "x" * 2001}, "over 2000"),
        ({"data": {"when": object()}}, "JSON-serializable"),
        ({"data": math.inf}, "JSON-serializable"),
        ({"data": "x" * 20000}, "bytes as JSON"),
    ],
)
def test_a_report_that_cannot_travel_is_refused_with_what_is_wrong(
    arguments: dict[str, Any], says: str
) -> None:
    # given
    sink = Sink()
    reporter = ToolProgressReporter(sink)

    # when / then
    with pytest.raises(ToolProgressError, match=says):
        reporter.progress(**arguments)
    reporter.close()
    assert sink.reports == []  # nothing travelled


def test_valid_reports_travel_whole() -> None:
    # given
    sink = Sink()
    reporter = ToolProgressReporter(sink, worker="w@host")

    # when
    reporter.progress(fraction=0, message="start", data={"rows": [1, 2]})
    reporter.close()

    # then
    [report] = sink.reports
    assert (report.seq, report.fraction, report.message, report.data, report.worker) == (
        1,
        0.0,
        "start",
        {"rows": [1, 2]},
        "w@host",
    )
    assert abs(report.at - time.time()) < 5
    assert ProgressReport.from_json(report.to_json()) == report


def test_a_tight_loop_sends_a_few_reports_the_last_one_always() -> None:
    # given
    sink = Sink()
    reporter = ToolProgressReporter(sink, min_interval_s=0.05)

    # when: 10 000 reports as fast as the tool can make them, then the call ends
    started = time.monotonic()
    for step in range(1, 10_001):
        reporter.progress(fraction=step / 10_000, message=f"step {step}")
    reporter.close()
    elapsed = time.monotonic() - started  # reports go out until the close: it counts

    # then: at most one per interval (plus the first and the last), in order, ending with the last
    assert len(sink.reports) <= 2 + elapsed / 0.05
    assert [r.seq for r in sink.reports] == sorted(r.seq for r in sink.reports)
    assert sink.reports[-1].message == "step 10000"
    assert sink.reports[-1].seq == 10_000


def test_a_held_report_is_sent_when_its_interval_has_passed() -> None:
    # given: a report sent, and one made right after it (held by the rate limit)
    sink = Sink()
    reporter = ToolProgressReporter(sink, min_interval_s=0.05)
    reporter.progress(fraction=0.1)
    reporter.progress(fraction=0.2)
    assert [r.fraction for r in sink.reports] == [0.1]

    # when: the tool goes quiet
    # then: the held one goes out on its own once its interval has passed, without waiting for the end
    # of the call
    assert wait_until(lambda: len(sink.reports) == 2, 2.0), sink.reports
    assert [r.fraction for r in sink.reports] == [0.1, 0.2]
    reporter.close()
    assert len(sink.reports) == 2  # nothing left to send


def test_reports_after_the_call_ended_are_dropped() -> None:
    sink = Sink()
    reporter = ToolProgressReporter(sink)
    reporter.close()
    reporter.progress(fraction=0.5)
    assert sink.reports == []


@pytest.mark.parametrize(("timeout_s", "sent"), [(None, 0), (5.0, 1)], ids=["unwatched", "watched"])
def test_a_heartbeat_travels_only_for_a_tool_that_is_watched(timeout_s: float | None, sent: int) -> None:
    # given
    sink = Sink()
    reporter = ToolProgressReporter(sink, heartbeat_timeout_s=timeout_s)

    # when
    reporter.heartbeat()
    reporter.close()

    # then: a beat carries no report of its own (seq 0), and counts as one state sent
    assert len(sink.reports) == sent
    assert all(r.seq == 0 and r.beats == 1 for r in sink.reports)


@pytest.mark.parametrize("value", [0, -1, "5", True])
def test_a_heartbeat_timeout_must_be_positive_seconds(value: Any) -> None:
    from workers import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="heartbeat_timeout_s"):
        tool("Sleeps", heartbeat_timeout_s=value)


class Steps:
    @tool("Copies in steps", heartbeat_timeout_s=2.5)
    def copy(self, parts: int, progress: ToolProgressReporter) -> str:
        for part in range(1, parts + 1):
            progress.progress(fraction=part / parts, message=f"part {part}")
        return f"{parts} parts"

    @tool("Reports nonsense")
    def nonsense(self, progress: ToolProgressReporter) -> str:
        progress.progress(fraction=2)
        return "never"


def test_the_reporter_is_injected_and_never_shown_to_the_model() -> None:
    # given
    registry = ToolRegistry([Steps()])
    copy = registry.get("copy")
    assert copy is not None
    sink = Sink()

    # when
    with reporting(ToolProgressReporter(sink)):
        outcome = run_tool(copy, ToolExecutionRequest("c1", "copy", '{"parts": 3}'), Invocation())

    # then
    assert outcome.text == "3 parts"
    assert list(copy.specification.parameters["properties"]) == ["parts"]
    assert copy.heartbeat_timeout_s == 2.5
    assert sink.reports[-1].message == "part 3"


def test_a_bad_report_fails_the_call_with_its_message() -> None:
    nonsense = ToolRegistry([Steps()]).get("nonsense")
    assert nonsense is not None

    outcome = run_tool(nonsense, ToolExecutionRequest("c1", "nonsense", "{}"), Invocation())  # no sink set

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.error_type == "ToolProgressError"
    assert "between 0 and 1, got 2" in outcome.text


def test_the_catalog_tells_remote_orchestrators_the_heartbeat_timeout() -> None:
    from workers.runtime.catalog import CatalogTool

    copy = ToolRegistry([Steps()]).get("copy")
    assert copy is not None

    advertised = CatalogTool.from_json(CatalogTool.of(copy).to_json())

    assert advertised.definition().heartbeat_timeout_s == 2.5


class _LateTimer:
    """A `threading.Timer` that fires only when the test says so (as a timer late under load)."""

    made: ClassVar[list[_LateTimer]] = []

    def __init__(self, interval: float, function: Any) -> None:
        self.function = function
        self.cancelled = False
        self.daemon = False
        _LateTimer.made.append(self)

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.function()


def test_a_late_timer_never_sends_two_reports_within_one_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    # given: a reporter whose timers fire only when told
    monkeypatch.setattr("workers.calls.progress.threading.Timer", _LateTimer)
    _LateTimer.made.clear()
    sink = Sink()
    reporter = ToolProgressReporter(sink, min_interval_s=0.05)
    reporter.progress(message="one")  # sent
    reporter.progress(message="two")  # held: a timer for the end of the interval
    time.sleep(0.06)
    reporter.progress(message="three")  # the interval passed: sent at once, the timer still pending
    reporter.progress(message="four")  # held

    # when: the pending timer fires late, just after "three" went out
    _LateTimer.made[0].fire()

    # then: "four" waits out the interval since "three" instead of going out right behind it
    assert [r.message for r in sink.reports] == ["one", "three"]
    assert len(_LateTimer.made) == 2
    _LateTimer.made[1].fire()
    reporter.close()
    assert [r.message for r in sink.reports][-1] == "four"
