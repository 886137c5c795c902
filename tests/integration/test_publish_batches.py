"""The hot path's round trips, on a real Redis: the calls dispatched in one loop turn are sent in one
pipeline with their `task-sent` events, subscribed to in one command, and a call's cancellation mark
is read with its STARTED state."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu.exceptions import OperationalError

from orchestrator.executors._collector import ResultCollector
from orchestrator.executors.celery._publish import CHUNK, Message, Sender
from workers.app import make_app, make_publisher
from workers.protocol import CALL_CANCELLED_KEY, META_PREFIX
from workers.runtime._backend import ResultBackend, cancelled_at_start
from workers.settings import Settings

QUEUE = "batched-publish-test"


@pytest.fixture
def counted_sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every packed command sent on any Redis connection of this process, counted."""
    sends: list[int] = []
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sends.append(1)
        original(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    return sends


@pytest.fixture
def publisher_settings(settings: Settings) -> Iterator[Settings]:
    if not settings.broker_url.startswith("redis://"):
        pytest.skip("batched publishing is the Redis transport's")
    yield settings


def test_the_calls_of_one_loop_turn_are_sent_in_one_round_trip_with_their_events(
    publisher_settings: Settings, client: redis.Redis, counted_sends: list[int]
) -> None:
    client.delete(QUEUE)
    app = make_publisher(publisher_settings)
    sender = Sender(app)
    events = client.pubsub()
    events.psubscribe("*celeryev/task.sent")
    events.get_message(timeout=1)
    sender.send(Message("tool.warm", {}, {"queue": QUEUE}))  # connections opened, queue declared

    async def twenty() -> None:
        sent = [sender.send_soon(Message("tool.noop", {"n": n}, {"queue": QUEUE})) for n in range(20)]
        before = len(counted_sends)
        await asyncio.gather(*sent)
        assert len(counted_sends) - before == 20 // CHUNK, "twenty calls and their events: a pipeline a chunk"

    asyncio.run(twenty())
    assert client.llen(QUEUE) == 21
    heard = 0
    deadline = time.monotonic() + 5
    while heard < 21 and time.monotonic() < deadline:
        message = events.get_message(timeout=0.5)
        heard += message is not None and message["type"] == "pmessage"
    assert heard == 21, "every call's task-sent event went out with it"
    events.close()
    client.delete(QUEUE)
    app.close()


def test_a_batch_the_broker_refuses_fails_each_call_with_the_brokers_error(
    publisher_settings: Settings,
) -> None:
    import dataclasses

    from tests._ports import free_port

    down = dataclasses.replace(publisher_settings, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    app = make_publisher(down)
    sender = Sender(app)
    options = {"queue": QUEUE, "retry": True, "retry_policy": {"max_retries": 0}}

    async def turn(count: int) -> list[BaseException | None]:
        sent = [sender.send_soon(Message("tool.noop", {}, dict(options))) for _ in range(count)]
        return list(await asyncio.gather(*sent, return_exceptions=True))

    for count in (1, 2):  # alone in its turn, and with another
        errors = asyncio.run(turn(count))
        assert all(isinstance(error, OperationalError) for error in errors), errors
    app.close()


def test_deferred_watches_share_one_subscribe_sent_when_asked(
    settings: Settings, client: redis.Redis
) -> None:
    collector = ResultCollector(settings.redis_url)
    try:
        collector.watch("deferred-a", "pool", deferred=True)
        collector.watch("deferred-b", "pool", deferred=True)
        collector.watch("deferred-gone", "pool", deferred=True)
        collector.forget("deferred-gone")
        channels = [META_PREFIX + name for name in ("deferred-a", "deferred-b", "deferred-gone")]
        time.sleep(0.1)
        assert [n for _, n in client.pubsub_numsub(*channels)] == [0, 0, 0]
        collector.subscribe_deferred()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            counts = [n for _, n in client.pubsub_numsub(*channels)]
            if counts[:2] == [1, 1]:
                break
            time.sleep(0.02)
        assert counts == [1, 1, 0], "the two still watched are subscribed to; the forgotten one is not"
    finally:
        collector.close()


@pytest.mark.parametrize("marked", [True, False])
def test_the_started_state_answers_whether_the_call_was_given_up(
    settings: Settings, client: redis.Redis, marked: bool
) -> None:
    app = make_app(settings)
    backend = app.backend
    assert isinstance(backend, ResultBackend)
    task_id = f"started-{marked}-{time.time_ns()}"
    if marked:
        client.set(CALL_CANCELLED_KEY.format(task_id), b"1", ex=60)
    backend.store_result(task_id, {"hostname": "w1"}, "STARTED")
    assert cancelled_at_start(task_id) is marked
    assert cancelled_at_start("another-task") is None, "only the call this thread started"
    stored = json.loads(client.get(META_PREFIX + task_id) or b"{}")
    assert stored["status"] == "STARTED"


def test_a_batch_whose_pipeline_fails_is_sent_again_call_by_call(
    publisher_settings: Settings, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dropped connection during the pipeline leaves delivery uncertain: each call is sent again
    with Celery's retry policy rather than failed."""
    client.delete(QUEUE)
    app = make_publisher(publisher_settings)
    sender = Sender(app)
    sender.send(Message("tool.warm", {}, {"queue": QUEUE}))
    failures = [redis.ConnectionError("dropped mid-pipeline")]
    execute = redis.client.Pipeline.execute

    def dropping(self: Any, raise_on_error: bool = True) -> Any:
        if failures:
            raise failures.pop()
        return execute(self, raise_on_error)

    monkeypatch.setattr(redis.client.Pipeline, "execute", dropping)

    async def one() -> None:
        await sender.send_soon(Message("tool.noop", {}, {"queue": QUEUE, "retry": True}))

    asyncio.run(one())
    assert not failures, "the pipeline was tried"
    assert client.llen(QUEUE) == 2
    client.delete(QUEUE)
    app.close()
