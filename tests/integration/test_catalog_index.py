"""The catalog is read through its index of workers, never by scanning the keyspace: a Redis holding a
day of results (a million keys) costs an orchestrator's catalog read two commands, not a scan of them
all. Workers of an earlier toolfleet, which keep no index, are still found by a scan."""

from __future__ import annotations

import json
import time

import pytest
import redis

from workers.protocol import WORKER_KEY, WORKERS_KEY
from workers.runtime.catalog import Catalog, CatalogHeartbeat, WorkerEntry

pytestmark = pytest.mark.integration


def _entry(hostname: str) -> WorkerEntry:
    return WorkerEntry(hostname, ["indexed"], "threads", 4, 1, time.time())


def _scans(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def test_the_catalog_reads_its_workers_through_the_index_without_a_scan(client: redis.Redis) -> None:
    # given: a worker beating into the catalog, an entry nobody indexed (as of an earlier toolfleet),
    # and many other keys
    client.delete(WORKERS_KEY)
    client.mset({f"celery-task-meta-filler-{n}": "{}" for n in range(2000)})
    client.set(WORKER_KEY.format("unindexed@old"), json.dumps(_entry("unindexed@old").to_json()), px=10_000)
    heartbeat = CatalogHeartbeat(client, _entry("indexed@new"), ttl_s=5)
    heartbeat.start()
    try:
        # when: the catalog is read
        scans = _scans(client)
        names = [w.hostname for w in Catalog(client).workers()]
        # then: the indexed worker, read with no scan at all
        assert "indexed@new" in names and "unindexed@old" not in names
        assert _scans(client) == scans
    finally:
        heartbeat.stop()
    # and: a worker that stops leaves the index at once
    assert client.zscore(WORKERS_KEY, "indexed@new") is None


def test_without_an_index_the_entries_are_found_by_a_scan(client: redis.Redis) -> None:
    # given: only workers that keep no index (an earlier toolfleet's)
    client.delete(WORKERS_KEY)
    client.set(WORKER_KEY.format("unindexed@old"), json.dumps(_entry("unindexed@old").to_json()), px=10_000)
    # when / then: the catalog still finds them
    assert "unindexed@old" in [w.hostname for w in Catalog(client).workers()]
    client.delete(WORKER_KEY.format("unindexed@old"))


def test_a_worker_silent_for_an_hour_leaves_the_index(client: redis.Redis) -> None:
    # given: an index member whose entry expired over an hour ago
    client.zadd(WORKERS_KEY, {"gone@long-ago": time.time() - 3700})
    # when: any worker beats
    heartbeat = CatalogHeartbeat(client, _entry("beating@now"), ttl_s=5)
    heartbeat.beat()
    heartbeat.stop()
    # then: the long-gone member is dropped
    assert client.zscore(WORKERS_KEY, "gone@long-ago") is None
