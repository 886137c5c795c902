"""Task ids of calls: derived from the idempotency key, one per dispatch."""

from __future__ import annotations

import uuid

import pytest

from orchestrator.executors._attempts import Attempts
from workers.protocol import call_task_id


def test_the_first_dispatch_of_a_call_has_the_id_its_key_gives() -> None:
    assert call_task_id("inv-1:call-1") == call_task_id("inv-1:call-1", 0)
    assert uuid.UUID(call_task_id("inv-1:call-1")).version == 5


def test_each_attempt_and_each_key_has_an_id_of_its_own() -> None:
    ids = {call_task_id(key, attempt) for key in ("inv-1:a", "inv-1:b", "inv-2:a") for attempt in range(3)}
    assert len(ids) == 9


def test_an_attempt_below_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="attempt must be at least 0"):
        call_task_id("inv-1:a", -1)


def test_dispatches_of_one_key_are_counted_from_zero_and_keys_apart() -> None:
    attempts = Attempts()
    assert [attempts.next("a"), attempts.next("a"), attempts.next("b"), attempts.next("a")] == [0, 1, 0, 2]


def test_the_oldest_key_is_forgotten_past_the_bound() -> None:
    attempts = Attempts(max_keys=2)
    attempts.next("a")
    attempts.next("b")
    attempts.next("a")  # `a` is now the most recent
    attempts.next("c")  # forgets `b`
    assert (attempts.next("a"), attempts.next("b")) == (2, 0)
