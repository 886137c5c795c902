"""Builds of a pool: the queue a worker consumes for its build of each pool it serves, and the pools
whose live workers serve different versions of the same tools (a rolling deploy under way).

A worker consumes its pool's queue and, besides, the queue of its build of that pool
(`workers.tools.versions.build_queue`: the pool and a digest of the versions it serves there). An
orchestrator publishes each call to the queue of a build whose version of the tool matches the
definition the model was given, so old and new workers serve side by side during a rolling deploy
and no call reaches a worker whose tool differs from the one the model saw.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workers.runtime.catalog import WorkerEntry
from workers.tools.registry import ToolRegistry
from workers.tools.versions import build_queue, tool_version

__all__ = ["RollingPool", "build_queues", "pool_queues", "rolling_pools"]


def build_queues(registry: ToolRegistry, queues: Iterable[str], build_id: str | None) -> dict[str, str]:
    """For each of `queues` that is a pool of `registry`'s tools, the queue of this build of it."""
    found: dict[str, str] = {}
    for pool in sorted(set(queues)):
        versions = [(d.name, tool_version(d, build_id)) for d in registry if d.pool == pool]
        if versions:
            found[pool] = build_queue(pool, versions)
    return found


def pool_queues(pool: str, workers: Iterable[WorkerEntry]) -> list[str]:
    """The queues a pool's calls wait in: its own, then its live workers' builds' (a build no live
    worker serves any more is not waited on)."""
    builds = {queue for entry in workers if pool in entry.pools and (queue := entry.queue(pool))}
    return [pool, *sorted(builds)]


@dataclass(frozen=True)
class RollingPool:
    """A pool whose live workers serve different versions of its tools: per tool whose versions differ,
    each version and the workers serving it (newest version first)."""

    pool: str
    versions: dict[str, dict[str, tuple[str, ...]]]


def rolling_pools(workers: Iterable[WorkerEntry]) -> list[RollingPool]:
    """The pools whose live workers serve some tool at different versions."""
    ordered = sorted(workers, key=lambda e: (-e.started_at, e.hostname))
    by_pool: dict[str, dict[str, dict[str, list[str]]]] = {}
    for worker in ordered:
        for pool in worker.pools:
            tools = by_pool.setdefault(pool, {})
            for name, version in worker.versions(pool).items():
                tools.setdefault(name, {}).setdefault(version, []).append(worker.hostname)
    rolling = []
    for pool, tools in sorted(by_pool.items()):
        differing = {
            name: {version: tuple(hosts) for version, hosts in versions.items()}
            for name, versions in sorted(tools.items())
            if len(versions) > 1
        }
        if differing:
            rolling.append(RollingPool(pool, differing))
    return rolling
