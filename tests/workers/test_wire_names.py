"""The task names and the refusal detail of the wire contract, read and written by one module."""

from __future__ import annotations

import json
from typing import Any

import pytest

from workers.protocol import (
    NotRegisteredDetail,
    compensation_task_name,
    is_compensation_task,
    is_toolfleet_task,
    tool_of_task,
    tool_task_name,
)


def test_the_refusal_detail_round_trips_through_json() -> None:
    detail = NotRegisteredDetail(worker="w1@host", pool="bank", tools=("credit", "debit"))
    assert NotRegisteredDetail.from_json(json.loads(json.dumps(detail.to_json()))) == detail


@pytest.mark.parametrize(
    "stored",
    [None, "text", {}, {"worker": "", "tools": []}, {"worker": "w1", "tools": "credit"}, {"tools": []}],
)
def test_a_refusal_without_a_workers_detail_reads_as_none(stored: Any) -> None:
    assert NotRegisteredDetail.from_json(stored) is None


def test_a_refusal_without_a_pool_reads_with_none() -> None:
    assert NotRegisteredDetail.from_json({"worker": "w1", "tools": ["a"]}) == NotRegisteredDetail(
        worker="w1", pool=None, tools=("a",)
    )


def test_toolfleet_tasks_are_the_calls_and_compensations_of_tools() -> None:
    assert is_toolfleet_task(tool_task_name("credit")) and is_toolfleet_task(compensation_task_name("credit"))
    assert not is_toolfleet_task("celery.chord_unlock")
    assert is_compensation_task(compensation_task_name("credit"))
    assert not is_compensation_task(tool_task_name("credit"))
    assert tool_of_task(tool_task_name("credit")) == "credit"
    assert tool_of_task(compensation_task_name("credit")) is None
