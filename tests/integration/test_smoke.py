from __future__ import annotations

import asyncio

import pytest

from orchestrator.executors.celery import CeleryExecutor
from workers import OutcomeKind, ToolExecutionRequest
from workers.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration


def test_echo_runs_on_the_alpha_worker(pools: dict[str, WorkerProcess], settings: Settings) -> None:
    executor = CeleryExecutor(settings=settings)
    outcome = asyncio.run(executor.execute(ToolExecutionRequest("1", "echo", '{"text": "hi", "times": 2}')))
    assert outcome.kind is OutcomeKind.SUCCESS
    assert outcome.text == "hi hi"
    assert outcome.worker == "alpha@integration"
    assert outcome.pool == "alpha"
