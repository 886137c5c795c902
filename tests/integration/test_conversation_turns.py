"""Turns of one conversation, one at a time in arrival order across processes (orchestrator/server/
turns.py), on a real Redis: a later turn waits for the earlier one, past its wait it is refused with 409
`conversation_busy` and leaves the queue, and a turn whose replica died holds the conversation only
until its lease expires."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from orchestrator.errors import ApiError
from orchestrator.server.turns import LEASE_KEY, TURNS_KEY, take_turn

pytestmark = pytest.mark.integration


def _on_redis(redis_url: str, scenario: Callable[[aioredis.Redis, str], Awaitable[None]]) -> None:
    async def run() -> None:
        client = aioredis.Redis.from_url(redis_url)
        try:
            await scenario(client, f"agent/{uuid.uuid4().hex}")
        finally:
            await client.aclose()

    asyncio.run(run())


def test_turns_go_one_at_a_time_in_the_order_they_arrived(redis_url: str) -> None:
    async def scenario(client: aioredis.Redis, conversation: str) -> None:
        queue = TURNS_KEY.format(conversation)
        order: list[int] = []
        running = released = 0

        async def turn(n: int) -> None:
            nonlocal running, released
            held = await take_turn(client, conversation, 10)
            running += 1
            assert running == 1, "two turns of one conversation at once"
            order.append(n)
            await asyncio.sleep(0.02)
            running -= 1
            await held.release()
            released += 1

        tasks = []
        for n in range(10):  # each arrives once the one before is in the queue
            tasks.append(asyncio.create_task(turn(n)))
            while await client.llen(queue) + released < n + 1:
                await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        assert order == list(range(10))
        assert await client.llen(queue) == 0

    _on_redis(redis_url, scenario)


def test_a_turn_that_waits_too_long_is_refused_and_leaves_the_queue(redis_url: str) -> None:
    async def scenario(client: aioredis.Redis, conversation: str) -> None:
        first = await take_turn(client, conversation, 1)
        with pytest.raises(ApiError) as refused:
            await take_turn(client, conversation, 0.2)
        assert (refused.value.status, refused.value.code) == (409, "conversation_busy")
        assert await client.llen(TURNS_KEY.format(conversation)) == 1  # the refused one left
        await first.release()
        third = await take_turn(client, conversation, 0.2)  # at once: nothing ahead of it
        await third.release()

    _on_redis(redis_url, scenario)


def test_a_turn_whose_replica_died_holds_the_conversation_until_its_lease_expires(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(client: aioredis.Redis, conversation: str) -> None:
        # given: a turn at the head whose replica stops renewing its lease (it died)
        dead = await take_turn(client, conversation, 1)
        assert dead.renewing is not None
        dead.renewing.cancel()
        await client.pexpire(LEASE_KEY.format(dead.ticket), 300)
        # when: another turn arrives; then: it goes on once the lease has expired, not before
        started = asyncio.get_running_loop().time()
        alive = await take_turn(client, conversation, 5)
        assert 0.2 < asyncio.get_running_loop().time() - started < 2
        await alive.release()

    _on_redis(redis_url, scenario)
