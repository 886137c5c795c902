"""Which pools have a live worker and what kind of pool each is, read from the workers' catalog with
short caches, so a batch of calls reads Redis once rather than once per call."""

from __future__ import annotations

import logging
import time

import redis

from workers.runtime.catalog import Catalog, WorkerEntry

__all__ = ["CATALOG_CACHE_S", "CATALOG_RECHECK_S", "OUTAGE_HOLD_S", "Pools"]

log = logging.getLogger(__name__)

POOL_ALIVE_CACHE_S = 1.0
CATALOG_CACHE_S = 2.0
CATALOG_RECHECK_S = 0.2
OUTAGE_HOLD_S = 1.0  # after a failed read, how long calls skip the catalog instead of failing on it again


class Pools:
    """The live catalog as one executor sees it: its workers, each pool's liveness and pool kind."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._alive_at: dict[str, float] = {}
        self._kinds: dict[str, str] = {}
        self._read_at = -1e9
        self._down_until = 0.0
        self._workers: list[WorkerEntry] = []

    def workers(self, max_age_s: float = CATALOG_CACHE_S) -> list[WorkerEntry]:
        """The catalog's workers, read again when the copy is older than `max_age_s`."""
        now = time.monotonic()
        if now - self._read_at >= max_age_s:
            self._workers = self.catalog.workers()
            self._read_at = now
        return self._workers

    def kind(self, pool: str) -> str | None:
        """The pool kind (`prefork`, `threads`, ..., or `mixed`) learnt when the pool was last seen alive."""
        return self._kinds.get(pool)

    def limit(self, pool: str) -> int | None:
        """The fewest calls of `pool` at once its live workers announced (`--pool-concurrency`), if any
        did; None, too, while the catalog cannot be read."""
        try:
            workers = self.workers()
        except redis.RedisError:
            return None
        limits = [e.pool_concurrency for e in workers if pool in e.pools and e.pool_concurrency is not None]
        return min(limits) if limits else None

    def has_workers(self, pool: str) -> bool:
        """Whether a live worker serves `pool`; True as well while the catalog cannot be read."""
        checked = self._alive_at.get(pool)
        now = time.monotonic()
        if checked is not None and now - checked < POOL_ALIVE_CACHE_S:
            return True
        if now < self._down_until:
            return True  # Redis just failed: do not block every call of a batch on it again
        try:
            alive = bool(self.catalog.live_workers(pool))
        except redis.RedisError as exc:
            log.warning("catalog unreadable (%s); dispatching to pool %s anyway", exc, pool)
            self._down_until = now + OUTAGE_HOLD_S
            return True
        if alive:
            self._alive_at[pool] = now
            if pool not in self._kinds:
                self._learn_kind(pool)
        else:
            self._alive_at.pop(pool, None)
        return alive

    def _learn_kind(self, pool: str) -> None:
        kinds = {entry.pool_kind for entry in self.workers(CATALOG_RECHECK_S) if pool in entry.pools}
        if kinds:
            self._kinds[pool] = kinds.pop() if len(kinds) == 1 else "mixed"
