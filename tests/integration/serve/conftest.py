"""Fixtures of the `toolfleet serve` tests: one scripted upstream model, one worker of pool `serve`,
and two replicas sharing PostgreSQL (SQLite when it does not answer, outside CI) and the test Redis."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._postgres import reachable_postgres
from tests.integration.fake_openai import FakeOpenAi, fake_openai
from tests.integration.serve.replicas import (
    AGENT,
    AGENTS_MODULE,
    Replica,
    replica_env,
    start_replica,
    two_replicas,
)
from tests.integration.serve.upstream import script
from tests.integration.worker_processes import tool_worker
from workers.runtime.process import WorkerProcess


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAi]:
    with fake_openai(script) as server:
        yield server


@pytest.fixture(scope="module")
def database_url() -> str:
    return reachable_postgres()


@pytest.fixture(scope="module")
def serve_worker(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    logs = tmp_path_factory.mktemp("serve-worker")
    worker = tool_worker(
        redis_url, ["serve"], [AGENTS_MODULE], logs / "serve.log", f"serve-{uuid.uuid4().hex[:6]}@integration"
    )
    try:
        worker.wait_ready(timeout_s=60)
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def replica_changes() -> dict[str, str | None]:
    """Variables a module's replicas set (or, when None, remove) beyond `replica_env`'s: none here."""
    return {}


@pytest.fixture(scope="module")
def replicas(
    redis_url: str,
    database_url: str,
    upstream: FakeOpenAi,
    serve_worker: WorkerProcess,
    replica_changes: dict[str, str | None],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Replica, Replica]]:
    """Two replicas of one service, as behind a load balancer."""
    env = replica_env(redis_url, database_url, upstream.base_url, **replica_changes)
    with two_replicas(env, tmp_path_factory.mktemp("serve-replicas")) as pair:
        yield pair


@pytest.fixture
def ns() -> str:
    """The namespace of one test's side effects in Redis."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path


HEARTBEAT_TTL_S = 2.0  # of the replicas `pair` starts


@pytest.fixture
def pair(
    redis_url: str, database_url: str, upstream: FakeOpenAi, serve_worker: WorkerProcess, tmp_path: Path
) -> Iterator[tuple[Replica, Replica]]:
    """Two replicas of their own (the first is killed), beating every 2/3 s with a 2 s TTL, serving
    `assistant` and `undoer`."""
    env = replica_env(
        redis_url, database_url, upstream.base_url, TOOLFLEET_HEARTBEAT_TTL_S=str(HEARTBEAT_TTL_S)
    )
    first = start_replica(env, tmp_path / "a.log", agents=(AGENT, "undoer"))
    second = start_replica(env, tmp_path / "b.log", agents=(AGENT, "undoer"))
    try:
        yield first, second
    finally:
        second.stop()
        first.stop(signal.SIGKILL)
