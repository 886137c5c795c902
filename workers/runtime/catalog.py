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
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from workers._redis_errors import mapped_redis_errors
from workers.errors import MixedPoolError
from workers.protocol import POOL_KEY, POOLS_KEY, WORKER_KEY, WORKERS_KEY
from workers.tools import Compensation, ToolDefinition, ToolOptions
from workers.tools.specification import ReturnBehavior, SearchBehavior, ToolSpecification
from workers.tools.versions import build_queue, tool_version, version_digest

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
class CatalogTool:
    """A tool as a worker advertises it: enough to call it without its code."""

    specification: ToolSpecification
    options: ToolOptions
    compensable: bool
    version: str | None = None  # None: advertised by a worker that names no versions

    @classmethod
    def of(cls, definition: ToolDefinition, build_id: str | None = None) -> CatalogTool:
        """`definition` as a worker of build `build_id` advertises it, with its version."""
        return cls(
            definition.specification,
            definition.options,
            definition.compensation is not None,
            tool_version(definition, build_id),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "specification": self.specification.to_dict(),
            "pool": self.options.pool,
            "timeout": self.options.timeout,
            "retries": self.options.retries,
            "idempotent": self.options.idempotent,
            "heartbeat_timeout_s": self.options.heartbeat_timeout_s,
            "requires_approval": self.options.requires_approval,
            "concurrency": self.options.concurrency,
            "concurrency_key": self.options.concurrency_key,
            "rate_limit": self.options.rate_limit,
            "rate_limit_key": self.options.rate_limit_key,
            "return_behavior": self.options.return_behavior.value,
            "search_behavior": self.options.search_behavior.value,
            "compensable": self.compensable,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CatalogTool:
        spec = ToolSpecification.from_json(data["specification"])
        options = ToolOptions(
            name=spec.name,
            description=spec.description,
            return_behavior=ReturnBehavior(data.get("return_behavior", "TO_LLM")),
            search_behavior=SearchBehavior(data.get("search_behavior", "SEARCHABLE")),
            metadata=dict(spec.metadata),
            pool=str(data.get("pool", "default")),
            timeout=data.get("timeout"),
            retries=int(data.get("retries", 0)),
            idempotent=bool(data.get("idempotent", False)),
            heartbeat_timeout_s=data.get("heartbeat_timeout_s"),
            requires_approval=bool(data.get("requires_approval", False)),
            concurrency=data.get("concurrency"),
            concurrency_key=data.get("concurrency_key"),
            rate_limit=data.get("rate_limit"),
            rate_limit_key=data.get("rate_limit_key"),
        )
        version = data.get("version")
        return cls(spec, options, bool(data.get("compensable", False)), str(version) if version else None)

    def definition(self) -> ToolDefinition:
        """A definition that can be dispatched to a pool but not run in this process; calls of it go to
        the workers of any build serving its digest (the build id is not part of what the model sees)."""
        return ToolDefinition(
            specification=self.specification,
            function=_remote_only(self.specification.name),
            parameters=(),
            options=self.options,
            returns_none=False,
            is_async=False,
            compensation=(
                Compensation(self.specification.name, _remote_only(self.specification.name), (), False)
                if self.compensable
                else None
            ),
            version=version_digest(self.version) if self.version else None,
        )


def _remote_only(name: str) -> Any:
    def run(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"Tool '{name}' comes from the worker catalog: it runs only on its pool")

    run.__name__ = name
    return run


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
