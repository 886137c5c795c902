"""A call's queue wait: measured by its worker from the message's `toolfleet_sent_at` header, on the
call's first attempt only, and carried beside the outcome (`to_wire`), never in `to_json` (which the
two executors' outcomes compare equal in); an older worker's outcome, without it, reads as unknown."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from celery import Celery, Task
from celery.backends.base import BaseBackend

from workers._failures import failure_for
from workers.protocol import SENT_AT_HEADER, OutcomeKind, ToolOutcome, outcome_from_failure
from workers.runtime.tasks import _queued_s

OUTCOME = ToolOutcome(OutcomeKind.SUCCESS, "ok", queued_s=0.123456)


def _task(headers: dict[str, Any], retries: int = 0) -> Task:
    """What `_queued_s` reads of a running task: its attempt and its message's headers."""
    return cast(Task, SimpleNamespace(request=SimpleNamespace(retries=retries, headers=headers)))


def test_the_wire_carries_the_queue_wait_beside_the_outcome() -> None:
    # when
    wire = OUTCOME.to_wire("w1@host")

    # then: to the millisecond, with the worker's name; `to_json` is the outcome alone
    assert wire == {"kind": "success", "text": "ok", "worker": "w1@host", "queued_s": 0.123}
    assert OUTCOME.to_json() == {"kind": "success", "text": "ok"}
    read = ToolOutcome.from_json(json.loads(json.dumps(wire)))
    assert read.queued_s == 0.123
    assert read == ToolOutcome(OutcomeKind.SUCCESS, "ok")  # compared without it, as `worker` is


def test_an_unknown_queue_wait_is_left_off_the_wire() -> None:
    assert ToolOutcome(OutcomeKind.SUCCESS, "ok").to_wire(None) == {
        "kind": "success",
        "text": "ok",
        "worker": None,
    }


@pytest.mark.parametrize("value", [None, "0.5", -0.5, True, float("nan"), float("inf"), [1]])
def test_an_older_workers_or_a_garbled_queue_wait_reads_as_unknown(value: Any) -> None:
    wire = {"kind": "success", "text": "ok", "worker": "w1@host"}
    if value is not None:
        wire["queued_s"] = value
    assert ToolOutcome.from_json(wire).queued_s is None


def test_a_failure_carries_its_queue_wait_to_the_orchestrator() -> None:
    # given: a failed call's outcome, with its queue wait
    outcome = ToolOutcome(OutcomeKind.EXECUTION_ERROR, "no money", error_type="Declined", queued_s=0.25)
    backend = BaseBackend(app=Celery(set_as_current=False), serializer="json")

    # when: the task's exception is stored as Celery's result backend stores it, then read back
    stored = json.loads(json.dumps(backend.prepare_exception(failure_for(outcome, "w1@host"), "json")))
    read = outcome_from_failure(stored)

    # then
    assert stored["exc_type"] == "Declined"
    assert read == outcome and read is not None and read.queued_s == 0.25


def test_the_worker_measures_the_wait_from_the_publish() -> None:
    assert _queued_s(_task({SENT_AT_HEADER: time.time() - 2.5})) == pytest.approx(2.5, abs=0.5)


def test_a_retry_has_no_queue_wait_of_its_own() -> None:
    # a retry's message keeps the first publish's time: from it, the wait would count the first run
    assert _queued_s(_task({SENT_AT_HEADER: time.time() - 2.5}, retries=1)) is None


@pytest.mark.parametrize("sent_at", [None, "1700000000", True])
def test_a_message_without_a_readable_publish_time_has_no_queue_wait(sent_at: Any) -> None:
    headers = {} if sent_at is None else {SENT_AT_HEADER: sent_at}
    assert _queued_s(_task(headers)) is None


def test_a_publish_time_ahead_of_the_workers_clock_is_no_wait() -> None:
    assert _queued_s(_task({SENT_AT_HEADER: time.time() + 30})) == 0.0
