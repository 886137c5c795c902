"""Redis commands per call: `INFO commandstats` read before and after a run of calls, its counts
differenced and divided by the calls. The server counts every client's commands (heartbeats, the
collector's subscription, both sides of a measure), so a run is timed alone, one side at a time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis

__all__ = ["commands_per_call", "total"]

IGNORED = frozenset({"info"})  # the reads of the counts themselves


def _counts(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


async def commands_per_call(
    client: redis.Redis, call: Callable[[], Awaitable[object]], calls: int
) -> dict[str, float]:
    """Each command the server ran during `calls` awaits of `call`, per call, most frequent first."""
    before = _counts(client)
    for _ in range(calls):
        await call()
    after = _counts(client)
    per_call = {
        name: (count - before.get(name, 0)) / calls
        for name, count in after.items()
        if name not in IGNORED and count > before.get(name, 0)
    }
    return {name: round(value, 2) for name, value in sorted(per_call.items(), key=lambda kv: -kv[1])}


def total(per_call: dict[str, float]) -> float:
    return round(sum(per_call.values()), 1)
