"""Real Redis, real worker processes: the fixtures of the integration tests.

Tests use a dedicated Redis database (`TOOLFLEET_TEST_REDIS_DB`, default 13) on the server at
`TOOLFLEET_REDIS_URL`, flushed at the start of the session, so a developer's own data is untouched.
Every other `TOOLFLEET_*` variable of the caller is removed before the session starts
(tests/conftest.py), so the workers started here read only what these fixtures give them.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

from orchestrator.executors.celery import CeleryExecutor
from orchestrator.executors.local import LocalExecutor
from tests._environment import broker_environment, integration_redis_url
from tests.integration import slot_tools
from tests.integration.private_redis import PrivateRedis
from tests.integration.worker_processes import all_running, tool_worker
from tests.otlp_receiver import OtlpReceiver
from workers.app import make_app
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

TOOLS = "tests.integration.tools"


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = integration_redis_url(os.environ)
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"integration tests need a Redis at {url} (make test starts one): {exc}")
    client.flushdb()
    os.environ["TOOLFLEET_REDIS_URL"] = url  # the test tools read it, and so do child processes
    yield url
    client.close()


@pytest.fixture(scope="session")
def settings(redis_url: str) -> Settings:
    return Settings.from_env(
        {
            "TOOLFLEET_REDIS_URL": redis_url,
            "TOOLFLEET_HEARTBEAT_TTL_S": "2",
            "TOOLFLEET_LIVENESS_CHECK_INTERVAL_S": "0.2",
            **broker_environment(os.environ),
        }
    )


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A connection to the test database, answering bytes (as the product's own connections do)."""
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


@pytest.fixture
def text_client(redis_url: str) -> Iterator[redis.Redis]:
    """A connection to the test database that answers `str`, for tests that read what tools wrote."""
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    connection.close()


@pytest.fixture
def up(private_redis: PrivateRedis) -> PrivateRedis:
    """The `private_redis` of the test's module or folder, running (a test that failed mid-outage may
    have left it down)."""
    return private_redis.ensure_running()


@pytest.fixture
def worker_app(settings: Settings) -> Iterator[Celery]:
    """A worker's Celery app (no tools), for what workers store in Redis: results, states."""
    app = make_app(settings)
    yield app
    app.close()


@pytest.fixture(scope="session")
def worker_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("worker-logs")


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP receiver on loopback for the module's traced processes (`receiver.endpoint`)."""
    with OtlpReceiver() as running:
        yield running


def _start(
    redis_url: str, logs: Path, pools: list[str], kind: str, concurrency: int, name: str
) -> WorkerProcess:
    return tool_worker(
        redis_url,
        pools,
        [TOOLS],
        logs / f"{name}.log",
        f"{name}@integration",
        kind=kind,
        concurrency=concurrency,
    )


@pytest.fixture(scope="session")
def pools(redis_url: str, worker_logs: Path) -> Iterator[dict[str, WorkerProcess]]:
    """Three worker processes: `alpha` and `beta` (threads) and `heavy` (prefork)."""
    starts = {
        "alpha": lambda: _start(redis_url, worker_logs, ["alpha"], "threads", 100, "alpha"),
        "beta": lambda: _start(redis_url, worker_logs, ["beta"], "threads", 8, "beta"),
        "heavy": lambda: _start(redis_url, worker_logs, ["heavy"], "prefork", 2, "heavy"),
    }
    with all_running(starts) as workers:
        yield workers


@pytest.fixture
def executor_workers(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The fixtures that start the workers a test's tools live on: the module's `WORKERS`, unless a
    folder's conftest.py overrides this fixture for every module of the folder."""
    return tuple(getattr(request.module, "WORKERS", ()))


@pytest.fixture
def executor_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Options both executors take (retries, backoff), by their names in `LocalExecutor` and `Settings`:
    the module's `EXECUTOR_OPTIONS`, unless a folder's conftest.py overrides this fixture."""
    return dict(getattr(request.module, "EXECUTOR_OPTIONS", {}))


@pytest.fixture(params=["local", "celery"])
def executor(
    request: pytest.FixtureRequest,
    settings: Settings,
    executor_workers: tuple[str, ...],
    executor_options: dict[str, Any],
) -> Iterator[LocalExecutor | CeleryExecutor]:
    """Where a test's tool calls run: in this process, or on worker processes; every test runs on both.

    What the calls need comes from two fixtures: `executor_workers` (the workers to start) and
    `executor_options` (options both executors take).
    """
    chosen: LocalExecutor | CeleryExecutor
    if request.param == "local":
        chosen = LocalExecutor(**executor_options)
    else:
        for name in executor_workers:
            request.getfixturevalue(name)
        chosen = CeleryExecutor(settings=dataclasses.replace(settings, **executor_options))
    yield chosen
    chosen.close()


@pytest.fixture(scope="module")
def slot_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One threads worker of the flow-control tests' pool (`slot_tools`), with room for far more calls
    than any limit there."""
    log_path = tmp_path_factory.mktemp("slots") / "worker.log"
    worker = tool_worker(
        redis_url,
        [slot_tools.POOL],
        ["tests.integration.slot_tools"],
        log_path,
        f"slots-{uuid.uuid4().hex[:6]}@test",
        concurrency=16,
    )
    worker.wait_ready(timeout_s=60)
    yield worker
    worker.stop()
