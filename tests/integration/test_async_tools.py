"""`async def` tools on real workers: each worker thread (or prefork child) runs them on one
long-lived event loop, not a new loop per call; a call's leftovers do not reach the next; a failure
is an outcome; a deadline interrupts an async tool on prefork as it does a sync one."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import tests.integration.async_tools as at
from orchestrator.executors.celery import CeleryExecutor
from tests.integration.worker_processes import threads_and_prefork
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]

MODULE = "tests.integration.async_tools"


@pytest.fixture(scope="module")
def async_pools(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A threads worker with one thread (every call on the same thread) and a prefork worker with
    one child (every call in the same process)."""
    logs = tmp_path_factory.mktemp("async-workers")
    with threads_and_prefork(redis_url, MODULE, (at.THREADS, at.PREFORK), logs, threads=1):
        yield


def _call(settings: Settings, name: str, **arguments: Any) -> ToolOutcome:
    async def one() -> ToolOutcome:
        executor = CeleryExecutor(settings=settings)
        try:
            request = ToolExecutionRequest(f"c-{uuid.uuid4().hex[:8]}", name, json.dumps(arguments))
            return await executor.execute(request, executor.definition(name))
        finally:
            executor.close()

    return asyncio.run(one())


@pytest.mark.parametrize("tool", ["where_threads", "where_prefork"])
def test_successive_async_calls_share_one_event_loop(
    async_pools: None, settings: Settings, tool: str
) -> None:
    places = [_call(settings, tool) for _ in range(3)]

    assert all(p.kind is OutcomeKind.SUCCESS for p in places), places
    # one process, one thread, one loop: the loop outlives each call
    assert len({p.text for p in places}) == 1, [p.text for p in places]


def test_a_task_a_call_left_behind_is_cancelled_when_it_ends(async_pools: None, settings: Settings) -> None:
    first = _call(settings, "leave_a_task")
    second = _call(settings, "leave_a_task")

    # each call sees only itself and the one task it started: the first call's task did not survive
    assert (first.text, second.text) == ("2", "2")


def test_an_async_failure_is_an_outcome_and_the_loop_serves_the_next_call(
    async_pools: None, settings: Settings
) -> None:
    failed = _call(settings, "async_fail")
    after = _call(settings, "async_nap", seconds=0.01)

    assert failed.kind is OutcomeKind.EXECUTION_ERROR and "the async tool failed" in failed.text
    assert after.kind is OutcomeKind.SUCCESS and after.text == "rested"


def test_a_deadline_interrupts_an_async_tool_on_prefork_and_the_child_serves_on(
    async_pools: None, settings: Settings
) -> None:
    overrun = _call(settings, "async_overrun")
    after = _call(settings, "where_prefork")

    assert overrun.kind is OutcomeKind.TIMED_OUT
    assert after.kind is OutcomeKind.SUCCESS


def test_async_calls_queued_behind_each_other_on_one_thread_all_complete(
    async_pools: None, settings: Settings
) -> None:
    async def many() -> list[ToolOutcome]:
        executor = CeleryExecutor(settings=settings)
        try:
            definition = executor.definition("async_nap")
            requests = [
                ToolExecutionRequest(f"n{i}", "async_nap", json.dumps({"seconds": 0.05})) for i in range(5)
            ]
            return await asyncio.gather(*(executor.execute(r, definition) for r in requests))
        finally:
            executor.close()

    outcomes = asyncio.run(many())

    assert [o.text for o in outcomes] == ["rested"] * 5
