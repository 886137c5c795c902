"""The workers' result backend on a real Redis: Celery's rules, one round trip per batch of states."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from typing import Any

import pytest
import redis
from celery import Celery, states

from tests._ports import free_port
from tests.integration.states import META, StateRecorder
from workers.app import make_app
from workers.protocol import PROGRESS_STATE
from workers.runtime._backend import ResultBackend
from workers.settings import Settings


def _stored(client: redis.Redis, task_id: str) -> dict[str, Any]:
    raw = client.get(META + task_id)
    assert raw is not None
    meta: dict[str, Any] = json.loads(raw)
    return meta


def _all_at_once(target: Any, inputs: list[Any], timeout_s: float) -> None:
    """Run `target(x)` for every `x` of `inputs`, each on a thread of its own, all started at once, and
    wait for every one of them."""
    threads = [threading.Thread(target=target, args=(x,)) for x in inputs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    assert not any(thread.is_alive() for thread in threads), "a thread is still storing"


def test_the_worker_app_uses_it_and_keeps_its_url(worker_app: Celery, settings: Settings) -> None:
    # given: a worker app on a Redis result backend; then: its backend is this one, on that URL
    assert isinstance(worker_app.backend, ResultBackend)
    assert worker_app.backend.url == settings.result_backend
    assert worker_app.conf.result_backend == settings.result_backend


def test_a_state_is_stored_with_its_expiry_and_published(
    worker_app: Celery, client: redis.Redis, redis_url: str
) -> None:
    published = StateRecorder(redis_url)
    task_id = uuid.uuid4().hex
    try:
        # when: a task's STARTED then SUCCESS are stored
        worker_app.backend.store_result(task_id, {"pid": 1, "hostname": "w@h"}, states.STARTED)
        worker_app.backend.store_result(task_id, {"kind": "success"}, states.SUCCESS)
        seen = published.statuses(task_id)
    finally:
        published.close()

    # then: Redis holds the last, with the app's result expiry, and both were published in order
    meta = _stored(client, task_id)
    assert meta["status"] == "SUCCESS"
    assert meta["result"] == {"kind": "success"}
    assert meta["task_id"] == task_id
    assert 0 < client.ttl(META + task_id) <= int(worker_app.conf.result_expires)
    assert seen == ["STARTED", "SUCCESS"]
    # and: Celery's own reader reads it back
    assert worker_app.backend.get_task_meta(task_id)["status"] == "SUCCESS"


def test_a_stored_success_is_never_overwritten(
    worker_app: Celery, client: redis.Redis, redis_url: str
) -> None:
    # given: a task whose SUCCESS is stored
    task_id = uuid.uuid4().hex
    worker_app.backend.store_result(task_id, "first", states.SUCCESS)
    published = StateRecorder(redis_url)
    try:
        # when: a redelivered copy of it stores STARTED and then FAILURE
        worker_app.backend.store_result(task_id, {"pid": 2}, states.STARTED)
        worker_app.backend.mark_as_failure(task_id, ValueError("late"))
        # ... a state stored after them is published after them: once it arrives, so has theirs
        marker = uuid.uuid4().hex
        worker_app.backend.store_result(marker, "marker", states.SUCCESS)
        assert published.statuses(marker) == ["SUCCESS"]
        seen = published.statuses(task_id, final=False)
    finally:
        published.close()

    # then: the SUCCESS stays, and nothing else was published
    assert _stored(client, task_id)["result"] == "first"
    assert seen == []


def test_states_stored_together_share_round_trips(
    worker_app: Celery, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the process's writer, with its round trips (pipelines sent) counted
    backend: ResultBackend = worker_app.backend
    writer = backend._writer
    sent: list[int] = []
    write = writer._write

    def counting(batch: list[Any]) -> None:
        sent.append(len(batch))
        write(batch)

    monkeypatch.setattr(writer, "_write", counting)
    task_ids = [uuid.uuid4().hex for _ in range(64)]
    barrier = threading.Barrier(len(task_ids))

    def store(task_id: str) -> None:
        barrier.wait()
        backend.store_result(task_id, task_id, states.SUCCESS)

    # when: 64 threads store a result at the same moment
    _all_at_once(store, task_ids, timeout_s=10)

    # then: every result is stored, in fewer round trips than results
    assert all(_stored(client, task_id)["result"] == task_id for task_id in task_ids)
    assert sum(sent) == len(task_ids)
    assert len(sent) < len(task_ids)


def test_a_thread_writes_only_batches_holding_its_own_state(
    worker_app: Celery, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: the writer, with each batch's writing thread and the threads whose states it holds
    backend: ResultBackend = worker_app.backend
    writer = backend._writer
    owner: dict[str, int] = {}
    batches: list[tuple[int, set[int]]] = []
    write = writer._write

    def recording(batch: list[Any]) -> None:
        held = {owner[item.key.decode().removeprefix(META)] for item in batch}
        batches.append((threading.get_ident(), held))
        write(batch)

    monkeypatch.setattr(writer, "_write", recording)
    task_ids = [[uuid.uuid4().hex for _ in range(20)] for _ in range(16)]

    def store_all(ids: list[str]) -> None:
        for task_id in ids:
            owner[task_id] = threading.get_ident()
            backend.store_result(task_id, task_id, states.SUCCESS)

    # when: 16 threads each store 20 results, one after the other, all at once
    _all_at_once(store_all, task_ids, timeout_s=30)

    # then: all are stored, in batches, and no thread wrote a batch without its own state in it
    # (a writer hands the writing on instead of writing for others while its own call waits)
    assert all(_stored(client, task_id)["result"] == task_id for ids in task_ids for task_id in ids)
    assert len(batches) < 16 * 20
    assert all(writer_thread in held for writer_thread, held in batches)


def test_it_loads_its_script_again_when_the_server_forgot_it(worker_app: Celery, client: redis.Redis) -> None:
    # given: a backend that has stored once (its script is loaded)
    worker_app.backend.store_result(uuid.uuid4().hex, "warm", states.SUCCESS)
    # when: the server's scripts are flushed (as after a restart) and another result is stored
    client.script_flush()
    task_id = uuid.uuid4().hex
    worker_app.backend.store_result(task_id, "after", states.SUCCESS)
    # then: it is stored
    assert _stored(client, task_id)["result"] == "after"


def test_a_store_against_a_dead_server_raises_to_the_caller(settings: Settings) -> None:
    # given: an app whose result backend answers nowhere, with Celery's retries off
    dead = f"redis://127.0.0.1:{free_port()}/0"
    app = make_app(dataclasses.replace(settings, result_backend=dead))
    app.conf.result_backend_always_retry = False
    app.conf.redis_socket_connect_timeout = 0.5
    try:
        backend = app.backend
        assert isinstance(backend, ResultBackend)
        # then: storing raises the connection error (Celery's retry policy sees it)
        with pytest.raises(redis.ConnectionError):
            backend._store_result(uuid.uuid4().hex, "lost", states.SUCCESS)
    finally:
        app.close()


@pytest.mark.parametrize("final", [states.SUCCESS, states.FAILURE, states.REVOKED])
def test_a_progress_report_never_replaces_a_final_state(
    worker_app: Celery, client: redis.Redis, final: str
) -> None:
    # given: a task whose final state is stored, after a progress report of its own
    task_id = uuid.uuid4().hex
    worker_app.backend.store_result(task_id, {"seq": 1}, PROGRESS_STATE)
    assert _stored(client, task_id)["status"] == PROGRESS_STATE  # an interim state replaces STARTED
    worker_app.backend.store_result(task_id, "done", final)

    # when: a report held by the rate limit arrives late
    worker_app.backend.store_result(task_id, {"seq": 2}, PROGRESS_STATE)

    # then: the final state stays
    assert _stored(client, task_id)["status"] == final
