"""Progress from tools on real workers: each report travels as the task's `PROGRESS` state through
the result backend, reaches `stream()` as a `ToolProgress` in order, the journal keeps the last one,
Flower shows the custom state; a tool reporting in a tight loop sends a few states, the last always."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from orchestrator import AiMessage, AiService, ScriptedChatModel, ToolExecutionRequest, ToolProgress
from orchestrator.executors import observe_progress
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.result import StreamEvent, ToolExecuted
from orchestrator.saga.journal import Journal
from tests.integration._flower import AUTH, running_flower
from tests.integration.worker_processes import celery_executor, serving
from workers import OutcomeKind
from workers.calls.invocation import Invocation, idempotency_key
from workers.calls.progress import ProgressReport
from workers.protocol import META_PREFIX, PROGRESS_STATE, call_task_id
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(redis_url: str, worker_logs: Path) -> Iterator[WorkerProcess]:
    with serving(redis_url, "progresspool", "tests.integration.progress_tools", worker_logs, "progress") as w:
        yield w


@pytest.fixture(scope="module")
def flower(redis_url: str, worker: WorkerProcess, worker_logs: Path) -> Iterator[str]:
    with running_flower(redis_url, worker_logs / "progress-flower.log", worker.hostname) as url:
        yield url


@pytest.fixture
def executor(settings: Settings, worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    with celery_executor(settings) as executor:
        yield executor


def _flower_states(url: str, task_id: str, stop: threading.Event) -> list[dict[str, Any]]:
    """What Flower's API says of the task, polled until `stop`."""
    seen: list[dict[str, Any]] = []
    while not stop.is_set():
        response = httpx.get(f"{url}/api/task/info/{task_id}", auth=AUTH, timeout=5)
        if response.status_code == 200:
            seen.append(response.json())
        time.sleep(0.1)
    return seen


def test_a_slow_tool_streams_its_ten_steps_in_order_journals_the_last_and_shows_in_flower(
    executor: CeleryExecutor, flower: str, client: redis.Redis, tmp_path: Path
) -> None:
    # given: a 3 s tool reporting 10 steps, behind a service with a journal
    journal = Journal(f"sqlite:///{tmp_path / 'journal.db'}")
    script: list[AiMessage | str] = [
        AiMessage(
            tool_execution_requests=[ToolExecutionRequest("s1", "steps", '{"count": 10, "seconds": 3}')]
        ),
        "done",
    ]
    service = AiService(chat_model=ScriptedChatModel(script), executor=executor, journal=journal)
    invocation_id = str(uuid.uuid4())
    task_id = call_task_id(idempotency_key(invocation_id, "s1"))
    stop = threading.Event()
    stored: list[str] = []

    async def run() -> list[StreamEvent]:
        events: list[StreamEvent] = []
        async for event in service.stream("go", invocation_id=invocation_id):
            events.append(event)
            if isinstance(event, ToolProgress) and event.fraction == 0.5:
                raw = client.get(META_PREFIX + task_id)  # what AsyncResult(task_id) reads now
                stored.append(json.loads(raw)["status"] if raw else "")
        return events

    # when
    poller: list[list[dict[str, Any]]] = []
    thread = threading.Thread(target=lambda: poller.append(_flower_states(flower, task_id, stop)))
    thread.start()
    try:
        events = asyncio.run(run())
    finally:
        stop.set()
        thread.join(10)

    # then: ten reports, in order, before the call's result
    progress = [e for e in events if isinstance(e, ToolProgress)]
    assert [(p.fraction, p.message, p.data) for p in progress] == [
        (n / 10, f"step {n} of 10", {"step": n}) for n in range(1, 11)
    ]
    assert {(p.request_id, p.tool_name) for p in progress} == {("s1", "steps")}
    executed = [i for i, e in enumerate(events) if isinstance(e, ToolExecuted)]
    assert executed and max(events.index(p) for p in progress) < executed[0]
    # the journal keeps the last one
    [call] = journal.calls(invocation_id)
    assert call.last_progress is not None
    assert (call.last_progress["fraction"], call.last_progress["message"]) == (1.0, "step 10 of 10")
    # the result backend held the custom state while the call ran, and Flower showed it
    assert stored == [PROGRESS_STATE]
    shown = [info for info in poller[0] if info.get("state") == PROGRESS_STATE]
    assert shown, f"Flower never showed {PROGRESS_STATE}: {[i.get('state') for i in poller[0]]}"
    assert "step" in str(shown[-1].get("result"))


def test_a_tool_reporting_ten_thousand_times_sends_a_few_states_the_last_one_always(
    executor: CeleryExecutor, client: redis.Redis
) -> None:
    # given: a subscription to the call's channel, to count the states that travel
    definition = executor.definition("flood")
    assert definition is not None
    invocation = Invocation()
    request = ToolExecutionRequest("f1", "flood", '{"count": 10000}')
    task_id = call_task_id(idempotency_key(invocation.context.invocation_id, "f1"))
    pubsub = client.pubsub()
    pubsub.subscribe(META_PREFIX + task_id)
    heard: list[ProgressReport] = []

    # when
    async def run() -> Any:
        with observe_progress(heard.append):
            return await executor.execute(request, definition, invocation)

    started = time.monotonic()
    outcome = asyncio.run(run())
    elapsed = time.monotonic() - started

    # then
    assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
    statuses: list[str] = []
    quiet_until = time.monotonic() + 0.5
    while time.monotonic() < quiet_until:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message is not None:
            statuses.append(json.loads(message["data"])["status"])
    pubsub.close()
    travelled = statuses.count(PROGRESS_STATE)
    assert 1 <= travelled <= 2 + elapsed / 0.05, (travelled, elapsed)
    assert statuses[-1] == "SUCCESS"
    assert heard and heard[-1].seq == 10_000
    assert heard[-1].message == "report 10000"
    assert [r.seq for r in heard] == sorted({r.seq for r in heard})
