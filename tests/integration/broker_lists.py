"""The Redis lists a pool's calls wait in on a Redis broker: each of its queues (its own, and its live
workers' builds', `workers.runtime.builds.pool_queues`), one list per priority."""

from __future__ import annotations

import redis

from workers.priorities import redis_lists
from workers.runtime.builds import pool_queues
from workers.runtime.catalog import Catalog

__all__ = ["pool_lists"]


def pool_lists(client: redis.Redis, pool: str) -> list[str]:
    """Every list of `pool`'s queues, on the Redis of `client` (broker and catalog alike)."""
    return [name for queue in pool_queues(pool, Catalog(client).workers()) for name in redis_lists(queue)]
