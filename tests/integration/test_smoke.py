from __future__ import annotations

import asyncio

import pytest

from orchestrator.executors.celery import CeleryExecutor
from workers import OutcomeKind, ToolExecutionRequest
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.broker]


def test_echo_runs_on_the_alpha_worker(pools: dict[str, WorkerProcess], settings: Settings) -> None:
    executor = CeleryExecutor(settings=settings)
    outcome = asyncio.run(executor.execute(ToolExecutionRequest("1", "echo", '{"text": "hi", "times": 2}')))
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "hi hi"
    assert outcome.worker == "alpha@integration"
    assert outcome.pool == "alpha"


def test_a_failing_tool_on_a_prefork_pool_leaves_the_worker_serving(
    pools: dict[str, WorkerProcess], settings: Settings
) -> None:
    # given: a prefork child raises an exception type its parent process has never seen
    executor = CeleryExecutor(settings=settings)

    async def calls() -> tuple[object, object]:
        failed = await executor.execute(ToolExecutionRequest("1", "fail_heavy", '{"message": "boom"}'))
        after = await executor.execute(ToolExecutionRequest("2", "slow_heavy", '{"seconds": 0.01}'))
        return failed, after

    # when
    failed, after = asyncio.run(calls())

    # then: the failure comes back structured, and the worker (parent and pool) keeps serving
    assert failed.kind is OutcomeKind.EXECUTION_ERROR  # type: ignore[attr-defined]
    assert failed.error_type == "BrandNewError"  # type: ignore[attr-defined]
    assert failed.text == "boom"  # type: ignore[attr-defined]
    assert after.kind is OutcomeKind.SUCCESS  # type: ignore[attr-defined]
    assert pools["heavy"].process.poll() is None
