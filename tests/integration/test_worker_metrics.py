"""`toolfleet worker --metrics-port`: after known calls, its `/metrics` counts exactly them, on a
threads pool (one process) and on a prefork pool (calls in child processes, added up)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import uuid
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from tests._ports import free_port
from tests._waiting import wait_for
from tests.integration import telemetry_tools
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import tool_worker
from tests.metrics_scrape import scrape, total
from workers.protocol import OutcomeKind, ToolOutcome
from workers.settings import Settings
from workers.tools.registry import ToolRegistry

pytestmark = pytest.mark.integration

A, B = telemetry_tools.POOL_A, telemetry_tools.POOL_B


def _settled(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
    samples = scrape(url)
    return samples if total(samples, "toolfleet_worker_compensation_runs_total") == 2 else None


@pytest.mark.parametrize("kind", ["threads", "prefork"])
def test_a_workers_metrics_count_the_calls_it_ran(
    kind: str, settings: Settings, redis_url: str, worker_logs: Path
) -> None:
    # Given: a worker of both pools serving its metrics
    port = free_port()
    worker = tool_worker(
        redis_url,
        [A, B],
        ["tests.integration.telemetry_tools"],
        worker_logs / f"metrics-{kind}-{uuid.uuid4().hex[:6]}.log",
        f"metrics-{kind}-{uuid.uuid4().hex[:6]}@test",
        kind=kind,
        concurrency=2,
        extra_args=["--metrics-port", str(port)],
    )
    ns = uuid.uuid4().hex

    def call(call_id: str, name: str, **arguments: object) -> ToolExecutionRequest:
        return ToolExecutionRequest(id=call_id, name=name, arguments=json.dumps({"ns": ns, **arguments}))

    first = [call("r1", "reserve", item="a"), call("r2", "reserve", item="b"), call("c1", "charge", amount=3)]
    second = [call("c2", "charge", amount=4, decline=True)]
    model = ScriptedChatModel(
        [AiMessage(tool_execution_requests=first), AiMessage(tool_execution_requests=second), "done"]
    )
    with worker.running(timeout_s=60):
        executor = CeleryExecutor(settings=settings)
        try:
            # When: one invocation runs three calls, then a declined charge (which undoes both reserves)
            service = AiService(
                chat_model=model,
                tools=[telemetry_tools.shop],
                executor=executor,
                compensate_on_tool_errors=True,
            )
            assert service.chat("shop").content == "done"
        finally:
            executor.close()

        # Then: the worker's page counts each run by tool, pool and outcome, and nothing is in flight
        url = f"http://127.0.0.1:{port}/metrics"
        samples = wait_for(lambda: _settled(url), what="the compensations counted")
        runs = "toolfleet_worker_tool_runs_total"
        assert total(samples, runs, tool="reserve", pool=A, outcome="success") == 2
        assert total(samples, runs, tool="charge", pool=B, outcome="success") == 1
        assert total(samples, runs, tool="charge", pool=B, outcome="execution_error") == 1
        assert total(samples, runs) == 4
        assert total(samples, "toolfleet_worker_tool_run_duration_seconds_count", tool="reserve") == 2
        assert total(samples, "toolfleet_worker_queue_wait_seconds_count", pool=A) == 2
        assert total(samples, "toolfleet_worker_queue_wait_seconds_count", pool=B) == 2
        assert total(samples, "toolfleet_worker_tool_runs_in_flight") == 0
        assert total(samples, "toolfleet_worker_tool_retries_total") == 0
        assert (
            total(
                samples,
                "toolfleet_worker_compensation_runs_total",
                tool="reserve",
                pool=A,
                result="succeeded",
            )
            == 2
        )


def test_a_pool_process_killed_mid_call_is_not_counted_in_flight_forever(
    settings: Settings, redis_url: str, worker_logs: Path
) -> None:
    # Given: a prefork worker serving its metrics, one of its processes running a long call
    port = free_port()
    worker = tool_worker(
        redis_url,
        [A],
        ["tests.integration.telemetry_tools"],
        worker_logs / f"metrics-killed-{uuid.uuid4().hex[:6]}.log",
        f"metrics-killed-{uuid.uuid4().hex[:6]}@test",
        kind="prefork",
        concurrency=2,
        extra_args=["--metrics-port", str(port)],
    )
    ns, url = uuid.uuid4().hex, f"http://127.0.0.1:{port}/metrics"
    in_flight = "toolfleet_worker_tool_runs_in_flight"
    request = ToolExecutionRequest("l1", "linger", json.dumps({"ns": ns, "seconds": 30}))
    outcomes: list[ToolOutcome] = []
    linger = ToolRegistry([telemetry_tools.linger]).get("linger")
    with worker.running(timeout_s=60):
        executor = CeleryExecutor(settings=settings)
        call = threading.Thread(
            target=lambda: outcomes.append(asyncio.run(executor.execute(request, linger, None)))
        )
        call.start()
        try:
            pid = wait_for(lambda: process_client().get(f"obs:{ns}:pid"), what="the call started")
            assert total(scrape(url), in_flight, tool="linger") == 1
            # When: that process is SIGKILLed (no shutdown signal runs in it)
            os.kill(int(pid), signal.SIGKILL)
            call.join(timeout=30)
            # Then: the call failed, and the worker's page counts nothing in flight any more
            assert [o.kind for o in outcomes] == [OutcomeKind.WORKER_LOST]
            assert total(scrape(url), in_flight) == 0
        finally:
            call.join(timeout=30)
            executor.close()
