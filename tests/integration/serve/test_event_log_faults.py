"""An invocation's event stream under faults: one end, whoever tries to write more (a superseded run,
a recovery, a second cancel); a run taken over writes nothing more; a follower reads on through a
Redis restart, from where it was."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
import redis.asyncio as aioredis

from orchestrator.executors.celery._dispatch import Dispatcher
from orchestrator.server.events import EventLog
from orchestrator.server.turns import LEASE_KEY, TURNS_KEY, take_turn
from tests.integration.private_redis import PrivateRedis

pytestmark = pytest.mark.integration


def test_a_stream_tells_one_end_and_a_superseded_run_writes_no_more(redis_url: str) -> None:
    async def story() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        log, invocation_id = EventLog(client), str(uuid.uuid4())
        try:
            await log.add(invocation_id, {"type": "invocation.started"})
            # the first run writes with its token without taking the stream (nobody had it)
            assert await log.add(invocation_id, {"type": "text.delta", "text": "a"}, runner="first")
            await log.take(invocation_id, "adopter")  # the first run is taken for dead and adopted
            assert await log.add(invocation_id, {"type": "text.delta", "text": "b"}, runner="first") is None
            assert await log.add(invocation_id, {"type": "invocation.succeeded"}, runner="first") is None
            assert await log.add(invocation_id, {"type": "text.delta", "text": "c"}, runner="adopter")
            assert await log.add(invocation_id, {"type": "invocation.succeeded"}, runner="adopter")
            # a recovery, or a second cancel, after the end: not written
            assert await log.add(invocation_id, {"type": "invocation.failed"}) is None
            assert await log.add(invocation_id, {"type": "invocation.cancelled"}) is None
            assert await log.add(invocation_id, {"type": "compensation.finished"}) is None  # nor after it
            return [
                str(event["type"]) + str(event.get("text", "")) async for _, event in _all(log, invocation_id)
            ]
        finally:
            await client.aclose()

    assert asyncio.run(story()) == [
        "invocation.started",
        "text.deltaa",
        "text.deltac",
        "invocation.succeeded",
    ]


async def _all(log: EventLog, invocation_id: str):  # type: ignore[no-untyped-def]
    async for entry in log.entries(invocation_id):
        if entry is not None:
            yield entry


def test_a_follower_reads_on_through_a_redis_restart(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    invocation_id = str(uuid.uuid4())
    try:

        async def story() -> list[str]:
            client = aioredis.Redis.from_url(server.url, socket_timeout=2)
            log = EventLog(client)
            await log.add(invocation_id, {"type": "invocation.started"})
            read: list[str] = []
            restarted = threading.Event()

            def restart_then_end() -> None:  # while the follower waits for the next event
                time.sleep(0.5)
                server.stop()
                time.sleep(1.0)
                server.start()
                restarted.set()
                plain = redis.Redis.from_url(server.url)
                event = json.dumps({"type": "invocation.succeeded"})
                plain.xadd(f"toolfleet:events:{invocation_id}", {"event": event})
                plain.close()

            thread = threading.Thread(target=restart_then_end)
            thread.start()
            try:
                async for entry in log.entries(invocation_id, keepalive_s=0.2):
                    if entry is not None:
                        read.append(str(entry[1]["type"]))
            finally:
                thread.join(timeout=30)
                await client.aclose()
            assert restarted.is_set()
            return read

        assert asyncio.run(story()) == ["invocation.started", "invocation.succeeded"]
    finally:
        server.stop()


def test_a_turn_ending_while_redis_restarts_still_leaves_its_conversation(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    try:

        async def story() -> tuple[int, int]:
            client = aioredis.Redis.from_url(server.url, socket_timeout=2)
            try:
                turn = await take_turn(client, "soak/conversation", wait_s=5)
                server.stop()  # the turn ends while Redis is away, and comes back a second later
                threading.Timer(1.0, server.start).start()
                await turn.release()
                queue = TURNS_KEY.format("soak/conversation")
                return int(await client.llen(queue)), int(await client.exists(LEASE_KEY.format(turn.ticket)))
            finally:
                await client.aclose()

        # the next turn need not wait out the lease: nothing of this one is left
        assert asyncio.run(story()) == (0, 0)
    finally:
        server.stop()


def test_a_call_given_up_while_redis_restarts_is_still_marked_abandoned() -> None:
    tries: list[str] = []

    def mark_abandoned(task_id: str, *, raise_errors: bool = False) -> bool:
        tries.append(task_id)
        if len(tries) < 3:  # Redis answers on the third try
            raise redis.ConnectionError("Connection refused")
        return True

    dispatcher = SimpleNamespace(mark_abandoned=mark_abandoned)
    claimed = asyncio.run(Dispatcher.claim_abandoned(dispatcher, "task-1"))  # type: ignore[arg-type]
    assert claimed and tries == ["task-1"] * 3


def test_an_end_written_while_redis_restarts_lands_once(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    try:

        async def story() -> list[str]:
            client = aioredis.Redis.from_url(server.url, socket_timeout=2)
            log, invocation_id = EventLog(client), str(uuid.uuid4())
            try:
                await log.add(invocation_id, {"type": "invocation.started"})
                server.stop()  # the invocation ends while Redis is away; it is back a second later
                threading.Timer(1.0, server.start).start()
                assert await log.add(invocation_id, {"type": "invocation.succeeded"}) is not None
                return [str(event["type"]) async for _, event in _all(log, invocation_id)]
            finally:
                await client.aclose()

        assert asyncio.run(story()) == ["invocation.started", "invocation.succeeded"]
    finally:
        server.stop()


def test_what_an_adopter_does_not_tell_again_is_read_through_a_redis_restart(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    try:

        async def story() -> set[tuple[str, str]]:
            client = aioredis.Redis.from_url(server.url, socket_timeout=2)
            log, invocation_id = EventLog(client), str(uuid.uuid4())
            try:
                await log.add(invocation_id, {"type": "tool_call.started", "call_id": "c1"})
                server.stop()  # an adopted run begins while Redis is away; it is back a second later
                threading.Timer(1.0, server.start).start()
                return await log.told(invocation_id)
            finally:
                await client.aclose()

        assert asyncio.run(story()) == {("tool_call.started", "c1")}
    finally:
        server.stop()
