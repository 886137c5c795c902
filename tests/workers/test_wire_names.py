"""The task names and the refusal detail of the wire contract, read and written by one module."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workers import protocol


def test_the_refusal_detail_round_trips_through_json() -> None:
    detail = protocol.NotRegisteredDetail(worker="w1@host", pool="bank", tools=("credit", "debit"))
    assert protocol.NotRegisteredDetail.from_json(json.loads(json.dumps(detail.to_json()))) == detail


@pytest.mark.parametrize(
    "stored",
    [None, "text", {}, {"worker": "", "tools": []}, {"worker": "w1", "tools": "credit"}, {"tools": []}],
)
def test_a_refusal_without_a_workers_detail_reads_as_none(stored: Any) -> None:
    assert protocol.NotRegisteredDetail.from_json(stored) is None


def test_a_refusal_without_a_pool_reads_with_none() -> None:
    detail = protocol.NotRegisteredDetail.from_json({"worker": "w1", "tools": ["a"]})
    assert detail == protocol.NotRegisteredDetail(worker="w1", pool=None, tools=("a",))


def test_toolfleet_tasks_are_the_calls_and_compensations_of_tools() -> None:
    call, undo = protocol.tool_task_name("credit"), protocol.compensation_task_name("credit")
    assert protocol.is_toolfleet_task(call) and protocol.is_toolfleet_task(undo)
    assert not protocol.is_toolfleet_task("celery.chord_unlock")
    assert protocol.is_compensation_task(undo)
    assert not protocol.is_compensation_task(call)
    assert protocol.tool_of_task(call) == "credit"
    assert protocol.tool_of_task(undo) is None
