"""Calls in doubt and compensations lost on the way, on real workers (SPEC §7): a call whose worker died
after its effect, before it could tell, is undone at once, under a key of its own, so that a late finish
is still undone; a compensation whose message was lost is sent again."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import time
from collections.abc import Callable

import pytest
import redis

from orchestrator import CeleryExecutor, ScriptedChatModel
from tests._background import Background
from tests._waiting import wait_until
from tests.integration import fault_tools
from tests.integration.broker_lists import pool_lists
from tests.integration.fault_tools import HEAVY_POOL, k
from tests.integration.scripts import ask, call, saga_service
from tests.integration.test_saga_faults import (  # the module's workers and sagas, shared
    HeavySaga,
    celery_executor,
    count,
    counts,
    faults_worker,
    heavy_saga,
    logs,
    start_heavy,
    unique,
)
from workers import OutcomeKind, ToolExecution, ToolExecutionRequest
from workers.calls.invocation import Invocation
from workers.protocol import CALL_ABANDONED, call_state_key
from workers.runtime.process import WorkerProcess

pytestmark = pytest.mark.integration

__all__ = ["celery_executor", "faults_worker", "heavy_saga", "logs", "start_heavy"]  # fixtures used here


def test_a_call_whose_worker_died_after_its_effect_is_undone_in_doubt(
    start_heavy: Callable[..., list[WorkerProcess]], heavy_saga: HeavySaga
) -> None:
    # Given: a prefork worker (one child) running a booking that holds 20 s after it booked
    [worker] = start_heavy(1)
    key = unique("doubt")
    model = ScriptedChatModel([ask(call("hold-1", "heavy_hold", key=key, seconds=20.0)), "told"])
    running = Background(
        lambda: saga_service(model, heavy_saga.executor, heavy_saga.journal, [fault_tools.tools]).chat("hold")
    )
    assert wait_until(lambda: heavy_saga.client.get(k(key, "effect")) == "booked", 20.0)
    [child] = worker.child_pids()

    # When: its pool child is SIGKILLed before it could tell how the call ended
    os.kill(child, signal.SIGKILL)

    # Then: the model is told the call lost its worker, and the booking, which stood, is undone once
    result = running.join(30.0)
    [held] = result.tool_executions
    assert held.has_failed and held.status == "worker_lost", held
    assert wait_until(lambda: count(heavy_saga.client, key, "comps") >= 1, 20.0), counts(
        heavy_saga.client, key
    )
    assert heavy_saga.client.get(k(key, "effect")) is None
    time.sleep(1.0)  # a non-event (no second undo): waited out, there is nothing to await
    assert counts(heavy_saga.client, key) == {"runs": 1, "done": 1, "comp_starts": 1, "comps": 1}


def test_an_undo_in_doubt_does_not_stop_the_undo_of_a_late_finish(
    faults_worker: WorkerProcess, celery_executor: CeleryExecutor, text_client: redis.Redis
) -> None:
    # Given: a booking undone in doubt (its worker was declared lost: the undo found nothing yet)
    key = unique("both")
    request = ToolExecutionRequest(
        "book-1", "fault_book", json.dumps({"key": key, "group": "", "undo_seconds": 0})
    )
    invocation = Invocation()
    definition = celery_executor.definition("fault_book")
    assert definition is not None
    in_doubt = ToolExecution(request=request, result="lost", has_failed=True, status="worker_lost")
    first = asyncio.run(celery_executor.compensate(definition, in_doubt, invocation))
    assert not first.is_error, first

    # When: the call finishes after all (its worker had only stopped) and is undone as a late finish
    finished = ToolExecution(request=request, result=f"booked {key}", status="success")
    second = asyncio.run(celery_executor.compensate(definition, finished, invocation))

    # Then: that undo ran too, under the call's own key: the first one's did not stand for it
    assert not second.is_error and second.text != "Already compensated", second
    assert count(text_client, key, "comps") == 2
    # ... and the call's own undo is still done once, whatever the deliveries
    third = asyncio.run(celery_executor.compensate(definition, finished, invocation))
    assert not third.is_error and count(text_client, key, "comps") == 2


def test_a_compensation_whose_message_was_lost_is_sent_again(
    start_heavy: Callable[..., list[WorkerProcess]], heavy_saga: HeavySaga, celery_executor: CeleryExecutor
) -> None:
    # Given: a prefork worker stopped for a moment (still in the catalog: its heartbeat lasts 30 s, so
    # a loaded machine's delay before the undo is sent cannot drop it from the catalog first), as the
    # undo of a booking is sent to its pool's queue
    [worker] = start_heavy(1, {"TOOLFLEET_HEARTBEAT_TTL_S": "30", "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "5"})
    key = unique("lost")
    booking = ToolExecutionRequest(
        "book-1", "heavy_book", json.dumps({"key": key, "group": "", "undo_seconds": 0})
    )
    definition = celery_executor.definition("heavy_book")
    assert definition is not None
    booked = ToolExecution(request=booking, result=f"booked {key}", status="success")
    broker = redis.Redis.from_url(celery_executor.settings.broker_url)
    queues = pool_lists(broker, HEAVY_POOL)
    warming = {"key": f"{key}-warm", "group": "", "undo_seconds": 0}  # the executor's first undo
    warm = dataclasses.replace(
        booked, request=ToolExecutionRequest("book-0", "heavy_book", json.dumps(warming))
    )
    assert not asyncio.run(celery_executor.compensate(definition, warm, Invocation())).is_error
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        undoing = Background(
            lambda: asyncio.run(celery_executor.compensate(definition, booked, Invocation()))
        )
        assert wait_until(lambda: sum(broker.llen(queue) for queue in queues) >= 1, 5.0)

        # When: its message is lost (as when the worker that took it lost Redis, and its return failed)
        broker.delete(*queues)
    finally:
        os.kill(worker.pid, signal.SIGCONT)

    # Then: no worker having it, nor its queue, it is sent again, and runs once
    outcome = undoing.join(40.0)
    assert not outcome.is_error, outcome
    assert counts(heavy_saga.client, key) == {"runs": 0, "done": 0, "comp_starts": 1, "comps": 1}


@pytest.mark.parametrize("compensable", [True, False], ids=["undone-if-run", "discarded"])
def test_a_call_left_queued_as_its_pool_lost_its_last_worker_does_not_stand(
    compensable: bool,
    start_heavy: Callable[..., list[WorkerProcess]],
    heavy_saga: HeavySaga,
    celery_executor: CeleryExecutor,
) -> None:
    # Given: the prefork pool's only worker, known live to the executor, stopped (SIGSTOP) as a
    # booking is sent to it: its heartbeat lapses 2 s later, the booking's message still queued
    [worker] = start_heavy(1)
    definition = celery_executor.definition("heavy_book")
    assert definition is not None
    warm = _booking(unique("warm"))
    assert asyncio.run(celery_executor.execute(warm, definition)).kind is OutcomeKind.SUCCESS
    key = unique("orphan")
    broker = redis.Redis.from_url(celery_executor.settings.broker_url)
    queues = pool_lists(broker, HEAVY_POOL)
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        # When: the call (undone by its worker if it finishes late, or not) ends `no_worker`
        outcome = asyncio.run(
            celery_executor.execute(_booking(key), definition, Invocation(), compensate_if_late=compensable)
        )
        assert outcome.kind is OutcomeKind.NO_WORKER, outcome
        # a call its worker undoes if it finishes late is marked abandoned, as at a deadline
        state = broker.get(call_state_key(outcome.task_id or ""))
        assert state == (CALL_ABANDONED.encode() if compensable else None), state
    finally:
        os.kill(worker.pid, signal.SIGCONT)

    # Then: the worker, back, discards its message (revoked), or undoes the booking it ran: none stands
    assert wait_until(lambda: sum(broker.llen(queue) for queue in queues) == 0, 10.0)
    time.sleep(2.0)  # a non-event (a booking left standing): waited out, there is nothing to await
    ran = counts(heavy_saga.client, key)
    assert heavy_saga.client.get(k(key, "effect")) is None, ran
    assert ran["runs"] == ran["comps"], ran


def _booking(key: str) -> ToolExecutionRequest:
    return ToolExecutionRequest(
        "book-1", "heavy_book", json.dumps({"key": key, "group": "", "undo_seconds": 0})
    )
