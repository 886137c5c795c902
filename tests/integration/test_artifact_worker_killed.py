"""A worker killed while it writes an artifact: the call is lost, not half-answered; the store holds no
record of the artifact (nothing can read half of it), and `toolfleet artifacts gc` removes the bytes
the write left."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orchestrator.executors.celery import CeleryExecutor
from tests._cli import toolfleet
from tests._waiting import wait_for
from tests.integration import artifact_pipeline_tools as tools
from tests.integration.worker_processes import tool_worker
from workers import OutcomeKind, ToolExecutionRequest, ToolOutcome
from workers.artifacts import ArtifactStore
from workers.settings import Settings
from workers.tools import discover_tools

pytestmark = pytest.mark.integration


def test_a_worker_killed_mid_write_leaves_no_record_and_gc_removes_its_bytes(
    redis_url: str, settings: Settings, tmp_path: Path
) -> None:
    # given: a worker writing a 30 MiB artifact a MiB every 0.1 s into a directory store
    url = (tmp_path / "artifacts").as_uri()
    store = ArtifactStore.from_url(url)
    worker = tool_worker(
        redis_url,
        [tools.SLOW_POOL],
        [tools.__name__],
        tmp_path / "worker.log",
        "slow@artifacts",
        env={"TOOLFLEET_ARTIFACT_URL": url},
    )
    worker.wait_ready(timeout_s=60)
    (definition,) = [d for d in discover_tools(tools) if d.name == "slow_export"]
    executor = CeleryExecutor(settings=settings)
    try:

        async def call() -> ToolOutcome:
            request = ToolExecutionRequest("c1", "slow_export", '{"mebibytes": 30, "pause_s": 0.1}')
            return await executor.execute(request, definition)

        async def scenario() -> ToolOutcome:
            running = asyncio.ensure_future(call())
            # when: a few MiB are written, the worker is SIGKILLed
            await asyncio.to_thread(
                wait_for, lambda: any(p.stat().st_size >= 3 << 20 for p in (tmp_path / "artifacts").glob("*"))
            )
            worker.kill()
            return await running

        outcome = asyncio.run(scenario())
    finally:
        worker.stop()
        executor.close()

    # then: the call is lost, and the store has bytes but no record: no reader sees half an artifact
    assert outcome.kind is OutcomeKind.WORKER_LOST
    assert list(store.records()) == []
    ((orphan, size),) = store.unrecorded(time.time() + 1).items()
    assert 3 << 20 <= size == (tmp_path / "artifacts" / orphan).stat().st_size < 30 << 20
    # and gc removes them once they are older than its age
    kept = toolfleet(
        "artifacts", "gc", "--older-than", "1h", cwd=tmp_path, env={"TOOLFLEET_ARTIFACT_URL": url}
    )
    assert kept.returncode == 0 and "removed 0 write(s) without a record" in kept.stdout, kept.stdout
    assert list(store.unrecorded(time.time() + 1)) == [orphan]
    removed = toolfleet(
        "artifacts", "gc", "--older-than", "0", cwd=tmp_path, env={"TOOLFLEET_ARTIFACT_URL": url}
    )
    assert removed.returncode == 0 and "removed 1 write(s) without a record" in removed.stdout, removed.stdout
    assert list((tmp_path / "artifacts").iterdir()) == []
