"""A call that reaches a worker of its pool that does not serve it: the outcome says which worker
lacked which tool, as the model reads it."""

from __future__ import annotations

from typing import Any

from orchestrator.executors._outcomes import outcome_of_meta as _outcome
from orchestrator.executors._outcomes import worker_of as _worker_of
from workers import OutcomeKind, ToolDefinition, tool
from workers.tools import discover_tools


@tool("Shouts", pool="files")
def shout(text: str) -> str:
    return text.upper()


DEFINITION: ToolDefinition = discover_tools(shout)[0]


def failure(*exc_message: Any) -> dict[str, Any]:
    """The meta Celery stores for a task refused as unregistered."""
    return {
        "status": "FAILURE",
        "result": {
            "exc_type": "NotRegistered",
            "exc_message": list(exc_message),
            "exc_module": "celery.exceptions",
        },
    }


def test_a_refusal_naming_its_worker_says_which_worker_lacked_the_tool_and_what_it_serves() -> None:
    meta = failure("tool.shout", {"worker": "w2@host", "pool": "files", "tools": ["echo", "read"]})

    outcome = _outcome(meta, DEFINITION, 10.0)

    assert outcome.kind is OutcomeKind.NO_WORKER
    assert outcome.error_type == "NotRegistered"
    assert outcome.text == (
        "Tool 'shout' is not served by worker 'w2@host' of pool 'files' "
        "(its workers serve different tools: 'w2@host' serves echo, read)"
    )
    assert _worker_of(meta) == "w2@host"


def test_a_worker_serving_no_tool_of_the_pool_says_so() -> None:
    meta = failure("tool.shout", {"worker": "w2@host", "pool": "files", "tools": []})

    assert _outcome(meta, DEFINITION, 10.0).text == (
        "Tool 'shout' is not served by worker 'w2@host' of pool 'files' "
        "(its workers serve different tools: 'w2@host' serves no tool)"
    )


def test_a_plain_celery_refusal_still_names_the_tool_and_the_pool() -> None:
    outcome = _outcome(failure("tool.shout"), DEFINITION, 10.0)

    assert outcome.kind is OutcomeKind.NO_WORKER
    assert outcome.text == (
        "Tool 'shout' is not served by the worker of pool 'files' that received the call "
        "(its workers serve different tools)"
    )


def test_a_refused_compensation_is_a_failed_compensation_naming_the_worker() -> None:
    meta = failure("compensate.shout", {"worker": "w2@host", "pool": "files", "tools": ["shout"]})

    outcome = _outcome(meta, DEFINITION, 10.0)

    assert outcome.kind is OutcomeKind.EXECUTION_ERROR
    assert outcome.text == (
        "The compensation of tool 'shout' is not served by worker 'w2@host' of pool 'files' "
        "(its workers serve different tools: 'w2@host' serves shout)"
    )


def test_a_call_the_worker_timed_out_reads_as_one_the_orchestrator_timed_out() -> None:
    # given: the failure a worker stores when its side of the call's deadline fired first
    carried = {"kind": "timed_out", "text": "Tool 'shout' did not finish within its deadline"}
    meta = {
        "status": "FAILURE",
        "result": {
            "exc_type": "TimedOut",
            "exc_message": [
                "Tool 'shout' did not finish within its deadline",
                {**carried, "error_type": "TimeoutError"},
            ],
            "exc_module": "workers._failures",
        },
    }

    # then: the model reads the words it reads when the orchestrator's deadline fires first
    outcome = _outcome(meta, DEFINITION, 0.3)
    assert (outcome.kind, outcome.text) == (OutcomeKind.TIMED_OUT, "Tool 'shout' did not finish within 0.3 s")
