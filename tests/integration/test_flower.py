"""Every tool call and compensation is visible in Flower, under its task name, with its state,
arguments and runtime — checked through Flower's REST API, behind basic auth."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests._background import Background
from tests._ports import free_port
from tests._processes import reap
from tests._waiting import wait_until
from tests.integration._flower import AUTH, running_flower, start_flower
from tests.integration.worker_processes import serving
from workers import OutcomeKind, ToolExecution, ToolExecutionRequest
from workers.calls.invocation import Invocation
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    with serving(redis_url, "flowerpool", "tests.integration.flower_tools", worker_logs, "flower") as w:
        yield w


@pytest.fixture(scope="module")
def flower(redis_url: str, worker: WorkerProcess, worker_logs: Path) -> Iterator[str]:
    with running_flower(redis_url, worker_logs / "flower.log", worker.hostname) as url:
        yield url


def _task(url: str, task_id: str, final: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        response = httpx.get(f"{url}/api/task/info/{task_id}", auth=AUTH, timeout=5)
        if response.status_code == 200 and response.json().get("state") == final:
            info: dict[str, Any] = response.json()
            return info
        assert time.monotonic() < deadline, (
            f"{task_id} never reached {final} in Flower: {response.text[:500]}"
        )
        time.sleep(0.1)


def test_a_successful_call_a_failing_call_and_a_compensation_show_in_flower(
    flower: str, settings: Settings
) -> None:
    # given
    executor = CeleryExecutor(settings=settings)
    definition = executor.definition("charge")
    assert definition is not None
    invocation = Invocation()
    ok_request = ToolExecutionRequest("call_ok", "charge", '{"card": "4242", "amount": 12.5}')
    bad_request = ToolExecutionRequest("call_bad", "charge", '{"card": "declined", "amount": 99}')

    # when: a call that succeeds, one that fails, and the compensation of the first
    async def scenario() -> tuple[Any, Any, Any]:
        ok = await executor.execute(ok_request, definition, invocation)
        bad = await executor.execute(bad_request, definition, invocation)
        execution = ToolExecution(request=ok_request, result=ok.text, task_id=ok.task_id)
        undo = await executor.compensate(definition, execution, invocation)
        return ok, bad, undo

    try:
        ok, bad, undo = asyncio.run(scenario())
    finally:
        executor.close()
    assert (ok.kind, bad.kind, undo.kind) == (
        OutcomeKind.SUCCESS,
        OutcomeKind.EXECUTION_ERROR,
        OutcomeKind.SUCCESS,
    )

    # then: Flower shows each under its task name, with state, arguments and runtime
    success = _task(flower, ok.task_id, "SUCCESS")
    assert success["name"] == "tool.charge"
    assert success["worker"] == "flower@integration"
    assert '{"card": "4242", "amount": 12.5}' in success["kwargs"]
    assert "'call_id': 'call_ok'" in success["kwargs"]
    assert success["runtime"] is not None and success["runtime"] > 0

    failure = _task(flower, bad.task_id, "FAILURE")
    assert failure["name"] == "tool.charge"
    assert failure["exception"] == "Declined('card declined declined for 99')"
    assert '{"card": "declined", "amount": 99}' in failure["kwargs"]

    compensation = _task(flower, undo.task_id, "SUCCESS")
    assert compensation["name"] == "compensate.charge"
    assert '{"card": "4242", "amount": 12.5}' in compensation["kwargs"]
    assert compensation["runtime"] is not None

    # and the invocation's parameters (which may hold secrets) are never among the arguments
    assert "parameters" not in success["kwargs"]


def test_toolfleet_flower_exits_within_two_seconds_of_sigterm(redis_url: str, worker_logs: Path) -> None:
    # given: Flower serving, with an inspection in flight that would wait 20 s for a worker that does
    # not exist (a slow broker looks the same)
    log = worker_logs / "flower-sigterm.log"
    port = free_port()
    process = start_flower(redis_url, port, log, FLOWER_INSPECT_TIMEOUT="20000")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "Flower did not answer within 30 s"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthcheck", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        params = {"workername": "nobody@nowhere", "refresh": "1"}
        inspection = Background(lambda: httpx.get(f"{url}/api/workers", auth=AUTH, params=params, timeout=30))
        # ... still unanswered a second later: Flower holds it, waiting for the worker
        assert not wait_until(lambda: not inspection.running, 1.0), "the inspection was answered at once"
        # when: the container runtime stops it, the inspection still in flight
        assert inspection.running, "the inspection ended before SIGTERM"
        process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        elapsed = time.monotonic() - stopped
        # ... which ends with Flower, unanswered or answered as Flower stops
        with contextlib.suppress(httpx.TransportError):
            inspection.join(10)
    finally:
        reap(process, grace_s=1)
    # then: it exited on its own, promptly and cleanly
    assert elapsed < 2.5, f"Flower took {elapsed:.1f} s to stop after SIGTERM\n{log.read_text()[-2000:]}"
    assert process.returncode == 0
