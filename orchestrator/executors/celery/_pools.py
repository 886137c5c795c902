"""Which pools have a live worker and what kind of pool each is, read from the workers' catalog with
short caches, so a batch of calls reads Redis once rather than once per call."""

from __future__ import annotations

import logging
import time

import redis

from workers.runtime.catalog import Catalog, WorkerEntry

__all__ = ["CATALOG_CACHE_S", "CATALOG_RECHECK_S", "OUTAGE_HOLD_S", "POOL_LEARN_S", "Pools"]

log = logging.getLogger(__name__)

POOL_ALIVE_CACHE_S = 1.0
CATALOG_CACHE_S = 2.0
CATALOG_RECHECK_S = 0.2
OUTAGE_HOLD_S = 1.0  # after a failed read, how long calls skip the catalog instead of failing on it again
POOL_LEARN_S = 30.0  # how often a live pool's kind and announced limit are read again from the catalog


class Pools:
    """The live catalog as one executor sees it: its workers, each pool's liveness and pool kind."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._alive_at: dict[str, float] = {}
        self._kinds: dict[str, str] = {}
        self._limits: dict[str, int] = {}
        self._learnt_at: dict[str, float] = {}
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

    def last_read(self) -> list[WorkerEntry]:
        """The catalog's workers as last read, however old (none before the first read)."""
        return self._workers

    def kind(self, pool: str) -> str | None:
        """The pool kind (`prefork`, `threads`, ..., or `mixed`) learnt when the pool was last seen alive."""
        return self._kinds.get(pool)

    def limit(self, pool: str) -> int | None:
        """The fewest calls of `pool` at once its live workers announced (`--pool-concurrency`), as
        `has_workers` last learnt it (at most `POOL_LEARN_S` ago); None if none did."""
        return self._limits.get(pool)

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
            if now - self._learnt_at.get(pool, -POOL_LEARN_S) >= POOL_LEARN_S:
                self._learn(pool, now)
        else:
            self._alive_at.pop(pool, None)
        return alive

    def _learn(self, pool: str, now: float) -> None:
        """The pool's kind and announced limit, from its live workers' catalog entries."""
        try:
            entries = [entry for entry in self.workers(CATALOG_RECHECK_S) if pool in entry.pools]
        except redis.RedisError as exc:  # what was learnt stands; read again at the next call
            log.warning("catalog unreadable (%s); pool %s as last learnt", exc, pool)
            return
        if not entries:
            return
        kinds = {entry.pool_kind for entry in entries}
        self._kinds[pool] = kinds.pop() if len(kinds) == 1 else "mixed"
        limits = [entry.pool_concurrency for entry in entries if entry.pool_concurrency is not None]
        if limits:
            self._limits[pool] = min(limits)
        else:
            self._limits.pop(pool, None)
        self._learnt_at[pool] = now
