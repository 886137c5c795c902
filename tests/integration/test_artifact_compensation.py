"""A compensation removes the artifacts of the call it undoes: a report rendered on a real worker is
deleted from the artifact store (record and bytes) when a later call of its batch fails.

The tools live in this module, served on pool `artifact-saga` by a worker of the test's own whose
`TOOLFLEET_ARTIFACT_URL` names the store (a directory, then an S3 bucket on moto's server). The
compensation notes in the test Redis what it received and where it ran.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from orchestrator import ScriptedChatModel
from orchestrator.executors.celery import CeleryExecutor
from orchestrator.saga.journal import Journal
from tests.artifact_stores import ArtifactStoreUrl
from tests.integration.scripts import ask, call, saga_service
from tests.integration.side_effects import process_client
from tests.integration.worker_processes import celery_executor, tool_worker
from workers import ToolErrorVisibleToLlm, ToolExecution, compensate_for, tool
from workers.artifacts import Artifact, delete_artifacts, refs_in, store_for
from workers.errors import ArtifactNotFoundError
from workers.runtime.process import WorkerProcess
from workers.settings import Settings

pytestmark = pytest.mark.integration

POOL = "artifact-saga"
ROWS = "| month | sales |\n|---|---|\n" + "| Jan | 120 |\n" * 2000
NOT_PUBLISHED = "the publishing desk refused the report"


class PublishRefused(ToolErrorVisibleToLlm, Exception):
    """The report could not be published."""


def _received_key(run: str) -> str:
    return f"artifact-saga:{run}:received"


@tool("Renders the quarterly report as a Markdown file", pool=POOL, timeout=20)
def render_report(run: str, title: str) -> Artifact:
    return Artifact(_report(title), name="report.md", media_type="text/markdown")


def _report(title: str) -> str:
    return f"# {title}\n\n{ROWS}"


@compensate_for("render_report")
def discard_report(execution: ToolExecution) -> None:
    """Removes the rendered report; notes what it received, what it removed, and in which process."""
    run = json.loads(execution.request.arguments)["run"]
    removed = delete_artifacts(execution)
    noted = {"refs": [ref.ref for ref in execution.artifacts], "removed": removed, "pid": os.getpid()}
    process_client(socket_timeout=5).rpush(_received_key(run), json.dumps(noted))


@tool("Publishes the report", pool=POOL, timeout=20)
def publish_report(run: str, title: str) -> str:
    raise PublishRefused(NOT_PUBLISHED)


@pytest.fixture(params=["dir", "s3"])
def artifact_store(request: pytest.FixtureRequest) -> ArtifactStoreUrl:
    """The test's store: a directory, or an S3 bucket on moto's server (each test a prefix of its own)."""
    shared: ArtifactStoreUrl = request.getfixturevalue(f"{request.param}_artifact_url")
    return shared.under(uuid.uuid4().hex[:8])


@pytest.fixture
def report_worker(
    redis_url: str, artifact_store: ArtifactStoreUrl, worker_logs: Path
) -> Iterator[WorkerProcess]:
    """A threads worker serving this module's tools on `POOL`, storing artifacts in the test's store."""
    name = f"artifacts-{uuid.uuid4().hex[:6]}"
    worker = tool_worker(
        redis_url,
        [POOL],
        [__name__],
        worker_logs / f"{name}.log",
        f"{name}@integration",
        env={**artifact_store.worker_env(), "TOOLFLEET_COMPENSATION_RETRIES": "1"},
    )
    with worker.running(timeout_s=60) as process:
        yield process


@pytest.fixture
def executor(settings: Settings, report_worker: WorkerProcess) -> Iterator[CeleryExecutor]:
    with celery_executor(settings) as running:
        yield running


def test_a_compensation_deletes_the_artifacts_of_the_call_it_undoes(
    executor: CeleryExecutor, artifact_store: ArtifactStoreUrl, journal: Journal, redis_url: str
) -> None:
    # given: a batch that renders a report on the worker, then fails to publish it
    run = uuid.uuid4().hex
    render = call("render-1", "render_report", run=run, title="Q3 report")
    publish = call("publish-1", "publish_report", run=run, title="Q3 report")
    model = ScriptedChatModel([ask(render, publish), "The report could not be published"])
    service = saga_service(model, executor, journal, tools=[sys.modules[__name__]])
    # when
    result = service.chat("Render the Q3 report and publish it")
    # then: the publication failed and the rendering was rolled back
    assert result.content == "The report could not be published"
    assert [(e.request.name, e.status) for e in result.tool_executions] == [
        ("render_report", "rolled_back"),
        ("publish_report", "execution_error"),
    ]
    assert result.invocation_id is not None
    rendered, _ = journal.calls(result.invocation_id)
    (ref,) = refs_in(rendered.result_object)  # the journaled result carried the report's reference
    assert (ref.name, ref.media_type, ref.size) == ("report.md", "text/markdown", len(_report("Q3 report")))
    assert [(c.tool, c.state.value) for c in journal.compensations(result.invocation_id)] == [
        ("render_report", "succeeded")
    ]
    # the compensation ran on the worker, received the reference and removed that one artifact
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        (received,) = [json.loads(item) for item in client.lrange(_received_key(run), 0, -1)]
    finally:
        client.close()
    assert received == {"refs": [ref.ref], "removed": 1, "pid": received["pid"]}
    assert received["pid"] != os.getpid()
    # and the report is gone from the store: its record and its bytes
    store = store_for(artifact_store.url)
    with pytest.raises(ArtifactNotFoundError):
        store.record(ref.ref)
    assert not store.fs.exists(f"{store.root}/{ref.id}")
    assert [r.ref.id for r in store.records()] == []


def test_deleting_artifacts_again_or_of_a_call_with_none_removes_nothing(
    dir_artifact_url: ArtifactStoreUrl, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: a stored artifact, and the execution of the call whose result referred to it
    store_url = dir_artifact_url.under(uuid.uuid4().hex[:8])
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", store_url.url)
    record, _ = store_for(store_url.url).put(Artifact(b"chart", name="chart.svg"))
    with_one = ToolExecution(
        request=call("c1", "render_report", run="r", title="t"),
        result="[artifact chart.svg]",
        result_object={"chart": record.ref.to_json(), "rows": 3},
    )
    without = ToolExecution(request=call("c2", "publish_report", run="r", title="t"), result="ok")
    # when / then: the first removal removes it, a second (a compensation run again) removes nothing
    assert with_one.artifacts == [record.ref]
    assert delete_artifacts(with_one) == 1
    assert delete_artifacts(with_one) == 0
    # and a call with none reaches no store: not even one the environment names wrongly
    monkeypatch.setenv("TOOLFLEET_ARTIFACT_URL", "ftp://nowhere/artifacts")
    assert (without.artifacts, delete_artifacts(without)) == ([], 0)
