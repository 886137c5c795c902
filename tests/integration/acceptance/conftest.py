"""The worker of the `AiService` acceptance tests: one real worker process serving
`tests.integration.acceptance_tools` on pool `acc`, shared by every module of this folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.integration.acceptance_tools as acc
from orchestrator import CeleryExecutor
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

REPO_ROOT = str(Path(__file__).resolve().parents[3])
TOOLS_MODULE = "tests.integration.acceptance_tools"


@pytest.fixture(scope="package")
def acc_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker serving the acceptance tools on pool `acc`."""
    worker = WorkerProcess(
        pools=[acc.POOL],
        modules=[TOOLS_MODULE],
        redis_url=redis_url,
        kind="threads",
        concurrency=16,
        hostname=f"acc-{os.getpid()}@acceptance",
        env={"TOOLFLEET_HEARTBEAT_TTL_S": "2", "PYTHONPATH": REPO_ROOT},
        log_path=tmp_path_factory.mktemp("acceptance-worker") / "acc.log",
        loglevel="INFO",
    )
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture(scope="package")
def celery_executor(acc_worker: WorkerProcess, settings: Settings) -> Iterator[CeleryExecutor]:
    chosen = CeleryExecutor(settings=settings)
    yield chosen
    chosen.close()


@pytest.fixture(autouse=True)
def _forget_raised() -> None:
    acc.RAISED.clear()
