"""An `Idempotency-Key` whose first request died before its invocation started (its replica killed
between taking the key and starting): a retry starts the invocation afresh once the first request's
starting lease has lapsed, not before, and never once the invocation has started."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from orchestrator.server.events import EventLog
from orchestrator.server.idempotency import IdempotencyKey
from tests.integration.serve.replicas import AGENT, Replica
from tests.integration.serve.test_invocations import AUTH, _read_all

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


@pytest.fixture(scope="module")
def replica_changes() -> dict[str, str | None]:
    return {"TOOLFLEET_SERVE_TURN_WAIT_S": "1"}  # a retry waits 1 s + the start grace for the first


def _held_by_a_dead_request(redis_url: str, body: bytes, key: str, *, lease: bool) -> str:
    """The key as a first request left it when its replica died after taking it, before starting its
    invocation: held, naming an invocation with no events; its starting lease still there or lapsed."""
    # scoped by the request's tenant: the default tenant's, `API_KEY` being a plain key
    scope = hashlib.sha256(f"default\0agents/{AGENT}/invocations\0{key}".encode()).hexdigest()
    name, never = f"toolfleet:idempotency:{scope}", str(uuid.uuid4())
    client = redis.Redis.from_url(redis_url)
    client.set(name, json.dumps({"invocation_id": never, "body": hashlib.sha256(body).hexdigest()}), ex=600)
    if lease:
        client.set(f"{name}:starting", never, px=60_000)
    return never


def test_a_retry_never_names_an_invocation_that_has_not_started(
    redis_url: str, replicas: tuple[Replica, Replica]
) -> None:
    body = json.dumps({"input": "add 2 3"}).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    url = f"{replicas[1].base_url}/agents/{AGENT}/invocations"
    # its first request is (as far as anyone knows) still starting it: the retry is told to come back
    key = uuid.uuid4().hex
    _held_by_a_dead_request(redis_url, body, key, lease=True)
    refused = httpx.post(url, content=body, headers={**headers, "Idempotency-Key": key}, timeout=30)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "idempotency_key_in_use"
    # its first request died (its lease lapsed): the retry starts the invocation, which answers
    key = uuid.uuid4().hex
    never = _held_by_a_dead_request(redis_url, body, key, lease=False)
    started = httpx.post(url, content=body, headers={**headers, "Idempotency-Key": key}, timeout=30)
    assert started.status_code == 202 and started.json()["id"] != never
    events = _read_all(replicas[1], started.json()["id"])
    assert events[-1][1]["type"] == "invocation.succeeded"
