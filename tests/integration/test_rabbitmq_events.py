"""A threads worker on RabbitMQ takes burst after burst of calls while it publishes their task events.

Its pool threads publish the events (a full buffer is sent by the thread that filled it) on the
connection its event loop reads; waiting there for the broker's confirms, a thread lost one to the
loop and the worker stopped consuming until RabbitMQ closed it for missed heartbeats.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests._environment import LOCAL_RABBITMQ_URL, rabbitmq_listens
from tests._waiting import wait_until
from tests.integration.task_events import task_events
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


def test_a_threads_worker_on_rabbitmq_takes_burst_after_burst_while_sending_their_events(
    rabbit_settings: Settings, redis_url: str, worker_logs: Path
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

    probe = ToolExecutionRequest("probe", "echo_burst", '{"text": "p"}')
    try:
        worker.wait_ready(timeout_s=30)
        with task_events(rabbit_settings, executor, probe) as events:
            # when: 40 bursts of 100 calls each are made, one after the other
            outcomes = [burst(n) for n in range(BURSTS)]
            task_ids = {o.task_id for results in outcomes for o in results}

            def succeeded() -> set[str]:
                return {e["uuid"] for e in list(events) if e.get("type") == "task-succeeded"}

            events_told = wait_until(lambda: task_ids <= succeeded(), 15.0)
    finally:
        executor.close()
        worker.stop()

    # then: every call of every burst succeeds, and its task's success reached the events exchange
    for n, results in enumerate(outcomes):
        assert [o.kind for o in results] == [OutcomeKind.SUCCESS] * CALLS, f"burst {n}"
        assert [o.text for o in results] == [f"{n}.{i}" for i in range(CALLS)], f"burst {n}"
    assert len(task_ids) == BURSTS * CALLS
    assert events_told, f"{len(task_ids - succeeded())} calls' task-succeeded events never arrived"
