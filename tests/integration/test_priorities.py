"""Priorities measured on both brokers with a real worker: a pool running one call at a time, with calls
of the default priority waiting in its queue, runs the calls of a higher priority that come after them
first."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from pathlib import Path

import pytest
import redis

from orchestrator import CeleryExecutor, ToolExecutionRequest
from tests._environment import LOCAL_RABBITMQ_URL, rabbitmq_listens
from tests.integration import slot_tools
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolDefinition, ToolOutcome
from workers.app import make_publisher
from workers.calls.invocation import Invocation
from workers.priorities import redis_lists
from workers.settings import Settings

pytestmark = pytest.mark.integration

RABBIT_URL = LOCAL_RABBITMQ_URL
LOW, HIGH = 8, 4


def _empty(settings: Settings, pool: str) -> None:
    """No message of an earlier run waits in `pool`'s queue (on RabbitMQ, the queue is made anew)."""
    with make_publisher(settings).connection_for_write() as connection:
        if settings.broker_url.startswith("amqp"):
            connection.default_channel.queue_delete(pool)
        else:
            client = redis.Redis.from_url(settings.broker_url)
            client.delete(*redis_lists(pool))
            client.close()


def _batch(
    executor: CeleryExecutor,
    definition: ToolDefinition,
    run: str,
    label: str,
    count: int,
    priority: int | None,
) -> asyncio.Future[list[ToolOutcome]]:
    requests = [
        (
            ToolExecutionRequest(
                f"{label}{i}", "labelled", json.dumps({"run": run, "label": f"{label}{i}", "seconds": 0.3})
            ),
            definition,
        )
        for i in range(count)
    ]
    invocation = Invocation(parameters={} if priority is None else {"priority": priority})
    return asyncio.ensure_future(executor.execute_batch(requests, invocation))


async def _low_then_high(
    executor: CeleryExecutor, definition: ToolDefinition, client: redis.Redis, run: str
) -> tuple[list[ToolOutcome], int]:
    """The outcomes of the low calls, then of the high ones; how many low calls had started when the
    high ones were sent."""
    low = _batch(executor, definition, run, "low", LOW, None)  # the default priority, 5
    deadline = time.monotonic() + 30
    while client.llen(f"test:priorities:{run}") < 1:  # the first low call runs, the rest wait
        assert time.monotonic() < deadline, "the low priority calls never started"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # ... all of them published
    started = client.llen(f"test:priorities:{run}")
    high = _batch(executor, definition, run, "high", HIGH, 6)
    return [*await low, *await high], started


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_high_priority_calls_overtake_the_low_ones_waiting_in_the_queue(
    broker: str, settings: Settings, redis_url: str, client: redis.Redis, tmp_path: Path
) -> None:
    if broker == "rabbitmq" and not rabbitmq_listens():
        pytest.skip("no RabbitMQ listens on 127.0.0.1:5672: the AMQP broker variant cannot run")
    # given: one worker running one call at a time for the pool, on the broker
    broker_url = RABBIT_URL if broker == "rabbitmq" else redis_url
    pool = slot_tools.PRIORITY_POOL
    # (RabbitMQ orders by priority in classic queues only: its quorum queues, before RabbitMQ 4.0,
    # deliver in order of arrival)
    on_broker = dataclasses.replace(settings, broker_url=broker_url, broker_queue_type="classic")
    _empty(on_broker, pool)
    env = {
        "TOOLFLEET_BROKER_URL": broker_url,
        "TOOLFLEET_RESULT_BACKEND": redis_url,
        "TOOLFLEET_BROKER_QUEUE_TYPE": "classic",
    }
    worker = tool_worker(
        redis_url,
        [pool],
        ["tests.integration.slot_tools"],
        tmp_path / "worker.log",
        f"prio-{broker}@test",
        concurrency=1,
        env=env,
    )
    executor = CeleryExecutor(settings=on_broker, tools=[slot_tools])
    definition = executor.definition("labelled")
    assert definition is not None
    run = uuid.uuid4().hex
    try:
        worker.wait_ready(timeout_s=60)

        # when: 8 calls of the default priority (5) wait in its queue, then 4 of priority 6 come (a
        # priority apart: kombu's default Redis steps would put both in one list)
        outcomes, started = asyncio.run(_low_then_high(executor, definition, client, run))
    finally:
        executor.close()
        worker.stop()

    # then: every call ran; the high priority ones ran before every low one still waiting when they
    # came (besides those started then, at most the one the worker had taken ran first)
    assert [o.kind for o in outcomes] == [OutcomeKind.SUCCESS] * (LOW + HIGH), [o.text for o in outcomes]
    order = [label.decode() for label in client.lrange(f"test:priorities:{run}", 0, -1)]
    print(f"\n{broker}: started in the order {order}")
    last_high = max(i for i, label in enumerate(order) if label.startswith("high"))
    assert started <= LOW - 4, "too few low priority calls still waited for the measure to mean anything"
    assert last_high < started + 1 + HIGH, (started, order)
