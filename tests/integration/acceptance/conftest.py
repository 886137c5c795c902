"""The worker of the `AiService` acceptance tests: one real worker process serving
`tests.integration.acceptance_tools` on pool `acc`, shared by every module of this folder, and
where the shared `executor` fixture (tests/integration/conftest.py) runs every module's calls.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import tests.integration.acceptance_tools as acc
from orchestrator import CeleryExecutor
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

TOOLS_MODULE = "tests.integration.acceptance_tools"


@pytest.fixture(scope="package")
def acc_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker serving the acceptance tools on pool `acc`."""
    log_path = tmp_path_factory.mktemp("acceptance-worker") / "acc.log"
    hostname = f"acc-{os.getpid()}@acceptance"
    worker = tool_worker(redis_url, [acc.POOL], [TOOLS_MODULE], log_path, hostname, concurrency=16)
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture
def executor_workers() -> tuple[str, ...]:
    return ("acc_worker",)


@pytest.fixture(scope="package")
def celery_executor(acc_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    chosen = CeleryExecutor(settings=settings)
    yield chosen
    chosen.close()


@pytest.fixture(autouse=True)
def _forget_raised() -> None:
    acc.RAISED.clear()
