"""The result collector publishing an idempotent call again when its worker is declared lost.

Worker liveness and task states are written to Redis as workers write them (the catalog keys, the
worker app's own result backend); the redispatch itself is recorded, not sent.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from celery import Celery, states

from orchestrator.executors._collector import ResultCollector
from tests._waiting import wait_until
from workers.protocol import POOL_KEY, WORKER_KEY

pytestmark = pytest.mark.integration

INTERVAL_S = 0.1


@pytest.fixture(autouse=True)
def no_stray_catalog_entries(client: redis.Redis) -> Iterator[None]:
    """The stand-in worker entries these tests write never outlive them: the catalog is shared."""
    before = set(client.scan_iter(match=WORKER_KEY.format("*")))
    yield
    stray = set(client.scan_iter(match=WORKER_KEY.format("*"))) - before
    if stray:
        client.delete(*stray)


@pytest.fixture
def collector(redis_url: str) -> Iterator[ResultCollector]:
    own = ResultCollector(redis_url, check_interval_s=INTERVAL_S, heartbeat_ttl_s=1.0)
    yield own
    own.close()


def test_a_worker_restarted_under_the_lost_ones_name_may_take_the_copy_sent_again(
    collector: ResultCollector, client: redis.Redis, worker_app: Celery
) -> None:
    # given: an idempotent call started by worker `w1` of a pool that has another live worker
    pool, w1 = f"pool-{uuid.uuid4().hex[:8]}", f"w1-{uuid.uuid4().hex[:8]}@h"
    task_id = str(uuid.uuid4())
    client.set(WORKER_KEY.format(w1), "{}")
    client.zadd(POOL_KEY.format(pool), {"w2@h": time.time() + 600})
    started: list[str] = []
    redispatches: list[float] = []
    lock = threading.Lock()

    def redispatch() -> None:
        with lock:
            redispatches.append(time.monotonic())

    future = collector.watch(task_id, pool, started.append, redispatch=redispatch)
    worker_app.backend.store_result(task_id, {"pid": 100, "hostname": w1}, states.STARTED)
    assert wait_until(lambda: started == [w1], 5), started

    # when: `w1`'s heartbeat lapses
    client.delete(WORKER_KEY.format(w1))

    # then: the call is published again, once; the STARTED `w1` left in the store (read back every
    # interval) does not make it `w1`'s again, else the next check would find `w1` dead once more
    assert wait_until(lambda: len(redispatches) == 1, 5), redispatches
    # (a non-event: waited out over ten liveness checks, there is nothing to await)
    time.sleep(10 * INTERVAL_S)
    assert (started, len(redispatches)) == ([w1], 1)

    # when: a worker restarted under the name `w1` takes the copy sent again
    client.set(WORKER_KEY.format(w1), "{}")
    worker_app.backend.store_result(task_id, {"pid": 200, "hostname": w1}, states.STARTED)

    # then: the call is known to run on `w1` again, and completes there
    assert wait_until(lambda: started == [w1, w1], 5), started
    worker_app.backend.mark_as_done(task_id, {"kind": "success", "text": "done"})
    meta = future.result(timeout=5)
    assert (meta["status"], meta["worker"], len(redispatches)) == ("SUCCESS", w1, 1)


def test_a_call_lost_once_more_is_sent_again_and_ends_lost_past_the_limit(
    collector: ResultCollector, client: redis.Redis, worker_app: Celery
) -> None:
    # given: an idempotent call whose every worker dies while running it
    pool = f"pool-{uuid.uuid4().hex[:8]}"
    task_id = str(uuid.uuid4())
    client.zadd(POOL_KEY.format(pool), {"spare@h": time.time() + 600})
    redispatched = threading.Semaphore(0)
    started: list[str] = []
    future = collector.watch(task_id, pool, started.append, redispatch=redispatched.release)
    workers = [f"w{n}-{uuid.uuid4().hex[:8]}@h" for n in range(4)]

    # when: each of four workers starts it and is declared lost
    for number, worker in enumerate(workers):
        client.set(WORKER_KEY.format(worker), "{}")
        worker_app.backend.store_result(task_id, {"pid": 100 + number, "hostname": worker}, states.STARTED)
        assert wait_until(lambda seen=workers[: number + 1]: started == seen, 5), started
        client.delete(WORKER_KEY.format(worker))
        if number < 3:
            assert redispatched.acquire(timeout=5), f"not sent again after losing {worker}"

    # then: sent again three times (`MAX_REDISPATCHES`), then lost with its last worker
    meta = future.result(timeout=5)
    assert (meta["status"], meta["worker"]) == ("TOOLFLEET_WORKER_LOST", workers[-1])
    assert not redispatched.acquire(timeout=0)
