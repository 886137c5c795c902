"""An `Idempotency-Key` whose first request died before its invocation started (its replica killed
between taking the key and starting): a retry starts the invocation afresh once the first request's
starting lease has lapsed, not before, and never once the invocation has started."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from orchestrator.server.events import EventLog
from orchestrator.server.idempotency import IdempotencyKey

pytestmark = pytest.mark.integration


def test_a_key_whose_first_request_died_before_starting_is_taken_over_by_a_retry(redis_url: str) -> None:
    async def story() -> tuple[str, str, str, str]:
        client = aioredis.Redis.from_url(redis_url)
        name = f"toolfleet:idempotency:test-{uuid.uuid4().hex}"
        try:
            first = await IdempotencyKey(client, name, b"body").claim("first")
            # the first request's replica is alive, starting it: a retry names the first invocation
            while_starting = await IdempotencyKey(client, name, b"body").claim("retry-1")
            # ... its replica dies before it started: its lease lapses, and a retry takes the key over
            await client.delete(f"{name}:starting")
            taken = await IdempotencyKey(client, name, b"body").claim("retry-2")
            # once that one has started, every later retry names it
            await EventLog(client).add("retry-2", {"type": "invocation.started"})
            await client.delete(f"{name}:starting")
            later = await IdempotencyKey(client, name, b"body").claim("retry-3")
            return first, while_starting, taken, later
        finally:
            await client.delete(name, f"{name}:starting", "toolfleet:events:retry-2")
            await client.aclose()

    assert asyncio.run(story()) == ("first", "first", "retry-2", "retry-2")
