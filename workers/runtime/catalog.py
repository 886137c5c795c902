"""The live catalog: what each worker serves (tool specifications, pools), kept alive by heartbeats.

Each worker writes `toolfleet:worker:<hostname>` (JSON, expiring) and its hostname with an expiry
time into `toolfleet:pool:<pool>` (a sorted set). A worker that stops refreshing them — it died, or
lost Redis — drops out of the catalog when its heartbeat expires. An orchestrator reads the catalog
to find tools without importing their code, and to fail fast when no live worker serves a pool.

A call lands on any worker of its pool, so every worker of a pool must serve the same tools: a
worker joining a pool whose live workers serve others is refused (`pool_conflicts`), and
`toolfleet tools` flags pools whose workers differ (`mixed_pools`). They may serve different
*versions* of those tools (`workers.tools.versions`), as in a rolling deploy: each worker advertises
its tools' versions and also consumes the queue of its build of each pool (`WorkerEntry.queue`), whose
live workers are kept under `toolfleet:pool:<that queue>` as a pool's are; an orchestrator publishes a
call to the queue of a build that serves the version the model was given.

Each tool is advertised as a `CatalogTool` (`workers.runtime._catalog_tool`), with what a reader shows
of its behaviour; a worker's own health check (`toolfleet worker-health`) reads its entry here too
(`Catalog.beating`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from workers._redis_errors import mapped_redis_errors
from workers.errors import MixedPoolError
from workers.protocol import POOL_KEY, POOLS_KEY, WORKER_KEY, WORKERS_KEY
from workers.runtime._catalog_tool import CatalogTool
from workers.tools.versions import build_queue

__all__ = [
    "Catalog",
    "CatalogHeartbeat",
    "CatalogTool",
    "MixedPool",
    "MixedPoolError",
    "WorkerEntry",
    "mixed_pools",
    "newest_first",
    "pool_conflicts",
    "pool_tools",
    "served_text",
]

log = logging.getLogger(__name__)

RETRY_INTERVAL_S = 0.25  # between heartbeats while Redis is unreachable
FORGET_AFTER_S = 3600.0  # a worker silent this long leaves the index of workers (its entry long expired)


@dataclass(frozen=True)
class WorkerEntry:
    """One live worker: where it runs, which pools it serves, how, and its tools."""

    hostname: str
    pools: list[str]
    pool_kind: str
    concurrency: int
    pid: int
    started_at: float
    tools: list[CatalogTool] = field(default_factory=list)
    pool_concurrency: int | None = None  # at most this many calls of its pools at once, fleet-wide
    build_id: str | None = None  # `--build-id`, `TOOLFLEET_BUILD_ID`: part of its tools' versions
    _queues: dict[str, str | None] = field(default_factory=dict, init=False, repr=False, compare=False)

    def versions(self, pool: str) -> dict[str, str]:
        """Each tool it serves on `pool` and its version there (tools with no version left out)."""
        return {t.specification.name: t.version for t in self.tools if t.options.pool == pool and t.version}

    def queue(self, pool: str) -> str | None:
        """The queue of its build of `pool`, which it consumes besides `pool`'s; None when it advertises
        no versions there (a worker of an earlier toolfleet consumes the pool's queue only)."""
        if pool not in self._queues:  # asked for every call routed: worked out once per entry read
            tools = [t for t in self.tools if t.options.pool == pool]
            versioned = bool(tools) and all(t.version is not None for t in tools)
            self._queues[pool] = build_queue(pool, self.versions(pool).items()) if versioned else None
        return self._queues[pool]

    def to_json(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "pools": self.pools,
            "pool_kind": self.pool_kind,
            "concurrency": self.concurrency,
            "pid": self.pid,
            "started_at": self.started_at,
            "tools": [t.to_json() for t in self.tools],
            "pool_concurrency": self.pool_concurrency,
            "build_id": self.build_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerEntry:
        return cls(
            hostname=str(data["hostname"]),
            pools=[str(p) for p in data.get("pools", [])],
            pool_kind=str(data.get("pool_kind", "unknown")),
            concurrency=int(data.get("concurrency", 0)),
            pid=int(data.get("pid", 0)),
            started_at=float(data.get("started_at", 0.0)),
            tools=[CatalogTool.from_json(t) for t in data.get("tools", [])],
            pool_concurrency=data.get("pool_concurrency"),
            build_id=data.get("build_id") or None,
        )


class CatalogHeartbeat:
    """Publishes a worker's entry and refreshes it every third of its time to live, on a thread."""

    def __init__(self, client: redis.Redis, entry: WorkerEntry, ttl_s: float) -> None:
        self._client = client
        self._entry = entry
        self._ttl_s = ttl_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolfleet-heartbeat", daemon=True)

    def start(self) -> None:
        self.beat()
        self._thread.start()

    def beat(self) -> None:
        expires_at = time.time() + self._ttl_s
        pipe = self._client.pipeline(transaction=False)
        pipe.set(
            WORKER_KEY.format(self._entry.hostname),
            json.dumps(self._entry.to_json()),
            px=int(self._ttl_s * 1000),
        )
        # The index orchestrators read the catalog through (no scan of the keyspace); members whose
        # entry expired long ago are dropped by whichever worker beats.
        pipe.zadd(WORKERS_KEY, {self._entry.hostname: expires_at})
        pipe.zremrangebyscore(WORKERS_KEY, "-inf", expires_at - FORGET_AFTER_S)
        for pool in self._entry.pools:
            pipe.zadd(POOL_KEY.format(pool), {self._entry.hostname: expires_at})
            pipe.sadd(POOLS_KEY, pool)
            queue = self._entry.queue(pool)
            if queue is not None:  # its build's live workers, as a pool's; gone once no worker beats
                pipe.zadd(POOL_KEY.format(queue), {self._entry.hostname: expires_at})
                pipe.pexpire(POOL_KEY.format(queue), int(self._ttl_s * 1000))
        pipe.execute()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(min(RETRY_INTERVAL_S, self._ttl_s / 3) if failing else self._ttl_s / 3):
            try:
                self.beat()
                failing = False
            except redis.RedisError as exc:
                # Redis is unreachable: try again soon, to be back in the catalog as soon as it answers.
                if not failing:
                    log.warning("catalog heartbeat of %s failed: %s", self._entry.hostname, exc)
                failing = True

    def announce(self) -> None:
        """Publish the entry now (the worker reconnected: Redis may have lost it); never raises."""
        try:
            self.beat()
        except redis.RedisError as exc:
            log.warning("catalog announcement of %s failed: %s", self._entry.hostname, exc)

    def stop(self) -> None:
        """Stop beating and remove the entry, so orchestrators stop sending work here at once."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.delete(WORKER_KEY.format(self._entry.hostname))
            pipe.zrem(WORKERS_KEY, self._entry.hostname)
            for pool in self._entry.pools:
                pipe.zrem(POOL_KEY.format(pool), self._entry.hostname)
                queue = self._entry.queue(pool)
                if queue is not None:
                    pipe.zrem(POOL_KEY.format(queue), self._entry.hostname)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not remove %s from the catalog: %s", self._entry.hostname, exc)


class Catalog:
    """Reads the live catalog; an unusable Redis raises `RedisUnavailableError` (TOOLFLEET_REDIS_URL)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def workers(self) -> list[WorkerEntry]:
        """Every live worker's entry, read through the index of workers (`WORKERS_KEY`): two commands
        whatever else Redis holds. Where no worker keeps the index (workers of an earlier toolfleet
        only), the keyspace is scanned for entries as those wrote them."""
        with mapped_redis_errors(self._client):
            names = self._client.zrangebyscore(WORKERS_KEY, time.time(), "+inf")
            if names:
                keys = [WORKER_KEY.format(n.decode() if isinstance(n, bytes) else n) for n in names]
            elif self._client.exists(WORKERS_KEY):
                keys = []
            else:
                keys = list(self._client.scan_iter(match=WORKER_KEY.format("*"), count=500))
            raws = self._client.mget(keys) if keys else []
        entries = []
        for key, raw in zip(keys, raws, strict=True):
            if not raw:
                continue
            try:
                entries.append(WorkerEntry.from_json(json.loads(raw)))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                # One entry that is not a worker's (another tool, a hand edit) must not hide the others.
                log.warning("catalog entry %r is not a worker's and is skipped: %r", key, exc)
        return sorted(entries, key=lambda e: e.hostname)

    def live_workers(self, pool: str) -> list[str]:
        """Hostnames whose heartbeat for `pool` has not expired."""
        with mapped_redis_errors(self._client):
            names = self._client.zrangebyscore(POOL_KEY.format(pool), time.time(), "+inf")
        return [n.decode() if isinstance(n, bytes) else str(n) for n in names]

    def worker_alive(self, hostname: str) -> bool:
        with mapped_redis_errors(self._client):
            return bool(self._client.exists(WORKER_KEY.format(hostname)))

    def beating(self, accept: Callable[[str], bool]) -> list[tuple[WorkerEntry, float]]:
        """The live workers whose hostname `accept` takes, each with the time (epoch seconds) its
        heartbeat expires: two commands that read only those workers' entries, so a health check
        asked often on every host never reads the whole fleet's."""
        with mapped_redis_errors(self._client):
            scored = self._client.zrangebyscore(WORKERS_KEY, time.time(), "+inf", withscores=True)
            chosen = [(name, float(expires)) for name, expires in _named(scored) if accept(name)]
            raws = self._client.mget([WORKER_KEY.format(name) for name, _ in chosen]) if chosen else []
        found = []
        for (name, expires_at), raw in zip(chosen, raws, strict=True):
            try:
                entry = WorkerEntry.from_json(json.loads(raw)) if raw else None
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                log.warning("catalog entry of %r is not a worker's and is skipped: %r", name, exc)
                continue
            if entry is not None:  # no entry: it expired since the index was read
                found.append((entry, expires_at))
        return found

    def tools(self, pools: Iterable[str] | None = None) -> list[CatalogTool]:
        """Each tool served by a live worker, once: the newest worker's, so that while two builds serve
        different versions of a tool every orchestrator gives the model the same one."""
        wanted = set(pools) if pools is not None else None
        workers = self.workers()
        newest: dict[str, CatalogTool] = {}
        for entry in newest_first(workers):
            for item in entry.tools:
                if wanted is None or item.options.pool in wanted:
                    newest.setdefault(item.specification.name, item)
        found: dict[str, CatalogTool] = {}  # in the order the workers (by hostname) list them
        for entry in workers:
            for item in entry.tools:
                if wanted is None or item.options.pool in wanted:
                    found.setdefault(item.specification.name, newest[item.specification.name])
        return list(found.values())


def _named(scored: Iterable[Any]) -> Iterable[tuple[str, Any]]:
    """(name, score) pairs of a sorted set read `withscores`, names as text."""
    for name, score in scored:
        yield (name.decode() if isinstance(name, bytes) else str(name)), score


def newest_first(workers: Iterable[WorkerEntry]) -> list[WorkerEntry]:
    """`workers`, the latest started first (then by hostname, so that equals are ordered alike)."""
    return sorted(workers, key=lambda e: (-e.started_at, e.hostname))


@dataclass(frozen=True)
class MixedPool:
    """A pool whose workers serve different tools: each worker's hostname and the tools it serves there."""

    pool: str
    served: dict[str, tuple[str, ...]]


def pool_tools(tools: Iterable[CatalogTool], pool: str) -> tuple[str, ...]:
    """The tools of `pool` among `tools`, sorted; a compensable one marked (its undo is a task too)."""
    return tuple(
        sorted(
            t.specification.name + (" (compensable)" if t.compensable else "")
            for t in tools
            if t.options.pool == pool
        )
    )


def served_text(tools: Sequence[str]) -> str:
    return ", ".join(tools) if tools else "no tool"


def mixed_pools(workers: Iterable[WorkerEntry]) -> list[MixedPool]:
    """The pools whose live workers do not all serve the same tools."""
    by_pool: dict[str, dict[str, tuple[str, ...]]] = {}
    for worker in workers:
        for pool in worker.pools:
            by_pool.setdefault(pool, {})[worker.hostname] = pool_tools(worker.tools, pool)
    return [
        MixedPool(pool, served) for pool, served in sorted(by_pool.items()) if len(set(served.values())) > 1
    ]


def pool_conflicts(
    workers: Iterable[WorkerEntry], hostname: str, pools: Iterable[str], tools: Sequence[CatalogTool]
) -> list[MixedPool]:
    """The pools of `pools` whose live workers (other than `hostname`) serve other tools than `tools`
    would there; each with the joining worker's tools first."""
    others = [w for w in workers if w.hostname != hostname]
    conflicts: list[MixedPool] = []
    for pool in pools:
        own = pool_tools(tools, pool)
        differing = {w.hostname: pool_tools(w.tools, pool) for w in others if pool in w.pools}
        differing = {name: served for name, served in differing.items() if served != own}
        if differing:
            conflicts.append(MixedPool(pool, {hostname: own, **differing}))
    return conflicts
