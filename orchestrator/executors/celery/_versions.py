"""Which queue of its pool a call is published to: that of a build whose version of the tool matches the
definition the model was given, so that during a rolling deploy no call reaches a worker serving
another version of its tool.

Each worker consumes its pool's queue and the queue of its build of the pool (`WorkerEntry.queue`,
`workers.runtime.builds`). A call of tool T wanting version V (`workers.tools.versions`) goes to the
build queue of a live worker whose T matches V; among several such builds one is drawn at random,
weighted by the builds' live concurrency. When no live worker of the pool serves T at V:

- a call is answered `no_worker` at once, naming the versions the pool's live workers serve;
- a compensation goes to the pool's own queue (the undo matters more than the build it runs on);
- so does anything when no live worker of the pool advertises T at all, or one advertises no versions
  (a worker of an earlier toolfleet): there it lands as it always has.

While the catalog cannot be read, the last copy read decides, and with no copy the pool's queue does.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from orchestrator.executors._outcomes import no_worker_outcome, version_mismatch_outcome
from orchestrator.executors.celery._pools import CATALOG_CACHE_S, CATALOG_RECHECK_S, Pools
from workers import ToolDefinition, ToolOutcome
from workers.runtime.builds import pool_queues
from workers.runtime.catalog import WorkerEntry
from workers.tools.versions import tool_version, version_matches

__all__ = ["QUEUE_ALIVE_CACHE_S", "Routes", "ToolBuilds"]

log = logging.getLogger(__name__)

QUEUE_ALIVE_CACHE_S = 1.0

Choose = Callable[[Sequence[str], Sequence[float]], str]


def _weighted(queues: Sequence[str], weights: Sequence[float]) -> str:
    return random.choices(queues, weights)[0]


@dataclass
class _Build:
    version: str
    concurrency: int = 0
    workers: int = 0


@dataclass(frozen=True)
class ToolBuilds:
    """How a pool's live workers serve one tool: the build queues serving it, each with its version,
    live concurrency and workers, and whether some worker of the pool names no versions."""

    queues: dict[str, _Build]
    unversioned: bool

    @classmethod
    def of(cls, workers: Sequence[WorkerEntry], pool: str, name: str) -> ToolBuilds:
        queues: dict[str, _Build] = {}
        unversioned = False
        for entry in workers:
            if pool not in entry.pools:
                continue
            queue = entry.queue(pool)
            version = entry.versions(pool).get(name)
            if queue is None:
                unversioned = True
            elif version is not None:
                build = queues.setdefault(queue, _Build(version))
                build.concurrency += max(entry.concurrency, 1)
                build.workers += 1
        return cls(queues, unversioned)

    def matching(self, wanted: str) -> dict[str, int]:
        """The build queues whose version matches `wanted`, with their live concurrency."""
        return {q: b.concurrency for q, b in self.queues.items() if version_matches(wanted, b.version)}

    def versions(self) -> dict[str, int]:
        """Each version served, with its live workers, in version order."""
        served: dict[str, int] = {}
        for build in sorted(self.queues.values(), key=lambda b: b.version):
            served[build.version] = served.get(build.version, 0) + build.workers
        return served


class Routes:
    """The queue each call of an executor goes to, from its `Pools`' copy of the catalog."""

    def __init__(self, pools: Pools, build_id: str | None = None, *, choose: Choose = _weighted) -> None:
        self.pools = pools
        self.build_id = build_id
        self._choose = choose
        self._alive_at: dict[str, float] = {}
        self._read: list[WorkerEntry] | None = None  # the copy of the catalog `_builds` was made from
        self._builds: dict[tuple[str, str], ToolBuilds] = {}

    def wanted(self, definition: ToolDefinition) -> str:
        """The version a call of `definition` needs: the catalog's, or that of the local definition (of
        this orchestrator's build, when it has a build id)."""
        return definition.version or tool_version(definition, self.build_id)

    def queue(self, definition: ToolDefinition, *, undoing: bool = False) -> str | ToolOutcome:
        """The queue to publish a call (or with `undoing`, a compensation) of `definition` to, or the
        `no_worker` outcome that answers it at once."""
        pool = definition.pool
        if not self.pools.has_workers(pool):
            return no_worker_outcome(definition)
        wanted = self.wanted(definition)
        builds = ToolBuilds({}, True)
        for max_age_s in (CATALOG_CACHE_S, CATALOG_RECHECK_S):
            try:
                workers = self.pools.workers(max_age_s)
            except redis.RedisError as exc:
                log.warning("catalog unreadable (%s); routing %s by its last copy", exc, definition.name)
                workers = self.pools.last_read()
            builds = self._tool_builds(workers, pool, definition.name)
            matching = builds.matching(wanted)
            while matching:
                queue = self._choose(list(matching), list(matching.values()))
                if self._alive(queue):
                    return queue
                del matching[queue]  # its build stopped since the copy was read: read it again
        if undoing or builds.unversioned or not builds.queues:
            return pool
        return version_mismatch_outcome(definition, wanted, builds.versions())

    def _tool_builds(self, workers: list[WorkerEntry], pool: str, name: str) -> ToolBuilds:
        """`ToolBuilds.of`, worked out once per copy of the catalog (a batch's calls share it)."""
        if workers is not self._read:
            self._read, self._builds = workers, {}
        builds = self._builds.get((pool, name))
        if builds is None:
            builds = self._builds[(pool, name)] = ToolBuilds.of(workers, pool, name)
        return builds

    def undo_queue(self, definition: ToolDefinition) -> str:
        """The queue a compensation of `definition` goes to (its pool's when no build is known live)."""
        routed = self.queue(definition, undoing=True)
        return routed if isinstance(routed, str) else definition.pool

    def pool_queues(self, pool: str) -> list[str]:
        """`pool`'s queues (`workers.runtime.builds.pool_queues`) as the catalog was last read; its own
        alone when the catalog cannot be read and never was."""
        try:
            workers = self.pools.workers()
        except redis.RedisError:
            workers = self.pools.last_read()
        return pool_queues(pool, workers)

    def _alive(self, queue: str) -> bool:
        """Whether a worker of that build still beats (its queue's live workers, cached briefly); True
        while the catalog cannot be read."""
        now = time.monotonic()
        checked = self._alive_at.get(queue)
        if checked is not None and now - checked < QUEUE_ALIVE_CACHE_S:
            return True
        try:
            alive = bool(self.pools.catalog.live_workers(queue))
        except redis.RedisError:
            return True
        if alive:
            self._alive_at[queue] = now
        else:
            self._alive_at.pop(queue, None)
        return alive
