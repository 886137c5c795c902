"""The wire contract: task envelopes round-trip through JSON, and a failure reads back as its outcome."""

from __future__ import annotations

import json

import pytest
from celery import Celery
from celery.backends.base import BaseBackend

from workers.calls.invocation import Invocation, InvocationContext
from workers.protocol import (
    CallTask,
    CompensationTask,
    OutcomeKind,
    ToolExecution,
    ToolExecutionRequest,
    ToolOutcome,
    outcome_from_failure,
)


def _stored(exc: BaseException) -> object:
    """The failure as Celery's JSON result backend stores it and an orchestrator reads it back."""
    backend = BaseBackend(app=Celery(set_as_current=False), serializer="json")
    return json.loads(json.dumps(backend.prepare_exception(exc, "json")))


REQUEST = ToolExecutionRequest(id="c1", name="pay", arguments='{"amount": 3}')
INVOCATION = Invocation(InvocationContext(service_name="bank"), {"user": "ann"})


def test_call_task_round_trips_through_json() -> None:
    envelope = CallTask(REQUEST, INVOCATION, compensate_if_late=True, deadline=1234.5)

    again = CallTask.from_json(json.loads(json.dumps(envelope.to_json())))

    assert again == envelope


def test_compensation_task_round_trips_through_json() -> None:
    execution = ToolExecution(request=REQUEST, result="paid", task_id="t1", pool="bank")
    envelope = CompensationTask(execution, INVOCATION, "key-1", deadline=99.0, failures=2)

    again = CompensationTask.from_json(json.loads(json.dumps(envelope.to_json())))

    assert again.to_json() == envelope.to_json()
    assert (again.idempotency_key, again.deadline, again.failures) == ("key-1", 99.0, 2)


def test_a_task_without_deadline_reads_with_defaults() -> None:
    envelope = CallTask.from_json({"request": REQUEST.to_json(), "invocation": INVOCATION.to_json()})

    assert (envelope.deadline, envelope.compensate_if_late) == (None, False)


def test_flower_shows_the_arguments_and_ids_never_the_parameters() -> None:
    shown = CallTask(REQUEST, INVOCATION).reprs()

    assert shown["argsrepr"] == "()"
    assert "'call_id': 'c1'" in shown["kwargsrepr"]
    assert str(INVOCATION.context.invocation_id) in shown["kwargsrepr"]
    assert "ann" not in shown["kwargsrepr"]


@pytest.mark.parametrize("error_type", ["InsufficientFunds", None, "not an identifier"])
def test_a_stored_failure_reads_back_as_its_outcome(error_type: str | None) -> None:
    from workers._failures import failure_for

    outcome = ToolOutcome(kind=OutcomeKind.EXECUTION_ERROR, text="no money", error_type=error_type)

    read = outcome_from_failure(_stored(failure_for(outcome, "w1")))

    assert read == outcome


def test_an_outcome_on_the_wire_carries_only_the_fields_set() -> None:
    assert ToolOutcome(OutcomeKind.SUCCESS, "ok").to_json() == {"kind": "success", "text": "ok"}
    full = ToolOutcome(
        OutcomeKind.EXECUTION_ERROR,
        "no",
        result_object={"a": 1},
        attributes={"k": "v"},
        error_type="ValueError",
        message_for_llm="try again",
        parameter_changes={"p": 2},
        error_type_name="builtins.ValueError",
    )
    assert ToolOutcome.from_json(json.loads(json.dumps(full.to_json()))) == full
    assert ToolOutcome.from_json({"kind": "success", "text": "ok"}) == ToolOutcome(OutcomeKind.SUCCESS, "ok")
