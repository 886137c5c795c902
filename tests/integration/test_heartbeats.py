"""Heartbeats on real workers: a call whose tool is declared `heartbeat_timeout_s=1` is declared lost
within about a second of its heartbeats stopping — its worker SIGSTOPped mid-call, or the tool never
beating at all — long before its 30 s deadline."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator.executors.celery import CeleryExecutor
from tests._background import Background
from tests._waiting import wait_for
from tests.integration.worker_processes import celery_executor, serving
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.calls.invocation import Invocation, idempotency_key
from workers.protocol import META_PREFIX, PROGRESS_STATE, call_task_id
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]


@pytest.fixture
def worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    with serving(
        redis_url, "progresspool", "tests.integration.progress_tools", worker_logs, "heartbeat"
    ) as w:
        yield w


@pytest.fixture
def executor(settings: Settings, worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    with celery_executor(settings) as executor:
        yield executor


def _call(executor: CeleryExecutor, request: ToolExecutionRequest, invocation: Invocation) -> ToolOutcome:
    definition = executor.definition(request.name)
    assert definition is not None
    assert definition.heartbeat_timeout_s == 1  # the catalog tells this orchestrator
    return asyncio.run(executor.execute(request, definition, invocation))


def _status(client: redis.Redis, task_id: str) -> str | None:
    raw = client.get(META_PREFIX + task_id)
    return str(json.loads(raw)["status"]) if raw else None


def test_a_call_whose_worker_is_stopped_is_declared_lost_within_two_seconds(
    executor: CeleryExecutor, worker: WorkerProcess, client: redis.Redis, settings: Settings
) -> None:
    # given: a 4 s call of a tool beating every 0.1 s, under a 30 s deadline, reporting already
    invocation = Invocation()
    request = ToolExecutionRequest("b1", "beating", '{"seconds": 4}')
    task_id = call_task_id(idempotency_key(invocation.context.invocation_id, "b1"))
    running = Background(lambda: _call(executor, request, invocation))
    wait_for(lambda: _status(client, task_id) == PROGRESS_STATE, 10, "the call's first report")

    # when: its worker stops dead (hung, partitioned: it neither beats nor dies)
    os.killpg(worker.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        outcome = running.join(timeout_s=10)
        lost_after = time.monotonic() - stopped
    finally:
        os.killpg(worker.pid, signal.SIGCONT)

    # then: lost at once (heartbeat timeout 1 s plus one liveness check), naming the heartbeat timeout
    assert outcome.kind is OutcomeKind.WORKER_LOST, outcome.text
    assert "heartbeat" in outcome.text and "1 s" in outcome.text
    assert outcome.worker == worker.hostname
    assert lost_after < 2.0, lost_after
    # and the resumed worker finishes its call, then stops cleanly
    wait_for(lambda: _status(client, task_id) == "SUCCESS", 10, "the resumed call's result")


def test_a_tool_that_never_beats_is_declared_lost_though_its_worker_lives(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: a tool declared with a 1 s heartbeat timeout that never beats (the worker beats for no one)
    invocation = Invocation()
    request = ToolExecutionRequest("q1", "silent", '{"seconds": 3}')

    # when
    started = time.monotonic()
    outcome = _call(executor, request, invocation)
    elapsed = time.monotonic() - started

    # then: lost after its heartbeat timeout, not at its 30 s deadline
    assert outcome.kind is OutcomeKind.WORKER_LOST, outcome.text
    assert "sent no heartbeat for 1 s" in outcome.text
    assert elapsed < 2.5, elapsed
    task_id = call_task_id(idempotency_key(invocation.context.invocation_id, "q1"))
    wait_for(lambda: _status(client, task_id) == "SUCCESS", 10, "the silent call's own end")


def test_a_tool_that_beats_is_never_declared_lost(executor: CeleryExecutor) -> None:
    outcome = _call(executor, ToolExecutionRequest("b2", "beating", '{"seconds": 2.5}'), Invocation())

    assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
