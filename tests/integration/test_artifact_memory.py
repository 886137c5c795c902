"""A 50 MiB artifact from a tool on a prefork worker to a client, through `GET /v1/artifacts/{id}` of a
real `toolfleet serve`, on a directory store and on S3: it arrives whole (its SHA-256), and neither the
worker's child that made it nor the service that sent it holds it: each one's peak memory grows by
less than 20 MiB over what a smaller artifact already took."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests.artifact_stores import ArtifactStoreUrl
from tests.integration import artifact_tools
from tests.integration.serve.replicas import API_KEY, Replica, replica_env, start_replica
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.artifacts import ArtifactRef
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

MIB = 1 << 20
LARGE_MIB = 50
WARM_UP_MIB = 12  # more than two S3 parts: the paths a large write and read take, taken once before
GROWTH_LIMIT = 20 * MIB
UPSTREAM = "http://127.0.0.1:9/v1"  # the served agent's model: never asked here


@dataclass(frozen=True)
class Fleet:
    """A prefork worker (one child) serving the artifact tool, and a service, on one store."""

    store: ArtifactStoreUrl
    worker: WorkerProcess
    service: Replica


@pytest.fixture(scope="module", params=["dir", "s3"])
def fleet(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    store: ArtifactStoreUrl = request.getfixturevalue(f"{request.param}_artifact_url")
    logs = tmp_path_factory.mktemp(f"artifact-memory-{request.param}")
    worker = tool_worker(
        redis_url,
        [artifact_tools.POOL],
        [artifact_tools.__name__],
        logs / "worker.log",
        f"artifacts-{uuid.uuid4().hex[:6]}@integration",
        kind="prefork",
        concurrency=1,
        env=store.worker_env(),
    )
    with worker.running(timeout_s=60):
        env = replica_env(redis_url, f"sqlite:///{logs / 'serve.db'}", UPSTREAM, **store.worker_env())
        service = start_replica(env, logs / "serve.log")
        try:
            yield Fleet(store, worker, service)
        finally:
            service.stop()


def made(settings: Settings, mebibytes: int) -> tuple[int, ArtifactRef]:
    """The artifact tool's call on the worker: the pid of the process it ran in, and its artifact."""

    async def call() -> ToolOutcome:
        executor = CeleryExecutor(settings=settings)
        try:
            definition = executor.definition("make_artifact")
            request = ToolExecutionRequest(
                f"m-{uuid.uuid4().hex[:8]}", "make_artifact", json.dumps({"mebibytes": mebibytes})
            )
            return await executor.execute(request, definition)
        finally:
            executor.close()

    outcome = asyncio.run(call())
    assert outcome.kind is OutcomeKind.SUCCESS, outcome.text
    result: dict[str, Any] = outcome.result_object
    return int(result["pid"]), ArtifactRef.from_json(result["artifact"])


def fetched(service: Replica, ref: ArtifactRef) -> tuple[int, str]:
    """The size and SHA-256 of what `GET /v1/artifacts/{id}` sends, read as a stream a piece at a time."""
    digest, size = hashlib.sha256(), 0
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream(
        "GET", f"{service.base_url}/artifacts/{ref.id}", headers=headers, timeout=60
    ) as response:
        assert response.status_code == 200, response.read()[:500]
        assert response.headers["content-length"] == str(ref.size)
        for piece in response.iter_bytes():
            digest.update(piece)
            size += len(piece)
    return size, digest.hexdigest()


def peak_rss(pid: int) -> int:
    """The most memory the process `pid` has held at once so far (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    assert found is not None, status
    return int(found.group(1)) * 1024


@pytest.mark.timeout(120)
def test_a_50_mib_artifact_reaches_the_client_whole_held_by_no_process(
    fleet: Fleet, settings: Settings
) -> None:
    # given: a worker's child and a service that already made and sent a smaller artifact
    child, warm = made(settings, WARM_UP_MIB)
    assert child in fleet.worker.child_pids() and child != fleet.worker.pid
    assert fetched(fleet.service, warm) == (WARM_UP_MIB * MIB, artifact_tools.pattern_sha256(WARM_UP_MIB))
    child_before, service_before = peak_rss(child), peak_rss(fleet.service.process.pid)

    # when: the tool makes 50 MiB, a MiB at a time, and the client reads them through the service
    again, large = made(settings, LARGE_MIB)
    size, sha256 = fetched(fleet.service, large)

    # then: every byte arrives, and neither process ever held a large part of them
    expected = artifact_tools.pattern_sha256(LARGE_MIB)
    assert again == child  # the same child made both: its peaks compare
    assert (large.size, large.sha256) == (LARGE_MIB * MIB, expected)
    assert (size, sha256) == (LARGE_MIB * MIB, expected)
    assert large.uri.startswith(fleet.store.url.split("?", 1)[0])
    growth = {
        "worker child": peak_rss(child) - child_before,
        "service": peak_rss(fleet.service.process.pid) - service_before,
    }
    in_mib = {name: f"{grown / MIB:.1f} MiB" for name, grown in growth.items()}
    assert all(grown < GROWTH_LIMIT for grown in growth.values()), f"peak memory grew: {in_mib}"
