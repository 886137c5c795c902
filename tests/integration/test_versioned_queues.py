"""A pool's queues are its own and its live builds': the autoscaling depth counts calls waiting in a build's
queue, and an adopted call is found waiting there."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import redis

from orchestrator.executors.celery._attach import in_broker
from orchestrator.executors.celery._pools import Pools
from orchestrator.executors.celery._versions import Routes
from orchestrator.telemetry.queues import sample_queues
from workers import tool
from workers.app import make_publisher
from workers.protocol import SENT_AT_HEADER
from workers.runtime.builds import pool_queues
from workers.runtime.catalog import Catalog, CatalogHeartbeat, CatalogTool, WorkerEntry
from workers.settings import Settings
from workers.tools.registry import ToolRegistry

pytestmark = pytest.mark.integration


class Stash:
    @tool("Stashes a value", pool="placeholder")
    def stash(self, value: str) -> str:
        return value


@pytest.fixture
def build(redis_url: str) -> Iterator[tuple[str, WorkerEntry]]:
    """A worker entry of a fresh pool, announced in the catalog (no process consumes its queues)."""
    pool = f"builds-{uuid.uuid4().hex[:8]}"
    (definition,) = ToolRegistry([Stash()])
    definition = dataclasses.replace(definition, options=dataclasses.replace(definition.options, pool=pool))
    tools = [CatalogTool.of(definition, "rel-2")]
    entry = WorkerEntry(f"{pool}@h", [pool], "threads", 4, 1, time.time(), tools, build_id="rel-2")
    client = redis.Redis.from_url(redis_url)
    heartbeat = CatalogHeartbeat(client, entry, 30.0)
    heartbeat.beat()
    try:
        yield pool, entry
    finally:
        heartbeat.stop()
        client.close()


def test_the_depth_of_a_pool_counts_its_builds_queues_and_their_oldest_call(
    redis_url: str, build: tuple[str, WorkerEntry]
) -> None:
    # given: a pool with one call in its own queue, and two in the queue of its live build
    pool, entry = build
    queue = entry.queue(pool)
    assert queue is not None and queue != pool
    settings = Settings.from_env({"TOOLFLEET_REDIS_URL": redis_url})
    publisher = make_publisher(settings)
    now = time.time()
    publisher.send_task("tool.stash", queue=pool, headers={SENT_AT_HEADER: now - 5})
    for ago in (40.0, 2.0):
        publisher.send_task("tool.stash", queue=queue, headers={SENT_AT_HEADER: now - ago})
    client = redis.Redis.from_url(redis_url)
    try:
        assert pool_queues(pool, Catalog(client).workers()) == [pool, queue]
    finally:
        client.close()

    # when: the queues are sampled
    sample = sample_queues(settings, now=now)

    # then: all three wait in the pool, the oldest (in the build's queue) for 40 s
    assert sample.depth[pool] == 3
    assert sample.oldest_s[pool] == pytest.approx(40.0, abs=0.01)


def test_a_call_waiting_in_a_builds_queue_is_found_in_the_broker(
    redis_url: str, build: tuple[str, WorkerEntry]
) -> None:
    # given: a call published to the build's queue of the pool
    pool, entry = build
    settings = Settings.from_env({"TOOLFLEET_REDIS_URL": redis_url})
    task_id = f"task-{uuid.uuid4().hex}"
    make_publisher(settings).send_task("tool.stash", task_id=task_id, queue=entry.queue(pool))
    client = redis.Redis.from_url(redis_url)
    dispatcher = SimpleNamespace(settings=settings, routes=Routes(Pools(Catalog(client))))
    try:
        # then: it is found waiting, and another id is not
        assert in_broker(dispatcher, task_id, pool, held=False) is True  # type: ignore[arg-type]
        assert in_broker(dispatcher, "task-other", pool, held=False) is False  # type: ignore[arg-type]
    finally:
        client.close()
