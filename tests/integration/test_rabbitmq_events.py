"""A threads worker on RabbitMQ takes burst after burst of calls while it publishes their task events.

Its pool threads publish the events (a full buffer is sent by the thread that filled it) on the
connection its event loop reads; waiting there for the broker's confirms, a thread lost one to the
loop and the worker stopped consuming until RabbitMQ closed it for missed heartbeats.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests._environment import LOCAL_RABBITMQ_URL, rabbitmq_listens
from tests._waiting import wait_for, wait_until
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecutionRequest
from workers.app import make_publisher
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

RABBIT_URL = LOCAL_RABBITMQ_URL
BURSTS = 40
CALLS = 100


@pytest.fixture
def rabbit_settings(settings: Settings) -> Settings:
    if not rabbitmq_listens():
        pytest.skip("no RabbitMQ listens on 127.0.0.1:5672: the AMQP broker variant cannot run")
    return dataclasses.replace(settings, broker_url=RABBIT_URL)


@pytest.fixture
def succeeded(rabbit_settings: Settings) -> Iterator[set[str]]:
    """The ids of the tasks whose `task-succeeded` event reached the broker's events exchange."""
    app = make_publisher(rabbit_settings)
    seen: set[str] = set()
    stop = threading.Event()

    def consume() -> None:
        def on_event(event: dict[str, Any]) -> None:
            seen.add(event["uuid"])

        with app.connection_for_read() as connection:
            receiver = app.events.Receiver(connection, handlers={"task-succeeded": on_event})

            def stop_when_asked() -> None:
                stop.wait()
                receiver.should_stop = True  # seen within a second, at its next poll

            threading.Thread(target=stop_when_asked, daemon=True).start()
            receiver.capture(limit=None, timeout=None, wakeup=False)

    thread = threading.Thread(target=consume, name="task-events", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(timeout=5)


def test_a_threads_worker_on_rabbitmq_takes_burst_after_burst_while_sending_their_events(
    rabbit_settings: Settings, succeeded: set[str], redis_url: str, worker_logs: Path
) -> None:
    # given: a worker of 100 threads for pool `burst`, its broker RabbitMQ, its task events on
    with make_publisher(rabbit_settings).connection_for_write() as connection:
        connection.default_channel.queue_delete("burst")  # of an earlier run, perhaps of another type
    env = {
        "TOOLFLEET_BROKER_URL": RABBIT_URL,
        "TOOLFLEET_RESULT_BACKEND": redis_url,
        "TOOLFLEET_TASK_EVENTS": "true",
    }
    worker = tool_worker(
        redis_url,
        ["burst"],
        ["tests.integration.burst_tools"],
        worker_logs / "burst.log",
        "burst@integration",
        kind="threads",
        concurrency=CALLS,
        env=env,
    )
    executor = CeleryExecutor(settings=rabbit_settings)

    def burst(n: int) -> list[Any]:
        requests = [
            ToolExecutionRequest(f"b{n}-{i}", "echo_burst", json.dumps({"text": f"{n}.{i}"}))
            for i in range(CALLS)
        ]

        async def all_of_them() -> list[Any]:
            return list(await asyncio.gather(*(executor.execute(r) for r in requests)))

        return asyncio.run(all_of_them())

    try:
        worker.wait_ready(timeout_s=30)

        # events are pub/sub: the receiver is bound once a probe call's event reaches it
        def probe_seen() -> bool:
            probe = asyncio.run(
                executor.execute(ToolExecutionRequest("probe", "echo_burst", '{"text": "p"}'))
            )
            return wait_until(lambda: probe.task_id in succeeded, 1.0)

        wait_for(probe_seen, 15.0, "the event receiver")

        # when: 40 bursts of 100 calls each are made, one after the other
        outcomes = [burst(n) for n in range(BURSTS)]
    finally:
        executor.close()
        worker.stop()

    # then: every call of every burst succeeds, and its task's success reached the events exchange
    for n, results in enumerate(outcomes):
        assert [o.kind for o in results] == [OutcomeKind.SUCCESS] * CALLS, f"burst {n}"
        assert [o.text for o in results] == [f"{n}.{i}" for i in range(CALLS)], f"burst {n}"
    task_ids = {o.task_id for results in outcomes for o in results}
    assert len(task_ids) == BURSTS * CALLS
    assert wait_until(lambda: task_ids <= succeeded, 15.0), len(task_ids - succeeded)
