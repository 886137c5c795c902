"""An invocation's events, kept in a Redis stream of their own so that any replica can serve them.

Each event is one stream entry (`toolfleet:events:<invocation id>`, field `event`, JSON with a
`type`); the entry's id is the SSE `id`, so a client that reconnects with `Last-Event-ID` (to any
replica) reads on from the next entry: nothing lost, nothing repeated. The stream expires
`EVENTS_TTL_S` after its last event. The last event of an invocation is one of `TERMINAL_TYPES`.

The types: `invocation.started`, `text.delta`, `tool_call.queued`, `tool_call.started`,
`tool_call.finished` (tool, pool, worker, outcome, elapsed), `compensation.queued`,
`compensation.started`, `compensation.finished`, then `invocation.completed` (content,
finish_reason, usage), `invocation.failed` (error) or `invocation.cancelled`. An invocation that
pauses for approvals adds `approval.requested` (the waiting calls) and `invocation.paused`; when it
is resumed, on any replica, its stream goes on from `invocation.resumed` (the decisions), written by
the process that took it (of several trying at once, one does).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

__all__ = ["EVENTS_KEY", "EVENTS_TTL_S", "TERMINAL_TYPES", "EventLog", "sse"]

EVENTS_KEY = "toolfleet:events:{}"
EVENTS_TTL_S = 24 * 3600
MAX_EVENTS = 100_000  # an invocation that streams more keeps its latest (approximately)
TERMINAL_TYPES = frozenset({"invocation.completed", "invocation.failed", "invocation.cancelled"})
READ_BLOCK_MS = 5_000


class EventLog:
    """The event streams of every invocation, in one Redis."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    async def add(self, invocation_id: str, event: dict[str, Any]) -> str:
        """Append `event`; its stream id."""
        key = EVENTS_KEY.format(invocation_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(
                key, {"event": json.dumps(event, separators=(",", ":"))}, maxlen=MAX_EVENTS, approximate=True
            )
            pipe.expire(key, EVENTS_TTL_S)
            entry_id, _ = await pipe.execute()
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    async def exists(self, invocation_id: str) -> bool:
        return bool(await self.client.exists(EVENTS_KEY.format(invocation_id)))

    async def first(self, invocation_id: str) -> dict[str, Any] | None:
        """The invocation's first event (`invocation.started`: its agent and conversation), or None."""
        entries: Any = await self.client.xrange(EVENTS_KEY.format(invocation_id), count=1)
        return json.loads(entries[0][1][b"event"]) if entries else None

    async def last(self, invocation_id: str) -> dict[str, Any] | None:
        """The invocation's latest event, or None."""
        entries: Any = await self.client.xrevrange(EVENTS_KEY.format(invocation_id), count=1)
        return json.loads(entries[0][1][b"event"]) if entries else None

    async def follow(self, invocation_id: str, after: str = "0") -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The events after stream id `after` ("0": all), waiting for new ones, until a terminal one."""
        key = EVENTS_KEY.format(invocation_id)
        cursor = after
        while True:
            batches: Any = await self.client.xread({key: cursor}, count=500, block=READ_BLOCK_MS)
            for _, entries in batches:
                for raw_id, fields in entries:
                    cursor = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                    event = json.loads(fields[b"event"])
                    yield cursor, event
                    if event.get("type") in TERMINAL_TYPES:
                        return
            if not batches and not await self.client.exists(key):
                return  # expired, or never was


def sse(entry_id: str, event: dict[str, Any]) -> str:
    """One server-sent event: its id (for `Last-Event-ID`), its type and its JSON."""
    return f"id: {entry_id}\nevent: {event.get('type', 'message')}\ndata: {_json(event)}\n\n"


def _json(event: dict[str, Any]) -> str:
    return json.dumps(event, separators=(",", ":"))
