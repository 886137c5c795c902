"""An invocation's event stream, followed on a real Redis, stays open through quiet stretches: it blocks
within the client's socket timeout, survives a read that outlives it, and sends keep-alive comments."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
import redis.asyncio as aioredis

from orchestrator.server.events import KEEPALIVE, EventLog, stream_position

pytestmark = pytest.mark.integration


async def _followed(redis_url: str, socket_timeout_s: float, quiet_s: float) -> tuple[list[str], float]:
    """What following an invocation yields when its first event is followed by `quiet_s` of silence
    and then its last one, on a client of `socket_timeout_s`; and how long the quiet part lasted."""
    client = aioredis.Redis.from_url(redis_url, socket_timeout=socket_timeout_s)
    events = EventLog(client)
    invocation_id = str(uuid.uuid4())
    try:
        await events.add(invocation_id, {"type": "invocation.started"})

        async def finish() -> float:
            await asyncio.sleep(quiet_s)
            await events.add(invocation_id, {"type": "invocation.succeeded", "content": "done"})
            return time.monotonic()

        finishing = asyncio.create_task(finish())
        started = time.monotonic()
        chunks = [chunk async for chunk in events.follow(invocation_id, keepalive_s=0.3)]
        await finishing
        return chunks, time.monotonic() - started
    finally:
        await client.aclose()


def _types(chunks: list[str]) -> list[str]:
    return [
        "keep-alive" if chunk == KEEPALIVE else json.loads(chunk.split("data: ", 1)[1])["type"]
        for chunk in chunks
    ]


@pytest.mark.parametrize(
    "socket_timeout_s",
    [
        pytest.param(1.0, id="reads-block-within-the-socket-timeout"),
        pytest.param(0.05, id="reads-outlive-the-socket-timeout"),
    ],
)
def test_a_quiet_stream_stays_open_with_keep_alives_until_its_last_event(
    redis_url: str, socket_timeout_s: float
) -> None:
    # given: an invocation that says nothing for 2 s between its first and its last event
    # when: a client follows it with a keep-alive every 0.3 s
    chunks, took_s = asyncio.run(_followed(redis_url, socket_timeout_s, quiet_s=2.0))
    # then: both events arrive, the silence between carries keep-alives, and nothing else
    types = _types(chunks)
    assert types[0] == "invocation.started" and types[-1] == "invocation.succeeded", types
    assert set(types[1:-1]) == {"keep-alive"}
    assert 3 <= len(types[1:-1]) <= 2.0 / 0.3 + 1, types
    assert took_s >= 2.0


@pytest.mark.parametrize(("socket_timeout_s", "block_ms"), [(None, 15_000), (5.0, 2_500), (0.05, 100)])
def test_a_read_blocks_within_the_keep_alive_and_half_the_socket_timeout(
    socket_timeout_s: float | None, block_ms: int
) -> None:
    client = aioredis.Redis(socket_timeout=socket_timeout_s)
    assert EventLog(client)._block_ms(15.0) == block_ms


@pytest.mark.parametrize(
    ("given", "position"),
    [
        ("0", "0"),
        ("1764500000012-0", "1764500000012-0"),
        ("0001-02", "1-2"),
        (f"{2**64 - 1}-{2**64 - 1}", f"{2**64 - 1}-{2**64 - 1}"),
        (f"{2**64}-0", None),
        (f"0-{2**64}", None),
        ("1-", None),
        ("-1", None),
        ("1-2-3", None),
        ("x; drop", None),
        ("１-2", None),  # a digit, but not an ASCII one
    ],
)
def test_a_position_to_follow_from_is_a_stream_id_in_redis_range_in_canonical_form(
    given: str, position: str | None
) -> None:
    assert stream_position(given) == position
