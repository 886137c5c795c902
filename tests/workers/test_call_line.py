"""What a call costs besides the tool: an identity only for the tools that take one, and a log
line formatted by logging itself, only when its level is on."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from workers import ToolCallIdentity, ToolExecutionRequest, ToolProgressReporter, tool
from workers.calls import invocation as invocation_module
from workers.calls.runner import log_call, run_tool
from workers.protocol import OutcomeKind, ToolOutcome
from workers.tools.registry import ToolRegistry


@tool
def add(a: int, b: int) -> int:
    return a + b


@tool
def whoami(identity: ToolCallIdentity) -> str:
    return identity.idempotency_key


def _counting_identities(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    original = invocation_module.ToolCallIdentity.of.__func__

    def counted(cls: type[ToolCallIdentity], *args: object, **kwargs: object) -> ToolCallIdentity:
        built.append(str(args[2]))
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(invocation_module.ToolCallIdentity, "of", classmethod(counted))
    return built


def test_a_tool_without_an_identity_parameter_gets_no_identity_built(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _counting_identities(monkeypatch)
    (definition,) = ToolRegistry().add(add)

    outcome = run_tool(definition, ToolExecutionRequest(id="c1", name="add", arguments='{"a": 1, "b": 2}'))

    assert outcome.text == "3" and built == []
    assert not definition.takes_identity


def test_a_tool_with_an_identity_parameter_gets_its_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _counting_identities(monkeypatch)
    (definition,) = ToolRegistry().add(whoami)
    assert definition.takes_identity and dataclasses.replace(definition).takes_identity

    outcome = run_tool(definition, ToolExecutionRequest(id="c1", name="whoami", arguments="{}"))

    assert outcome.kind is OutcomeKind.SUCCESS and outcome.text and built == ["whoami"]


FAILED = ToolOutcome(kind=OutcomeKind.EXECUTION_ERROR, text="secret", error_type="ConnectionError")


def test_a_retried_attempt_has_its_number_and_pause_on_the_calls_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="workers.calls.runner"):
        log_call("pay", "c1", FAILED, 12.34, task_id="t1", attempt=2, retry_in_s=0.5)

    (record,) = caplog.records
    assert record.getMessage() == (
        "tool pay call c1 task t1: attempt 2 execution_error (ConnectionError) in 12.3 ms; retrying in 0.50 s"
    )
    assert record.args and "%s" in str(record.msg)  # formatted by logging, from its arguments
    assert "secret" not in caplog.text


@pytest.mark.parametrize(
    ("outcome", "task_id", "expected"),
    [
        (FAILED, None, "tool pay call c1: execution_error (ConnectionError) in 1.0 ms"),
        (
            ToolOutcome(kind=OutcomeKind.SUCCESS, text="ok"),
            "t1",
            "tool pay call c1 task t1: success in 1.0 ms",
        ),
    ],
)
def test_a_calls_line_has_the_parts_it_knows(
    caplog: pytest.LogCaptureFixture, outcome: ToolOutcome, task_id: str | None, expected: str
) -> None:
    with caplog.at_level(logging.INFO, logger="workers.calls.runner"):
        log_call("pay", "c1", outcome, 1.0, task_id=task_id)
    assert [r.getMessage() for r in caplog.records] == [expected]


def test_below_info_a_call_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="workers.calls.runner"):
        log_call("pay", "c1", FAILED, 1.0, task_id="t1")
    assert caplog.records == []


@tool("Reports its progress")
def reports(progress: ToolProgressReporter) -> str:
    progress.progress(fraction=1.0)
    return "reported"


def test_only_a_tool_with_a_reporter_parameter_is_marked_as_taking_one() -> None:
    (plain,) = ToolRegistry().add(add)
    (reporting,) = ToolRegistry().add(reports)

    assert not plain.takes_reporter
    assert reporting.takes_reporter and dataclasses.replace(reporting).takes_reporter
