"""A call that fails for want of time is `timed_out` whichever timer fired first: the pool's time limit,
or a timeout the tool raised once the call's deadline had passed (an MCP request's timeout is its tool's
deadline, and fires on the worker a moment after the orchestrator's)."""

from __future__ import annotations

import time

import pytest

from workers.calls.runner import error_outcome
from workers.errors import McpTimeoutError
from workers.protocol import OutcomeKind, ToolOutcome
from workers.runtime.tasks import _past_its_deadline


def _raised(exc: Exception) -> ToolOutcome:
    return error_outcome(exc, OutcomeKind.EXECUTION_ERROR)


@pytest.mark.parametrize(
    ("outcome", "deadline_in_s", "timed_out"),
    [
        (_raised(McpTimeoutError("MCP tool 'sleep' did not answer within 3 s")), -0.01, True),
        (_raised(TimeoutError("read timed out")), -1, True),
        (_raised(McpTimeoutError("did not answer")), 60, False),  # time left: may be retried
        (_raised(ConnectionError("reset")), -1, False),
        (_raised(ValueError("bad")), -1, False),
        (_raised(TimeoutError("read timed out")), None, False),
        (ToolOutcome(OutcomeKind.EXECUTION_ERROR, "limit", error_type="SoftTimeLimitExceeded"), None, True),
    ],
)
def test_a_call_failed_for_want_of_time_only_once_its_deadline_passed(
    outcome: ToolOutcome, deadline_in_s: float | None, timed_out: bool
) -> None:
    deadline = None if deadline_in_s is None else time.time() + deadline_in_s
    assert _past_its_deadline(outcome, deadline) is timed_out
