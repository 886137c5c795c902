"""An event written again after its first write landed and its answer was lost (Redis restarting as it
answered) is in the stream once."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from orchestrator.server.events import EventLog

pytestmark = pytest.mark.integration


def test_an_event_whose_answer_was_lost_is_written_once(redis_url: str) -> None:
    invocation_id = str(uuid.uuid4())

    async def scenario() -> tuple[list[str], list[str | None]]:
        client = aioredis.Redis.from_url(redis_url)
        log = EventLog(client)
        written = log._add
        lost: list[bool] = []

        async def answer_lost_once(**kwargs: Any) -> Any:
            entry = await written(**kwargs)
            if not lost:
                lost.append(True)
                raise RedisConnectionError("Connection reset by peer")  # as Redis went down answering
            return entry

        log._add = answer_lost_once  # type: ignore[method-assign]
        try:
            ids = [
                await log.add(invocation_id, {"type": "invocation.started", "invocation_id": invocation_id}),
                await log.add(invocation_id, {"type": "invocation.succeeded", "content": "done"}),
            ]
            entries: Any = await client.xrange(f"toolfleet:events:{invocation_id}")
            return [e[1][b"event"].decode() for e in entries], ids
        finally:
            await client.aclose()

    events, ids = asyncio.run(scenario())

    assert [e.split('"type":"')[1].split('"')[0] for e in events] == [
        "invocation.started",
        "invocation.succeeded",
    ]
    assert all(ids)
