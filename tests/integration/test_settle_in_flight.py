"""How recovery settles one call from the state it left in Redis (`orchestrator.executors.celery._settle`).

The states are written through a worker app's own result backend, as a worker stores them, and the
per-call marks as the worker's late-completion path writes them; revokes are recorded, not sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery, states

from orchestrator.executors.base import Settled
from orchestrator.executors.celery import _dispatch as dispatch_module
from orchestrator.executors.celery._dispatch import Dispatcher
from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._settle import settle
from workers.protocol import call_state_key, call_task_id
from workers.runtime.catalog import Catalog
from workers.settings import Settings

pytestmark = pytest.mark.integration

TTL_S = 120


@pytest.fixture
def dispatcher(settings: Settings, client: redis.Redis) -> Iterator[Dispatcher]:
    """The executor's dispatcher on the test database; its publisher is never used (revokes are
    recorded by the tests)."""
    publisher = Celery(set_as_current=False)
    yield Dispatcher(
        dataclasses.replace(settings, result_expires_s=TTL_S), publisher, client, Pools(Catalog(client))
    )
    publisher.close()


def new_task_id() -> str:
    """The task id of a call of its own."""
    return call_task_id(f"{uuid.uuid4()}:c1")


def run_settle(dispatcher: Dispatcher, task_id: str) -> tuple[Settled, list[str]]:
    revoked: list[str] = []
    settled = asyncio.run(settle(dispatcher, task_id, revoked.append))
    return settled, revoked


class WorkerLostError(Exception):
    """Stored under billiard's name, as a prefork worker stores a child killed mid-call."""


def lost() -> Exception:
    return WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)")


def test_a_success_is_to_be_compensated_and_left_unmarked(
    dispatcher: Dispatcher, client: redis.Redis, worker_app: Celery
) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_done(task_id, {"kind": "success", "text": "credited"})

    settled, revoked = run_settle(dispatcher, task_id)

    assert (settled.state, settled.task_id, revoked) == ("succeeded", task_id, [])
    assert settled.meta is not None and settled.meta["result"]["text"] == "credited"
    assert client.get(call_state_key(task_id)) is None


def test_a_failure_has_nothing_to_undo(
    dispatcher: Dispatcher, client: redis.Redis, worker_app: Celery
) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_failure(task_id, ValueError("card declined"))

    settled, revoked = run_settle(dispatcher, task_id)

    assert (settled.state, revoked) == ("failed", [])
    assert client.get(call_state_key(task_id)) is None


@pytest.mark.parametrize("stored", [None, states.STARTED, states.RETRY, states.REVOKED])
def test_a_call_queued_or_running_is_revoked_and_marked_abandoned(
    dispatcher: Dispatcher, client: redis.Redis, worker_app: Celery, stored: str | None
) -> None:
    # given: no state yet (queued), or a started, retrying or revoked one (a threads pool still runs it)
    task_id = new_task_id()
    if stored is not None:
        worker_app.backend.store_result(task_id, {"hostname": "w@h"}, stored)

    settled, revoked = run_settle(dispatcher, task_id)

    assert (settled.state, settled.task_id, revoked) == ("abandoned", task_id, [task_id])
    assert client.get(call_state_key(task_id)) == b"abandoned"
    assert 0 < client.ttl(call_state_key(task_id)) <= TTL_S


def test_a_call_already_marked_abandoned_stays_abandoned(dispatcher: Dispatcher, client: redis.Redis) -> None:
    # given: its orchestrator marked it abandoned at its deadline, then died before journaling that
    task_id = new_task_id()
    client.set(call_state_key(task_id), "abandoned")

    settled, revoked = run_settle(dispatcher, task_id)

    assert (settled.state, revoked) == ("abandoned", [task_id])
    assert client.get(call_state_key(task_id)) == b"abandoned"


def test_a_call_its_worker_marked_finished_first_is_a_success(
    dispatcher: Dispatcher, client: redis.Redis, worker_app: Celery
) -> None:
    # given: the worker marked the call finished; its result lands a moment later
    task_id = new_task_id()
    client.set(call_state_key(task_id), "finished")
    later = threading.Timer(
        0.3, worker_app.backend.mark_as_done, (task_id, {"kind": "success", "text": "ok"})
    )
    later.start()
    try:
        settled, revoked = run_settle(dispatcher, task_id)
    finally:
        later.join()

    # then: the worker will not compensate it (it was not abandoned), so recovery must
    assert (settled.state, revoked) == ("succeeded", [])
    assert settled.meta is not None and settled.meta["status"] == "SUCCESS"
    assert client.get(call_state_key(task_id)) == b"finished"


def test_a_call_that_lost_its_worker_is_a_failure(
    dispatcher: Dispatcher, client: redis.Redis, worker_app: Celery
) -> None:
    task_id = new_task_id()
    worker_app.backend.mark_as_failure(task_id, lost())

    settled, revoked = run_settle(dispatcher, task_id)

    assert (settled.state, revoked) == ("failed", [])


def test_a_call_marked_finished_whose_result_never_arrives_is_a_success_without_a_result(
    dispatcher: Dispatcher, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the worker marked the call finished, and its result never reaches the backend
    monkeypatch.setattr(dispatch_module, "LATE_RESULT_GRACE_S", 0.3)
    task_id = new_task_id()
    client.set(call_state_key(task_id), "finished")

    settled, revoked = run_settle(dispatcher, task_id)

    # then: it succeeded (not abandoned, not revoked), with no result to tell
    assert (settled.state, settled.meta, revoked) == ("succeeded", None, [])
    assert client.get(call_state_key(task_id)) == b"finished"


def test_an_unreachable_redis_settles_nothing(dispatcher: Dispatcher) -> None:
    # given: a dispatcher whose Redis does not answer
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    cut_off = Dispatcher(dispatcher.settings, dispatcher.publisher, down, dispatcher.pools)

    # then: settling raises, rather than claiming the call abandoned
    try:
        with pytest.raises(redis.ConnectionError):
            run_settle(cut_off, new_task_id())
    finally:
        down.close()
