"""The pools' autoscaling signals on real brokers: the calls waiting in a pool's queue, every priority's
list counted, and the age of the oldest (Redis); the ready messages of its queue (RabbitMQ); read in
the background, never at a scrape."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import redis
from kombu import Exchange, Queue
from kombu.connection import Connection
from prometheus_client import CollectorRegistry, generate_latest

from orchestrator.telemetry.queues import QueueSample, QueueSignals, sample_queues
from workers.app import make_publisher
from workers.protocol import POOLS_KEY, SENT_AT_HEADER
from workers.settings import Settings

pytestmark = pytest.mark.integration

RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def test_a_pools_queue_depth_counts_every_priority_and_its_oldest_call_ages(redis_url: str) -> None:
    # given: a pool nobody serves yet, with three calls sent at known times, at three priorities
    settings = Settings.from_env({"TOOLFLEET_REDIS_URL": redis_url})
    pool = f"signals-{uuid.uuid4().hex[:8]}"
    redis.Redis.from_url(redis_url).sadd(POOLS_KEY, pool)
    publisher = make_publisher(settings)
    now = time.time()
    for ago, priority in ((30.0, 0), (12.0, 5), (3.0, 9)):
        publisher.send_task(
            "tool.nothing", queue=pool, priority=priority, headers={SENT_AT_HEADER: now - ago}
        )

    # when: the queues are sampled
    sample = sample_queues(settings, now=now)

    # then: all three wait, the oldest for 30 s, whatever list its priority put it on
    assert sample.depth[pool] == 3
    assert sample.oldest_s[pool] == pytest.approx(30.0, abs=0.01)


def test_the_signals_of_a_rabbitmq_broker_count_the_ready_messages(redis_url: str) -> None:
    # given: a RabbitMQ broker whose pool's queue holds two calls
    pool = f"signals-{uuid.uuid4().hex[:8]}"
    exchange = Exchange(pool, type="direct")
    queue = Queue(pool, exchange, routing_key=pool)
    with Connection(RABBITMQ_URL, connect_timeout=5) as connection:
        try:
            connection.ensure_connection(max_retries=1)
        except Exception as exc:
            pytest.fail(f"these tests need RabbitMQ at {RABBITMQ_URL}: {exc}")
        producer = connection.Producer()
        for n in range(2):
            producer.publish({"n": n}, exchange=exchange, routing_key=pool, declare=[queue])
        catalog = redis.Redis.from_url(redis_url)
        settings = Settings.from_env({"TOOLFLEET_REDIS_URL": redis_url, "TOOLFLEET_BROKER_URL": RABBITMQ_URL})
        catalog.sadd(POOLS_KEY, pool)
        try:
            # when: sampled
            sample = sample_queues(settings)
        finally:
            catalog.srem(POOLS_KEY, pool)
            queue(connection.channel()).delete()
    # then: both counted; no age is told (RabbitMQ does not let it be read)
    assert sample.depth[pool] == 2
    assert pool not in sample.oldest_s


class _NotAtScrape:
    """A queue reader that fails the test if a scrape reads the queues."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> QueueSample:
        self.reads += 1
        return QueueSample({"heavy": 7}, {"heavy": 41.5})


def test_a_scrape_reads_the_last_sample_and_never_the_queues() -> None:
    read = _NotAtScrape()
    signals = QueueSignals(read)
    registry = CollectorRegistry()
    registry.register(signals)
    signals.sample()
    scraped: list[Any] = [generate_latest(registry).decode() for _ in range(3)]
    assert read.reads == 1
    assert 'toolfleet_pool_queue_depth{pool="heavy"} 7.0' in scraped[-1]
    assert 'toolfleet_pool_oldest_wait_seconds{pool="heavy"} 41.5' in scraped[-1]
