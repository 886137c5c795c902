"""Autoscaling signals, per pool: the calls waiting in its queues (its own and those of its live
workers' builds, `workers.runtime.builds`; every priority's list counted) and how long the oldest of
them has waited.

They are sampled in the background every `SAMPLE_S` and exported from that sample, so a scrape never
scans a queue: `toolfleet_pool_queue_depth{pool}` and `toolfleet_pool_oldest_wait_seconds{pool}`,
for every pool a worker ever announced. On a Redis broker the lists are read (`LLEN`, and the oldest
end of each list, whose message says when it was sent); on any other broker (RabbitMQ) a passive
declare counts the ready messages, and the oldest one's age, which cannot be read there, is not
exported. A call a worker has taken but not started (prefetched) no longer waits in the queue.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kombu.connection import Connection
from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from workers.priorities import redis_lists
from workers.protocol import POOLS_KEY, SENT_AT_HEADER
from workers.redis_client import connect as connect_redis
from workers.redis_client import is_redis
from workers.runtime.builds import pool_queues
from workers.runtime.catalog import Catalog
from workers.settings import Settings

__all__ = ["SAMPLE_S", "QueueSample", "QueueSignals", "sample_queues", "watch_queues"]

log = logging.getLogger(__name__)

SAMPLE_S = 5.0  # how often the queues are read; an autoscaler's scrape reads the last sample


@dataclass(frozen=True)
class QueueSample:
    """Per pool, the calls waiting in its queue, and the age in seconds of the oldest (Redis only)."""

    depth: dict[str, int] = field(default_factory=dict)
    oldest_s: dict[str, float] = field(default_factory=dict)


def sample_queues(settings: Settings, now: float | None = None) -> QueueSample:
    """Read every announced pool's queue once (see the module's docstring)."""
    catalog = connect_redis(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    try:
        pools = sorted(p.decode() if isinstance(p, bytes) else str(p) for p in catalog.smembers(POOLS_KEY))
        workers = Catalog(catalog).workers() if pools else []
    finally:
        catalog.close()
    if not pools:
        return QueueSample()
    queues = {pool: pool_queues(pool, workers) for pool in pools}
    if is_redis(settings.broker_url):
        return _redis_sample(settings.broker_url, queues, time.time() if now is None else now)
    return QueueSample(depth=_amqp_depths(settings.broker_url, queues))


def _redis_sample(url: str, queues: dict[str, list[str]], now: float) -> QueueSample:
    client = connect_redis(url, socket_timeout=5, socket_connect_timeout=2)
    lists = {pool: [key for queue in names for key in redis_lists(queue)] for pool, names in queues.items()}
    try:
        pipe = client.pipeline(transaction=False)
        for keys in lists.values():
            for key in keys:
                pipe.llen(key)
                pipe.lindex(key, -1)  # kombu pushes on the left and takes from the right: the oldest
        answers = iter(pipe.execute())
    finally:
        client.close()
    depth, oldest = {}, {}
    for pool, keys in lists.items():
        waiting, ages = 0, []
        for _ in keys:
            length, tail = next(answers), next(answers)
            waiting += int(length)
            sent_at = _sent_at(tail)
            if sent_at is not None:
                ages.append(max(now - sent_at, 0.0))
        depth[pool] = waiting
        oldest[pool] = max(ages, default=0.0)
    return QueueSample(depth, oldest)


def _sent_at(message: bytes | None) -> float | None:
    """When a queued message was published (the dispatcher's header), if it says."""
    if not message:
        return None
    try:
        value = json.loads(message).get("headers", {}).get(SENT_AT_HEADER)
        return float(value) if value is not None else None
    except (ValueError, TypeError, AttributeError):
        return None


def _amqp_depths(url: str, queues: dict[str, list[str]]) -> dict[str, int]:
    depths = {}
    with Connection(url, connect_timeout=5) as connection:  # type: ignore[no-untyped-call]
        for pool, names in queues.items():
            depths[pool] = sum(_amqp_depth(connection, queue) for queue in names)
    return depths


def _amqp_depth(connection: Connection, queue: str) -> int:
    channel = connection.channel()  # type: ignore[no-untyped-call]
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except Exception as exc:  # a queue not declared yet: nothing waits in it
        log.debug("queue %s not read: %s", queue, exc)
        return 0
    finally:
        channel.close()


class QueueSignals(Collector):
    """The gauges of the last sample (made by `sample()`, called by `watch_queues`' thread)."""

    def __init__(self, read: Callable[[], QueueSample]) -> None:
        self.read = read
        self.last = QueueSample()

    def sample(self) -> None:
        try:
            self.last = self.read()
        except Exception as exc:  # Redis or the broker away: the last sample stands, the next tries again
            log.warning("could not read the pools' queues: %s", exc)

    def collect(self) -> Iterator[Any]:
        last = self.last
        depth = GaugeMetricFamily(
            "toolfleet_pool_queue_depth",
            "Tool calls and compensations waiting in a pool's queue, every priority counted",
            labels=("pool",),
        )
        for pool, waiting in sorted(last.depth.items()):
            depth.add_metric((pool,), waiting)
        oldest = GaugeMetricFamily(
            "toolfleet_pool_oldest_wait_seconds",
            "How long the oldest call waiting in a pool's queue has waited (0 when none waits)",
            labels=("pool",),
        )
        for pool, age in sorted(last.oldest_s.items()):
            oldest.add_metric((pool,), age)
        yield depth
        yield oldest

    def describe(self) -> Iterator[Any]:
        return iter(())


def watch_queues(settings: Settings, every_s: float = SAMPLE_S) -> Callable[[], None]:
    """Sample the queues every `every_s` in a thread of this process and export the signals in the
    default registry; returns what stops it."""
    signals = QueueSignals(lambda: sample_queues(settings))
    stopping = threading.Event()

    def run() -> None:
        while not stopping.is_set():
            signals.sample()
            stopping.wait(every_s)

    REGISTRY.register(signals)
    thread = threading.Thread(target=run, name="toolfleet-queue-signals", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=10)
        REGISTRY.unregister(signals)

    return stop
