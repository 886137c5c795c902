"""How recovery settles one call from the states its dispatches left in Redis (`orchestrator.saga._inflight`).

The states are written through a worker app's own result backend, as a worker stores them, and the
per-call marks as the worker's late-completion path writes them; revokes are recorded, not sent.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
import redis
from celery import Celery, states

from orchestrator.saga._inflight import Settled, settle
from workers.protocol import call_state_key, call_task_id

pytestmark = pytest.mark.integration

TTL_S = 120


def new_task_id() -> str:
    """The task id of a call of its own."""
    return call_task_id(f"{uuid.uuid4()}:c1")


def run_settle(client: redis.Redis, task_ids: list[str]) -> tuple[Settled, list[str]]:
    revoked: list[str] = []
    settled = asyncio.run(settle(client, task_ids, revoked.append, mark_ttl_s=TTL_S))
    return settled, revoked


class WorkerLostError(Exception):
    """Stored under billiard's name, as a prefork worker stores a child killed mid-call."""


def lost() -> Exception:
    return WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)")


def test_a_success_is_to_be_compensated_and_left_unmarked(client: redis.Redis, worker_app: Celery) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_done(task_id, {"kind": "success", "text": "credited"})

    settled, revoked = run_settle(client, [task_id])

    assert (settled.state, settled.task_id, revoked) == ("succeeded", task_id, [])
    assert settled.meta is not None and settled.meta["result"]["text"] == "credited"
    assert client.get(call_state_key(task_id)) is None


def test_a_failure_has_nothing_to_undo(client: redis.Redis, worker_app: Celery) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_failure(task_id, ValueError("card declined"))

    settled, revoked = run_settle(client, [task_id])

    assert (settled.state, revoked) == ("failed", [])
    assert client.get(call_state_key(task_id)) is None


@pytest.mark.parametrize("stored", [None, states.STARTED, states.RETRY, states.REVOKED])
def test_a_call_queued_or_running_is_revoked_and_marked_abandoned(
    client: redis.Redis, worker_app: Celery, stored: str | None
) -> None:
    # given: no state yet (queued), or a started, retrying or revoked one (a threads pool still runs it)
    task_id = new_task_id()
    if stored is not None:
        worker_app.backend.store_result(task_id, {"hostname": "w@h"}, stored)

    settled, revoked = run_settle(client, [task_id])

    assert (settled.state, settled.task_id, revoked) == ("abandoned", task_id, [task_id])
    assert client.get(call_state_key(task_id)) == b"abandoned"
    assert 0 < client.ttl(call_state_key(task_id)) <= TTL_S


def test_a_call_already_marked_abandoned_stays_abandoned(client: redis.Redis) -> None:
    # given: its orchestrator marked it abandoned at its deadline, then died before journaling that
    task_id = new_task_id()
    client.set(call_state_key(task_id), "abandoned")

    settled, revoked = run_settle(client, [task_id])

    assert (settled.state, revoked) == ("abandoned", [task_id])
    assert client.get(call_state_key(task_id)) == b"abandoned"


def test_a_call_its_worker_marked_finished_first_is_a_success(
    client: redis.Redis, worker_app: Celery
) -> None:
    # given: the worker marked the call finished; its result lands a moment later
    task_id = new_task_id()
    client.set(call_state_key(task_id), "finished")
    later = threading.Timer(
        0.3, worker_app.backend.mark_as_done, (task_id, {"kind": "success", "text": "ok"})
    )
    later.start()
    try:
        settled, revoked = run_settle(client, [task_id])
    finally:
        later.join()

    # then: the worker will not compensate it (it was not abandoned), so recovery must
    assert (settled.state, revoked) == ("succeeded", [])
    assert settled.meta is not None and settled.meta["status"] == "SUCCESS"
    assert client.get(call_state_key(task_id)) == b"finished"


def test_a_call_that_lost_its_worker_is_a_failure(client: redis.Redis, worker_app: Celery) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_failure(task_id, lost())

    settled, revoked = run_settle(client, [task_id])

    assert (settled.state, revoked) == ("failed", [])
