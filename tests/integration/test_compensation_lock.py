"""The bookkeeping of a compensation on its worker: the lock is released only by its holder, and a
late-success mark that cannot be written gives up instead of retrying forever, and one whose first
write landed unanswered reads the orchestrator's verdict again.

The task bodies run in this process against the test Redis (the lock) or a Redis that does not
answer (the mark); the Celery task around them is a stand-in exposing what the bodies read.
"""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from workers import ToolExecutionRequest, compensate_for, tool
from workers.calls.invocation import Invocation
from workers.protocol import (
    CALL_ABANDONED,
    CompensationTask,
    OutcomeKind,
    ToolExecution,
    ToolOutcome,
    call_state_key,
    compensation_lock_key,
)
from workers.runtime import _compensation as compensation_module
from workers.runtime._compensation import finish_or_compensate_late, run_compensation_task
from workers.settings import Settings
from workers.tools.registry import ToolRegistry

pytestmark = [pytest.mark.integration, pytest.mark.broker]


class _Retry(Exception):
    """What the stand-in task's `retry` raises, as Celery's `Retry` would."""


def _task(task_id: str) -> Any:
    request = SimpleNamespace(id=task_id, hostname="lock-test@integration", headers={}, retries=0)
    return SimpleNamespace(request=request, retry=lambda **_: _Retry(), app=None)


class _Ledger:
    """A tool whose undo, while it runs, sees its lock expire and another delivery take it."""

    def __init__(self, client: redis.Redis, lock: str, other: str) -> None:
        self.client, self.lock, self.other = client, lock, other

    @tool(pool="locks")
    def credit(self, name: str) -> str:
        return name

    @compensate_for("credit")
    def uncredit(self, name: str) -> None:
        self.client.set(self.lock, self.other, ex=60)  # our TTL ran out; another delivery took it
        raise ConnectionError("the ledger did not answer")


def test_a_failed_undo_leaves_a_lock_another_delivery_took_in_place(
    settings: Settings, client: redis.Redis
) -> None:
    # given a compensation whose lock, while its undo runs, passes to another delivery
    key = f"lock-{uuid.uuid4().hex}"
    lock, other = compensation_lock_key(key), f"other@integration|1|{uuid.uuid4().hex}"
    (definition,) = ToolRegistry().add(_Ledger(client, lock, other))
    request = ToolExecutionRequest(id="call-1", name="credit", arguments='{"name": "Ada"}')
    envelope = CompensationTask(
        ToolExecution(request=request, result="Ada"), Invocation(), key, deadline=time.time() + 60
    )

    # when its undo fails and it lets go of the lock before its retry
    with pytest.raises(_Retry):
        run_compensation_task(_task(f"compensate-{key}"), definition, settings, envelope)

    # then the other delivery still holds the lock: no third delivery may undo the call meanwhile
    assert client.get(lock) == other.encode()
    client.delete(lock)


@tool(pool="locks")
def book(name: str) -> str:
    return name


@compensate_for("book")
def unbook(name: str) -> None: ...


def test_a_late_success_mark_without_a_deadline_gives_up_once_redis_stays_away() -> None:
    # given a call without a deadline and a Redis that never answers
    (definition,) = ToolRegistry().add(book)
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0", result_expires_s=1, retry_backoff_s=0.05, retry_backoff_max_s=0.2
    )
    success = ToolOutcome(kind=OutcomeKind.SUCCESS, text="booked")
    request = ToolExecutionRequest(id="call-2", name="book", arguments='{"name": "Ada"}')
    args = (_task(str(uuid.uuid4())), definition, settings, request, Invocation(), success, None)

    # when its worker marks it finished
    marking = threading.Thread(target=finish_or_compensate_late, args=args, daemon=True)
    marking.start()
    marking.join(timeout=15)

    # then it stops retrying, bounded by the result's lifetime, instead of retrying forever
    assert not marking.is_alive(), "marking a call without a deadline finished retries forever"


class _AnswerLost:
    """A Redis client whose first command lands but whose answer is lost (a link that stalled)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client, self.lost = client, False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)

        def call(*arguments: Any, **options: Any) -> Any:
            result = method(*arguments, **options)
            if not self.lost:
                self.lost = True
                raise redis.TimeoutError("Timeout reading from the server")
            return result

        return call


def test_a_late_success_whose_first_mark_landed_unanswered_is_still_compensated(
    settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a call its orchestrator abandoned, and a worker whose first write of the mark lands
    # but whose answer is lost, so that it writes it again
    (definition,) = ToolRegistry().add(book)
    task_id = str(uuid.uuid4())
    client.set(call_state_key(task_id), CALL_ABANDONED, ex=60)
    lossy = _AnswerLost(client)
    monkeypatch.setattr(compensation_module, "_redis", lambda _: lossy)
    sent: list[str] = []
    task = _task(task_id)
    task.app = SimpleNamespace(send_task=lambda name, **options: sent.append(name))
    success = ToolOutcome(kind=OutcomeKind.SUCCESS, text="booked")
    request = ToolExecutionRequest(id="call-3", name="book", arguments='{"name": "Ada"}')
    quick = Settings(redis_url=settings.redis_url, retry_backoff_s=0.01, retry_backoff_max_s=0.05)

    # when it marks the call finished
    finish_or_compensate_late(task, definition, quick, request, Invocation(), success, time.time() + 5)

    # then: the retry reads the orchestrator's verdict, not its own first write: the call is undone
    assert lossy.lost and sent == ["compensate.book"]
