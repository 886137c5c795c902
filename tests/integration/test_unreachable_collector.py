"""A collector that does not answer costs no call and no more than `FLUSH_TIMEOUT_S` of a stop.

The OTLP endpoint is a loopback port bound but not listening: every connection is refused, and the
exporter retries each batch with a growing pause for up to its 10 s timeout (about 7 s). A real worker
and this process (the orchestrator) both export there: the invocation still gets its answer, stopping
the orchestrator's tracing gives up after the bound, and the worker stops on SIGTERM within seconds,
though its spans are still buffered (a long schedule delay keeps them so until the stop).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.telemetry import setup_tracing, stop_tracing
from tests.integration import telemetry_tools
from tests.integration.worker_processes import tool_worker
from workers.settings import Settings
from workers.telemetry.tracing import FLUSH_TIMEOUT_S

pytestmark = pytest.mark.integration

# What a stop may take beyond its flushes' bounds: Celery's warm shutdown of an idle worker (about 1.6 s
# measured), with room for a busy machine. A prefork worker flushes twice in turn (its children, then
# its parent); unbounded, each flush would retry for about 7 s.
STOP_MARGIN_S = 5.0
FLUSHES = {"threads": 1, "prefork": 2}


@pytest.fixture
def unreachable() -> Iterator[str]:
    """An OTLP endpoint on loopback that refuses every connection while the test runs."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))  # never listening: connections are refused, and no one else has it
        yield f"http://127.0.0.1:{bound.getsockname()[1]}"


@pytest.mark.parametrize("kind", ["threads", "prefork"])
def test_calls_succeed_and_stops_are_bounded_when_the_collector_is_unreachable(
    kind: str, unreachable: str, redis_url: str, settings: Settings, worker_logs: Path
) -> None:
    # given: a worker and this process tracing to a collector that refuses connections
    log_path = worker_logs / f"unreachable-{kind}-{uuid.uuid4().hex[:6]}.log"
    worker = tool_worker(
        redis_url,
        [telemetry_tools.POOL_A],
        ["tests.integration.telemetry_tools"],
        log_path,
        f"unreachable-{kind}-{uuid.uuid4().hex[:6]}@test",
        kind=kind,
        concurrency=2,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": unreachable, "OTEL_BSP_SCHEDULE_DELAY": "60000"},
    )
    worker.wait_ready(timeout_s=60)
    ns = uuid.uuid4().hex
    call = ToolExecutionRequest(id="r1", name="reserve", arguments=json.dumps({"ns": ns, "item": "lamp"}))
    model = ScriptedChatModel([AiMessage(tool_execution_requests=[call]), "reserved"])
    executor = CeleryExecutor(settings=settings)
    try:
        assert setup_tracing("unreachable-test", environ={"OTEL_EXPORTER_OTLP_ENDPOINT": unreachable})
        try:
            # when: an invocation calls a tool on the worker
            result = AiService(chat_model=model, tools=[telemetry_tools.shop], executor=executor).chat("go")
        finally:
            started = time.monotonic()
            stop_tracing()
            orchestrator_stop_s = time.monotonic() - started
        # then: the call succeeded, and stopping tracing here gave up on the collector after the bound
        assert result.content == "reserved"
        assert [e.status for e in result.tool_executions] == ["success"]
        assert orchestrator_stop_s < FLUSH_TIMEOUT_S + 1.0, orchestrator_stop_s
        # when: the worker is asked to stop, its spans still buffered
        started = time.monotonic()
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not stop within 30 s of SIGTERM:\n{log_path.read_text()[-3000:]}")
        worker_stop_s = time.monotonic() - started
    finally:
        executor.close()
        worker.stop()
    # then: it stopped cleanly within seconds, saying the spans were dropped
    log = log_path.read_text(errors="replace")
    assert worker.process.returncode == 0, log[-3000:]
    assert worker_stop_s < FLUSHES[kind] * FLUSH_TIMEOUT_S + STOP_MARGIN_S, (worker_stop_s, log[-3000:])
    assert "spans not exported within" in log, log[-3000:]
