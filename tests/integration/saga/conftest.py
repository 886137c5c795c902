"""The worker of the saga acceptance tests: one real worker process serving
`tests.integration.saga_tools` on pool `saga` (compensations run there as `compensate.<tool>`
tasks), shared by every module of this folder; where the shared `executor` fixture
(tests/integration/conftest.py) runs every module's calls; and each test's `Ledger`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import tests.integration.saga_tools as saga
from tests.integration.saga._ledger import COMPENSATION_RETRIES, RETRY_BACKOFF_S, Ledger
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess

TOOLS_MODULE = "tests.integration.saga_tools"


@pytest.fixture(scope="package")
def saga_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker serving the saga tools on pool `saga`, with small compensation retries."""
    # The worker retries compensations itself, reading these from its own environment.
    env = {
        "TOOLFLEET_COMPENSATION_RETRIES": str(COMPENSATION_RETRIES),
        "TOOLFLEET_RETRY_BACKOFF_S": str(RETRY_BACKOFF_S),
    }
    log_path = tmp_path_factory.mktemp("saga-worker") / "saga.log"
    hostname = f"saga-{os.getpid()}@saga"
    worker = tool_worker(redis_url, [saga.POOL], [TOOLS_MODULE], log_path, hostname, concurrency=8, env=env)
    with worker.running(timeout_s=60):
        yield worker


@pytest.fixture
def executor_workers() -> tuple[str, ...]:
    return ("saga_worker",)


@pytest.fixture
def executor_options() -> dict[str, Any]:
    return {"compensation_retries": COMPENSATION_RETRIES, "retry_backoff_s": RETRY_BACKOFF_S}


@pytest.fixture
def ledger(redis_url: str) -> Iterator[Ledger]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    book = Ledger(client, uuid.uuid4().hex)
    yield book
    keys = list(client.scan_iter(f"saga:{book.ns}:*"))
    if keys:
        client.delete(*keys)
    client.close()
